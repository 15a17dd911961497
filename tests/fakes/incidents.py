"""Labelled SYNTHETIC incidents for `explain` and `anomalies`: never real data.

Each generator builds runs a user could have — Marin-shaped W&B history from tests/fakes/synth.py
with one known thing done to it — and returns an `Incident`: the runs, and beside them the ground
truth (which cause classes happened at which steps, and which windows hold only expected change).
Every run id starts with `synthetic-`, carries the tags `synthetic` and `incident:<name>`, and lives
in the SYNTHETIC project `synthetic-lab/explain-incidents`. The truth stays here, in Python; nothing
in the runs' config tells a detector the answer.

The injected shapes follow the published signatures (the OPT-175B and BLOOM tr8-104B logbooks,
PaLM, OLMo 2, Wortsman et al. 2023; Marin's QB router bias and hero optimizer, marin#8435):
- QB router-bias re-set: `router_bias` is replaced each step, so its norm can jump in one step
  (`heuristic_parameter`); the leaves' Δ‖θᵢ‖² still sum exactly to the logged Δ‖θ‖².
- optimizer co-spike: grad norm first (×15), loss one logged step later (×2.5), both easing
  over the next steps (BLOOM tr8-104B: grad 12,953 → 262,623 one step before loss 3.11 → 7.71).
- bad batch: a loss spike with no grad-norm precursor (PaLM, OLMo 2) — `data_batch`.
- logit growth: loss creeping up while the output layer's norm and the z-loss (log²Z, the
  `train/loss − train/cross_entropy_loss` gap in grug) rise steadily (Wortsman et al., PaLM).
- restart gap: steps missing from the history and a wall-clock pause (OPT logbook) — `infrastructure`.
- schedule: warm-up end, data-mixture switches and decay start, from the run's own config in
  Levanter's names — expected shape changes, not incidents.

    python -m tests.fakes.incidents --offline DIR NAME…   # write runs as offline `.wandb` files

`--offline` logs the named incidents' runs with the real wandb SDK (offline mode, system stats off,
`wandb.teardown()` after), in its own process so no `wandb-core` outlives it.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from . import synth
from .synth import SynthRun

ENTITY, PROJECT, GROUP = "synthetic-lab", "explain-incidents", "synthetic-incidents"
LAYERS, EXPERTS = 4, 8
LOSS, CE, GRAD = "train/loss", "train/cross_entropy_loss", "grad/norm/total"
PTOTAL, HEAD = "params/norm/total", "params/norm/lm_head"
GRAD_EPISODE = (15.0, 4.0, 1.5)     # grad norm × at the event's first three logged steps
LOSS_EPISODE = (2.5, 1.4, 1.1)      # loss × one logged step later, easing back
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cause:
    """One thing that really happened: its contract cause class and where a person would look."""

    cause_class: str
    step: int
    what: str
    steps: tuple[int, ...] = ()            # every logged step the event touches
    window: tuple[int, int] | None = None  # trend events: first and last step of the trend


@dataclass
class Incident:
    """SYNTHETIC runs (root first; the last carries the incident) and their ground truth."""

    name: str
    issue: str                         # which point of which issue it exercises
    runs: list[SynthRun]
    causes: list[Cause] = field(default_factory=list)
    quiet: list[tuple[int, int, str]] = field(default_factory=list)   # [lo, hi]: only expected change
    every: int = 1                     # logging interval of the dense keys

    @property
    def run(self) -> SynthRun:
        return self.runs[-1]

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def cause(self, cause_class: str) -> Cause:
        return next(c for c in self.causes if c.cause_class == cause_class)

    def __repr__(self) -> str:  # short: failure reports print it, and the runs hold every array
        return f"Incident({self.name!r}, runs={[r.run_id for r in self.runs]}, causes={self.causes})"


# --- runs --------------------------------------------------------------------------------------

def base_run(run_id: str, incident: str, *, steps: int, seed: int = 0, **kw) -> SynthRun:
    """A healthy SYNTHETIC MoE run (4 layers, 8 experts, watch keys every 10 steps)."""
    return synth.marin_run(run_id, steps=steps, layers=LAYERS, experts=EXPERTS, seed=seed, entity=ENTITY,
                           project=PROJECT, group=GROUP, tags=[f"incident:{incident}"], **kw)


def fork_pair(parent_id: str, child_id: str, incident: str, *, fork_step: int, parent_steps: int,
              last_step: int, seed: int = 0) -> tuple[SynthRun, SynthRun]:
    """A parent logging [0, parent_steps) and a child forked at `fork_step` (W&B `fork_from`),
    created six hours later and logging (fork_step, last_step]; both plan `last_step + 1` steps."""
    total = last_step + 1
    parent = base_run(parent_id, incident, steps=parent_steps, seed=seed, num_train_steps=total, state="crashed")
    ts_s, ts_v = parent.series["_timestamp"]
    t_fork = float(ts_v[np.searchsorted(ts_s, fork_step)])
    created = (datetime.fromtimestamp(t_fork, timezone.utc) + timedelta(hours=6)).replace(microsecond=0)
    child = base_run(child_id, incident, steps=last_step - fork_step, start_step=fork_step + 1, seed=seed + 1,
                     num_train_steps=total, fork_parent=parent_id, fork_step=fork_step, created_at=created)
    return parent, child


def sparsify(run: SynthRun, every: int) -> SynthRun:
    """Keep only steps that are multiples of `every` in every key (a run logging every N steps)."""
    for key, (s, v) in list(run.series.items()):
        keep = s % every == 0
        run.series[key] = (s[keep], v[keep])
    run._touch()
    return run


# --- injections --------------------------------------------------------------------------------

def _at(run: SynthRun, key: str, steps) -> tuple[np.ndarray, np.ndarray]:
    """The logged steps among `steps` for `key`, and their current values."""
    s, v = run.series[key]
    want = np.asarray(steps, dtype=np.int64)
    idx = np.clip(np.searchsorted(s, want), 0, max(len(s) - 1, 0))
    ok = (idx < len(s)) & (s[idx] == want) if len(s) else np.zeros(len(want), bool)
    return want[ok], v[idx[ok]]


def _leaves(run: SynthRun, prefix: str) -> list[str]:
    return [k for k in run.series if k.startswith(prefix) and k != prefix + "total"]


def retotal(run: SynthRun, prefix: str = "params/norm/") -> None:
    """Keep `<prefix>total` the exact root-sum-of-squares of its leaves after an injection."""
    leaves = _leaves(run, prefix)
    steps = run.series[leaves[0]][0]
    run.set_values(prefix + "total", steps, np.sqrt(sum(run.series[k][1] ** 2 for k in leaves)))


def set_loss(run: SynthRun, steps, new_loss, gap=None) -> None:
    """Log a new train/loss at `steps`; cross-entropy follows it, keeping the z-loss gap
    (`loss − CE`) unless a new `gap` is given."""
    steps, old = _at(run, LOSS, steps)
    new_loss = np.broadcast_to(np.asarray(new_loss, dtype=np.float64), old.shape)
    _, ce = _at(run, CE, steps)
    keep_gap = old - ce if gap is None else np.asarray(gap)
    run.set_values(LOSS, steps, new_loss)
    run.set_values(CE, steps, new_loss - keep_gap)


def loss_spike(run: SynthRun, at: int, factor: float = 1.8) -> None:
    """A bad batch: loss × factor at one step, no grad-norm precursor."""
    steps, old = _at(run, LOSS, [at])
    set_loss(run, steps, old * factor)


def grad_scale(run: SynthRun, steps, factors) -> None:
    """grad/norm/total × factor at each step; at watch steps the grad leaves scale too, so the
    total stays their exact root-sum-of-squares."""
    for step, f in zip(steps, factors):
        s, v = _at(run, GRAD, [step])
        if not len(s):
            continue
        run.set_values(GRAD, s, v * f)
        for leaf in _leaves(run, "grad/norm/"):
            ls, lv = _at(run, leaf, [step])
            if len(ls):
                run.set_values(leaf, ls, lv * f)


def optimizer_co_spike(run: SynthRun, at: int, every: int = 1) -> tuple[int, ...]:
    """Grad norm ×15, ×4, ×1.5 at `at` and the next two logged steps; loss ×2.5, ×1.4, ×1.1 one
    logged step behind. Returns the event's logged steps."""
    steps = [at + i * every for i in range(len(GRAD_EPISODE) + 1)]
    grad_scale(run, steps[:3], GRAD_EPISODE)
    for step, f in zip(steps[1:], LOSS_EPISODE):
        s, old = _at(run, LOSS, [step])
        set_loss(run, s, old * f)
    return tuple(steps)


