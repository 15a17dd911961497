"""Mirror W&B runs: metadata, history — exported parquet parts kept as they are, the rest in step
windows — then system metrics.

Resumability is the design constraint: a sync killed at any moment (Ctrl-C, SIGKILL) must
lose nothing and resume without duplicates. Every unit of work — a registered parquet part
or ~1M values of history windows — is written in ONE transaction together with the
watermark (the next step to fetch, store/state.py). A killed sync leaves the last committed
unit; the next one starts from the watermark, `replace_range` and `parts.register` make any
overlap idempotent, and files a kill left unregistered are deleted (`parts.collect_garbage`).

Finished history arrives as W&B's parquet export. Its parts are downloaded and kept as the
stored form (store/parts.py: nothing is decoded into rows; what reads need from a whole part
is computed once); the live tail comes as JSON history windows into the long table.

Rewinds and forks: when W&B's `lastStep` goes backwards, or the `_timestamp` of the last
step we stored no longer matches what W&B serves, history was rewritten; we walk back (two
keys per row) to the first step that differs, forget everything from there — long rows
deleted, parts clipped — re-sync from it, record the `rewind` (an anomaly every detection pass
keeps) and move detection back to just before it. A part file that went missing sends the
watermark back to its first step the same way. Fork children are stored from `fork_step` on —
every row they logged themselves; W&B also serves the parent's rows below (and, for a child
that did not log it, at) the fork step, which stay the parent's (see store/lineage.py). A
finished run whose state, last step and heartbeat are unchanged since it was fully mirrored
costs its one metadata request and nothing more.

System metrics (`events`) are W&B's sampled stream, not a log to page through: the latest
sample set replaces the stored one, asked for only when the run's metadata moved since the
stored set was fetched (store/system.py keeps what it was fetched for, in the same transaction).
"""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from marinctl import paths
from marinctl.domain import Anomaly, Progress, RunInfo
from marinctl.errors import RuntimeFailure, UserError
from marinctl.sources import wandb_parquet
from marinctl.sources.wandb import WandbClient
from marinctl.sources.wandb_rows import batch_from_rows, max_step
from marinctl.store import Store, anomalies, metrics, parts, runs, state, system
from marinctl.sync.targets import Plan

TARGET_VALUES_PER_PAGE = 200_000
COMMIT_VALUES = 1_000_000  # at most this many window values wait for a transaction (one file open + commit each)
PARQUET_MIN_STEPS = 5_000  # below this, a few JSON windows cost less than asking for exports
WINDOW = 1000              # steps per window when walking back to a rewind
WINDOWS_AHEAD = 8          # history windows fetched ahead of the commits (~200k values each)


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
    """Bring one run's metadata, history and system metrics up to date; safe to interrupt at any point."""
    result = _sync_history(store, client, run, progress=progress, use_parquet=use_parquet)
    _sync_system(store, client, run)
    return result


def _sync_history(store: Store, client: WandbClient, run: RunInfo, *, progress: Progress | None,
                  use_parquet: bool) -> RunSyncResult:
    """The run's metadata, then its history from the watermark (parts, then windows)."""
    with store.transaction() as con:
        before = runs.sync_facts(con, run.uid)
        run_pk = runs.upsert_run(con, run)
        last_step = runs.last_step(con, run_pk)
        mark = state.history_mark(con, run.uid)
        lost = parts.lost_from(con, run_pk)
        if lost is not None:   # a part's file is gone: fetch its history again from its first step
            metrics.delete_from(con, run_pk, lost)
            last_step = runs.refresh_last_step(con, run_pk)
            mark = min(mark, lost) if mark is not None else lost
            state.set_history_mark(con, run.uid, mark)
        parts.collect_garbage(con, run.uid)   # files a killed sync left, or parts just dropped
    floor = run.fork_step if run.fork_step is not None else 0
    remote_last = run.remote_last_step
    result = RunSyncResult(run=run.run_id, uid=run.uid, rows_added=0, first_step=None, last_step=last_step)
    if remote_last is None or remote_last < floor or _finished_and_mirrored(before, run, mark):
        return result

    fetch = _history_of(client, run)
    if last_step is not None:
        start = _rewound_from(store, client, run, run_pk, last_step, remote_last, floor)
        if start is not None:
            with store.transaction() as con:
                metrics.delete_from(con, run_pk, start)
                anomalies.clear(con, run_pk, start)
                anomalies.insert(con, [_rewind(run_pk, start, last_step)])   # both detection passes keep it
                state.rewind_detection(con, run.uid, start)
                last_step = runs.refresh_last_step(con, run_pk)
                state.set_history_mark(con, run.uid, start)
                parts.collect_garbage(con, run.uid)
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

    feed: _Windows | None = None
    try:
        # Bulk: the parquet export's parts, kept as they are; far cheaper than JSON windows.
        if use_parquet and remote_last - start >= PARQUET_MIN_STEPS:
            export = wandb_parquet.describe(client, run)
            if export.urls and export.live_start is not None and start < export.live_start <= remote_last:
                feed = _Windows(fetch, export.live_start, remote_last)   # the live tail arrives meanwhile
            start, added, last_step = _sync_parts(store, client, run, run_pk, export, start, remote_last,
                                                  last_step, tick)
            result.rows_added += added
        # Live tail and anything not exported: history windows, fetched ahead.
        if feed is None or feed.start != start:
            if feed is not None:
                feed.close()
            feed = _Windows(fetch, start, remote_last)
        result.rows_added += _sync_windows(store, feed, run, run_pk, start, last_step, tick)
    finally:
        if feed is not None:
            feed.close()

    with store.connect() as con:
        result.first_step, result.last_step = metrics.step_range(con, [(run_pk, None, None)])
    return result


