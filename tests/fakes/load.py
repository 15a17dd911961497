"""Write SYNTHETIC runs straight into a marinctl Store (no W&B server in between).

Used by tests and benchmarks that need a populated store. Metrics go in through the same
`replace_range` path sync uses, in step windows (default 10k steps), so a hero-scale run
never needs one giant Arrow table. Fork children store only their own steps (> fork_step),
which is how marinctl stores forks (store/lineage.py).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

from marinctl.domain import RunInfo
from marinctl.store import metrics as metrics_mod
from marinctl.store import runs as runs_mod

from .synth import SynthRun


def run_info(run: SynthRun) -> RunInfo:
    """The RunInfo a W&B sync would record for this SYNTHETIC run."""
    return RunInfo(
        source="wandb", run_id=run.run_id, entity=run.entity, project=run.project,
        name=run.display_name, group=run.group, job_type=run.job_type, tags=list(run.tags),
        state=run.state, created_at=run.created_at, heartbeat_at=run.heartbeat_at,
        config=run.config, summary=run.summary, fork_parent=run.fork_parent, fork_step=run.fork_step,
        remote_last_step=run.last_step, history_line_count=len(run.steps()),
        url=f"https://wandb.ai/{run.entity}/{run.project}/runs/{run.run_id}",
    )


def long_table(run: SynthRun, lo: int, hi: int) -> pa.Table:
    """Long (step, key, value) Arrow table of the run's own steps in [lo, hi), vectorised."""
    names, step_parts, value_parts, counts = [], [], [], []
    for key, (steps, values) in run.window(lo, hi).items():
        names.append(key)
        step_parts.append(steps)
        value_parts.append(values)
        counts.append(len(steps))
    if not names:
        return metrics_mod.BATCH_SCHEMA.empty_table()
    idx = np.repeat(np.arange(len(names), dtype=np.int32), counts)
    keys = pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(names, pa.string())).cast(pa.string())
    return pa.table({"step": pa.array(np.concatenate(step_parts), pa.int64()), "key": keys,
                     "value": pa.array(np.concatenate(value_parts), pa.float64())},
                    schema=metrics_mod.BATCH_SCHEMA)


def load_into_store(store, runs: Iterable[SynthRun], *, window: int = 10_000) -> dict[str, int]:
    """Upsert each run and write all its own metric rows; returns run_id -> run_pk."""
    pks: dict[str, int] = {}
    for run in runs:
        with store.transaction() as con:
            pk = runs_mod.upsert_run(con, run_info(run))
        pks[run.run_id] = pk
        steps = run.steps()
        if not len(steps):
            continue
        first, last = int(steps[0]), int(steps[-1])
        lo = first
        while lo <= last:
            hi = lo + window
            with store.transaction() as con:
                metrics_mod.replace_range(con, pk, long_table(run, lo, hi), lo, hi)
                con.execute("UPDATE runs SET last_step = ? WHERE run_pk = ?", [min(hi - 1, last), pk])
            lo = hi
    return pks
