"""A SYNTHETIC W&B run that grows while a follower watches it, with incidents arriving live (alerts).

    run = growing_run("synthetic-alerts-cospike")
    with WandbServer([run], verbose=False) as server:
        feed = Feed(server, run)
        feed.grow(20)                                 # 20 healthy steps, served from now on
        at = feed.grow(10, co_spike=True)             # an optimizer co-spike among them: its loss step
        feed.available_at[at]                         # when that step appeared on the server

The injected shapes are tests/fakes/incidents.py's (Marin's optimizer co-spike, NaN loss, a
slowdown); the run is a small Marin-shaped one from tests/fakes/synth.py, `running`, its
heartbeat at each growth's wall-clock time, so it is live while it grows and goes stale when it
stops. Every run id starts with `synthetic-alerts`; names, tags and config say SYNTHETIC.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Callable


from . import incidents as I
from .synth import SynthRun, marin_run

ENTITY, PROJECT = "synthetic-lab", "alerts"
START_STEPS = 400       # history before following: detection has its baselines (skips < 200, windows of 100)


def growing_run(run_id: str, *, steps: int = START_STEPS, seed: int = 0, name: str | None = None) -> SynthRun:
    assert run_id.startswith("synthetic-alerts"), run_id
    run = marin_run(run_id, steps=steps, layers=1, experts=2, norm_every=10, eval_every=10_000, seed=seed,
                    entity=ENTITY, project=PROJECT, group="synthetic-alerts", state="running",
                    num_train_steps=20_000, tags=["alerts"])
    if name is not None:
        run.display_name = name
    run.heartbeat_at = _now()
    return run


class Feed:
    """Grows a served run under the server's lock; remembers when each step became visible."""

    def __init__(self, server, run: SynthRun):
        self.server, self.run = server, run
        self.available_at: dict[int, float] = {}

    @property
    def last_step(self) -> int:
        return int(self.run.last_step)

    def grow(self, n: int, *, co_spike: bool = False, nan_loss: bool = False, slowdown: bool = False,
             then: Callable[[SynthRun, int, int], None] | None = None) -> int:
        """Log `n` more steps (at least 6 with an incident); with an incident, it starts at the
        new steps' second one; `then(run, first, last)` logs more at the new steps before any
        is served. Returns the incident's step (co-spike: its loss step; NaN: the first NaN),
        else the last new step."""
        with self.server._lock:
            first = self.last_step + 1
            self.run.extend(self.last_step + n)
            at = self.last_step
            if co_spike:
                steps = I.optimizer_co_spike(self.run, first + 1)
                at = steps[1]
            if nan_loss:
                s, _ = self.run.series[I.LOSS]
                bad = s[(s >= first + 1) & (s <= first + 2)]
                self.run.set_values(I.LOSS, bad, [math.nan, math.inf][: len(bad)])
                at = int(bad[0])
            if slowdown:
                _slow(self.run, first + 1)
            if then is not None:
                then(self.run, first, self.last_step)
            self.run.heartbeat_at = _now()
            now = time.time()
            for s in range(first, self.last_step + 1):
                self.available_at[s] = now
        return at

    def beat(self) -> None:
        """A heartbeat with no new step (a live run between logged steps)."""
        with self.server._lock:
            self.run.heartbeat_at = _now()
            self.run._touch()
            self.run.heartbeat_at = _now()


def _slow(run: SynthRun, at: int, ratio: float = 0.5) -> None:
    """From `at`, tokens/s and MFU halve and each step takes twice as long (incidents.slowdown's shape)."""
    for key, f in (("throughput/tokens_per_second", ratio), ("throughput/mfu", ratio), ("throughput/duration", 1 / ratio)):
        s, v = run.series[key]
        v = v.copy()
        v[s >= at] *= f
        run.series[key] = (s, v)
    run._touch()


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)



