"""Labelled SYNTHETIC runbook incidents and healthy controls: never real data.

The incidents Marin's hero runbook watches for (`.agents/skills/manage-hero-run/SKILL.md`:
resume loss mismatch, sustained loss spike, throughput collapse, router collapse) and the
hero's own history (attention-gate norm growth, issue #8818; weight decay on the gate and
router weight from step 54k, PR #8833), each done to a healthy Marin-shaped run from
tests/fakes/synth.py through the helpers of tests/fakes/incidents.py. Every run id starts with
`synthetic-`, carries the tags `synthetic` and `incident:<name>`, and lives in the SYNTHETIC
project `synthetic-lab/explain-incidents` (healthy sweeps: `synthetic-lab/healthy-sweep`).
The truth stays here, in Python; nothing in a run's config tells a detector the answer.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import incidents as I
from . import synth
from .incidents import Cause, Incident, SynthRun

GATE = "params/norm/stacked_blocks.{i}.attn_gate"
ROUTER_W = "params/norm/stacked_blocks.{i}.mlp.router.weight"
TPS, DURATION, MFU = "throughput/tokens_per_second", "throughput/duration", "throughput/mfu"
SWEEP_PROJECT = "healthy-sweep"


# --- injections ----------------------------------------------------------------------------------

def add_gates(run: SynthRun, base: float = 8.0) -> None:
    """Give every layer an attention gate (Adam, no weight decay), growing as the run's other Adam
    leaves do: 30% over the planned run, 0.1% noise."""
    steps = run.series[I.PTOTAL][0]
    total = run.spec.num_train_steps
    for i in range(run.spec.layers):
        rng = np.random.default_rng([run.spec.seed, 8818, i])
        v = base * (1.0 + 0.3 * steps / total) * (1.0 + 1e-3 * rng.standard_normal(len(steps)))
        run.set_values(GATE.format(i=i), steps, v)
    I.retotal(run)


def grow(run: SynthRun, key: str, at: int, per_1k: float) -> None:
    """From `at`, `key` grows a further `per_1k` (relative) every 1,000 steps, steadily."""
    s, v = run.series[key]
    v = v.copy()
    m = s >= at
    v[m] *= 1.0 + per_1k * (s[m] - at) / 1000.0
    run.set_values(key, s, v)


def stall_loss(run: SynthRun, at: int, rise_per_1k: float = 0.03) -> None:
    """From `at` the loss stops falling and creeps up `rise_per_1k` per 1,000 steps (noise kept)."""
    s, loss = run.series[I.LOSS]
    m = s >= at
    level = synth.loss_level(run.spec, s[m])
    flat = synth.loss_level(run.spec, np.array([at]))[0] * (1.0 + rise_per_1k * (s[m] - at) / 1000.0)
    I.set_loss(run, s[m], loss[m] / level * flat)


def slow_window(run: SynthRun, lo: int, hi: int, ratio: float) -> None:
    """Steps [lo, hi) run at `ratio` of the usual speed: tokens/s and MFU × ratio, step time and
    the wall clock stretched; from `hi` on the usual speed again."""
    for key, f in ((TPS, ratio), (MFU, ratio), (DURATION, 1 / ratio)):
        s, v = run.series[key]
        v = v.copy()
        v[(s >= lo) & (s < hi)] *= f
        run.series[key] = (s, v)
    for key in ("_timestamp", "_runtime"):
        s, v = run.series[key]
        dt = np.diff(v, prepend=v[0])
        dt[(s >= lo) & (s < hi)] /= ratio
        run.series[key] = (s, v[0] + np.cumsum(dt))
    run._touch()


def excursion(run: SynthRun, at: int, length: int, factor: float) -> tuple[int, ...]:
    """The loss × `factor` for `length` steps from `at` (a run of bad batches), then back at once;
    the grad norm untouched. Returns the steps."""
    steps = tuple(range(at, at + length))
    s, old = I._at(run, I.LOSS, steps)
    I.set_loss(run, s, old * factor)
    return steps


def collapse_routing(run: SynthRun, at: int, length: int, depth: float = 0.4) -> None:
    """Router collapse: every layer's routing entropy sinks steadily by `depth` of its value over
    `length` steps (tokens crowd onto fewer experts), then recovers at once; the mean follows."""
    layers = []
    for i in range(run.spec.layers):
        key = f"train/router/layer_{i}/routing_entropy"
        s, v = run.series[key]
        v = v.copy()
        m = (s >= at) & (s < at + length)
        v[m] *= 1.0 - depth * (s[m] - at + 1) / length
        run.series[key] = (s, v)
        layers.append(v)
    s = run.series["train/router/routing_entropy_mean"][0]
    run.series["train/router/routing_entropy_mean"] = (s, np.mean(layers, axis=0))
    run._touch()


def scale_noise(run: SynthRun, loss: float = 1.0, throughput: float = 1.0) -> None:
    """The loss's relative noise × `loss` (synth's is 1%), tokens/s and step time's × `throughput` (2%)."""
    if loss == 1.0 and throughput == 1.0:
        return
    s, v = run.series[I.LOSS]
    level = synth.loss_level(run.spec, s)
    I.set_loss(run, s, level * (1.0 + loss * (v / level - 1.0)))
    for key in (TPS, DURATION):
        s, v = run.series[key]
        med = float(np.median(v))
        run.series[key] = (s, med * (1.0 + throughput * (v / med - 1.0)))
    run._touch()


