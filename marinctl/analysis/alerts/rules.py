"""The user's alert rules, `<home>/alerts.toml`: what W&B's metric automations offer, for any run.

W&B's automations (paid plans, the project's owner only) watch a metric three ways; so do
these rules, each with a name and a run selector:

    [[rule]]
    name = "loss above 4"          # what the alert says; unique
    runs = ["hero-*"]              # globs over a run's id, name or uid (default: every followed run)
    metric = "train/loss"
    kind = "threshold"             # the min, max, mean, median or sum of the last `window` logged
    stat = "mean"                  #   values is above `above` and/or below `below`
    window = 20
    above = 4.0

    [[rule]]
    kind = "change"                # the window's stat against the `baseline` rows before it
    relative = 0.25                #   (default: as many as the window): |Δ|/|previous| >= 0.25
    direction = "down"             #   (or `absolute = 0.5`; 0 with a direction: any rise or fall)

    [[rule]]
    kind = "zscore"                # the newest value (or the `stat` of the last `recent` rows)
    z = 4.0                        #   against the `window` values before it: |z| >= 4,
    min_rise = 0.05                #   and at least `min_rise` from their mean (direction up | down | any)

Three more kinds watch what is not a window of a metric: `nonfinite` (the metric logged NaN/Inf:
the built-in alert, at the rule's priority), `silent` (no heartbeat from a running run for
`after` seconds) and `stalled` (no new step for `after` seconds while its heartbeat is newer).

Every rule also takes `priority` (emergency | high | normal | low, analysis/alerts/priority.py)
and/or `severity` (high | medium | low; default medium, each giving the other when alone),
`cause_class` (the contract's cause, when explain names none at the step) and `source` (where
the rule comes from, said with its alerts). A `[liveness]` table sets `stale_after` (seconds
without a new heartbeat before a running run is stale; default: the run's own source's rule, see
analysis/alerts/raised.py), and `preset = "NAME"` adds a shipped preset's rules
(analysis/alerts/presets/). Windows count logged rows of the metric; non-finite values are left
out of them (a NaN is an alert of its own).
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from marinctl.analysis.alerts import priority as P
from marinctl.errors import UserError

FILE_NAME = "alerts.toml"
WINDOW_KINDS = ("threshold", "change", "zscore")
TIME_KINDS = ("silent", "stalled")
KINDS = (*WINDOW_KINDS, "nonfinite", *TIME_KINDS)
STATS = ("min", "max", "mean", "median", "sum")
DIRECTIONS = ("up", "down", "any")
SEVERITIES = ("high", "medium", "low")
CAUSE_CLASSES = ("optimizer", "adam_state", "data_batch", "numerics", "logit_growth", "init_shape", "moe_routing",
                 "heuristic_parameter", "infrastructure", "config", "none")
MAX_WINDOW = 100_000
_HINT = "fix the file (README: Alerts), or move it aside to follow with the built-in alerts only"
_KEYS = {"name", "runs", "metric", "kind", "stat", "window", "above", "below", "relative", "absolute", "direction",
         "z", "severity", "priority", "baseline", "recent", "min_rise", "after", "cause_class", "source"}
_ONLY = {"above": ("threshold",), "below": ("threshold",), "relative": ("change",), "absolute": ("change",),
         "baseline": ("change",), "z": ("zscore",), "recent": ("zscore",), "min_rise": ("zscore",),
         "after": TIME_KINDS, "window": WINDOW_KINDS, "stat": WINDOW_KINDS, "direction": ("change", "zscore")}


@dataclass(frozen=True)
class Rule:
    name: str
    metric: str | None
    kind: str
    window: int = 1
    runs: tuple[str, ...] = ("*",)
    stat: str = "mean"
    above: float | None = None
    below: float | None = None
    relative: float | None = None
    absolute: float | None = None
    direction: str = "any"
    z: float | None = None
    severity: str = "medium"
    priority: str = "normal"
    baseline: int | None = None       # change: rows of the window before (default: window)
    recent: int = 1                   # zscore: rows whose stat is judged
    min_rise: float = 0.0             # zscore: the least distance from the mean that counts
    after: float | None = None        # silent, stalled: seconds
    cause_class: str | None = None
    source: str | None = None

    def selects(self, run: dict[str, Any]) -> bool:
        """Whether the rule watches `run` (a glob matching its id, display name or uid)."""
        names = [str(run.get(k)) for k in ("run_id", "name", "uid") if run.get(k)]
        return any(fnmatch.fnmatchcase(n, pat) for pat in self.runs for n in names)

    @property
    def rows_needed(self) -> int:
        """Logged values one evaluation reads: the window, and the rows before it (change, zscore)."""
        if self.kind == "change":
            return self.window + (self.baseline or self.window)
        if self.kind == "zscore":
            return self.window + self.recent
        return self.window


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...] = ()
    stale_after: float | None = None   # seconds; None: each source's own rule
    path: Path | None = None
    presets: tuple[str, ...] = ()

    def with_preset(self, name: str) -> "Rules":
        """These rules and a preset's (analysis/alerts/presets/), named apart; UserError when there is no such preset."""
        if name in self.presets:
            return self
        from marinctl.analysis.alerts import presets

        extra = presets.rules(name)
        clash = {r.name for r in self.rules} & {r.name for r in extra.rules}
        if clash:
            raise UserError(f"{self.path or FILE_NAME}: rule {sorted(clash)[0]!r} is also a rule of preset {name!r};"
                            " rename yours", _HINT)
        return Rules(self.rules + extra.rules, self.stale_after, self.path, (*self.presets, name))