def router_bias_jump(run: SynthRun, at: int, to: float = 30.0) -> None:
    """QB re-sets every layer's router bias to norm ~`to` from step `at` on (then drifts 0.1%/step)."""
    for i in range(run.spec.layers):
        key = f"params/norm/stacked_blocks.{i}.mlp.router_bias"
        s, v = run.series[key]
        v = v.copy()
        after = s >= at
        v[after] = to * (1.0 + 0.001 * np.arange(after.sum()))
        run.set_values(key, s, v)
    retotal(run)


def logit_growth(run: SynthRun, start: int, end: int, *, loss_rise: float = 0.15, head_growth: float = 0.5,
                 log_z: tuple[float, float] = (1.0, 6.0)) -> None:
    """From `start`, loss climbs `loss_rise` by `end` (and on, at the same rate), the lm_head norm
    grows steadily (×(1+head_growth) by `end`) and log Z of the output logits grows linearly, so the
    z-loss — and `train/loss − train/cross_entropy_loss` — rises as log²Z (×36 by `end`)."""
    s, loss = run.series[LOSS]
    m = s >= start
    frac = (s[m] - start) / (end - start)
    level = synth.loss_level(run.spec, s[m])
    new_loss = loss[m] * (synth.loss_level(run.spec, np.array([start]))[0] / level) * (1.0 + loss_rise * frac)
    _, ce = _at(run, CE, s[m])
    lz0, lz1 = log_z
    gap = (loss[m] - ce) * ((lz0 + (lz1 - lz0) * frac) / lz0) ** 2
    set_loss(run, s[m], new_loss, gap=gap)
    hs, hv = run.series[HEAD]
    hm = hs >= start
    run.set_values(HEAD, hs[hm], hv[hm] * (1.0 + head_growth * (hs[hm] - start) / (end - start)))
    retotal(run)