# --- incidents ----------------------------------------------------------------------------------

def gate_drift(run_id: str = "synthetic-gate-drift", *, at: int = 1500, steps: int = 3000, loss_moves: bool = False,
               per_1k: float = 0.4, seed: int = 0, noise: float = 1.0) -> Incident:
    """Every layer's attention-gate norm (Adam, no weight decay) grows a further 40%
    (`per_1k`) per 1,000 steps from `at`, steadily; the loss keeps falling (or, `loss_moves`, stalls)."""
    name = "gate-drift" + ("-loss" if loss_moves else "")
    run = I.base_run(run_id, name, steps=steps, seed=seed)
    scale_noise(run, loss=noise, throughput=noise)
    add_gates(run)
    for i in range(run.spec.layers):
        grow(run, GATE.format(i=i), at, per_1k)
    I.retotal(run)
    if loss_moves:
        stall_loss(run, at)
    return Incident(name, "28 #1", [run], [Cause("optimizer", at, "attn_gate norms +40%/1k steps from the onset",
                                                 window=(at, steps - 1))])


def router_weight_drift(run_id: str = "synthetic-router-weight-drift", *, at: int = 1500, steps: int = 3000) -> Incident:
    """Every layer's router weight (Adam, no weight decay) grows a further 50% per
    1,000 steps from `at`; the loss keeps falling."""
    run = I.base_run(run_id, "router-weight-drift", steps=steps)
    for i in range(run.spec.layers):
        grow(run, ROUTER_W.format(i=i), at, 0.5)
    I.retotal(run)
    return Incident("router-weight-drift", "28 #1", [run],
                    [Cause("moe_routing", at, "router weight norms +50%/1k steps", window=(at, steps - 1))])


FORK, PARENT_END, CHILD_END = 1200, 1500, 2000
COMPARED_TO = FORK + 250         # the runbook compares over 200 steps after a 50-step post-resume warm-up


def resume_offset(run_id: str = "synthetic-resume-mismatch", *, rel: float = 0.03, seed: int = 20,
                  noise: float = 1.0) -> Incident:
    """A child forked at step 1,200 from a parent that logged on to 1,499; from the
    fork on the child's loss sits `rel` above what the parent logged at the same steps (its own
    batches: independent noise, × `noise`)."""
    parent, child = I.fork_pair(f"{run_id}-parent", run_id, "resume-mismatch", fork_step=FORK,
                                parent_steps=PARENT_END, last_step=CHILD_END, seed=seed)
    for run in (parent, child):
        scale_noise(run, loss=noise, throughput=noise)
    s, v = child.series[I.LOSS]
    I.set_loss(child, s, v * (1.0 + rel))
    after = FORK + 51
    return Incident("resume-mismatch", "28 #2", [parent, child],
                    [Cause("infrastructure", after, f"child loss +{rel:.0%} over its parent's after the fork",
                           window=(after, COMPARED_TO))])


