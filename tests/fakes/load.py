"""Write SYNTHETIC runs straight into a marinctl Store (no W&B server in between).

Used by tests and benchmarks that need a populated store. Metrics go in through the same
`replace_range` path sync uses, in step windows (default 10k steps), so a hero-scale run
never needs one giant Arrow table. Fork children store only their own steps (> fork_step),
which is how marinctl stores forks (store/lineage.py). `load_as_parts` stores the same runs
as a W&B sync does: the exported history as parquet parts, the last steps as long rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable, Sequence

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
        return metrics_mod.batch_schema().empty_table()
    idx = np.repeat(np.arange(len(names), dtype=np.int32), counts)
    keys = pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(names, pa.string())).cast(pa.string())
    return pa.table({"step": pa.array(np.concatenate(step_parts), pa.int64()), "key": keys,
                     "value": pa.array(np.concatenate(value_parts), pa.float64())},
                    schema=metrics_mod.batch_schema())


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


def load_as_parts(store, runs: Iterable[SynthRun], work: Path, *, tail: int, per_file: int) -> dict[str, int]:
    """`load_into_store`, but each run's history except its last `tail` steps is kept as parquet
    parts, exported as the W&B fake exports them (`per_file` steps a file) into `work`."""
    from .wandb_history import HistoryView

    runs = list(runs)
    view, pks = HistoryView({r.run_id: r for r in runs}), {}
    for run in runs:
        first, last = int(run.steps()[0]), int(run.steps()[-1])
        cut = max(first, last + 1 - tail)
        files = view.write_parquet(run, cut, work / run.run_id, per_file)
        pks[run.run_id] = register_parts(store, run, files, cut)
    return pks


def register_parts(store, run: SynthRun, files: Sequence[Path], cut: int) -> int:
    """Register a run's exported `files` as its history below `cut` and its own steps from `cut`
    on as long rows, as a sync does (a fork child's export also holds its parent's rows before
    the fork: parts are used from the child's first step on). Returns the run's pk."""
    from marinctl.store import parts

    with store.transaction() as con:
        pk = runs_mod.upsert_run(con, run_info(run))
    first, last = int(run.steps()[0]), int(run.steps()[-1])
    found = [(f, parts.read_footer(f)) for f in files]
    found = [(f, footer) for f, footer in found if footer.num_rows and footer.file_hi > first]
    root, lo = parts.root_for(store.path), first
    for i, (f, _) in enumerate(found):
        dest = parts.new_file(root, run_info(run).uid)
        shutil.copy(f, dest)
        hi = max(lo, found[i + 1][1].file_lo if i + 1 < len(found) else cut)
        with store.transaction() as con:
            part = parts.facts(dest, lo, hi)
            parts.register(con, pk, dest, part)
            runs_mod.raise_last_step(con, pk, part.last_step)
        lo = hi
    with store.transaction() as con:
        metrics_mod.replace_range(con, pk, long_table(run, cut, last + 1), cut, last + 1)
        runs_mod.raise_last_step(con, pk, last)
    return pk
