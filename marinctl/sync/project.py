"""A whole W&B project mirrored: its listing tells which runs moved; those are fetched side by side
and written in order.

`sync ENTITY/PROJECT` (and `marin`, a project filtered by group) reads the run listing page by page
(one request per page, every run's metadata in it). Against what the last sync stored (one store
read per page) each run is:

- **unchanged**: W&B lists it exactly as stored (the listing digest: state, heartbeat, updatedAt,
  line count, last step, config, summary, tags) and its history is all here — nothing is asked or written;
- **moved without new history**: its metadata is written, nothing asked (a finished run whose last
  step and line count are unchanged is never fetched again, whatever else it says);
- **short**: new history that fits a request — windows of many runs go in ONE aliased request
  (sources/wandb_batch.py), checked against a rewrite at the last stored step in the same request;
- **long, forked, or rewritten**: the one-run path (sync/wandb.py `sync_run`: parquet parts,
  fork points, rewinds), after every other run, parents first.

Requests run on a bounded pool (the W&B client's concurrency, which halves at a 429 and holds every
thread until the server's wait has passed); at most that concurrency + 2 units are fetched ahead
of the writer, so memory is bounded by the runs in flight, not by the project. Units are decoded
in planning order (the one the writer needs next first), and the writer never waits for the
listing while it has something to write. The writer takes units in the order they were
planned: each in ONE transaction with every run's watermark, so a sync killed at any moment
resumes with nothing lost or doubled. The store is held open across back-to-back commits, at most
HOLD_S at a time, so another process can still read it.

In a project of at most INLINE runs (the hero lineage and ladder of `marin`, a handful of runs), a
run's system metrics (W&B's sampled `events` stream) come in the same aliased request as its
history, when the run moved since its stored set was fetched — a run whose history is complete but
whose set moved asks for the set alone. A sweep's runs leave them to their own sync (`sync
E/P/RUN`, `watch RUN`): 500 samples of a dozen keys each outweigh a short run's whole history
(bench/NOTES.md). Anomaly detection is left the same way when more than INLINE runs need scoring (~70 ms each: a sweep of thousands would spend minutes on it); `--detect` scores
them all now.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from marinctl.domain import Progress, RunInfo
from marinctl.errors import UserError
from marinctl.sources import wandb_batch
from marinctl.sources.wandb import WandbClient
from marinctl.store import Store, metrics, runs, state, synclock, system
from marinctl.sync import wandb as one_run
from marinctl.sync.targets import Plan, run_lock_key

WINDOW_STEPS = 1000         # steps per history window (the SDK's HistoryPage size)
BATCH_VALUES = 250_000      # history values asked for in one aliased request (estimated)
BATCH_RUNS = 48             # runs in one aliased request at most
COMMIT_RUNS = 200           # runs whose fetched history one commit may gather (units already here)
INLINE = 32                 # runs a project sync scores, and fetches system metrics for, itself
HOLD_S = 2.0                # longest the store is held open across back-to-back commits

Tally = Callable[[int, int, int], None]   # (runs done, runs listed so far or the server's count, rows added)


@dataclass
class Listed:
    """One listed run and what the store held of it before this sync."""

    info: RunInfo
    facts: dict[str, Any] | None
    start: int = 0                  # first step to fetch
    check_step: int | None = None   # the last stored step, checked for a rewrite
    history: bool = True            # new history to fetch (False: only the system metrics)
    with_system: bool = True        # a small project: its system metrics come with its history

    @property
    def system_stale(self) -> bool:
        """W&B may hold system samples the store does not: the run moved since its set was fetched."""
        return self.with_system and (self.facts is None or self.facts.get("system_for") != one_run.system_seen(self.info))

    @property
    def uid(self) -> str:
        return self.info.uid


@dataclass
class Unit:
    """What the writer commits next, in planning order: runs to fetch together (`batch`), runs whose
    metadata only moved (`meta`), or one run for the one-run path (`serial`)."""

    kind: str
    runs: list[Listed]
    future: Future | None = None
    seq: int = -1                   # a batch unit's place in the decoding order


@dataclass
class ProjectResult:
    results: list[one_run.RunSyncResult] = field(default_factory=list)
    to_score: list[str] = field(default_factory=list)      # uids whose stored history detection has not scored
    deferred: list[str] = field(default_factory=list)      # of those, left for later (more than INLINE)
    system_left: int = 0                                   # runs whose system metrics were left to their own sync


def sync_project(store: Store, client: WandbClient, plan: Plan, *, progress: Progress | None = None,
                 tally: Tally | None = None, select: Callable[[RunInfo], bool] | None = None,
                 detect_all: bool = False) -> ProjectResult:
    """Mirror every listed run of `plan`'s project (those `select` keeps) that moved; see the module doc."""
    threading.Thread(target=_preload, name="preload", daemon=True).start()
    out = ProjectResult()
    counts = {"done": 0, "total": 0, "rows": 0, "listed": 0}
    forks: list[Listed] = []
    lagging: list[str] = []

    def tell() -> None:
        if tally is not None:
            tally(counts["done"], max(counts["total"], counts["done"]), counts["rows"])

    def plan_units() -> Iterator[Unit]:
        small = None
        pages = _Ahead(client.list_pages(plan.entity, plan.project, filters=plan.filters or None))
        hold.touch()   # the store opened (created, migrated) while the first page is on its way
        while True:
            while not pages.ready() and not may_wait[0]:
                yield None   # the next page is not here yet and there is writing to do: come back later
            if counts["listed"] and not pages.ready():
                hold.release()   # waiting on the network: another process may write meanwhile
            got = next(pages, None)
            if got is None:
                break
            page, server_count = got
            kept = [r for r in page if select is None or select(r)]
            counts["listed"] += len(kept)
            counts["total"] = counts["listed"] if select is not None else max(server_count or 0, counts["listed"])
            if small is None:   # decided on the first page: the project's size, as W&B counts it
                small = (counts["listed"] if select is not None or not server_count else server_count) <= INLINE
            hold.touch()   # the store open once for the reads and the commits that follow
            with store.connect() as con:
                facts = runs.listed_facts(con, [r.uid for r in kept])
            meta: list[Listed] = []
            packer = _Packer()
            for info in kept:
                item = Listed(info, facts.get(info.uid), with_system=small)
                if not small and (item.facts is None or item.facts.get("system_for") is None):
                    out.system_left += 1
                kind = _classify(item)
                if item.facts is not None and _lags(item.facts):
                    lagging.append(item.uid)
                if kind == "same":
                    out.results.append(_unchanged(item))
                    counts["done"] += 1
                elif kind == "meta" and item.system_stale:
                    item.history = False     # its history is here: the request asks for its system set alone
                    yield from packer.add(item)
                elif kind == "meta":
                    meta.append(item)
                elif kind == "fork":
                    forks.append(item)
                elif kind == "serial":
                    yield Unit("serial", [item])
                else:
                    yield from packer.add(item)
            yield from packer.flush()
            if meta:
                yield Unit("meta", meta)
            tell()
        if counts["listed"] == 0:
            what = " matching --where" if select is not None else (" matching the marin groups" if plan.filters else "")
            raise UserError(f"no runs found in W&B project {plan.entity}/{plan.project}{what}",
                            f"check https://wandb.ai/{plan.entity}/{plan.project}")
        forks.sort(key=lambda r: (r.info.fork_step or 0, r.info.created_at.timestamp() if r.info.created_at else 0.0))
        for item in forks:   # parents (listed, so written above) before their children
            yield Unit("serial", [item])

    turns = _Turns()

    def fetch(unit: Unit) -> list:
        """A unit's request (side by side with the others), then its decoding in planning order: the
        writer commits in that order, so the unit it waits for is decoded first, not last of a crowd
        all holding one interpreter lock."""
        windows = [w for item in unit.runs for w in _windows(item)]
        answer, failed = None, None
        try:
            answer = wandb_batch.request(client, plan.entity, plan.project, windows)
        except BaseException as exc:  # noqa: BLE001 — raised below, in turn
            failed = exc
        with turns.turn(unit.seq):
            if failed is not None:
                raise failed
            return _per_run(unit.runs, windows, wandb_batch.decode(answer, windows))

    pool = _Pool(client.slots.limit, fetch)
    hold = _Hold(store)
    may_wait = [True]
    try:
        pending: deque[Unit] = deque()
        units = plan_units()
        ahead = client.slots.limit + 2   # units fetched or fetching ahead of the writer: memory's bound

        def fill() -> None:
            while len(pending) < ahead:
                may_wait[0] = not pending   # wait for the listing only when there is nothing to write
                unit = next(units, _DONE)
                if unit is _DONE or unit is None:
                    return
                if unit.kind == "batch":
                    unit.seq = turns.ticket()
                    unit.future = pool.submit(unit)
                pending.append(unit)

        fill()
        while pending:
            unit = pending.popleft()
            if unit.kind == "serial":
                hold.release()   # the one-run path opens the store per unit of its own work
                for item in unit.runs:
                    _sync_alone(store, client, item, out, progress)
            else:
                # the units after this one that are already here join its commit (one commit, not several)
                if unit.future is not None and not unit.future.done():
                    hold.release()   # waiting on the network: another process may write meanwhile
                items, got = list(unit.runs), _answers(unit)
                while pending and pending[0].kind != "serial" and (pending[0].future is None or pending[0].future.done()) \
                        and len(items) < COMMIT_RUNS:
                    more = pending.popleft()
                    items += more.runs
                    got += _answers(more)
                fill()   # the next units are fetched while this commit is written
                hold.touch()
                written, redo = _commit(store, items, got)
                out.results += written
                counts["rows"] += sum(r.rows_added for r in written)
                counts["done"] += len(items) - len(unit.runs)
                for item in redo:   # W&B rewrote history under a stored run: the one-run path walks it back
                    hold.release()
                    _sync_alone(store, client, item, out, progress)
            counts["done"] += len(unit.runs)
            tell()
            fill()
    finally:
        pool.close()
        hold.release()
    scored = {r.uid for r in out.results if r.rows_added or r.rewound_from is not None}
    out.to_score = list(dict.fromkeys([r.uid for r in out.results if r.uid in scored] + lagging))
    if len(out.to_score) > INLINE and not detect_all:
        out.deferred, out.to_score = out.to_score, []
    return out


