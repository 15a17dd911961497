"""Data composition by phase: which mixture a run was training on at a given step.

The hero trains on the Harrier 2026.08.18 mixture in three phases — initial, main from
step 108,000, cooldown from step 312,192 of 390,251 — and the ladder rungs switch at the
same fractions of their own schedules (marin.md §6). The weights come from the best
source the store holds, always labelled:
1. `wandb`: the run's own `mixture/weight/*` keys (phases where `mixture/stage` changes);
2. `file`: the synced repository file `harrier_mix_2026_08_18.json` (per-cell weights
   `phaseK_weights`: its phase0 is the pretraining mix, phase1 the cooldown mix);
3. `published`: the topic-share table Marin published (marinctl/data/harrier_mix_published.json).
Phase steps are inclusive: `end_step` is the last step of the phase.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import duckdb
import numpy as np

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
    source: str                       # 'wandb' | 'file' | 'published'
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


@lru_cache(maxsize=1)
def published_table() -> dict[str, Any]:
    return json.loads(resources.files("marinctl.data").joinpath("harrier_mix_published.json").read_text())


def hero_total_steps() -> int:
    return int(published_table()["total_steps"])


def schedule(total_steps: int | None = None) -> list[tuple[str, int, int | None]]:
    """(name, start, inclusive end) of each phase; rungs switch at the hero's fractions."""
    table = published_table()
    hero = int(table["total_steps"])
    total = total_steps or hero
    starts = [int(p["start_step"]) for p in table["phases"]]
    if total != hero:
        starts = [int(round(s * total / hero)) for s in starts]
    names = [p["name"] for p in table["phases"]]
    ends = [s - 1 for s in starts[1:]] + [total - 1]
    return list(zip(names, starts, ends))


def published_mix(total_steps: int | None = None) -> Mix:
    table = published_table()
    scale = 100.0 if table.get("unit") == "percent" else 1.0
    phases = []
    for i, (name, start, end) in enumerate(schedule(total_steps)):
        weights = {domain: round(values[i] / scale, 6) for domain, values in table["weights"].items()}
        phases.append(Phase(name, start, end, weights, "published"))
    notes = [] if not total_steps or total_steps == hero_total_steps() else [
        f"phase steps scaled from the hero's switches (108,000 and 312,192 of 390,251) to {total_steps:,} steps"]
    return Mix(phases, total_steps or hero_total_steps(), "published", table["label"], notes=notes)


def file_phase_weights(text: str) -> list[dict[str, float]]:
    """`phase0_weights`, `phase1_weights`, … of a mixture file, in order ([] if none)."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return []
    if not isinstance(doc, dict):
        return []
    found = []
    for key, value in doc.items():
        m = re.fullmatch(r"phase(\d+)_weights", key)
        if m and isinstance(value, dict):
            weights = {str(k): float(v) for k, v in value.items() if isinstance(v, (int, float))}
            found.append((int(m.group(1)), weights))
    return [w for _, w in sorted(found)]


def file_mix(text: str, sha: str | None, total_steps: int | None = None) -> Mix | None:
    """The schedule's phases with a repository file's cell weights (see module doc)."""
    sets = file_phase_weights(text)
    if not sets:
        return None
    sched = schedule(total_steps)
    name = HERO_MIX_PATH.rsplit("/", 1)[-1] + (f"@{sha[:10]}" if sha else "")
    notes = []
    if len(sets) == len(sched):
        picks = list(range(len(sched)))
    else:  # a pretrain + cooldown file: phase0 for every phase before the cooldown
        picks = [0] * (len(sched) - 1) + [len(sets) - 1]
        notes.append(f"{name} has {len(sets)} phases: phase0 (pretraining) is shown for "
                     + ", ".join(n for n, _, _ in sched[:-1]) + f"; phase{len(sets) - 1} for {sched[-1][0]}. "
                     "The step-108,000 mix change (PR #9162) is recorded in another file.")
    phases = [Phase(n, s, e, sets[k], f"{name} phase{k}") for (n, s, e), k in zip(sched, picks)]
    return Mix(phases, total_steps or hero_total_steps(), "file", f"repository file {name}", notes=notes)


def wandb_mix(con: duckdb.DuckDBPyConnection, segments, run_name: str | None) -> Mix | None:
    """Phases and weights from the run's own `mixture/*` keys, when it logged them."""
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
    return Mix(phases, None, "wandb", "the run's logged mixture/weight/* keys", run=run_name)


def stored_file(con: duckdb.DuckDBPyConnection) -> tuple[str, str | None] | None:
    row = con.execute("SELECT content, sha FROM repo_files WHERE repo = ? AND path = ?",
                      [HERO_MIX_REPO, HERO_MIX_PATH]).fetchone()
    return (row[0], row[1]) if row else None


def mix_for(con: duckdb.DuckDBPyConnection, run: str | None = None) -> tuple[Mix, int | None]:
    """The mixture for RUN (None: the hero) and the run's last step, best source first."""
    from marinctl import rungs
    from marinctl.errors import UserError
    from marinctl.store.lineage import resolve_target

    total: int | None = None
    target = None
    name = run or "hero"
    rung_names = {r["rung"]: r for r in rungs.rungs()} | {r["name"]: r for r in rungs.rungs()}
    if run in rung_names:
        total = int(rung_names[run]["steps"])
        try:
            target = resolve_target(con, run)
        except UserError:
            target = None
    elif run is not None and run != "hero":
        target = resolve_target(con, run, stitched=True)
        text = f"{target.leaf['run_id']} {target.leaf.get('name') or ''}"
        for r in rungs.rungs():
            if r["rung"] != "hero" and re.search(rf"(?<![\d]){r['name']}(?!\d)", text):
                total = int(r["steps"])
    else:
        try:
            target = resolve_target(con, "hero")
        except UserError:
            target = None
    if total is not None and total == hero_total_steps():
        total = None
    last_step = target.leaf.get("last_step") if target else None
    if target is not None:
        found = wandb_mix(con, target.segments, target.name)
        if found:
            return found, last_step
    stored = stored_file(con)
    mix = (file_mix(stored[0], stored[1], total) if stored else None) or published_mix(total)
    mix.run = target.name if target else name
    return mix, last_step
