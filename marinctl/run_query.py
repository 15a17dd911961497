"""Which runs: the filter language of `runs --where`, `sync E/P --where` (and watch's run filter),
and runs grouped by a key for `runs --group-by`.

An expression is terms separated by spaces, all of which must hold (AND); `-term` negates one.
A term is FIELD OP VALUE, as LEET's and wandb-tui's run filters read:

    cfg.optimizer.learning_rate>=1e-3   group~d512   state:running   tag:baseline   name~isoflop

- fields: `name` (display name or run id), `id`, `group`, `state`, `tag` (any of the run's tags),
  `job`, `entity`, `project`, `source`, `cfg.KEY` / `config.KEY` (nested keys by dots; a key that
  itself holds dots is found too), `summary.KEY` (W&B's summary keys, `summary.eval/paloma/macro_loss`);
- operators: `~` regex search (Python `re`; `(?i)` for any case), `:` equals ignoring case (for
  `tag`, has the tag), `=` equals exactly, `!=`, and `>` `>=` `<` `<=` on numbers;
- a bare word (no operator) matches names containing it, ignoring case;
- a value may be quoted ("a b" or 'a b') to hold spaces; a run without the field fails the term
  (so `-cfg.x>1` keeps the runs that lack `x`).

Bad terms (an unknown field, a regex that does not compile, a comparison with a non-number) are
a UserError naming the term. Everything here is pure: records in, records out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable

from marinctl.domain import RunInfo
from marinctl.errors import UserError

FIELDS = ("name", "id", "group", "state", "tag", "job", "entity", "project", "source")
PREFIXES = {"cfg": "config", "config": "config", "summary": "summary", "sum": "summary"}
_TERM = re.compile(r"^(?P<field>[A-Za-z_][\w.\-/]*?)(?P<op>>=|<=|!=|~|:|==|=|>|<)(?P<value>.*)$", re.S)
MISSING = object()
HINT = ("terms like cfg.optimizer.learning_rate>=1e-3 group~d512 state:running tag:baseline name~isoflop "
        "(space-separated, ANDed; -term negates)")


@dataclass(frozen=True)
class Term:
    """One parsed term: `text` as typed, and whether a run record satisfies it."""

    text: str
    negated: bool
    test: Callable[[dict[str, Any]], bool]

    def __call__(self, record: dict[str, Any]) -> bool:
        return self.test(record) != self.negated


@dataclass(frozen=True)
class Selection:
    """A parsed expression: a run is selected when every term holds."""

    text: str
    terms: tuple[Term, ...]

    def __call__(self, run: dict[str, Any] | RunInfo) -> bool:
        rec = record(run)
        return all(t(rec) for t in self.terms)

    def filter(self, runs: Iterable[Any]) -> list[Any]:
        return [r for r in runs if self(r)]


def parse(text: str) -> Selection:
    """The expression as a Selection; a UserError naming the first bad term."""
    words = split_terms(text)
    if not words:
        raise UserError("empty filter expression", HINT)
    return Selection(text, tuple(_term(w) for w in words))


def split_terms(text: str) -> list[str]:
    """Terms split on spaces outside quotes (quotes removed; backslashes kept for regexes)."""
    out, cur, quote, started = [], [], None, False
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote, started = ch, True
        elif ch.isspace():
            if cur or started:
                out.append("".join(cur))
            cur, started = [], False
        else:
            cur.append(ch)
    if quote:
        raise UserError(f"unclosed quote in filter {text!r}", "close the quote, e.g. name~\"isoflop 1e18\"")
    if cur or started:
        out.append("".join(cur))
    return out


def _term(word: str) -> Term:
    negated = word.startswith("-") and len(word) > 1
    body = word[1:] if negated else word
    if body in ("", "-"):
        raise UserError(f"bad filter term {word!r}: nothing to match", HINT)
    m = _TERM.match(body)
    if m is None:   # a bare word: a name containing it
        needle = body.lower()
        return Term(word, negated, lambda r: any(needle in (v or "").lower() for v in (r["name"], r["id"])))
    field, op, value = m.group("field"), m.group("op"), m.group("value")
    op = "=" if op == "==" else op
    get = _getter(field, word)
    if value == "":
        raise UserError(f"bad filter term {word!r}: no value after {op!r}", HINT)
    if op == "~":
        try:
            rx = re.compile(value)
        except re.error as exc:
            raise UserError(f"bad filter term {word!r}: the regex does not compile ({exc})",
                            "escape special characters, e.g. name~'1e\\+18'") from None
        return Term(word, negated, lambda r: any(rx.search(_text(v)) for v in _values(get(r))))
    if op in (">", ">=", "<", "<="):
        bound = _number(value)
        if bound is None:
            raise UserError(f"bad filter term {word!r}: {value!r} is not a number", f"compare with a number, e.g. {field}{op}1e-3")
        cmp = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}[op]
        return Term(word, negated, lambda r: any((x := _number(v)) is not None and cmp(x, bound) for v in _values(get(r))))
    if op == ":":
        want = value.lower()
        return Term(word, negated, lambda r: any(_equal(v, value, fold=True) or _text(v).lower() == want
                                                 for v in _values(get(r))))
    if op == "=":
        return Term(word, negated, lambda r: any(_equal(v, value) for v in _values(get(r))))
    return Term(word, negated, lambda r: (vals := _values(get(r))) != [] and not any(_equal(v, value) for v in vals))


def _getter(field: str, word: str) -> Callable[[dict[str, Any]], Any]:
    head, _, rest = field.partition(".")
    if head in PREFIXES and rest:
        part = PREFIXES[head]
        return lambda r: lookup(r[part], rest)
    if field in FIELDS:
        key = {"tag": "tags", "job": "job_type"}.get(field, field)
        return lambda r: r.get(key)
    near = [f for f in (*FIELDS, "cfg.KEY", "summary.KEY") if f.split(".")[0].startswith(field[:2])]
    raise UserError(f"bad filter term {word!r}: unknown field {field!r}"
                    + (f" (did you mean {near[0]}?)" if near else ""),
                    f"fields: {', '.join(FIELDS)}, cfg.KEY, summary.KEY")


def lookup(mapping: Any, dotted: str) -> Any:
    """A nested key by dots (`optimizer.learning_rate`), also when a key itself holds dots or is
    W&B's flat spelling (`optimizer.learning_rate` as one key); MISSING when absent."""
    if not isinstance(mapping, dict):
        return MISSING
    if dotted in mapping:
        return mapping[dotted]
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:i])
        if head in mapping:
            found = lookup(mapping[head], ".".join(parts[i:]))
            if found is not MISSING:
                return found
    return MISSING


