"""Mirror W&B runs: metadata, then history — bulk from parquet exports, the rest in step windows.

Resumability is the design constraint: a sync killed at any moment (Ctrl-C, SIGKILL) must
lose nothing and resume without duplicates. Every unit of work — a parquet chunk or a
history window — is written in ONE transaction together with the watermark (the next step
to fetch, store/state.py). A killed sync leaves the last committed unit; the next one
starts from the watermark and `replace_range` makes any overlap idempotent.

Rewinds and forks: when W&B's `lastStep` goes backwards, or the `_timestamp` of the last
step we stored no longer matches what W&B serves, history was rewritten; we walk back to
the first step that differs and re-sync from there, record the `rewind` (an anomaly every
detection pass keeps) and move detection back to just before it. Fork children are stored from
`fork_step` on — every row they logged themselves; W&B also serves the parent's rows below
(and, for a child that did not log it, at) the fork step, which stay the parent's (see
store/lineage.py). A finished run whose state, last step and heartbeat are unchanged since
it was fully mirrored costs its one metadata request and nothing more.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from marinctl.domain import Anomaly, Progress, RunInfo
from marinctl.errors import UserError
from marinctl.sources import wandb_parquet
from marinctl.sources.wandb import WandbClient
from marinctl.sources.wandb_rows import batch_from_rows, max_step
from marinctl.store import Store, anomalies, metrics, runs, state
from marinctl.sync.targets import Plan

TARGET_VALUES_PER_PAGE = 200_000
PARQUET_MIN_STEPS = 5_000  # below this, a few JSON windows cost less than asking for exports
WINDOW = 1000              # steps per window when walking back to a rewind


@dataclass
class RunSyncResult:
    run: str
    uid: str
    rows_added: int
    first_step: int | None
    last_step: int | None
    rewound_from: int | None = None

    def as_json(self) -> dict:
        return {"run": self.run, "rows_added": self.rows_added, "first_step": self.first_step,
                "last_step": self.last_step, **({"rewound_from": self.rewound_from} if self.rewound_from is not None else {})}


def sync_plan(store: Store, plan: Plan, *, progress: Progress | None = None,
              client: WandbClient | None = None) -> tuple[list[RunSyncResult], float]:
    """Every run a W&B plan names, parents first; returns their results and the seconds spent on HTTP."""
    own = client is None
    client = client or WandbClient()
    try:
        results = [sync_run(store, client, run, progress=progress) for run in remote_runs(client, plan)]
        return results, getattr(client, "http_seconds", 0.0)
    finally:
        if own:
            client.close()


def remote_runs(client: WandbClient, plan: Plan) -> list[RunInfo]:
    """The runs a plan names, parents before children (a fork child's lineage is complete when it lands)."""
    if plan.run_id:
        found = [client.run(plan.entity, plan.project, plan.run_id)]
    else:
        found = list(client.list_runs(plan.entity, plan.project, filters=plan.filters or None))
        if not found:
            raise UserError(f"no runs found in W&B project {plan.entity}/{plan.project}"
                            + (" matching the marin groups" if plan.filters else ""),
                            f"check https://wandb.ai/{plan.entity}/{plan.project}")
    found.sort(key=lambda r: (r.fork_step is not None, r.fork_step or 0,
                              r.created_at.timestamp() if r.created_at else 0.0))
    return found


def sync_run(store: Store, client: WandbClient, run: RunInfo, *, progress: Progress | None = None,
             use_parquet: bool = True) -> RunSyncResult:
    """Bring one run's metadata and history up to date; safe to interrupt at any point."""
    with store.transaction() as con:
        before = runs.sync_facts(con, run.uid)
        run_pk = runs.upsert_run(con, run)
        last_step = runs.last_step(con, run_pk)
        mark = state.history_mark(con, run.uid)
    floor = run.fork_step if run.fork_step is not None else 0
    remote_last = run.remote_last_step
    result = RunSyncResult(run=run.run_id, uid=run.uid, rows_added=0, first_step=None, last_step=last_step)
    if remote_last is None or remote_last < floor or _finished_and_mirrored(before, run, mark):
        return result

    fetch = _history_of(client, run)
    if last_step is not None:
        start = _rewound_from(store, fetch, run_pk, last_step, remote_last, floor)
        if start is not None:
            with store.transaction() as con:
                metrics.delete_from(con, run_pk, start)
                anomalies.clear(con, run_pk, start)
                anomalies.insert(con, [_rewind(run_pk, start, last_step)])   # both detection passes keep it
                state.rewind_detection(con, run.uid, start)
                last_step = runs.refresh_last_step(con, run_pk)
                state.set_history_mark(con, run.uid, start)
            mark = start
            result.rewound_from = start

    start = max(floor, mark if mark is not None else (last_step + 1 if last_step is not None else floor))
    if run.fork_step is not None and start == run.fork_step and _inherited_at_fork(store, fetch, run):
        start += 1
    total = remote_last + 1 - start
    if progress:
        progress(run.run_id, 0, max(total, 0))
    if start > remote_last:
        result.last_step = last_step
        return result

    def tick(next_step: int) -> None:
        if progress:
            progress(run.run_id, next_step - (remote_last + 1 - total), total)

    # Bulk: parquet exports cover finished history; far cheaper than JSON windows.
    if use_parquet and remote_last - start >= PARQUET_MIN_STEPS:
        export = wandb_parquet.open_export(client, run, start, remote_last)
        if export is not None:
            try:
                for chunk in export.chunks(start):
                    with store.transaction() as con:
                        n, top = metrics.replace_wide(con, run_pk, chunk.wide, chunk.numeric, chunk.lo, chunk.hi,
                                                      existing_last_step=last_step)
                        if top is not None:
                            runs.raise_last_step(con, run_pk, top)
                        state.set_history_mark(con, run.uid, chunk.hi)
                    if top is not None:
                        last_step = max(last_step if last_step is not None else -1, top)
                    result.rows_added += n
                    tick(chunk.hi)
            finally:
                export.close()
            start = max(start, export.boundary)

    # Live tail and anything not exported: history windows, fetched one ahead.
    with ThreadPoolExecutor(max_workers=1) as pool:
        lo = start
        hi = min(lo + WINDOW, remote_last + 1)
        future = pool.submit(fetch, lo, hi) if lo <= remote_last else None
        while future is not None:
            batch = batch_from_rows(future.result())
            per_step = max(1.0, batch.num_rows / max(1, hi - lo))
            next_window = int(min(10_000, max(100, TARGET_VALUES_PER_PAGE / per_step)))
            nlo, nhi = hi, min(hi + next_window, remote_last + 1)
            future = pool.submit(fetch, nlo, nhi) if nlo <= remote_last else None
            with store.transaction() as con:
                result.rows_added += metrics.replace_range(con, run_pk, batch, lo, hi, existing_last_step=last_step)
                if batch.num_rows:
                    runs.raise_last_step(con, run_pk, max_step(batch))
                state.set_history_mark(con, run.uid, hi)
            if batch.num_rows:
                last_step = max(last_step if last_step is not None else -1, max_step(batch))
            tick(hi)
            lo, hi = nlo, nhi

    with store.connect() as con:
        result.first_step, result.last_step = metrics.step_range(con, [(run_pk, None, None)])
    return result


def _rewind(run_pk: int, start: int, stored_to: int) -> Anomaly:
    """The record of a W&B rewind the sync saw: history from `start` was rewritten."""
    return Anomaly(run_pk, start, "_step", "rewind", float(max(stored_to - start + 1, 0)), "infrastructure",
                   {"previously_detected_to": stored_to, "rewound_from": start})


def _finished_and_mirrored(before: dict | None, run: RunInfo, mark: int | None) -> bool:
    """Nothing can have changed: finished before and now, same last step and heartbeat, all fetched."""
    return (before is not None and before["state"] == "finished" == run.state and mark is not None
            and run.remote_last_step is not None and mark > run.remote_last_step
            and before["remote_last_step"] == run.remote_last_step and before["heartbeat_at"] == run.heartbeat_at)


def _inherited_at_fork(store: Store, fetch, run: RunInfo) -> bool:
    """Is the row W&B serves for a fork child at its fork step its parent's (the child did not
    log that step itself)? It is when it holds exactly the values the parent stored there."""
    with store.connect() as con:
        parent_pk = runs.pk_of(con, f"{run.entity}/{run.project}/{run.fork_parent}")
        if parent_pk is None:
            return False   # the parent is not mirrored: we cannot tell, so the row is kept
        theirs = metrics.export_table(con, [(parent_pk, run.fork_step, run.fork_step + 1)], None)
    served = batch_from_rows(fetch(run.fork_step, run.fork_step + 1))
    parent, child = (dict(zip(t.column("key").to_pylist(), t.column("value").to_pylist())) for t in (theirs, served))
    return bool(parent) and parent.keys() == child.keys() and all(
        _same(v, child[k]) or (v != v and child[k] != child[k]) for k, v in parent.items())


def _history_of(client: WandbClient, run: RunInfo) -> Callable[[int, int], list[dict[str, Any]]]:
    return lambda lo, hi: client.history(run.entity, run.project, run.run_id, lo, hi)


def _rewound_from(store: Store, fetch, run_pk: int, last_step: int, remote_last: int, floor: int) -> int | None:
    """The first step W&B rewrote since the last sync, or None when the stored history still holds.

    Rewritten: `lastStep` went backwards, or the last stored step's `_timestamp` changed.
    """
    if remote_last >= last_step:
        rows = fetch(last_step, last_step + 1)
        remote_ts = rows[0].get("_timestamp") if rows else None
        local_ts = _stored_timestamps(store, run_pk, last_step, last_step + 1).get(last_step)
        if local_ts is None or _same(local_ts, remote_ts):
            return None
    # walk back window by window to the first step whose stored `_timestamp` differs
    hi = min(last_step, remote_last + WINDOW) + 1
    while hi > floor:
        lo = max(floor, hi - WINDOW)
        remote = {int(r["_step"]): r.get("_timestamp") for r in fetch(lo, hi)}
        local = _stored_timestamps(store, run_pk, lo, hi)
        diverged = [s for s in local if not _same(local[s], remote.get(s))]
        if not diverged:
            return hi  # everything in this window agrees: the rewrite starts above it
        first = min(diverged)
        if first > lo:
            return first
        hi = lo
    return floor


def _stored_timestamps(store: Store, run_pk: int, lo: int, hi: int) -> dict[int, float]:
    with store.connect() as con:
        steps, values = metrics.series(con, [(run_pk, lo, hi)], "_timestamp")
    return dict(zip(steps.tolist(), values.tolist()))


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=0, abs_tol=1e-6)
