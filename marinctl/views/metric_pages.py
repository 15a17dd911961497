"""Every metric of a run, browsable: keys grouped by prefix into sections, sections cut into pages.

A page holds `rows` rows of `cols` charts. Each section starts on a new row under its own
header line (`train/`, `params/norm/` …); a collapsed section is just its header. The first
page is the curated one (loss, eval loss, norms, MFU, LR, router health) unless a filter is
on. Pure functions over key lists, so paging can be tested without a store or a terminal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CURATED = "overview"          # the curated section's name
OTHER = "other"               # keys without a '/' prefix
HIDDEN_PREFIXES = ("_",)      # W&B's own columns (_timestamp, _runtime, _step)
SYSTEM_PREFIXES = ("system/", "system.")


def is_system(key: str) -> bool:
    """System metrics (GPU, CPU, memory …) live in their own pane, not in the grid."""
    return key.startswith(SYSTEM_PREFIXES)


def browsable(keys: list[str] | tuple[str, ...]) -> list[str]:
    """The keys the grid pages through: everything but W&B's `_` columns and system metrics."""
    return [k for k in keys if not k.startswith(HIDDEN_PREFIXES) and not is_system(k)]


def group_of(key: str) -> str:
    """A key's section: its prefix, at most two levels deep (`train/`, `params/norm/`, `train/router/`)."""
    parts = key.split("/")
    if len(parts) == 1:
        return OTHER
    return "/".join(parts[: min(2, len(parts) - 1)]) + "/"


def sections_of(keys: list[str], curated: list[str] | None = None) -> list[tuple[str, list[str]]]:
    """(section name, keys) in display order: the curated section first (when given), then the
    prefixes alphabetically with `other` last; keys keep their given order inside a section."""
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(group_of(k), []).append(k)
    names = sorted(groups, key=lambda g: (g == OTHER, g))
    out = [(CURATED, list(curated))] if curated else []
    return out + [(g, groups[g]) for g in names]


def matching(keys: list[str], pattern: str | None) -> list[str]:
    """Keys the regex finds (anywhere in the key); all keys without a pattern."""
    if not pattern:
        return list(keys)
    rx = re.compile(pattern)
    return [k for k in keys if rx.search(k)]


@dataclass(frozen=True)
class Section:
    """One section as a page shows it: its header, and the slice of its keys on this page."""

    name: str
    keys: tuple[str, ...]           # the keys on this page (empty when collapsed)
    total: int                      # keys in the whole section
    first: int = 0                  # index of keys[0] within the section (a section continued from the page before)
    collapsed: bool = False

    def header(self) -> str:
        mark = "▸" if self.collapsed else "▾"
        count = f"{self.total} key" + ("" if self.total == 1 else "s")
        if self.collapsed or (self.first == 0 and len(self.keys) == self.total):
            return f"{mark} {self.name}  ({count})"
        return f"{mark} {self.name}  ({self.first + 1}–{self.first + len(self.keys)} of {count})"


@dataclass(frozen=True)
class Page:
    sections: tuple[Section, ...]

    @property
    def keys(self) -> list[str]:
        return [k for s in self.sections for k in s.keys]

    def rows(self, cols: int) -> int:
        """Chart rows this page fills (each section starts a new row)."""
        return sum(-(-len(s.keys) // cols) for s in self.sections)


def paginate(sections: list[tuple[str, list[str]]], cols: int, rows: int,
             collapsed: frozenset[str] | set[str] = frozenset()) -> list[Page]:
    """Cut sections into pages of `rows` chart rows of `cols` charts each.

    A section longer than what is left of a page continues on the next one (its header says
    which keys it shows). Collapsed sections cost a header line and no rows; a page takes at
    most `rows + 4` header lines so a long run of collapsed sections still pages.
    """
    cols, rows = max(1, cols), max(1, rows)
    max_headers = rows + 4
    pages: list[Page] = []
    current: list[Section] = []
    rows_left = rows

    def flush() -> None:
        nonlocal current, rows_left
        if current:
            pages.append(Page(tuple(current)))
        current, rows_left = [], rows

    for name, keys in sections:
        if len(current) >= max_headers:
            flush()
        if name in collapsed or not keys:
            current.append(Section(name, (), len(keys), 0, collapsed=bool(keys)))
            continue
        start = 0
        while start < len(keys):
            if rows_left == 0:
                flush()
            take = min(len(keys) - start, rows_left * cols)
            current.append(Section(name, tuple(keys[start:start + take]), len(keys), start))
            rows_left -= -(-take // cols)
            start += take
    flush()
    return pages or [Page(())]


def short_labels(keys: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Each key's shortest suffix (whole `/` or `.` separated parts) that no other key shares.

    `params/norm/stacked_blocks.0.mlp.router_bias` and `…blocks.1.mlp.router_bias` read
    `0.mlp.router_bias` and `1.mlp.router_bias`; `grad/norm/total` beside `params/norm/total`
    keeps its prefix; a key alone keeps its last part. When only the whole key is unique (a
    `grad/…` twin of every `params/…` leaf), its first part and the suffix that is unique among
    the keys sharing that first part: `grad/…0.mlp.router_bias`, `params/…0.mlp.router_bias`.
    """
    tokens = {k: re.split(r"(?<=[/.])", k) for k in set(keys)}
    out = {key: _unique_suffix(key, parts, tokens) for key, parts in tokens.items()}
    for key, parts in tokens.items():
        if out[key] == key and len(parts) > 2:
            same_head = {k: t for k, t in tokens.items() if t[0] == parts[0]}
            tail = _unique_suffix(key, parts[1:], same_head)
            if len(parts[0]) + 1 + len(tail) <= len(key) - 6:      # only where it saves real room
                out[key] = f"{parts[0]}…{tail}"
    return out


def _unique_suffix(key: str, parts: list[str], tokens: dict[str, list[str]]) -> str:
    """The fewest trailing parts of `key` that end no other key of `tokens` at a part boundary."""
    suffix = key
    for n in range(1, len(parts) + 1):
        suffix = "".join(parts[-n:])
        if not any(o != key and (o == suffix or o.endswith(suffix) and o[-len(suffix) - 1] in "/.")
                   for o in tokens):
            return suffix
    return key
