"""Labelled SYNTHETIC episodes, one per incident kind marinctl knows, for `explain --range` (never real data).

Each builder returns an `Episode`: the runs (root first; the last carries the episode) and the
truth beside them — the cause class, the finding kinds that name it, and the steps it was
injected over. The shapes are tests/fakes/incidents.py's and runbook.py's (the published
signatures and Marin's runbook incidents); every run id starts with `synthetic-episode`, and the
runs live in the SYNTHETIC project `synthetic-lab/explain-incidents`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import incidents as I
from . import runbook as R
from .synth import SynthRun

FORK_AT, FORK_PARENT_END, FORK_LAST = 2400, 2500, 2800
DRIFT_AT = 1500


@dataclass
class Episode:
    name: str
    runs: list[SynthRun]
    cause_class: str
    kinds: tuple[str, ...]
    window: tuple[int, int]          # the steps the incident was injected over

    @property
    def run_id(self) -> str:
        return self.runs[-1].run_id

    def __repr__(self) -> str:
        return f"Episode({self.name!r}, {self.run_id}, {self.cause_class}, {self.window})"


def spike() -> Episode:
    run = I.base_run("synthetic-episode-spike", "episode-spike", steps=1200)
    I.loss_spike(run, 800, 1.8)
    return Episode("spike", [run], "data_batch", ("spike",), (800, 800))


def jump() -> Episode:
    run = I.base_run("synthetic-episode-jump", "episode-jump", steps=1200)
    I.router_bias_jump(run, 800)
    return Episode("jump", [run], "heuristic_parameter", ("param_norm_jump",), (800, 800))


def drift() -> Episode:
    inc = R.gate_drift("synthetic-episode-drift", at=DRIFT_AT, steps=3000)
    return Episode("drift", inc.runs, "optimizer", ("adam_drift",), (DRIFT_AT, 2999))


def resume_mismatch() -> Episode:
    inc = R.resume_offset("synthetic-episode-resume", rel=0.03)
    return Episode("resume mismatch", inc.runs, "infrastructure", ("resume_mismatch",), (R.FORK + 51, R.PARENT_END - 1))


def throughput_drop() -> Episode:
    inc = R.throughput_window("synthetic-episode-slowdown", lo=1500, hi=2000, steps=2400)
    return Episode("throughput drop", inc.runs, "infrastructure", ("throughput_collapse",), (1500, 1999))


def short_slowdown() -> Episode:
    """25% slower for 60 steps (26 minutes): shorter than the alert's several 15-minute checks."""
    inc = R.throughput_window("synthetic-episode-short-slowdown", lo=1500, hi=1560, steps=2000)
    return Episode("short slowdown", inc.runs, "infrastructure", ("throughput_dip",), (1500, 1559))


def router_collapse() -> Episode:
    inc = R.router_collapse("synthetic-episode-router-collapse", at=1500, length=150)
    kinds = ("routing_entropy_drop", "drop_fraction_rise", "overflow_rise", "router_zloss_jump")
    return Episode("router collapse", inc.runs, "moe_routing", kinds, (1500, 1649))


def nan() -> Episode:
    run = I.base_run("synthetic-episode-nan", "episode-nan", steps=1000)
    I.nonfinite_loss(run, [900, 901])
    return Episode("NaN", [run], "numerics", ("nonfinite",), (900, 901))


def logit_growth() -> Episode:
    inc = I.slow_logit_growth("synthetic-episode-logit-growth", start=1500, end=1900)
    return Episode("logit growth", inc.runs, "logit_growth", ("logit_growth",), (1500, 1900))


def fork_with_config_change() -> Episode:
    """A parent whose attention gates drift (Adam, no weight decay) from step 1,500, and a child
    forked at 2,400 with weight decay on the gate (the hero's fix, PR #8833) while the drift goes on."""
    parent, child = I.fork_pair("synthetic-episode-fork-parent", "synthetic-episode-fork-wd", "episode-fork",
                                fork_step=FORK_AT, parent_steps=FORK_PARENT_END, last_step=FORK_LAST, seed=50)
    for run in (parent, child):
        R.add_gates(run)
        for i in range(run.spec.layers):
            R.grow(run, R.GATE.format(i=i), DRIFT_AT, 0.4)
        I.retotal(run)
    child.config = {**child.config, "optimizer": {"weight_decay": {"attn_gate": 0.02}}}
    return Episode("fork with a config change", [parent, child], "infrastructure", ("fork",), (FORK_AT + 1, FORK_AT + 1))


KINDS = {"spike": spike, "jump": jump, "drift": drift, "resume mismatch": resume_mismatch,
         "throughput drop": throughput_drop, "router collapse": router_collapse, "NaN": nan, "logit growth": logit_growth}
MORE = {"short slowdown": short_slowdown, "fork with a config change": fork_with_config_change}


def build() -> dict[str, Episode]:
    return {name: make() for name, make in {**KINDS, **MORE}.items()}