def load(home: Path) -> Rules:
    """The rules of `<home>/alerts.toml` (none when the file does not exist), with the preset it
    names; UserError naming the problem."""
    path = Path(home) / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Rules()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", _HINT) from None
    return parse(text, path)


def parse(text: str, path: Path | str | None = None) -> Rules:
    where = str(path or FILE_NAME)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where} is not valid TOML: {exc}", _HINT) from None
    unknown = sorted(set(doc) - {"rule", "liveness", "preset"})
    if unknown:
        raise UserError(f"{where}: unknown table {unknown[0]!r} (expected [[rule]], [liveness] and preset = …)", _HINT)
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
    out = Rules(tuple(rules), stale, path if isinstance(path, Path) else None)
    preset = doc.get("preset")
    if preset is not None:
        if not isinstance(preset, str) or not preset:
            raise UserError(f"{where}: preset = \"NAME\" names one shipped preset (marinctl alerts --preset NAME --show)",
                            _HINT)
        out = out.with_preset(preset)
    return out


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
    kind = _choice(where, label, "kind", item.get("kind"), KINDS)
    misplaced = [k for k, kinds in _ONLY.items() if k in item and kind not in kinds]
    if misplaced:
        raise UserError(f"{where}: {label}: {misplaced[0]} does not apply to a {kind} rule", _HINT)
    metric = item.get("metric")
    if kind in TIME_KINDS:
        if metric is not None:
            raise UserError(f"{where}: {label}: a {kind} rule watches the run, not a metric (no metric = …)", _HINT)
    elif not isinstance(metric, str) or not metric:
        raise UserError(f"{where}: {label} needs a metric (metric = \"train/loss\")", _HINT)
    runs = item.get("runs", "*")
    runs = (runs,) if isinstance(runs, str) else runs
    if not isinstance(runs, (list, tuple)) or not runs or not all(isinstance(r, str) and r for r in runs):
        raise UserError(f"{where}: {label}: runs is a glob or a list of globs (runs = [\"hero-*\"])", _HINT)
    fields: dict[str, Any] = {"name": name.strip(), "metric": metric, "kind": kind, "runs": tuple(runs),
                              "stat": _choice(where, label, "stat", item.get("stat", "mean"), STATS),
                              "direction": _choice(where, label, "direction", item.get("direction", "any"), DIRECTIONS)}
    _levels(where, label, item, fields)
    for key in ("cause_class", "source"):
        if key in item:
            allowed = CAUSE_CLASSES if key == "cause_class" else None
            value = item[key]
            if not isinstance(value, str) or not value or (allowed and value not in allowed):
                raise UserError(f"{where}: {label}: {key} must be "
                                + (f"one of {', '.join(allowed)}" if allowed else "a string"), _HINT)
            fields[key] = value
    if kind in WINDOW_KINDS:
        fields["window"] = _rows(where, label, "window", item.get("window", 20 if kind != "zscore" else 100),
                                 3 if kind == "zscore" else 1)
    for key in ("above", "below", "relative", "absolute", "z", "min_rise", "after"):
        if key in item:
            fields[key] = _number(where, label, key, item[key])
    for key in ("baseline", "recent"):
        if key in item:
            fields[key] = _rows(where, label, key, item[key], 1)
    if kind == "threshold" and fields.get("above") is None and fields.get("below") is None:
        raise UserError(f"{where}: {label}: a threshold rule needs above = … and/or below = …", _HINT)
    if kind == "change":
        given = [k for k in ("relative", "absolute") if fields.get(k) is not None]
        zero_ok = given == ["absolute"] and fields["absolute"] == 0 and fields["direction"] != "any"
        if len(given) != 1 or (fields[given[0]] <= 0 and not zero_ok):
            raise UserError(f"{where}: {label}: a change rule needs one positive relative = … (0.2 is 20%) or absolute = …"
                            " (absolute = 0 only with direction up or down)", _HINT)
    if kind == "zscore":
        fields.setdefault("z", 3.0)
        if fields["z"] <= 0 or fields.get("min_rise", 0.0) < 0:
            raise UserError(f"{where}: {label}: z must be positive (and min_rise not negative)", _HINT)
    if kind in TIME_KINDS and not (fields.get("after") or 0) > 0:
        raise UserError(f"{where}: {label}: a {kind} rule needs after = SECONDS (a positive number)", _HINT)
    return Rule(**fields)


def _levels(where: str, label: str, item: dict[str, Any], fields: dict[str, Any]) -> None:
    """`priority` and `severity`: each gives the other when it is alone (default: medium, normal)."""
    severity = _choice(where, label, "severity", item["severity"], SEVERITIES) if "severity" in item else None
    level = _choice(where, label, "priority", item["priority"], P.LEVELS) if "priority" in item else None
    fields["severity"] = severity or (P.severity_of(level) if level else "medium")
    fields["priority"] = level or P.from_severity(fields["severity"])


def _rows(where: str, label: str, key: str, value: Any, lo: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= MAX_WINDOW:
        raise UserError(f"{where}: {label}: {key} must be a whole number of logged rows, {lo}–{MAX_WINDOW:,}", _HINT)
    return value


def _choice(where: str, label: str, key: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise UserError(f"{where}: {label}: {key} must be one of {', '.join(allowed)}, not {value!r}", _HINT)
    return value


def _number(where: str, label: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{where}: {label}: {key} must be a finite number, not {value!r}", _HINT)
    return float(value)
