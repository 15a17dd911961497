"""Put a GitHub event on a run's step axis: by what the text says, else by its time.

Order of evidence (the first that applies wins, recorded as `align` in the event's fields):
1. `fork`: a fork point `parent?_step=N` → step N, on the child run forked there if the
   store has it (or a run the text names), else the parent;
2. `checkpoint`: a checkpoint path `…/step-N` (handoff, "resumed from") → step N — the
   checkpoint holds N completed updates, so the resumed run's first logged step is N
   (Levanter's `StepInfo`, Marin's `lib/levanter/src/levanter/callbacks/_core.py`);
3. `text`: "step 54k", "Step 1,600", "steps 700 to 800" → that step (a range's first), on
   the run the text names, the hero lineage run whose segment holds it, or the run that was
   logging at the event's time — the time picks the run, never the step;
4. `time`: the event's timestamp through the run's `_timestamp` → step mapping (the run
   the text names, else the most recently started run that was logging at that time).
Events that none of these place keep step NULL; a later sync (after W&B history lands)
aligns them again. `realign` returns what changed; the sync pipeline writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from marinctl.analysis.events.facts import extract_facts
from marinctl.store import Connection
from marinctl.store import events as events_store
from marinctl.store import metrics as M
from marinctl.store import runs as runs_store

TIME_SLACK_S = 3600.0  # an event up to an hour after a run's last row still belongs to it


@dataclass
class Alignment:
    run_uid: str | None
    run_id: str | None
    step: int | None
    basis: str | None
    facts: dict[str, Any]


class Aligner:
    """Holds the store's runs, the hero lineage and `_timestamp` series for one pass."""

    def __init__(self, con: Connection):
        self.con = con
        self.runs = runs_store.lineage_rows(con)
        self.by_id: dict[str, dict[str, Any]] = {}
        for r in self.runs:  # later (cloud) rows win
            self.by_id[r["run_id"]] = r
        self._ts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.lineage = self._hero_lineage()

    def _hero_lineage(self):
        from marinctl.store.lineage import hero_leaf, stitched_target

        leaf = hero_leaf(self.con)
        if leaf is None:
            if len(self.runs) == 1:
                from marinctl.store.lineage import single
                from marinctl.store.runs import get_run

                return single(get_run(self.con, self.runs[0]["run_pk"]))
            return None
        return stitched_target("hero", leaf, self.con)

    @property
    def known_ids(self) -> list[str]:
        return list(self.by_id)

    # -- time → step -----------------------------------------------------------------------
    def timestamps(self, run_pk: int) -> tuple[np.ndarray, np.ndarray]:
        if run_pk not in self._ts:
            steps, ts = M.series(self.con, [(run_pk, None, None)], "_timestamp")
            ok = np.isfinite(ts)
            steps, ts = steps[ok], np.maximum.accumulate(ts[ok]) if ok.any() else ts[ok]
            self._ts[run_pk] = (steps, ts)
        return self._ts[run_pk]

    def step_at_time(self, run: dict[str, Any], when: float) -> int | None:
        steps, ts = self.timestamps(run["run_pk"])
        if len(ts) == 0 or when < ts[0] or when > ts[-1] + TIME_SLACK_S:
            return None
        return int(steps[int(np.searchsorted(ts, when, side="right")) - 1])

    def run_at_time(self, when: float) -> tuple[dict[str, Any], int] | None:
        best = None
        for run in self.runs:
            step = self.step_at_time(run, when)
            if step is None:
                continue
            start = self.timestamps(run["run_pk"])[1][0]
            if best is None or start > best[2]:
                best = (run, step, start)
        return (best[0], best[1]) if best else None

    def run_for_step(self, step: int) -> dict[str, Any] | None:
        if self.lineage is None:
            return None
        run = self.lineage.run_at(step)
        return self.by_id.get(run["run_id"])

    # -- one event -------------------------------------------------------------------------
    def align(self, text: str, when: datetime | None) -> Alignment:
        facts = extract_facts(text, self.known_ids)
        named = next((self.by_id[r] for r in facts.get("runs", []) if r in self.by_id), None)
        stamp = when.timestamp() if when is not None else None

        if "fork_step" in facts:
            step = facts["fork_step"]
            child = next((r for r in self.runs if r["fork_parent"] == facts["fork_parent"]
                          and r["fork_step"] == step), None)
            run = child or named or self.by_id.get(facts["fork_parent"]) or self.run_for_step(step)
            return self._result(run, step, "fork", facts)
        if "checkpoint_step" in facts:
            step = facts["checkpoint_step"]
            run = named or self.run_for_step(step)
            return self._result(run, step, "checkpoint", facts)
        if facts.get("steps"):           # the text names the step: it wins over the time
            step = facts["steps"][0]
            run = named or self.run_for_step(step)
            if run is None and stamp is not None:   # no lineage to ask: the run logging then
                found = self.run_at_time(stamp)
                run = found[0] if found else None
            return self._result(run, step, "text", facts)
        if stamp is not None:
            if named is not None:
                step = self.step_at_time(named, stamp)
                return self._result(named, step, "time" if step is not None else None, facts)
            found = self.run_at_time(stamp)
            if found:
                return self._result(found[0], found[1], "time", facts)
        return self._result(named, None, None, facts)

    @staticmethod
    def _result(run: dict[str, Any] | None, step: int | None, basis: str | None, facts: dict[str, Any]) -> Alignment:
        return Alignment(run["uid"] if run else None, run["run_id"] if run else None, step, basis, facts)


def realign(con: Connection) -> list[tuple[str, str | None, int | None, dict[str, Any]]]:
    """(event_id, run_uid, step, fields) for every GitHub/logbook event whose alignment changed."""
    aligner = Aligner(con)
    changed = []
    for event_id, when, title, body, run_uid, step, fields in events_store.to_align(con):
        a = aligner.align(f"{title or ''}\n{body or ''}", when)
        new_fields = {k: v for k, v in fields.items() if k not in ("facts", "align", "run")}
        if a.facts:
            new_fields["facts"] = a.facts
        if a.basis:
            new_fields["align"] = a.basis
        if a.run_id:
            new_fields["run"] = a.run_id
        if (a.run_uid, a.step, new_fields) != (run_uid, step, fields):
            changed.append((event_id, a.run_uid, a.step, new_fields))
    return changed