def system_seen(run: RunInfo) -> str:
    """What a stored system set was fetched for: the run's state, heartbeat and last step (W&B
    adds samples only while those move)."""
    return f"{run.state}|{run.heartbeat_at.isoformat() if run.heartbeat_at else ''}|{run.remote_last_step}"


def _sync_system(store: Store, client: WandbClient, run: RunInfo) -> None:
    """The run's system metrics, W&B's latest sample set replacing the stored one — fetched only
    when the run moved (state, heartbeat, last step) since the stored set was fetched."""
    seen = system_seen(run)
    with store.connect() as con:
        run_pk = runs.pk_of(con, run.uid)
        if run_pk is None or system.fetched_for(con, run_pk) == seen:
            return
    got = client.system_events(run.entity, run.project, run.run_id)
    with store.transaction() as con:
        system.replace_samples(con, run_pk, got, seen)


def _sync_parts(store: Store, client: WandbClient, run: RunInfo, run_pk: int, export: wandb_parquet.Export,
                start: int, remote_last: int, last_step: int | None,
                tick: Callable[[int], None]) -> tuple[int, int, int | None]:
    """Download the run's export and register its parts from `start` on, each in one transaction
    with the watermark. Returns (first step not covered, values registered, last stored step)."""
    if not export.urls or (export.live_start is not None and export.live_start <= start):
        return start, 0, last_step
    root = store.staging(paths.home())

    def arrived(path: Path) -> tuple[Path, parts.Footer, parts.Facts | None]:
        """In the download thread: the footer, and the facts of the whole file when any of it is
        needed (decoding one part overlaps the next part's download)."""
        footer = _footer(path)
        whole = parts.facts(path, footer.file_lo, footer.file_hi) if footer.num_rows and footer.file_hi > start else None
        return path, footer, whole

    got = wandb_parquet.download_all(client, export.urls, lambda: parts.new_file(root, run.uid), arrived)
    whole_facts = {path: whole for path, _, whole in got}
    got = [(path, footer) for path, footer, _ in got]
    got.sort(key=lambda g: g[1].file_lo)   # partitions in step order (their URL order is not stable)
    exported_hi = max((f.file_hi for _, f in got if f.num_rows), default=None)
    if exported_hi is None:
        for path, _ in got:
            path.unlink(missing_ok=True)
        return start, 0, last_step
    boundary = min(export.live_start if export.live_start is not None else exported_hi, exported_hi, remote_last + 1)
    usable = [(p, f) for p, f in got if f.num_rows and f.file_hi > start and f.file_lo < boundary]
    for path, footer in got:
        if (path, footer) not in usable:
            path.unlink(missing_ok=True)   # wholly below the watermark or past the live boundary
    spans, lo = [], start
    for i, (path, footer) in enumerate(usable):   # part i is used for [previous hi, next part's first step)
        hi = max(lo, usable[i + 1][1].file_lo if i + 1 < len(usable) else boundary)
        spans.append((path, lo, hi))
        lo = hi
    added = 0
    for path, lo, hi in spans:
        whole = whole_facts.get(path)
        # facts of the whole file serve when the part is used for all of it (the usual case)
        part = whole.used_for(lo, hi) if whole is not None else None
        part = part or parts.facts(path, lo, hi)
        with store.transaction() as con:
            parts.register(con, run_pk, path, part)
            if part.last_step is not None:
                runs.raise_last_step(con, run_pk, part.last_step)
            state.set_history_mark(con, run.uid, hi)
        if part.last_step is not None:
            last_step = max(last_step if last_step is not None else -1, part.last_step)
        added += sum(part.keys.column("n_values").to_pylist())
        tick(hi)
    return max(start, spans[-1][2] if spans else start), added, last_step