def _sync_alone(store: Store, client: WandbClient, item: Listed, out: ProjectResult, progress: Progress | None) -> None:
    """The one-run path for one listed run, under the run's own lock (skipped when another process
    holds it: that process is bringing the run up to date)."""
    with synclock.held(store, [_lock(item)], owner="sync (project)") as mine:
        if mine:
            out.results.append(one_run.sync_run(store, client, item.info, progress=progress))


def _lock(item: Listed) -> str:
    return run_lock_key(item.info.entity, item.info.project, item.info.run_id)


def _preload() -> None:
    """What decoding and writing the first units will need (pyarrow, DuckDB's Arrow scans: ~0.1 s of
    imports), loaded while the first listing page is on its way."""
    import pyarrow  # noqa: F401

    from marinctl.store import engine

    engine.preload()


def max_step(batch) -> int:
    """The largest step of a non-empty long batch (NumPy's max: pyarrow.compute costs an import)."""
    return int(batch.column("step").to_numpy().max())


def _answers(unit: Unit) -> list:
    """Per run of a unit, what was fetched for it (None for every run of a metadata-only unit)."""
    return unit.future.result() if unit.future is not None else [None] * len(unit.runs)


# --- what each run needs ------------------------------------------------------------------------

def _classify(item: Listed) -> str:
    """same | meta | batch | serial | fork: what bringing this run up to date takes."""
    run, f = item.info, item.facts
    floor = run.fork_step if run.fork_step is not None else 0
    remote_last = run.remote_last_step
    mark = f["mark"] if f else None
    no_history = remote_last is None or remote_last < floor
    complete = no_history or (mark is not None and mark > remote_last)
    if f is not None and complete and f["listing_digest"] is not None and f["listing_digest"] == run.listing_digest:
        return "same"
    if run.fork_step is not None:
        return "fork"
    if no_history:
        return "meta"
    stored_last = f["last_step"] if f else None
    if stored_last is not None and remote_last < stored_last:
        return "serial"   # lastStep went backwards: a rewind, walked back on the one-run path
    if complete and run.state == "finished" and f["remote_last_step"] == remote_last \
            and f["history_line_count"] == run.history_line_count:
        return "meta"     # nothing new logged: a finished run is never asked again
    item.start = max(floor, mark if mark is not None else (stored_last + 1 if stored_last is not None else floor))
    item.check_step = stored_last
    if remote_last + 1 - item.start >= one_run.PARQUET_MIN_STEPS or _values(item) > max(_batch_values(), BATCH_VALUES):
        return "serial"   # long: parquet parts and windows committed as they come
    return "batch"