def _values(v: Any) -> list[Any]:
    """A field's values to test: a list's items (tags), none when missing."""
    if v is MISSING or v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v)) if abs(v) < 1e15 else repr(v)
    return str(v)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v) if not (isinstance(v, float) and math.isnan(v)) else None
    if isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            return None
        return None if math.isnan(x) else x
    return None


def _equal(v: Any, want: str, fold: bool = False) -> bool:
    a, b = _number(v), _number(want)
    if a is not None and b is not None and not isinstance(v, str):
        return a == b
    if isinstance(v, bool):
        return want.lower() == ("true" if v else "false")
    return (_text(v).lower() == want.lower()) if fold else _text(v) == want


# --- records --------------------------------------------------------------------------------------

def record(run: dict[str, Any] | RunInfo) -> dict[str, Any]:
    """A run as the filter reads it, from a stored row (store/runs.py) or a listed RunInfo."""
    if isinstance(run, RunInfo):
        return {"name": run.name, "id": run.run_id, "group": run.group, "state": run.state, "tags": list(run.tags or []),
                "job_type": run.job_type, "entity": run.entity, "project": run.project, "source": run.source,
                "config": run.config or {}, "summary": run.summary or {}}
    if "id" in run and "config" in run and "run_id" not in run:
        return run
    return {"name": run.get("name"), "id": run.get("run_id"), "group": run.get("run_group"), "state": run.get("state"),
            "tags": list(run.get("tags") or []), "job_type": run.get("job_type"), "entity": run.get("entity"),
            "project": run.get("project"), "source": run.get("source"), "config": run.get("config") or {},
            "summary": run.get("summary") or {}}


# --- grouping -------------------------------------------------------------------------------------

LAST_KEYS = ("train/loss", "eval/paloma/macro_loss", "eval/loss", "throughput/total_tokens")


def group_by(runs: list[dict[str, Any]], key: str, keys: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs (stored rows) grouped by a field or `cfg.`/`summary.` key: per group its value, how many
    runs, the newest run (by heartbeat, then start) and that run's last values of `keys` (default:
    the LAST_KEYS it has) plus its last stored step. A run with several tags counts in each; a run
    without the key falls in the group `None`. Groups in order of their value."""
    get = _getter(key, key)
    groups: dict[Any, list[dict[str, Any]]] = {}
    for run in runs:
        vals = _values(get(record(run))) or [None]
        for v in vals:
            groups.setdefault(_hashable(v), []).append(run)
    out = []
    for value, members in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        newest = max(members, key=lambda r: (_stamp(r.get("heartbeat_at")), _stamp(r.get("created_at"))))
        summary = newest.get("summary") or {}
        wanted = keys or [k for k in LAST_KEYS if k in summary]
        last = {k: summary.get(k) for k in wanted}
        last["step"] = newest.get("last_step")
        out.append({"group": value, "runs": len(members), "latest_run": newest.get("run_id"), "last": last})
    return out


def _hashable(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        import json

        return json.dumps(v, sort_keys=True, default=str)
    return v


def _order(v: Any) -> tuple:
    if v is None:
        return (2, 0, "")
    n = _number(v) if not isinstance(v, str) else None
    return (0, n, "") if n is not None else (1, 0, _text(v))


def _stamp(v: Any) -> float:
    return v.timestamp() if isinstance(v, datetime) else float("-inf")
