"""Two runs side by side: how their configs differ, and where their metrics part ways.

`marinctl diff RUN_A RUN_B` (and watch's compare, later) reads from here. Configs are compared
key by key, nested keys joined by dots: changed, only in A, only in B. Metrics are aligned on a
common x (steps, or tokens) and, per key, the gap A − B is read against the runs' own step-to-step
noise as it shows in the gap: the robust spread of the gap's successive differences (1.4826·MAD/√2,
σ for white noise on a slow curve). For independent runs that is √(σ_A² + σ_B²); noise the runs
share (the same seed and data order) cancels, so a small change between otherwise equal runs shows.
The runs **separate** at the first x from which |gap| stays above SEPARATION_SIGMAS × that noise for
SEPARATION_RUN points in a row (one spike does not separate two runs; a lasting change does). The
largest |gap| and where, and each run's last value, come with it. Pure: series in, facts out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

SEPARATION_SIGMAS = 3.0     # a gap this many noise sigmas wide, SEPARATION_RUN times running, is not noise
SEPARATION_RUN = 5          # ... for this many aligned points in a row
TOKEN_KEYS = ("throughput/total_tokens",)   # Levanter's cumulative tokens (Levanter: lib/levanter/src/levanter/callbacks/_metrics.py)
MISSING = object()


# --- config ------------------------------------------------------------------------------------

def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level, keys joined by dots (`optimizer.learning_rate`); lists stay values."""
    out: dict[str, Any] = {}
    if isinstance(config, dict) and config:
        for k, v in config.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif prefix:
        out[prefix] = config
    return out


def config_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"changed": {key: [a, b]}, "only_a": {key: a}, "only_b": {key: b}} over flattened keys, sorted."""
    fa, fb = flatten(a or {}), flatten(b or {})
    changed = {k: [fa[k], fb[k]] for k in sorted(fa.keys() & fb.keys()) if not _same_value(fa[k], fb[k])}
    return {"changed": changed,
            "only_a": {k: fa[k] for k in sorted(fa.keys() - fb.keys())},
            "only_b": {k: fb[k] for k in sorted(fb.keys() - fa.keys())}}


# keys that name a run rather than configure it: every fork differs there (W&B's ids, the tracker's
# names, Marin's fork spec, the checkpoint it starts from)
_IDENTITY = re.compile(r"(^|\.)(id|run_id|name|display_name|tags|notes|group|project|entity|fork_from|resume|"
                       r"initialize_from|load_checkpoint_path|checkpoint_path|base_path|_wandb|git_commit)(\.|$)")


def fork_changes(parent: dict[str, Any], child: dict[str, Any], limit: int = 20) -> dict[str, Any]:
    """What a fork changed in its parent's config (config_diff without the keys that only name a
    run): {"changed": {key: [parent, child]}, "added": {key: child}, "removed": {key: parent}}, each
    at most `limit` keys, and how many keys differ in all (`count`)."""
    diff = config_diff(parent or {}, child or {})
    keep = lambda d: {k: v for k, v in d.items() if not _IDENTITY.search(k) and not k.startswith("trainer.tracker.")}  # noqa: E731
    changed, added, removed = keep(diff["changed"]), keep(diff["only_b"]), keep(diff["only_a"])
    cut = lambda d: dict(list(d.items())[:limit])  # noqa: E731
    return {"changed": cut(changed), "added": cut(added), "removed": cut(removed),
            "count": len(changed) + len(added) + len(removed)}


def _same_value(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    if isinstance(x, bool) or isinstance(y, bool):
        return x is y or (type(x) is type(y) and x == y)
    return x == y


# --- metrics -----------------------------------------------------------------------------------

@dataclass
class Separation:
    """Where one key's two series part ways (`separates_at` None: they never do beyond noise)."""

    key: str
    separates_at: float | None
    separates_at_step: int | None
    max_gap: float | None              # A − B where |A − B| is largest
    max_gap_at: float | None
    max_gap_step: int | None
    last_a: float | None
    last_b: float | None
    noise: float | None                # the gap's noise sigma the separation was judged against
    points: int                        # aligned points compared

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "separates_at": _num(self.separates_at), "separates_at_step": self.separates_at_step,
                "max_gap": _num(self.max_gap), "max_gap_at": _num(self.max_gap_at), "max_gap_step": self.max_gap_step,
                "last_a": _num(self.last_a), "last_b": _num(self.last_b), "noise": _num(self.noise),
                "points": self.points}


def _num(v: float | None) -> float | int | None:
    if v is None:
        return None
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