def _lags(f: dict[str, Any]) -> bool:
    """History is stored that detection has not scored (a deferred or interrupted pass)."""
    return f["last_step"] is not None and (f["scored_to"] is None or f["scored_to"] < f["last_step"])


def _batch_values() -> int:
    """BATCH_VALUES, or MARINCTL_PROJECT_BATCH_VALUES (smaller requests on a slow or strict server)."""
    return int(os.environ.get("MARINCTL_PROJECT_BATCH_VALUES") or BATCH_VALUES)


def _values(item: Listed) -> int:
    """An upper estimate of the values a run's new steps hold: steps × the keys its summary lists."""
    run = item.info
    if run.remote_last_step is None or not item.history:
        return 0
    keys = sum(1 for k in run.summary if not k.startswith("_")) + 3
    return max(run.remote_last_step + 1 - item.start, 0) * keys


def _windows(item: Listed) -> list[wandb_batch.Window]:
    """The run's new steps in windows of WINDOW_STEPS (one empty window when there are none, to
    check the last stored step); the first window carries the check and, when they moved, asks for
    the run's system metrics."""
    events = item.system_stale
    if not item.history:
        return [wandb_batch.Window(item.info.run_id, 0, 0, None, events=events)]
    end = item.info.remote_last_step + 1
    out, lo = [], item.start
    while True:
        hi = min(lo + WINDOW_STEPS, end) if lo < end else lo
        first = not out
        out.append(wandb_batch.Window(item.info.run_id, lo, hi, item.check_step if first else None,
                                      events=events and first))
        if hi >= end:
            return out
        lo = hi