def nonfinite_loss(run: SynthRun, steps) -> None:
    """NaN then +Inf loss (and cross-entropy) at `steps`; the run crashes after the last one."""
    steps = list(steps)
    vals = [math.nan, math.inf][: len(steps)] + [math.nan] * max(len(steps) - 2, 0)
    run.set_values(LOSS, steps, vals)
    run.set_values(CE, steps, vals)
    run.truncate(steps[-1] + 1)
    run.state = "crashed"


def step_gap(run: SynthRun, lo: int, hi: int, wall_gap_s: float = 2700.0) -> None:
    """A restart that skipped steps [lo, hi): nothing logged there, and the job was down
    `wall_gap_s` seconds before step `hi`."""
    for key, (s, v) in list(run.series.items()):
        keep = (s < lo) | (s >= hi)
        s, v = s[keep], v[keep].copy()
        if key in ("_timestamp", "_runtime"):
            v[s >= hi] += wall_gap_s
        run.series[key] = (s, v)
    run._touch()


def slowdown(run: SynthRun, at: int, ratio: float = 0.6) -> None:
    """From `at` every step takes 1/ratio as long: tokens/s and MFU × ratio, wall clock stretched."""
    for key, f in (("throughput/tokens_per_second", ratio), ("throughput/mfu", ratio), ("throughput/duration", 1 / ratio)):
        s, v = run.series[key]
        v = v.copy()
        v[s >= at] *= f
        run.series[key] = (s, v)
    for key in ("_timestamp", "_runtime"):
        s, v = run.series[key]
        dt = np.diff(v, prepend=v[0])
        dt[s >= at] /= ratio
        run.series[key] = (s, v[0] + np.cumsum(dt))
    run._touch()


def hyperball_drift(run: SynthRun, key: str, at: int, per_100: float = 0.03) -> None:
    """A MuonH matrix leaves its sphere: its norm grows `per_100` per 100 steps from `at`."""
    s, v = run.series[key]
    v = v.copy()
    m = s >= at
    v[m] *= 1 + per_100 * (s[m] - at) / 100
    run.set_values(key, s, v)
    retotal(run)


# --- the incidents -----------------------------------------------------------------------------