def _footer(path: Path) -> parts.Footer:
    try:
        return parts.read_footer(path)
    except ValueError as exc:
        raise RuntimeFailure(f"W&B's history export could not be read: {exc}",
                             "run the same `marinctl sync` again: the part is downloaded afresh") from None


def _sync_windows(store: Store, feed: "_Windows", run: RunInfo, run_pk: int, start: int,
                  last_step: int | None, tick: Callable[[int], None]) -> int:
    """History windows from `start` into the long table, committed with the watermark every
    ~COMMIT_VALUES values (sooner while the next window is not there yet: a commit made while
    waiting on W&B costs no time)."""
    added = 0
    pending: list[pa.Table] = []
    pending_lo = start
    for hi, batch, more in feed:
        pending.append(batch)
        if not more or sum(b.num_rows for b in pending) >= COMMIT_VALUES:
            table = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            with store.transaction() as con:
                added += metrics.replace_range(con, run_pk, table, pending_lo, hi, existing_last_step=last_step)
                if table.num_rows:
                    runs.raise_last_step(con, run_pk, max_step(table))
                state.set_history_mark(con, run.uid, hi)
            if table.num_rows:
                last_step = max(last_step if last_step is not None else -1, max_step(table))
            pending, pending_lo = [], hi
        tick(hi)
    return added


_END = object()   # the last window was handed over


class _Windows:
    """History windows [start, remote_last] fetched ahead by a worker thread, decoded into Arrow
    batches there, at most WINDOWS_AHEAD of them waiting. Started before the parts download, it
    brings the live tail in meanwhile; nothing is stored until the caller commits it in order."""

    def __init__(self, fetch: Callable[[int, int], list[dict[str, Any]]], start: int, remote_last: int):
        self.start = start
        self._queue: queue.Queue = queue.Queue(maxsize=WINDOWS_AHEAD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fetch_all, args=(fetch, start, remote_last),
                                        name="wandb-windows", daemon=True)
        self._thread.start()

    def _fetch_all(self, fetch, lo: int, remote_last: int) -> None:
        hi = min(lo + WINDOW, remote_last + 1)
        try:
            while lo <= remote_last and not self._stop.is_set():
                batch = batch_from_rows(fetch(lo, hi))
                per_step = max(1.0, batch.num_rows / max(1, hi - lo))
                size = int(min(10_000, max(100, TARGET_VALUES_PER_PAGE / per_step)))
                if not self._put((hi, batch)):
                    return
                lo, hi = hi, min(hi + size, remote_last + 1)
        except BaseException as exc:  # noqa: BLE001 — handed to the consuming thread, raised there
            self._put(exc)
            return
        self._put(_END)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        """(window end, batch, whether the next window is already here), in step order."""
        item = self._queue.get()
        while item is not _END:
            if isinstance(item, BaseException):
                raise item
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                nxt = None
            yield (*item, isinstance(nxt, tuple))
            item = nxt if nxt is not None else self._queue.get()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


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


def _rewound_from(store: Store, client: WandbClient, run: RunInfo, run_pk: int, last_step: int, remote_last: int,
                  floor: int) -> int | None:
    """The first step W&B rewrote since the last sync, or None when the stored history still holds.

    Rewritten: `lastStep` went backwards, or the last stored step's `_timestamp` changed. The
    walk back compares `_timestamp` only (W&B's sampled history: two keys a row, not whole rows).
    """
    def remote(lo: int, hi: int) -> dict[int, float]:
        return client.timestamps(run.entity, run.project, run.run_id, lo, hi)

    if remote_last >= last_step:
        local_ts = _stored_timestamps(store, run_pk, last_step, last_step + 1).get(last_step)
        if local_ts is None or _same(local_ts, remote(last_step, last_step + 1).get(last_step)):
            return None
    # walk back window by window to the first step whose stored `_timestamp` differs
    hi = min(last_step, remote_last + WINDOW) + 1
    while hi > floor:
        lo = max(floor, hi - WINDOW)
        theirs = remote(lo, hi)
        local = _stored_timestamps(store, run_pk, lo, hi)
        diverged = [s for s in local if not _same(local[s], theirs.get(s))]
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