def _per_run(items: list[Listed], windows: list[wandb_batch.Window], got: list[wandb_batch.Got]) -> list:
    """The windows' answers gathered per run: (one long batch, the checked `_timestamp`, the system
    samples or None when not asked)."""
    import pyarrow as pa

    by_run: dict[str, list[wandb_batch.Got]] = {}
    for w, g in zip(windows, got):
        by_run.setdefault(w.run_id, []).append(g)
    out = []
    for item in items:
        parts = by_run.get(item.info.run_id, [])
        if any(g.missing for g in parts):
            out.append(GONE)
            continue
        batches = [g.batch for g in parts if g.batch is not None and g.batch.num_rows]
        batch = pa.concat_tables(batches) if len(batches) > 1 else (batches[0] if batches else None)
        out.append((batch, parts[0].check_ts if parts else None, parts[0].system if parts else None))
    return out


GONE = "gone"   # what was fetched for a run W&B deleted after listing it


class _Packer:
    """Short runs gathered into aliased requests of at most BATCH_VALUES values and BATCH_RUNS runs."""

    def __init__(self) -> None:
        self.items: list[Listed] = []
        self.values = 0

    def add(self, item: Listed) -> Iterator[Unit]:
        v = _values(item)
        if self.items and (self.values + v > _batch_values() or len(self.items) >= BATCH_RUNS):
            yield from self.flush()
        self.items.append(item)
        self.values += v

    def flush(self) -> Iterator[Unit]:
        if self.items:
            yield Unit("batch", self.items)
        self.items, self.values = [], 0


# --- writing ------------------------------------------------------------------------------------

def _commit(store: Store, items: list[Listed], got: list) -> tuple[list[one_run.RunSyncResult], list[Listed]]:
    """One unit in ONE transaction: metadata, history and watermarks of every run in it. `got`:
    per run, (its new rows as one batch or None, the checked `_timestamp`, its system samples or
    None), or None where nothing was fetched (metadata only). Returns the results, and the runs whose last stored step W&B now
    serves otherwise (a rewrite: nothing of them is written here; the one-run path walks it back)."""
    results, redo = [], []
    with synclock.held(store, [_lock(item) for item in items], owner="sync (project)") as mine, \
            store.transaction() as con:
        keep: list[tuple[Listed, Any, bool]] = []
        sampled: list[tuple[Listed, list]] = []
        now = runs.listed_facts(con, [item.uid for item in items])   # another process may have synced since planning
        for item, fetched in zip(items, got):
            if fetched is GONE or _lock(item) not in mine:   # deleted since listed, or another process
                continue                                    # syncs it now: nothing of it is written here
            batch, check_ts, samples = fetched if fetched is not None else (None, None, None)
            mark = (now.get(item.uid) or {}).get("mark")
            if batch is not None and mark is not None and mark > item.start:
                batch = _from_step(batch, mark)              # what landed meanwhile is not written twice
            if fetched is not None and item.check_step is not None and _rewritten(con, item, check_ts):
                redo.append(item)
                continue
            keep.append((item, batch, fetched is not None))
            if samples is not None:
                sampled.append((item, samples))
        pks = runs.upsert_runs(con, [item.info for item, _, _ in keep])
        with_rows = [(pks[item.uid], batch) for item, batch, _ in keep if batch is not None]
        metrics.append_runs(con, with_rows)
        runs.raise_last_steps(con, {pk: max_step(batch) for pk, batch in with_rows})
        state.set_history_marks(con, {
            item.uid: max(item.info.remote_last_step + 1, (now.get(item.uid) or {}).get("mark") or 0)
            for item, _, fetched in keep if fetched and item.history and item.info.remote_last_step is not None})
        for item, samples in sampled:
            system.replace_samples(con, pks[item.uid], samples, one_run.system_seen(item.info))
        for item, batch, _ in keep:
            stored_last = item.facts["last_step"] if item.facts else None
            if batch is None:
                first, last = None, stored_last
            elif item.check_step is None:   # nothing was stored: the batch is the run's whole range
                first, last = int(batch.column("step").to_numpy().min()), max_step(batch)
            else:
                first, last = metrics.step_range(con, [(pks[item.uid], None, None)])
            results.append(one_run.RunSyncResult(item.info.run_id, item.uid, batch.num_rows if batch is not None else 0,
                                                 first, last))
    return results, redo


