"""The user's alert rules, `<home>/alerts.toml`: what W&B's metric automations offer, for any run.

W&B's automations (paid plans, the project's owner only) watch a metric three ways; so do
these rules, each with a name and a run selector:

    [[rule]]
    name = "loss above 4"          # what the alert says; unique
    runs = ["hero-*"]              # globs over a run's id, name or uid (default: every followed run)
    metric = "train/loss"
    kind = "threshold"             # the min, max or mean of the last `window` logged values
    stat = "mean"                  #   is above `above` and/or below `below`
    window = 20
    above = 4.0

    [[rule]]
    kind = "change"                # the window's stat against the window before it:
    relative = 0.25                #   |Δ|/|previous| >= 0.25 (or `absolute = 0.5`)
    direction = "down"             #   up | down | any (default any)

    [[rule]]
    kind = "zscore"                # the newest value against the `window` values before it
    z = 4.0                        #   |z| >= 4 (direction up | down | any)

Every rule also takes `severity` (high | medium | low, default medium). A `[liveness]` table
sets `stale_after` (seconds without a new heartbeat before a running run is stale; default:
the run's own source's rule, see analysis/alerts/raised.py). Windows count logged rows of the
metric; non-finite values are left out of them (a NaN is an alert of its own).
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from marinctl.errors import UserError

FILE_NAME = "alerts.toml"
KINDS = ("threshold", "change", "zscore")
STATS = ("min", "max", "mean")
DIRECTIONS = ("up", "down", "any")
SEVERITIES = ("high", "medium", "low")
MAX_WINDOW = 100_000
_HINT = "fix the file (README: Alerts), or move it aside to follow with the built-in alerts only"
_KEYS = {"name", "runs", "metric", "kind", "stat", "window", "above", "below", "relative", "absolute", "direction",
         "z", "severity"}


@dataclass(frozen=True)
class Rule:
    name: str
    metric: str
    kind: str
    window: int
    runs: tuple[str, ...] = ("*",)
    stat: str = "mean"
    above: float | None = None
    below: float | None = None
    relative: float | None = None
    absolute: float | None = None
    direction: str = "any"
    z: float | None = None
    severity: str = "medium"

    def selects(self, run: dict[str, Any]) -> bool:
        """Whether the rule watches `run` (a glob matching its id, display name or uid)."""
        names = [str(run.get(k)) for k in ("run_id", "name", "uid") if run.get(k)]
        return any(fnmatch.fnmatchcase(n, pat) for pat in self.runs for n in names)

    @property
    def rows_needed(self) -> int:
        """Logged values one evaluation reads: the window, and the one before it (change, zscore)."""
        return 2 * self.window if self.kind == "change" else self.window + 1 if self.kind == "zscore" else self.window


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...] = ()
    stale_after: float | None = None   # seconds; None: each source's own rule
    path: Path | None = None


def load(home: Path) -> Rules:
    """The rules of `<home>/alerts.toml` (none when the file does not exist); UserError naming the problem."""
    path = Path(home) / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Rules()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", _HINT) from None
    return parse(text, path)


def parse(text: str, path: Path | None = None) -> Rules:
    where = str(path or FILE_NAME)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where} is not valid TOML: {exc}", _HINT) from None
    unknown = sorted(set(doc) - {"rule", "liveness"})
    if unknown:
        raise UserError(f"{where}: unknown table {unknown[0]!r} (expected [[rule]] and [liveness])", _HINT)
    stale = None
    live = doc.get("liveness", {})
    if not isinstance(live, dict) or set(live) - {"stale_after"}:
        raise UserError(f"{where}: [liveness] takes only stale_after (seconds)", _HINT)
    if "stale_after" in live:
        stale = _number(where, "[liveness]", "stale_after", live["stale_after"])
        if stale <= 0:
            raise UserError(f"{where}: [liveness] stale_after must be a positive number of seconds", _HINT)
    items = doc.get("rule", [])
    if not isinstance(items, list):
        raise UserError(f"{where}: write rules as [[rule]] tables", _HINT)
    rules, names = [], set()
    for i, item in enumerate(items, 1):
        rule = _rule(where, i, item)
        if rule.name in names:
            raise UserError(f"{where}: two rules are named {rule.name!r}; each needs its own name", _HINT)
        names.add(rule.name)
        rules.append(rule)
    return Rules(tuple(rules), stale, path)


def _rule(where: str, i: int, item: Any) -> Rule:
    if not isinstance(item, dict):
        raise UserError(f"{where}: rule {i} is not a table", _HINT)
    name = item.get("name")
    label = f"rule {name!r}" if isinstance(name, str) and name.strip() else f"rule {i}"
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{where}: {label} needs a name (name = \"…\")", _HINT)
    extra = sorted(set(item) - _KEYS)
    if extra:
        raise UserError(f"{where}: {label}: unknown setting {extra[0]!r} (known: {', '.join(sorted(_KEYS))})", _HINT)
    metric = item.get("metric")
    if not isinstance(metric, str) or not metric:
        raise UserError(f"{where}: {label} needs a metric (metric = \"train/loss\")", _HINT)
    kind = _choice(where, label, "kind", item.get("kind"), KINDS)
    window = item.get("window", 20 if kind != "zscore" else 100)
    lo = 3 if kind == "zscore" else 1
    if not isinstance(window, int) or isinstance(window, bool) or not lo <= window <= MAX_WINDOW:
        raise UserError(f"{where}: {label}: window must be a whole number of logged rows, {lo}–{MAX_WINDOW:,}", _HINT)
    runs = item.get("runs", "*")
    runs = (runs,) if isinstance(runs, str) else runs
    if not isinstance(runs, (list, tuple)) or not runs or not all(isinstance(r, str) and r for r in runs):
        raise UserError(f"{where}: {label}: runs is a glob or a list of globs (runs = [\"hero-*\"])", _HINT)
    fields: dict[str, Any] = {"name": name.strip(), "metric": metric, "kind": kind, "window": window, "runs": tuple(runs),
                              "stat": _choice(where, label, "stat", item.get("stat", "mean"), STATS),
                              "direction": _choice(where, label, "direction", item.get("direction", "any"), DIRECTIONS),
                              "severity": _choice(where, label, "severity", item.get("severity", "medium"), SEVERITIES)}
    for key in ("above", "below", "relative", "absolute", "z"):
        if key in item:
            fields[key] = _number(where, label, key, item[key])
    if kind == "threshold" and fields.get("above") is None and fields.get("below") is None:
        raise UserError(f"{where}: {label}: a threshold rule needs above = … and/or below = …", _HINT)
    if kind == "change":
        given = [k for k in ("relative", "absolute") if fields.get(k) is not None]
        if len(given) != 1 or fields[given[0]] <= 0:
            raise UserError(f"{where}: {label}: a change rule needs one positive relative = … (0.2 is 20%) or absolute = …",
                            _HINT)
    if kind == "zscore":
        fields.setdefault("z", 3.0)
        if fields["z"] <= 0:
            raise UserError(f"{where}: {label}: z must be positive", _HINT)
    misplaced = [k for k in ("above", "below", "relative", "absolute", "z") if k in item and not _belongs(k, kind)]
    if misplaced:
        raise UserError(f"{where}: {label}: {misplaced[0]} does not apply to a {kind} rule", _HINT)
    return Rule(**fields)


def _belongs(key: str, kind: str) -> bool:
    return {"above": "threshold", "below": "threshold", "relative": "change", "absolute": "change", "z": "zscore"}[key] == kind


def _choice(where: str, label: str, key: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise UserError(f"{where}: {label}: {key} must be one of {', '.join(allowed)}, not {value!r}", _HINT)
    return value


def _number(where: str, label: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{where}: {label}: {key} must be a finite number, not {value!r}", _HINT)
    return float(value)