def coincident(run_id: str = "synthetic-coincident", *, at: int = 1500, steps: int = 2000, every: int = 1) -> Incident:
    """A QB router-bias re-set and an optimizer co-spike at the same step."""
    run = base_run(run_id, "coincident", steps=steps)
    router_bias_jump(run, at)
    event = optimizer_co_spike(run, at, every)
    if every > 1:
        sparsify(run, every)
    return Incident("coincident", "18 #1", [run], [
        Cause("heuristic_parameter", at, "QB re-set the router bias: most of Δ‖θ‖² is on router_bias leaves", (at,)),
        Cause("optimizer", event[1], "grad norm ×15, loss ×2.5 one logged step later, easing over the next steps", event),
    ], every=every)


def slow_logit_growth(run_id: str = "synthetic-logit-growth", *, start: int = 1500, end: int = 1900,
                      nan_at: int | None = None, every: int = 1) -> Incident:
    """Loss +15% over 400 steps with lm_head norm and z-loss rising; optionally NaNs later."""
    run = base_run(run_id, "logit-growth", steps=(nan_at + 40 if nan_at else end + 1), state="running")
    logit_growth(run, start, end)
    causes = [Cause("logit_growth", end, "loss +15%, lm_head norm ×1.5, z-loss ×36 over the window", window=(start, end))]
    if nan_at is not None:
        nonfinite_loss(run, [nan_at, nan_at + every])
        causes.append(Cause("numerics", nan_at, "train/loss NaN then Inf; the run crashed", (nan_at, nan_at + every)))
    if every > 1:
        sparsify(run, every)
    return Incident("logit-growth" + ("-nan" if nan_at else ""), "18 #2", [run], causes, every=every)


def restart_gap(run_id: str = "synthetic-gap", *, lo: int = 1200, hi: int = 1290, spikes: bool = False,
                steps: int = 1600, every: int = 1) -> Incident:
    """A restart skipped steps [lo, hi) (45 min down). With `spikes`: a bad batch 50
    steps before the gap, a big QB re-set at the first watch step after it (an anomalous per-step
    rate even spread over the gap) and a bad batch 5 logged steps after."""
    run = base_run(run_id, "gap" + ("-spikes" if spikes else ""), steps=steps)
    causes = []
    if spikes:
        loss_spike(run, lo - 50)
        router_bias_jump(run, hi, to=80.0)
        loss_spike(run, hi + 5 * every)
        causes += [Cause("data_batch", lo - 50, "loss ×1.8 without a grad precursor"),
                   Cause("heuristic_parameter", hi, "QB re-set the router bias (Δ‖θ‖² per step far above normal)"),
                   Cause("data_batch", hi + 5 * every, "loss ×1.8 without a grad precursor")]
    step_gap(run, lo, hi)
    causes.append(Cause("infrastructure", hi, f"restart: steps {lo}–{hi - 1} never logged, 45 min wall gap",
                        (lo - every, hi)))
    if every > 1:
        sparsify(run, every)
    return Incident("gap" + ("-spikes" if spikes else ""), "18 #3", [run], causes, every=every)


SCHEDULE = {"total": 3000, "warmup": 0.1, "decay": 0.3, "switches": (1200, 2500)}