def _from_step(batch, step: int):
    """The rows of a long batch at or past `step` (None when none are)."""
    import pyarrow as pa

    kept = batch.filter(pa.array(batch.column("step").to_numpy() >= step))
    return kept if kept.num_rows else None


def _rewritten(con, item: Listed, remote_ts: float | None) -> bool:
    """Does W&B serve the last stored step with another `_timestamp` than the one stored (or not at all)?"""
    steps, values = metrics.series(con, [(item.facts["run_pk"], item.check_step, item.check_step + 1)], "_timestamp")
    return bool(len(steps)) and not one_run._same(float(values[-1]), remote_ts)


def _unchanged(item: Listed) -> one_run.RunSyncResult:
    return one_run.RunSyncResult(item.info.run_id, item.uid, 0, None, item.facts["last_step"])


# --- plumbing -----------------------------------------------------------------------------------

class _Pool:
    """Daemon threads fetching units (a killed or interrupted sync does not wait for them)."""

    def __init__(self, workers: int, fn: Callable[[Unit], Any]):
        self._jobs: queue.Queue = queue.Queue()
        self._fn = fn
        self._threads = [threading.Thread(target=self._work, name=f"wandb-fetch-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def submit(self, unit: Unit) -> Future:
        fut: Future = Future()
        self._jobs.put((unit, fut))
        return fut

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            unit, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(self._fn(unit))
            except BaseException as exc:  # noqa: BLE001 — raised in the writer's thread
                fut.set_exception(exc)

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


class _Turns:
    """Tickets in planning order; `turn(n)` waits until every earlier ticket's turn has passed."""

    def __init__(self) -> None:
        self._issued = 0
        self._next = 0
        self._cond = threading.Condition()

    def ticket(self) -> int:
        with self._cond:
            self._issued += 1
            return self._issued - 1

    @contextlib.contextmanager
    def turn(self, n: int) -> Iterator[None]:
        with self._cond:
            while self._next < n:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._next = max(self._next, n + 1)
                self._cond.notify_all()


class _Hold:
    """The store held open across commits (each then opens in a fraction of a millisecond, where a
    first open costs ~35 ms and a last close a checkpoint), for HOLD_S at most; then released for
    GAP_S, during which commits open the file themselves, so another process gets its turn. It is
    released too before the writer waits on the network (a slow page or batch), never held idle."""

    GAP_S = 0.5

    def __init__(self, store: Store):
        self.store = store
        self._ctx = None
        self._since = 0.0
        self._released = -1e9

    def touch(self) -> None:
        now = time.monotonic()
        if self._ctx is not None and now - self._since > HOLD_S:
            self.release()
        if self._ctx is None and time.monotonic() - self._released > self.GAP_S:
            self._ctx = self.store.held()
            self._ctx.__enter__()
            self._since = time.monotonic()

    def release(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            ctx.__exit__(None, None, None)
            self._released = time.monotonic()


_DONE = object()


class _Ahead:
    """The listing read one page ahead in a thread: the next page is on its way while this one's
    runs are planned and fetched (a page's cursor comes from the page before). `ready()` says
    whether the next page (or the end) is here, so the writer need not wait for it."""

    _END = object()

    def __init__(self, pages: Iterator) -> None:
        self._box: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._done = False
        threading.Thread(target=self._read, args=(pages,), name="wandb-listing", daemon=True).start()

    def _read(self, pages: Iterator) -> None:
        try:
            for page in pages:
                while not self._stop.is_set():
                    try:
                        self._box.put(page, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._box.put(self._END)
        except BaseException as exc:  # noqa: BLE001 — raised where the pages are read
            self._box.put(exc)

    def ready(self) -> bool:
        return self._done or not self._box.empty()

    def __iter__(self) -> "_Ahead":
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._box.get()
        if item is self._END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def __del__(self) -> None:
        self._stop.set()