def resume_replay(run_id: str, *, offset: float, seed: int = 30, noise: float = 1.0) -> Incident:
    """A child that replays its parent's batches after the fork (its loss at each
    step the parent logged is the parent's, + `offset`, + 1e-4 numerics noise). offset 0: a
    faithful resume (a control); 0.005: above the runbook's 0.002 catch-up bar."""
    name = "resume-replay" if offset else "resume-faithful"
    parent, child = I.fork_pair(f"{run_id}-parent", run_id, name, fork_step=FORK,
                                parent_steps=PARENT_END, last_step=CHILD_END, seed=seed)
    for run in (parent, child):
        scale_noise(run, loss=noise, throughput=noise)
    ps, pv = parent.series[I.LOSS]
    over = ps > FORK
    jitter = 1e-4 * np.random.default_rng([seed, 2]).standard_normal(int(over.sum()))
    I.set_loss(child, ps[over], pv[over] + offset + jitter)
    causes = [Cause("infrastructure", FORK + 1, f"replayed batches, loss +{offset} over the parent's",
                    window=(FORK + 1, COMPARED_TO))] if offset else []
    return Incident(name, "28 #2", [parent, child], causes)


def throughput_window(run_id: str = "synthetic-throughput-collapse", *, lo: int = 1500, hi: int = 2000,
                      ratio: float = 0.75, steps: int = 2600, seed: int = 0, noise: float = 1.0) -> Incident:
    """Steps [lo, hi) run ~25% below the usual throughput, then recover (noise × `noise`)."""
    run = I.base_run(run_id, "throughput-collapse", steps=steps, seed=seed)
    scale_noise(run, loss=noise, throughput=noise)
    slow_window(run, lo, hi, ratio)
    return Incident("throughput-collapse", "28 #3", [run],
                    [Cause("infrastructure", lo, f"{1 - ratio:.0%} below baseline over [{lo}, {hi})", window=(lo, hi - 1))])


def loss_excursion(run_id: str = "synthetic-loss-excursion", *, at: int = 1500, length: int = 12,
                   factor: float = 1.8) -> Incident:
    """The loss ×1.8 for 12 steps with a normal grad norm, back to trend at once."""
    run = I.base_run(run_id, "loss-excursion", steps=2000)
    steps = excursion(run, at, length, factor)
    return Incident("loss-excursion", "28 #4", [run], [Cause("data_batch", at, "loss ×1.8 for 12 steps, grad normal",
                                                             steps, window=(at, at + length - 1))])


def router_collapse(run_id: str = "synthetic-router-collapse", *, at: int = 1500, length: int = 150) -> Incident:
    """Routing entropy sinks steadily over 150 steps (router collapse), then recovers."""
    run = I.base_run(run_id, "router-collapse", steps=2000)
    collapse_routing(run, at, length)
    return Incident("router-collapse", "28 #5", [run],
                    [Cause("moe_routing", at, "routing entropy sinking for 150 steps", window=(at, at + length - 1))])


def rung_named(run_id: str = "synthetic-ablation-d768-gate-wd") -> Incident:
    """An ablation whose id names a rung width (d768) but which is no ladder rung: its
    own config plans 3,000 steps, 5% warm-up, one data mixture."""
    run = I.base_run(run_id, "rung-named", steps=1200, num_train_steps=3000, warmup=0.05)
    run.config["optimizer"] = {"warmup": 0.05, "decay": None, "lr_schedule": "linear", "min_lr_ratio": 0.05}
    return Incident("rung-named", "28 #6", [run])


REGISTRY = {
    "gate-drift": gate_drift,
    "gate-drift-loss": lambda: gate_drift("synthetic-gate-drift-loss", loss_moves=True),
    "router-weight-drift": router_weight_drift,
    "resume-mismatch": resume_offset,
    "resume-replay": lambda: resume_replay("synthetic-resume-replay", offset=0.005),
    "resume-faithful": lambda: resume_replay("synthetic-resume-faithful", offset=0.0, seed=40),
    "throughput-collapse": throughput_window,
    "loss-excursion": loss_excursion,
    "router-collapse": router_collapse,
    "rung-named": rung_named,
}


