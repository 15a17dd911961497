"""A small deterministic SYNTHETIC store for the watch tests: hero lineage, ladder, markers."""

from __future__ import annotations

from tests.fakes.load import load_into_store
from tests.fakes.synth import hero_lineage, ladder_runs

SPIKE_STEP = 250          # an anomaly marker on train/loss (synthetic)
EVENT_STEP = 700          # a GitHub event aligned to the hero (synthetic)


def build_watch_store(store, *, seg: int = 200, ladder_steps: int = 200) -> dict[str, int]:
    """Hero fork chain (forks at 2·seg, 3·seg), four rungs, one anomaly and one event."""
    runs = hero_lineage(seg) + ladder_runs(ladder_steps)
    pks = load_into_store(store, runs)
    root = runs[0]
    leaf = runs[-1]
    with store.transaction() as con:
        con.execute("INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class) VALUES (?, ?, 'train/loss', 'spike', 7.5, 'data_batch')",
                    [pks[root.run_id], SPIKE_STEP])
        con.execute(
            "INSERT INTO events (event_id, source, kind, time, title, run_uid, step) VALUES"
            " ('github:marin-community/marin#1/comment/1', 'github', 'comment', TIMESTAMPTZ '2026-09-03 10:00:00+00',"
            " 'restarted from checkpoint (synthetic)', ?, ?)",
            [f"{leaf.entity}/{leaf.project}/{runs[1].run_id}", EVENT_STEP])
    return pks
