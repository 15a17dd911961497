"""SYNTHETIC hero-shaped runs that grow while a follower watches them, for the on-call tests.

    run = hero_run("hero-synthetic-oncall")           # 400 healthy steps, its clock ending now
    with WandbServer([run], verbose=False) as server:
        feed = HeroFeed(server, run)
        feed.grow(20)                                  # 20 more healthy steps, logged "now"
        feed.grow(20, plant=lambda r, lo, hi: r.set_values("grad/norm/total", [lo + 3], 3.0))

A small Marin-shaped run (tests/fakes/synth.py) with the values Marin's hero monitor expects of a
healthy hero on the keys its thresholds read: 46.1M tokens a step (2.3M tokens/s at the synth's
~20 s a step, MFU ~23%), routing entropy ~5.94 (uniform over 384 experts is 5.951), router bias
within ±40, no skipped optimizer step, a token drop fraction ~2e-4, a Paloma macro eval every
EVAL_EVERY steps that keeps improving. Its own clock (`_timestamp`, `_runtime`) follows the wall
clock: the history ends at creation time and each growth is logged at the moment it is served,
unless `lag_s` puts its newest steps that far in the past (a trainer that stalled, or a W&B that
lags). Its heartbeat is the moment of each growth, unless `heartbeat_age_s` says otherwise.
Every run id starts with `hero-synthetic` (so the `marin-hero` preset's `hero-*` rules watch it);
names, tags and config say SYNTHETIC.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Callable

import numpy as np

from .synth import SynthRun, marin_run

ENTITY, PROJECT = "synthetic-lab", "oncall"
START_STEPS = 400           # history before following: the longest preset window (180 rows) fits twice
FIRST_STEP = 100_000        # a hero a quarter of the way in: its loss ~1.32, flat against its noise (σ ≈ 0.013)
TOTAL_STEPS = 390_251       # the hero's stop step (its monitor's FINAL_STEP)
EVAL_EVERY = 25
HERO_TOKENS_PER_STEP = 46_137_344     # the hero recipe: 11,264 sequences × 4096 tokens (marin#8435)
SECONDS_PER_STEP = 19.8 + 0.4         # the synth's step time (duration + 0.4 s)
EVAL = "eval/paloma/macro_loss"
HEALTHY = {"train/router/routing_entropy_mean": (5.94, 0.002), "train/router/bias_max": (40.0, 1.0),
           "train/router/bias_min": (-40.0, 1.0), "optim/skipped_step": (0.0, 0.0)}

Plant = Callable[[SynthRun, int, int], None]


def hero_run(run_id: str, *, steps: int = START_STEPS, seed: int = 0, fork_parent: str | None = None,
             fork_step: int | None = None, start_step: int = FIRST_STEP, clock_end: float | None = None,
             step_s: float = SECONDS_PER_STEP) -> SynthRun:
    """A running SYNTHETIC hero-shaped run, created `steps × step_s` before `clock_end` (default:
    now), where its `_timestamp` ends (a fork child created after following began: a small `step_s`)."""
    assert run_id.startswith("hero-synthetic"), run_id
    end = time.time() if clock_end is None else clock_end
    created = datetime.fromtimestamp(end - steps * step_s, timezone.utc)
    run = marin_run(run_id, steps=steps, start_step=start_step, layers=1, experts=2, norm_every=10,
                    eval_every=EVAL_EVERY, seed=seed, entity=ENTITY, project=PROJECT, group="synthetic-oncall",
                    state="running", num_train_steps=TOTAL_STEPS, tags=["oncall"], created_at=created,
                    fork_parent=fork_parent, fork_step=fork_step, tokens_per_step=HERO_TOKENS_PER_STEP)
    if steps:
        healthy(run, start_step, start_step + steps - 1)
        ts, _ = run.series["_timestamp"]
        clock = end - (ts[-1] - ts).astype(np.float64) * step_s
        run.series["_timestamp"] = (ts, clock)
        run.series["_runtime"] = (ts, clock - created.timestamp())
        run._touch()
    run.heartbeat_at = _now()
    return run


def healthy(run: SynthRun, lo: int, hi: int) -> None:
    """The hero monitor's keys at healthy values for steps lo..hi (each key's own SYNTHETIC noise),
    and a Paloma macro eval every EVAL_EVERY steps that improves at each (the synth's own evals
    move less between two evals than their noise)."""
    steps = np.arange(lo, hi + 1)
    for key, (level, spread) in HEALTHY.items():
        noise = np.random.default_rng([run.spec.seed, lo, len(key)]).standard_normal(len(steps))
        run.set_values(key, steps, level + spread * noise)
    evals = steps[steps % EVAL_EVERY == 0]
    if len(evals):
        run.set_values(EVAL, evals, eval_loss(evals))


def eval_loss(steps) -> np.ndarray:
    """The healthy SYNTHETIC Paloma macro loss at eval steps: 1.45, falling 1e-6 a step."""
    return 1.45 - 1e-6 * (np.asarray(steps, dtype=np.float64) - FIRST_STEP)


class HeroFeed:
    """Grows a served hero run under the server's lock, as a live run logs."""

    def __init__(self, server, run: SynthRun):
        self.server, self.run = server, run

    @property
    def last_step(self) -> int:
        return int(self.run.last_step)

    def grow(self, n: int, *, plant: Plant | None = None, lag_s: float = 0.0, heartbeat_age_s: float = 0.0,
             own_pace: bool = False) -> int:
        """Log `n` more healthy steps, then `plant(run, first, last)` anything into them; their clock
        is now (or `lag_s` ago; `own_pace`: the synth's ~20 s a step on from the last), the heartbeat
        now (or `heartbeat_age_s` ago). Returns the last step."""
        with self.server._lock:
            first = self.last_step + 1
            self.run.extend(first + n - 1)
            healthy(self.run, first, self.last_step)
            if plant is not None:
                plant(self.run, first, self.last_step)
            if not own_pace:
                self._clock(first, time.time() - lag_s)
            self.run._touch()
            self.run.heartbeat_at = _now() - timedelta(seconds=heartbeat_age_s)
        return self.last_step

    def rewind(self, at: int, to: int, *, plant: Plant | None = None, seed: int = 99) -> None:
        """A W&B rewind: every step from `at` forgotten, then logged again up to `to` (new noise), now."""
        with self.server._lock:
            self.run.truncate(at)
            self.run.extend(to, seed=seed)
            healthy(self.run, at, to)
            if plant is not None:
                plant(self.run, at, to)
            self._clock(at, time.time())
            self.run._touch()
            self.run.heartbeat_at = _now()

    def _clock(self, first: int, end: float) -> None:
        """`_timestamp` and `_runtime` of steps first.. spread over the last second before `end`."""
        s, v = self.run.series["_timestamp"]
        new = s >= first
        k = int(new.sum())
        v = v.copy()
        v[new] = end - 1.0 + np.arange(1, k + 1) / max(k, 1)
        self.run.series["_timestamp"] = (s, v)
        rs, rv = self.run.series["_runtime"]
        rv = rv.copy()
        rv[rs >= first] = v[new] - self.run.created_at.timestamp()
        self.run.series["_runtime"] = (rs, rv)


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)