def schedule_changes(run_id: str = "synthetic-schedule") -> Incident:
    """A healthy run whose own schedule (Levanter config names) has a 10% warm-up,
    a stable phase, a linear decay over the last 30% and data-mix switches at steps 1200 and 2500.
    The loss and grad norm move where that schedule says they should: grad norm peaks at the end
    of warm-up, a harder mixture lifts loss 10% (grad ×1.4) then eases, decay speeds the descent."""
    total, warm_frac, decay_frac = SCHEDULE["total"], SCHEDULE["warmup"], SCHEDULE["decay"]
    sw1, sw2 = SCHEDULE["switches"]
    warm_end, decay_start = int(warm_frac * total), int(total - decay_frac * total)
    run = base_run(run_id, "schedule", steps=total, num_train_steps=total)
    s, loss = run.series[LOSS]
    x = s.astype(np.float64)
    dfrac = np.clip((x - decay_start) / (total - decay_start), 0, 1)
    bump = lambda at, tau: np.where(x >= at, np.exp(-(x - at) / tau), 0.0)  # noqa: E731
    set_loss(run, s, loss * (1 + 0.10 * bump(sw1, 80)) * (1 + 0.08 * bump(sw2, 60)) * (1 - 0.04 * dfrac))
    gs, gv = run.series[GRAD]
    gx = gs.astype(np.float64)
    shape = ((1 + 0.3 * np.exp(-((gx - warm_end) / 60) ** 2)) * (1 + 0.2 * np.clip((gx - decay_start) / (total - decay_start), 0, 1))
             * np.interp(gx, x, (1 + 0.4 * bump(sw1, 80)) * (1 + 0.3 * bump(sw2, 60))))
    run.set_values(GRAD, gs, gv * shape)
    for key, peak in (("optim/learning_rate", run.spec.learning_rate), ("optim/adam_lr", run.spec.adam_lr)):
        ls = run.series[key][0]
        lx = ls.astype(np.float64)
        lr = np.where(lx < warm_end, peak * (lx + 1) / warm_end,
                      np.where(lx < decay_start, peak, peak * (1 - (1 - 0.05) * (lx - decay_start) / (total - decay_start))))
        run.set_values(key, ls, lr)
    run.config = {
        "synthetic": True,
        "trainer": {"id": run_id, "num_train_steps": total, "watch": {"interval": 10},
                    "tracker": {"project": PROJECT, "entity": ENTITY, "group": GROUP, "tags": ["synthetic"]}},
        "optimizer": {"learning_rate": run.spec.learning_rate, "adam_lr": run.spec.adam_lr, "warmup": warm_frac,
                      "decay": decay_frac, "min_lr_ratio": 0.05, "lr_schedule": "linear"},
        "model": {"hidden_dim": 768, "num_layers": LAYERS, "num_experts": EXPERTS, "num_experts_per_tok": 2},
        "data": {"train_weights": [[0, {"web": 0.8, "code": 0.2}], [sw1, {"web": 0.5, "code": 0.2, "math": 0.3}],
                                   [sw2, {"web": 0.3, "code": 0.2, "math": 0.3, "instruct": 0.2}]]},
    }
    quiet = [(warm_end - 10, warm_end + 20, "warm-up ends"), (sw1 - 5, sw1 + 60, "data phase 2 starts"),
             (decay_start - 10, decay_start + 20, "decay starts"), (sw2 - 5, sw2 + 60, "data phase 3 starts")]
    return Incident("schedule", "18 #4", [run], [], quiet)


def forked(kind: str) -> Incident:
    """An incident in a fork child (W&B `fork_from`), its parent synced alongside.
    kind 'coincident': both causes 60 steps after the fork (few own watch points yet);
    'logit-growth': the trend starts in the parent and continues across the fork."""
    if kind == "coincident":
        parent, child = fork_pair("synthetic-fork-parent-a", "synthetic-fork-coincident", "fork-coincident",
                                  fork_step=1200, parent_steps=1400, last_step=2000)
        at = 1260
        router_bias_jump(child, at)
        event = optimizer_co_spike(child, at)
        causes = [Cause("heuristic_parameter", at, "QB re-set the router bias", (at,)),
                  Cause("optimizer", at + 1, "grad norm ×15, loss ×2.5 the next step", event),
                  Cause("infrastructure", 1201, "forked from synthetic-fork-parent-a at step 1200")]
        return Incident("fork-coincident", "18 #5 (#1)", [parent, child], causes)
    parent, child = fork_pair("synthetic-fork-parent-b", "synthetic-fork-logit-growth", "fork-logit-growth",
                              fork_step=1150, parent_steps=1300, last_step=1400, seed=10)
    for run in (parent, child):
        logit_growth(run, 1000, 1400)
    return Incident("fork-logit-growth", "18 #5 (#2)", [parent, child],
                    [Cause("logit_growth", 1400, "loss +15%, lm_head ×1.5, z-loss ×36 over 1000–1400 (fork at 1150)",
                           window=(1000, 1400))])


# --- the classic single-cause incidents (kept black-box through every refactor) --------------

