"""A run's schedule, answered in one place: how long it is, where warm-up ends and decay
starts, its data phases, and how many tokens a step holds — each fact with where it came from.

The watch header, explain's context, `mix`, the chart axes and the ladder all ask here, so a
run is described the same way everywhere. Facts come, in order, from:
1. the run's own config, under the names Levanter logs (W&B keeps them as nested dicts):
   `trainer.num_train_steps`, `trainer.train_batch_size` (sequences) × `model.seq_len`
   (or `model.max_seq_len`), `optimizer.warmup` and `optimizer.decay` (a fraction of the
   run when < 1, else steps; decay null: everything after warm-up), `optimizer.min_lr_ratio`,
   `optimizer.lr_schedule`, and data phases from `data.train_weights` when it is Levanter's
   staged mixture, a list of `[start_step, {domain: weight}]`. Flat top-level names
   (`num_train_steps`, `warmup`, `tokens_per_step`, …) are read too;
2. for a *logged* run of the hero lineage (group `moe-hero-ep`, or a `hero-…` id: its forks)
   or of the scaling ladder itself (group `…scaling-ladder`, or a `ladder-…` id, as
   store/runs.find_rung_runs finds rungs) whose config lacks a fact, Marin's published rung
   table (marinctl/rungs.py; data phases at the hero's switch steps, scaled to the run's length);
3. otherwise the fact is unknown (None).
A width in a run's name (`isoflop-moe-v16-1e+18-d768`, an ablation `…-d768-…`) does not make
it a rung: only the hero lineage and the ladder runs follow the published tables. A small
ablation in `moe-hero-ep-small-abl` is not the hero either. A reproduction (`source = 'repro'`
or `marinctl.repro_of` in its config) never takes the published rung's schedule: that rung is
its overlay, not the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

CONFIG = "config"
UNKNOWN = "unknown"
HERO_GROUP = "moe-hero-ep"


@dataclass(frozen=True)
class DataPhase:
    name: str
    start_step: int
    end_step: int | None            # inclusive; None when the run's length is unknown
    weights: dict[str, float] | None = field(default=None, compare=False)   # the config's own, when it gives them

    def holds(self, step: int) -> bool:
        return step >= self.start_step and (self.end_step is None or step <= self.end_step)


@dataclass(frozen=True)
class Schedule:
    """What a run is meant to do, step by step. `sources[fact]`: 'config', 'published rung NAME' or 'unknown'."""

    total_steps: int | None = None
    warmup_end_step: int | None = None      # first step after warm-up
    decay_start_step: int | None = None
    min_lr_ratio: float | None = None
    lr_schedule: str | None = None
    phases: tuple[DataPhase, ...] = ()
    tokens_per_step: int | None = None
    flops_budget: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    is_hero: bool = False
    repro_of: str | None = None             # the rung a reproduction overlays

    def source(self, fact: str) -> str:
        return self.sources.get(fact, UNKNOWN)

    def phase_at(self, step: int) -> tuple[int, DataPhase] | None:
        """(1-based number, phase) holding `step`; None outside every phase."""
        for i, phase in enumerate(self.phases):
            if phase.holds(step):
                return i + 1, phase
        return None


# --- the published side ------------------------------------------------------------------------

@lru_cache(maxsize=1)
def published_mix_table() -> dict[str, Any]:
    """Marin's published Harrier mixture: phase names, the hero's switch steps, topic shares."""
    return json.loads(resources.files("marinctl.data").joinpath("harrier_mix_published.json").read_text())


def hero_total_steps() -> int:
    return int(published_mix_table()["total_steps"])


def published_phases(total_steps: int | None = None) -> tuple[DataPhase, ...]:
    """The Harrier phases over `total_steps` (default: the hero's); rungs switch at the hero's fractions."""
    table = published_mix_table()
    hero = int(table["total_steps"])
    total = total_steps or hero
    starts = [int(p["start_step"]) for p in table["phases"]]
    if total != hero:
        starts = [int(round(s * total / hero)) for s in starts]
    ends = [s - 1 for s in starts[1:]] + [total - 1]
    return tuple(DataPhase(p["name"], s, e) for p, s, e in zip(table["phases"], starts, ends))


def published_rung(run: dict[str, Any]) -> dict[str, Any] | None:
    """The published rung row a *logged* Marin run follows (hero or ladder); None for anything else."""
    from marinctl import rungs

    if repro_of(run) is not None or run.get("source") == "repro":
        return None
    if is_hero_run(run):
        return rungs.rung("hero")
    if not is_ladder_run(run):
        return None
    text = f"{run.get('run_id') or ''} {run.get('name') or ''}"
    for r in rungs.rungs():
        if r["rung"] != "hero" and re.search(rf"(?<!\d){r['name']}(?!\d)", text):
            return r
    return None


def is_hero_run(run: dict[str, Any]) -> bool:
    """A run of the hero lineage: Marin's hero group, or a `hero-<change>-step<N>k` fork of it."""
    return (run.get("run_group") or "") == HERO_GROUP or (run.get("run_id") or "").startswith("hero-")


def is_ladder_run(run: dict[str, Any]) -> bool:
    """A run of Marin's scaling ladder itself (group `moe-hero-ep-scaling-ladder`, ids `ladder-d768`…)."""
    return "scaling-ladder" in (run.get("run_group") or "") or (run.get("run_id") or "").startswith("ladder-")


def repro_of(run: dict[str, Any]) -> str | None:
    mark = config_of(run).get("marinctl")
    got = mark.get("repro_of") if isinstance(mark, dict) else None
    return str(got) if got else None


# --- the run's own config ------------------------------------------------------------------------

def config_of(run: dict[str, Any]) -> dict[str, Any]:
    """The run's config as a dict (stored as JSON text or a dict; anything else reads as empty)."""
    cfg = run.get("config") or {}
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except json.JSONDecodeError:
            cfg = {}
    return cfg if isinstance(cfg, dict) else {}


_MISSING = object()


def _lookup(cfg: dict[str, Any], path: str) -> Any:
    """cfg['a']['b'] for 'a.b' (nested, as W&B keeps it) or a flattened 'a.b' key; `_MISSING` if neither."""
    cur: Any = cfg
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return cfg.get(path, _MISSING)
        cur = cur[part]
    return cur


def _number(cfg: dict[str, Any], *paths: str) -> float | None:
    for path in paths:
        v = _lookup(cfg, path)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= 0:
            return v
    return None


def _text(cfg: dict[str, Any], *paths: str) -> str | None:
    for path in paths:
        v = _lookup(cfg, path)
        if isinstance(v, str) and v:
            return v
    return None


def frac_or_steps(value: float, total: int | None) -> int | None:
    """Levanter's rule: below 1 a fraction of the run (truncated), else a step count."""
    if value < 1:
        return int(value * total) if total else None
    return int(value)


def _stages(cfg: dict[str, Any]) -> list[tuple[int, dict]] | None:
    """`data.train_weights` as [(start_step, weights)] when it is a staged mixture, sorted; else None."""
    raw = _lookup(cfg, "data.train_weights")
    if not isinstance(raw, list) or not raw:
        return None
    out = []
    for item in raw:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (int, float))
                and not isinstance(item[0], bool) and isinstance(item[1], dict)):
            return None
        out.append((int(item[0]), item[1]))
    return sorted(out, key=lambda s: s[0])


