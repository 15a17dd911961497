"""Data composition by phase: which mixture a run was training on at a given step.

The hero trains on the Harrier 2026.08.18 mixture in three phases — initial, main from
step 108,000, cooldown from step 312,192 of 390,251 — and the ladder rungs switch at the
same fractions of their own schedules (marin#8435; Marin's `docs/reports/hero-mixture-log.md`).
The weights come from the best
source the store holds, always labelled:
1. `config`: the run's staged mixture in its config (`data.train_weights`, Levanter's names):
   its phases, planned to the end of the run, with the weights the run logged
   (`mixture/weight/*`) where it logged them — a run stopped early still has its later phases;
2. `wandb`: the run's own `mixture/weight/*` keys (phases where `mixture/stage` changes; the
   last phase runs to the end of the schedule);
3. `file`: the synced repository file (`experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json`
   in Marin's repository), in any of its shapes:
   per-cell weights `phaseK_weights` (phase0 the pretraining mix, phase1 the cooldown mix), or
   stages with their start steps (`stages`/`phases`: `{start_step, weights}`, or Levanter's
   `train_weights: [[start_step, weights], …]`, as PR #9162's main-phase change writes them);
   a file in a shape not read here is said so in the notes;
4. `published`: the topic-share table Marin published (marinctl/data/harrier_mix_published.json).
Phase boundaries are the run's schedule (analysis/schedule.py), or a file's own start steps.
Phase steps are inclusive: `end_step` is the last step of the phase.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marinctl import numbers
from marinctl.analysis.schedule import (CONFIG, Schedule, hero_total_steps, published_mix_table, published_schedule,
                                        schedule_of_target)
from marinctl.store import Connection

HERO_MIX_REPO = "marin-community/marin"
HERO_MIX_PATH = "experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json"
WEIGHT_PREFIX = "mixture/weight/"
STAGE_KEY = "mixture/stage"


@dataclass
class Phase:
    name: str
    start_step: int
    end_step: int | None              # inclusive; None when open-ended
    weights: dict[str, float] = field(default_factory=dict)   # fractions summing to ~1
    weights_from: str | None = None

    def holds(self, step: int) -> bool:
        return step >= self.start_step and (self.end_step is None or step <= self.end_step)


@dataclass
class Mix:
    phases: list[Phase]
    total_steps: int | None
    source: str                       # 'wandb' | 'config' | 'file' | 'published'
    label: str
    run: str | None = None
    notes: list[str] = field(default_factory=list)

    def active(self, step: int | None) -> Phase | None:
        if step is None:
            return None
        for phase in self.phases:
            if phase.holds(step):
                return phase
        return None

    def as_json(self, at: int | None) -> dict[str, Any]:
        active = self.active(at)
        return {
            "phases": [{"name": p.name, "number": i + 1, "start_step": p.start_step, "end_step": p.end_step, "weights": p.weights,
                        "weights_from": p.weights_from} for i, p in enumerate(self.phases)],
            "active": active.name if active else None,
            "active_number": self.phases.index(active) + 1 if active else None,
            "at": at, "run": self.run, "source": self.source, "label": self.label,
            "total_steps": self.total_steps, "notes": self.notes,
        }


def published_mix(sched: Schedule | None = None) -> Mix:
    """Marin's published topic shares over `sched`'s data phases (default: the hero's schedule)."""
    sched = sched or published_schedule("hero")
    table = published_mix_table()
    scale = 100.0 if table.get("unit") == "percent" else 1.0
    phases = []
    for i, p in enumerate(sched.phases):
        weights = {domain: round(values[i] / scale, 6) for domain, values in table["weights"].items() if i < len(values)}
        phases.append(Phase(p.name, p.start_step, p.end_step, weights, "published"))
    total = sched.total_steps or hero_total_steps()
    notes = [] if total == hero_total_steps() else [
        f"phase steps scaled from the hero's switches (108,000 and 312,192 of 390,251) to {numbers.count(total)} steps"]
    return Mix(phases, total, "published", table["label"], notes=notes)


def config_mix(sched: Schedule, logged: Mix | None = None) -> Mix | None:
    """The run's own staged mixture (`data.train_weights` in its config), when it gave one;
    a phase whose start the run logged (`logged`, within a step) shows the weights it logged."""
    if sched.source("phases") != CONFIG or not all(p.weights for p in sched.phases):
        return None
    phases = []
    for p in sched.phases:
        seen = next((q for q in (logged.phases if logged else []) if abs(q.start_step - p.start_step) <= 1 and q.weights),
                    None)
        if seen is not None:
            phases.append(Phase(p.name, p.start_step, p.end_step, dict(seen.weights), "wandb"))
            continue
        total = sum(p.weights.values())
        weights = {k: v / total for k, v in p.weights.items()} if total > 0 else dict(p.weights)
        phases.append(Phase(p.name, p.start_step, p.end_step, weights, "config"))
    label = "the run's config (data.train_weights)" + (", weights as logged where logged" if logged else "")
    return Mix(phases, sched.total_steps, "config", label)


def _numeric(weights: Any) -> dict[str, float] | None:
    if not isinstance(weights, dict):
        return None
    out = {str(k): float(v) for k, v in weights.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out or None


def _start(item: dict) -> int | None:
    for key in ("start_step", "start", "step", "from_step"):
        v = item.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return None


def file_stages(text: str) -> list[tuple[int | None, dict[str, float]]]:
    """A mixture file's phases as (start step or None, weights), in order; [] for a shape not read here."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return []
    if not isinstance(doc, dict):
        return []
    found = []
    for key, value in doc.items():
        m = re.fullmatch(r"phase(\d+)_weights", key)
        if m and _numeric(value):
            found.append((int(m.group(1)), _numeric(value)))
    if found:
        return [(None, w) for _, w in sorted(found)]
    for key in ("stages", "phases", "train_weights", "weights"):
        items = doc.get(key)
        if not isinstance(items, list) or not items:
            continue
        stages = []
        for item in items:
            if isinstance(item, (list, tuple)) and len(item) == 2 and _numeric(item[1]) \
                    and isinstance(item[0], (int, float)) and not isinstance(item[0], bool):
                stages.append((int(item[0]), _numeric(item[1])))
            elif isinstance(item, dict) and _numeric(item.get("weights") or item.get("train_weights")):
                stages.append((_start(item), _numeric(item.get("weights") or item.get("train_weights"))))
            else:
                break
        else:
            if all(st is not None for st, _ in stages):
                stages.sort(key=lambda x: x[0])
            return stages
    return []


def file_mix(text: str, sha: str | None, sched: Schedule | None = None) -> Mix | None:
    """`sched`'s data phases (default: the hero's) with a repository file's weights (see module doc);
    a file that gives its own start steps keeps them on the hero's schedule."""
    stages = file_stages(text)
    if not stages:
        return None
    sets = [w for _, w in stages]
    sched = sched or published_schedule("hero")
    total = sched.total_steps or hero_total_steps()
    name = HERO_MIX_PATH.rsplit("/", 1)[-1] + (f"@{sha[:10]}" if sha else "")
    starts = [st for st, _ in stages]
    if all(st is not None for st in starts) and starts[0] == 0 and total == hero_total_steps():
        names = [p.name for p in sched.phases] if len(sched.phases) == len(stages) else \
            [f"stage {i + 1}" for i in range(len(stages))]
        ends = [st - 1 for st in starts[1:]] + [total - 1]
        phases = [Phase(n, st, e, w, f"{name} stage {i + 1}")
                  for i, (n, st, e, w) in enumerate(zip(names, starts, ends, sets))]
        return Mix(phases, total, "file", f"repository file {name}")
    bounds = [(p.name, p.start_step, p.end_step) for p in sched.phases]
    notes = []
    if len(sets) == len(bounds):
        picks = list(range(len(bounds)))
    else:  # a pretrain + cooldown file: phase0 for every phase before the cooldown
        picks = [0] * (len(bounds) - 1) + [len(sets) - 1]
        notes.append(f"{name} has {len(sets)} phases: phase0 (pretraining) is shown for "
                     + ", ".join(n for n, _, _ in bounds[:-1]) + f"; phase{len(sets) - 1} for {bounds[-1][0]}. "
                     "The step-108,000 mix change (PR #9162) is recorded in another file.")
    phases = [Phase(n, s, e, sets[k], f"{name} phase{k}") for (n, s, e), k in zip(bounds, picks)]
    return Mix(phases, total, "file", f"repository file {name}", notes=notes)


def wandb_mix(con: Connection, segments, run_name: str | None, total_steps: int | None = None,
              last_step: int | None = None) -> Mix | None:
    """Phases and weights from the run's own `mixture/*` keys, when it logged them; the last
    phase lasts to the end of the run's schedule (when its length is unknown: its last step)."""
    from marinctl.store import metrics as M

    if not segments:
        return None
    keys = [k for k in M.run_keys(con, [pk for pk, _, _ in segments]) if k.startswith(WEIGHT_PREFIX)]
    if not keys:
        return None
    stage_steps, stage_vals = M.series(con, segments, STAGE_KEY)
    series = {k[len(WEIGHT_PREFIX):]: M.series(con, segments, k) for k in keys}
    if len(stage_steps) == 0:  # no stage key: one phase per distinct weight vector
        stage_steps = np.unique(np.concatenate([s for s, _ in series.values()]))
        stage_vals = np.zeros(len(stage_steps))
    phases: list[Phase] = []
    change = np.flatnonzero(np.diff(stage_vals) != 0) + 1
    bounds = [0, *change.tolist(), len(stage_steps)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        start, last = int(stage_steps[lo]), int(stage_steps[hi - 1])
        weights = {}
        for domain, (steps, values) in series.items():
            sel = values[(steps >= start) & (steps <= last)]
            sel = sel[np.isfinite(sel)]
            if len(sel):
                weights[domain] = float(sel[0])
        total = sum(weights.values())
        if total > 0:
            weights = {k: v / total for k, v in weights.items()}
        phases.append(Phase(f"stage {int(stage_vals[lo])}", start, last, weights, "wandb"))
    for a, b in zip(phases, phases[1:]):
        a.end_step = b.start_step - 1
    end = total_steps - 1 if total_steps else last_step
    if end is not None:
        phases[-1].end_step = max(int(end), phases[-1].end_step)
    return Mix(phases, total_steps, "wandb", "the run's logged mixture/weight/* keys", run=run_name)


def mix_for(con: Connection, run: str | None = None) -> tuple[Mix, int | None]:
    """The mixture for RUN (None: the hero) and the run's last step, best source first.

    Phase boundaries are the run's own schedule (analysis/schedule.py); a rung named with
    nothing stored (`rung1`, `d768`) gets the published rung's.
    """
    from marinctl import rungs
    from marinctl.errors import UserError
    from marinctl.store import repo_files
    from marinctl.store.lineage import resolve_target

    name = run or "hero"
    published = {r["rung"] for r in rungs.rungs()} | {r["name"] for r in rungs.rungs()}
    target, sched = None, None
    try:
        target = resolve_target(con, name, stitched=name not in published)
    except UserError:
        if name not in published:
            raise
        sched = published_schedule(name)
    last_step = target.leaf.get("last_step") if target else None
    notes = []
    if target is not None:
        sched = schedule_of_target(target)
        logged = wandb_mix(con, target.segments, target.name, sched.total_steps, last_step)
        own = config_mix(sched, logged)
        if own or logged:
            found = own or logged
            found.run = target.name
            return found, last_step
        if not sched.phases:
            notes.append(f"{target.name}'s schedule does not say its data phases; showing the hero's published phases")
            sched = published_schedule("hero")
    stored = repo_files.read(con, HERO_MIX_REPO, HERO_MIX_PATH)
    from_file = file_mix(stored[0], stored[1], sched) if stored else None
    if stored and from_file is None:
        notes.append(f"could not read the synced {HERO_MIX_PATH.rsplit('/', 1)[-1]} (a shape not known here); "
                     "fell back to the published table")
    mix = config_mix(sched) or from_file or published_mix(sched)
    mix.run = target.name if target else name
    mix.notes = notes + mix.notes
    return mix, last_step
