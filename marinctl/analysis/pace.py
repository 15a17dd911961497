"""A run's recent pace: seconds per step, read from its own clock (`_timestamp`), the one source
of the ETA watch's header shows and a digest sends.

The median of per-step pace over the last few hundred logged steps, so a restart or fork gap in
the window (a `_runtime` reset, hours between two rows) does not inflate it; a run that logged no
`_timestamp` falls back on its logged step duration.
"""

from __future__ import annotations

import numpy as np

from marinctl.store import Connection
from marinctl.store import metrics as M
from marinctl.store.lineage import Target


def seconds_per_step(con: Connection, target: Target, step: int, window: int = 200) -> float | None:
    """Recent pace: median seconds per step from `_timestamp`, else the mean logged step duration."""
    s, v = M.series(con, target.segments, "_timestamp", lo=max(0, step - window))
    if len(s) >= 2:
        # Median of per-step pace: a restart or fork gap in the window must not inflate the ETA.
        ds, dv = np.diff(s), np.diff(v)
        ok = (ds > 0) & np.isfinite(dv)
        if ok.any():
            return float(np.median(dv[ok] / ds[ok]))
    s, v = M.series(con, target.segments, "throughput/duration", lo=max(0, step - window))
    ok = np.isfinite(v)
    return float(np.mean(v[ok])) if ok.any() else None