def classic(kind: str) -> Incident:
    """The single-cause incidents `explain` already holds on, one run each (1,600 steps)."""
    run = base_run(f"synthetic-{kind}", kind, steps=1600)
    causes: list[Cause] = []
    if kind == "router-bias":
        router_bias_jump(run, 500)
        causes.append(Cause("heuristic_parameter", 500, "QB re-set the router bias of every layer to norm ~30"))
    elif kind == "co-spike":
        grad_scale(run, [700], [20.0])
        loss_spike(run, 701, 1.8)
        causes.append(Cause("optimizer", 701, "grad norm ×20 at 700, loss ×1.8 at 701", (700, 701)))
    elif kind == "bad-batch":
        loss_spike(run, 900, 1.8)
        causes.append(Cause("data_batch", 900, "loss ×1.8 at 900, no grad precursor"))
    elif kind == "slowdown":
        slowdown(run, 1500)
        causes.append(Cause("infrastructure", 1500, "every step 1/0.6 as slow from 1500"))
    elif kind == "hyperball-drift":
        hyperball_drift(run, "params/norm/stacked_blocks.2.attn.w_q", 1200)
        causes.append(Cause("optimizer", 1240, "MuonH w_q of layer 2 grows 3%/100 steps from 1200", window=(1200, 1999)))
    elif kind != "healthy":
        raise ValueError(kind)
    return Incident(kind, "existing", [run], causes)


CLASSIC = ("router-bias", "co-spike", "bad-batch", "slowdown", "hyperball-drift", "healthy")

# name -> (generator, how it reaches marinctl: 'server' = loopback W&B, 'offline' = `.wandb` files)
REGISTRY: dict[str, tuple[Callable[[], Incident], str]] = {
    "coincident": (coincident, "server"),
    "logit-growth": (slow_logit_growth, "server"),
    "logit-growth-nan": (lambda: slow_logit_growth("synthetic-logit-growth-nan", nan_at=1960), "server"),
    "gap": (restart_gap, "server"),
    "gap-spikes": (lambda: restart_gap("synthetic-gap-spikes", spikes=True), "server"),
    "fork-coincident": (lambda: forked("coincident"), "server"),
    "fork-logit-growth": (lambda: forked("logit-growth"), "server"),
    "schedule": (schedule_changes, "offline"),
    "sparse-healthy": (lambda: Incident("sparse-healthy", "18 #5", [sparsify(base_run(
        "synthetic-sparse-healthy", "sparse-healthy", steps=3000), 10)], every=10), "offline"),
    "sparse-coincident": (lambda: coincident("synthetic-sparse-coincident", at=2000, steps=3000, every=10), "offline"),
    "sparse-logit-growth": (lambda: slow_logit_growth("synthetic-sparse-logit-growth", start=2000, end=2400,
                                                      every=10), "offline"),
    "sparse-gap": (lambda: restart_gap("synthetic-sparse-gap", lo=2000, hi=2060, steps=3000, every=10), "offline"),
    **{f"classic-{k}": ((lambda k=k: classic(k)), "server") for k in CLASSIC},
}


def build(names=None) -> dict[str, Incident]:
    return {n: REGISTRY[n][0]() for n in (names or REGISTRY)}


# --- offline `.wandb` files through the real SDK ---------------------------------------------

def write_offline(out: Path, names: list[str]) -> subprocess.Popen:
    """Start a process that logs the named incidents' runs as offline `.wandb` files under
    `out/wandb/`; wait on it (`.communicate()`) before syncing."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.fakes.incidents", "--offline", str(out), *names],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _log_offline(out: Path, names: list[str]) -> None:
    import wandb

    for incident in build(names).values():
        for run in incident.runs:
            wb = wandb.init(mode="offline", dir=str(out), project=run.project, entity=run.entity, id=run.run_id,
                            name=run.display_name, group=run.group, tags=run.tags, config=run.config,
                            settings=wandb.Settings(x_disable_stats=True))
            for row in run.rows():   # the SDK takes a logged `_timestamp` as the row's wall clock
                step = row.pop("_step")
                wb.log({k: v for k, v in row.items() if k == "_timestamp" or not k.startswith("_")}, step=step)
            wb.finish()
    wandb.teardown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offline", type=Path, required=True)
    ap.add_argument("names", nargs="+", choices=sorted(REGISTRY))
    args = ap.parse_args()
    args.offline.mkdir(parents=True, exist_ok=True)
    _log_offline(args.offline, args.names)