def noise_sigma(values: np.ndarray) -> float:
    """Step-to-step noise of a series: 1.4826·MAD of successive differences / √2 (0 when too short)."""
    v = values[np.isfinite(values)]
    if len(v) < 3:
        return 0.0
    d = np.diff(v)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def separation(key: str, xa: np.ndarray, ya: np.ndarray, sa: np.ndarray, xb: np.ndarray, yb: np.ndarray) -> Separation:
    """One key's comparison. `xa`, `xb`: each run's x (steps or tokens) for its values; `sa`: A's
    steps (to name the step a separation is at). B is read at A's x (linear between B's points)
    over the x both runs cover; where both logged the same x it is B's own value."""
    fa, fb = np.isfinite(ya), np.isfinite(yb)
    last_a = float(ya[fa][-1]) if fa.any() else None
    last_b = float(yb[fb][-1]) if fb.any() else None
    xa, ya, sa = xa[fa], ya[fa], sa[fa]
    xb, yb = xb[fb], yb[fb]
    if len(xa) == 0 or len(xb) == 0:
        return Separation(key, None, None, None, None, None, last_a, last_b, None, 0)
    lo, hi = max(xa[0], xb[0]), min(xa[-1], xb[-1])
    keep = (xa >= lo) & (xa <= hi)
    x, y, s = xa[keep], ya[keep], sa[keep]
    if len(x) == 0:
        return Separation(key, None, None, None, None, None, last_a, last_b, None, 0)
    gap = y - np.interp(x, xb, yb)
    sigma = noise_sigma(gap)
    scale = max(float(np.nanmax(np.abs(np.concatenate([ya, yb])))), 1e-300)
    bar = max(SEPARATION_SIGMAS * sigma, 1e-9 * scale)
    apart = np.abs(gap) > bar
    at = _first_run(apart, min(SEPARATION_RUN, len(apart)))
    i = int(np.argmax(np.abs(gap)))
    return Separation(key, float(x[at]) if at is not None else None, int(s[at]) if at is not None else None,
                      float(gap[i]), float(x[i]), int(s[i]), last_a, last_b, sigma, len(x))


def _first_run(flags: np.ndarray, n: int) -> int | None:
    """Index where the first run of at least `n` True values starts."""
    if n <= 0 or not flags.any():
        return None
    count = 0
    for i, f in enumerate(flags):
        count = count + 1 if f else 0
        if count >= n:
            return i - n + 1
    return None


def order(seps: Sequence[Separation]) -> list[Separation]:
    """Keys that separate first (earliest x), then the rest by name."""
    return sorted(seps, key=lambda s: (s.separates_at is None, s.separates_at if s.separates_at is not None else 0.0,
                                       s.key))


# --- reading the store -------------------------------------------------------------------------

def diff_runs(con, target_a, target_b, *, keys: list[str] | None = None, x: str = "step") -> dict[str, Any]:
    """The contract's diff document for two resolved targets (store/lineage.py `Target`s)."""
    from marinctl.errors import UserError
    from marinctl.store import metrics as M

    a, b = target_a.leaf, target_b.leaf
    doc: dict[str, Any] = {"run_a": target_a.name, "run_b": target_b.name, "x": x,
                           "config": config_diff(a.get("config") or {}, b.get("config") or {})}
    have_a, have_b = set(M.run_keys(con, target_a.run_pks)), set(M.run_keys(con, target_b.run_pks))
    if keys:
        missing = [k for k in keys if k not in have_a and k not in have_b]
        if missing:
            raise UserError(f"neither run logged {', '.join(missing)}",
                            f"list a run's keys with `marinctl show {target_a.name}` or `marinctl sql`")
        wanted = keys
    else:
        wanted = sorted(k for k in have_a & have_b if not k.startswith("_") and k not in TOKEN_KEYS)
    to_x_a = _x_of(con, target_a, x)
    to_x_b = _x_of(con, target_b, x)
    seps = []
    for key in wanted:
        sa, ya = M.series(con, target_a.segments, key)
        sb, yb = M.series(con, target_b.segments, key)
        seps.append(separation(key, to_x_a(sa), ya.astype(float), sa, to_x_b(sb), yb.astype(float)))
    doc["metrics"] = [s.as_dict() for s in order(seps)]
    return doc


def _x_of(con, target, mode: str):
    """steps → x for a run: the steps themselves, or tokens (its logged cumulative tokens where it
    logged them, else steps × its schedule's tokens per step)."""
    from marinctl.analysis.schedule import schedule_of_target
    from marinctl.errors import UserError
    from marinctl.store import metrics as M

    if mode == "step":
        return lambda steps: np.asarray(steps, dtype=float)
    for key in TOKEN_KEYS:
        ts, tv = M.series(con, target.segments, key)
        ok = np.isfinite(tv)
        if ok.sum() >= 2:
            ts, tv = ts[ok].astype(float), tv[ok].astype(float)
            return lambda steps, ts=ts, tv=tv: _extrapolated(np.asarray(steps, dtype=float), ts, tv)
    per_step = schedule_of_target(target).tokens_per_step
    if per_step:
        return lambda steps: (np.asarray(steps, dtype=float) + 1.0) * float(per_step)
    raise UserError(f"{target.name} has no token count: it logged no {TOKEN_KEYS[0]} and its config gives no "
                    "batch size × sequence length", "compare by step: drop --x tokens")


def _extrapolated(steps: np.ndarray, ts: np.ndarray, tv: np.ndarray) -> np.ndarray:
    """Cumulative tokens at `steps` from the logged ones, linear beyond them at the last rate."""
    out = np.interp(steps, ts, tv)
    rate = (tv[-1] - tv[0]) / max(ts[-1] - ts[0], 1.0)
    out = np.where(steps > ts[-1], tv[-1] + (steps - ts[-1]) * rate, out)
    return np.where(steps < ts[0], tv[0] - (ts[0] - steps) * rate, out)