def build(names=None) -> dict[str, Incident]:
    return {n: REGISTRY[n]() for n in (names or REGISTRY)}


# --- healthy sweeps ---------------------------------------------------------------------------------

SPIKES = (1.03, 1.05, 1.08, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0)
SPIKE_FIRST, SPIKE_EVERY = 500, 200


def healthy(run_id: str, *, seed: int, noise: float, every: int, warmup: float, switches: tuple[int, ...] = (),
            decay: float | None = None, steps: int = 2500) -> SynthRun:
    """A healthy SYNTHETIC run: loss noise × `noise` (1 = synth's 1%), logging every `every`
    steps, its own schedule in Levanter's names (warm-up fraction, linear decay over the last
    `decay` of the run, data-mixture switches where the loss jumps 10% and eases back, grad ×1.4),
    the loss and grad norm shaped as that schedule says."""
    run = synth.marin_run(run_id, steps=steps, seed=seed, entity=I.ENTITY, project=SWEEP_PROJECT, group="synthetic-sweep",
                          tags=["healthy-sweep"], num_train_steps=steps, warmup=warmup, layers=I.LAYERS, experts=I.EXPERTS)
    scale_noise(run, loss=noise, throughput=noise)
    s, loss = run.series[I.LOSS]
    x = s.astype(np.float64)
    bump = lambda at, tau: np.where(x >= at, np.exp(-(x - at) / tau), 0.0)  # noqa: E731
    shape = np.ones_like(x)
    for sw in switches:
        shape *= 1 + 0.10 * bump(sw, 80)
    decay_start = int(steps * (1 - decay)) if decay else steps
    shape *= 1 - 0.04 * np.clip((x - decay_start) / max(steps - decay_start, 1), 0, 1)
    I.set_loss(run, s, loss * shape)
    gs, gv = run.series[I.GRAD]
    gx = gs.astype(np.float64)
    warm_end = int(warmup * steps)
    gshape = 1 + 0.3 * np.exp(-((gx - warm_end) / 60) ** 2)
    for sw in switches:
        gshape *= np.interp(gx, x, 1 + 0.4 * bump(sw, 80))
    run.set_values(I.GRAD, gs, gv * gshape)
    weights = [[0, {"web": 0.8, "code": 0.2}]] + [[sw, {"web": 0.5 - 0.1 * k, "code": 0.2, "math": 0.3 + 0.1 * k}]
                                                  for k, sw in enumerate(switches)]
    run.config = {**run.config, "optimizer": {"warmup": warmup, "decay": decay, "lr_schedule": "linear", "min_lr_ratio": 0.05},
                  "trainer": {**run.config["trainer"], "num_train_steps": steps}}
    if switches:
        run.config["data"] = {"train_weights": weights}
    if every > 1:
        I.sparsify(run, every)
    return run


def sweep(seeds: int = 2, noises=(0.5, 1.0, 2.0), everies=(1, 10)) -> list[SynthRun]:
    """Healthy runs over noise levels, logging intervals, schedules (warm-up end; switches; decay) and seeds."""
    shapes = (dict(warmup=0.02), dict(warmup=0.1, switches=(900, 1700), decay=0.3))
    out = []
    for seed, noise, every, (k, shape) in itertools.product(range(seeds), noises, everies, enumerate(shapes)):
        out.append(healthy(f"synthetic-healthy-n{noise:g}-e{every}-s{k}-{seed}", seed=100 + seed, noise=noise,
                           every=every, **shape))
    return out


def spike_ladder(run_id: str = "synthetic-spike-sizes", *, noise: float = 1.0, seed: int = 7) -> SynthRun:
    """A healthy run with one loss spike of each size in SPIKES (no grad precursor), 200 steps apart."""
    run = healthy(run_id, seed=seed, noise=noise, every=1, warmup=0.02, steps=SPIKE_FIRST + SPIKE_EVERY * len(SPIKES) + 200)
    for k, f in enumerate(SPIKES):
        I.loss_spike(run, SPIKE_FIRST + SPIKE_EVERY * k, f)
    return run
