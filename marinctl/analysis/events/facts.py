"""Facts a GitHub text states about runs and steps, read with regular expressions.

Marin writes run lineage into prose: W&B run URLs and ids, `fork_from="parent?_step=N"`,
"step 54k", "step 81,716", checkpoint paths ending in `step-N`, "resumed from …", and the
status bot's `key: value` lines (HEAD SHA, coordinator job, W&B fork point, handoff
checkpoint). `extract_facts` turns one text into a plain dict that the aligner (and the
`events --json` reader) can use; it never guesses beyond what the text says.
"""

from __future__ import annotations

import re
from typing import Any, Iterable
from urllib.parse import unquote

_WANDB_URL = re.compile(
    r"https?://(?:[\w-]+\.)*(?:wandb\.ai|forge\.coreweave\.com)/(?:wandb/)?([\w.\-]+)/([\w.\-]+)/runs/([\w.%+\-]+)"
)
# fork_from="parent?_step=N", or a bare `parent?_step=N` (W&B's fork spec) anywhere.
_FORK = re.compile(r"(?:fork_from\s*[=:]\s*[\"'`]?)?([\w.+\-]+(?:/[\w.+\-]+){0,2})\?_step=(\d[\d,_]*)")
_CHECKPOINT = re.compile(r"([\w.+\-:/]*?/)?step-(\d+)\b")
_RESUMED = re.compile(r"\b(?:resum(?:ed|ing|e)|restart(?:ed|ing)?|relaunch(?:ed|ing)?)\s+from\b", re.I)
# "step 54k", "Step 1,600", "STEPS 700 to 800", "Step=2400", "step #2500", "Step ~2800",
# "step 0.0019M": any case, at a sentence start or in brackets; the first number of a range.
_STEP = re.compile(
    r"(?<![\w\-/])steps?(?:\s+|\s*[:=#]\s*)(?:(?:~|≈|about|around|approx\.?|approximately)\s*)?"
    r"(\d{1,3}(?:[,_]\d{3})+|\d+(?:\.\d+)?\s?[kKM]\b|\d+)(?!\d)(?![\w.,]\d)",
    re.I,
)
_SHA = re.compile(r"\b[0-9a-f]{7,40}\b")
_KV_LINE = re.compile(r"^\s*(?:[-*+]\s+)?\|?\s*\**([A-Za-z&/_ \-]{2,40}?)\**\s*(?::|\|)\s*(.+?)\s*\|?\s*$")


def parse_count(raw: str) -> int:
    """'54k' → 54000, '1.5k' → 1500, '0.0019M' → 1900, '81,716' → 81716."""
    s = raw.strip().replace(",", "").replace("_", "").replace(" ", "")
    scale = {"k": 1_000, "K": 1_000, "M": 1_000_000}.get(s[-1:])
    if scale:
        return int(round(float(s[:-1]) * scale))
    return int(float(s))


def _strip(value: str) -> str:
    return value.strip().strip("`*\"' ").strip()


def status_fields(text: str) -> dict[str, Any]:
    """The status bot's `key: value` facts (also markdown list/table rows)."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        m = _KV_LINE.match(line)
        if not m:
            continue
        key, value = m.group(1).lower().strip(), _strip(m.group(2))
        if not value:
            continue
        if "sha" in key or key in ("commit", "head", "head commit"):
            sha = _SHA.search(value)
            if sha and "sha" not in out:
                out["sha"] = sha.group(0)
        elif "coordinator" in key or key in ("job", "iris job"):
            out.setdefault("coordinator_job", value)
        elif "fork" in key:
            out.setdefault("fork_point", value)
        elif "checkpoint" in key:
            out.setdefault("checkpoint", value)
        elif ("w&b" in key or "wandb" in key) and "run" in key:
            out.setdefault("wandb_run", value)
    return out


def extract_facts(text: str, known_run_ids: Iterable[str] = ()) -> dict[str, Any]:
    """Run ids, fork point, checkpoint, step mentions and status fields found in `text`."""
    text = text or ""
    facts: dict[str, Any] = {}
    runs: list[str] = []
    for m in _WANDB_URL.finditer(text):
        rid = unquote(m.group(3))
        if rid not in runs:
            runs.append(rid)
    known = sorted({r for r in known_run_ids if r}, key=len, reverse=True)
    if known:
        pattern = re.compile(r"(?<![\w.\-])(" + "|".join(re.escape(r) for r in known) + r")(?![\w.\-])")
        for m in pattern.finditer(text):
            if m.group(1) not in runs:
                runs.append(m.group(1))
    fork = _FORK.search(text)
    if fork:
        parent = fork.group(1).split("/")[-1]
        facts["fork_parent"] = parent
        facts["fork_step"] = parse_count(fork.group(2))
        runs = [r for r in runs if r != parent] + ([parent] if parent in runs else [])
    for m in _CHECKPOINT.finditer(text):
        if "?_step=" in text[max(0, m.start() - 1):m.end() + 8]:
            continue
        facts["checkpoint_step"] = int(m.group(2))
        facts["checkpoint"] = _strip((m.group(1) or "") + f"step-{m.group(2)}")
        break
    if _RESUMED.search(text):
        facts["resumed"] = True
    steps = list(dict.fromkeys(parse_count(m.group(1)) for m in _STEP.finditer(text)))
    if steps:
        facts["steps"] = steps[:20]
    if runs:
        facts["runs"] = runs
    status = status_fields(text)
    if status:
        facts["status"] = status
        fp = status.get("fork_point")
        if fp and "fork_step" not in facts:
            m = _FORK.search(fp)
            if m:
                facts["fork_parent"], facts["fork_step"] = m.group(1).split("/")[-1], parse_count(m.group(2))
        ck = status.get("checkpoint")
        if ck and "checkpoint_step" not in facts:
            m = _CHECKPOINT.search(ck)
            if m:
                facts["checkpoint_step"], facts["checkpoint"] = int(m.group(2)), ck
    return facts