def _config_phases(stages: list[tuple[int, dict]], total: int | None) -> tuple[DataPhase, ...]:
    names = [p["name"] for p in published_mix_table()["phases"]]
    if len(names) != len(stages):
        names = [f"stage {i + 1}" for i in range(len(stages))]
    starts = [s for s, _ in stages]
    ends = [s - 1 for s in starts[1:]] + [total - 1 if total else None]
    return tuple(DataPhase(n, s, e, _weights(w)) for n, s, e, (_, w) in zip(names, starts, ends, stages))


def _weights(raw: dict) -> dict[str, float]:
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# --- the answer ------------------------------------------------------------------------------------

def schedule_of(run: dict[str, Any]) -> Schedule:
    """The schedule of one run (a `runs` row as a dict): its config first, see the module doc."""
    return _build(config_of(run), published_rung(run), repro_of(run))


def _build(cfg: dict[str, Any], rung: dict[str, Any] | None, repro: str | None) -> Schedule:
    published = f"published rung {'hero' if rung['rung'] == 'hero' else rung['name']}" if rung else None
    sources: dict[str, str] = {}

    def pick(fact: str, mine: Any, theirs: Any) -> Any:
        if mine is not None:
            sources[fact] = CONFIG
            return mine
        if theirs is not None and published:
            sources[fact] = published
            return theirs
        sources[fact] = UNKNOWN
        return None

    total = pick("total_steps", _number(cfg, "trainer.num_train_steps", "num_train_steps"), rung and rung["steps"])
    total = int(total) if total else None
    batch, seq = _number(cfg, "trainer.train_batch_size"), _number(cfg, "model.seq_len", "model.max_seq_len")
    tps = pick("tokens_per_step", batch * seq if batch and seq else _number(cfg, "tokens_per_step"),
               rung and rung["tokens_per_step"])
    warm = pick("warmup", _number(cfg, "optimizer.warmup", "warmup"), rung and rung["warmup_fraction"])
    warmup_end = frac_or_steps(warm, total) if warm is not None else None
    decay = _lookup(cfg, "optimizer.decay")
    if isinstance(decay, (int, float)) and not isinstance(decay, bool):
        sources["decay"] = CONFIG
        length = frac_or_steps(decay, total)
        decay_start = total - length if total is not None and length is not None else None
    else:   # null or absent: decay takes everything after warm-up (Levanter's default; Marin's linear schedule)
        sources["decay"] = CONFIG if decay is None else sources["warmup"]
        decay_start = warmup_end
    min_lr = pick("min_lr_ratio", _number(cfg, "optimizer.min_lr_ratio", "min_lr_ratio"), rung and rung["min_lr_ratio"])
    lr_sched = pick("lr_schedule", _text(cfg, "optimizer.lr_schedule", "lr_schedule"), rung and rung["schedule"])
    stages = _stages(cfg)
    phases = pick("phases", _config_phases(stages, total) if stages else None,
                  published_phases(total) if rung else None) or ()
    budget = pick("flops_budget", None, rung and float(rung["flops"]))
    return Schedule(total_steps=total, warmup_end_step=warmup_end, decay_start_step=decay_start,
                    min_lr_ratio=min_lr, lr_schedule=lr_sched, phases=phases,
                    tokens_per_step=int(tps) if tps else None, flops_budget=budget, sources=sources,
                    is_hero=bool(rung and rung["rung"] == "hero"), repro_of=repro)


def schedule_of_target(target) -> Schedule:
    """The schedule a stitched lineage or single run follows: its newest run's (the leaf's)."""
    return schedule_of(target.leaf)


def published_schedule(rung_name: str) -> Schedule:
    """A published rung's schedule by itself (`mix --run rung1` with nothing stored)."""
    from marinctl import rungs

    return _build({}, rungs.rung(rung_name), None)
