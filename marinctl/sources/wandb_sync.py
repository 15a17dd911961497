"""Mirror one W&B run's history into the store: bulk from parquet exports, then step windows.

Resumability is the design constraint: a sync killed at any moment (Ctrl-C, SIGKILL)
must lose nothing and resume without duplicates. Every unit of work — a parquet chunk or
a history window — is written in ONE transaction together with the watermark
(`sync_state` scope 'history': the next step to fetch). A killed sync leaves the last
committed unit; the next one starts from the watermark and `replace_range` makes any
overlap idempotent.

Rewinds and forks: when W&B's `lastStep` goes backwards, or the `_timestamp` of the last
step we stored no longer matches what W&B serves, history was rewritten; we walk back to
the first step that differs and re-sync from there. Fork children are stored only from
`fork_step + 1` (they inherit the rest from their parent; see store/lineage.py).
"""

from __future__ import annotations

import hashlib
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from marinctl import paths
from marinctl.domain import RunInfo
from marinctl.sources.wandb import WandbClient
from marinctl.store import Store
from marinctl.store import metrics as M
from marinctl.store.runs import upsert_run

Progress = Callable[[str, int, int], None]  # (run_id, steps_done, steps_total)

TARGET_VALUES_PER_PAGE = 200_000
PARQUET_CHUNK_STEPS = 10_000
PARQUET_MIN_STEPS = 5_000  # below this, a few JSON windows cost less than asking for exports


@dataclass
class RunSyncResult:
    run: str
    rows_added: int
    first_step: int | None
    last_step: int | None
    rewound_from: int | None = None

    def as_json(self) -> dict:
        return {"run": self.run, "rows_added": self.rows_added, "first_step": self.first_step,
                "last_step": self.last_step, **({"rewound_from": self.rewound_from} if self.rewound_from is not None else {})}


def _watermark(con, uid: str) -> int | None:
    row = con.execute("SELECT position FROM sync_state WHERE scope = 'history' AND name = ?", [uid]).fetchall()
    return row[0][0] if row else None


def _set_watermark(con, uid: str, position: int) -> None:
    con.execute(
        "INSERT INTO sync_state (scope, name, position, updated_at) VALUES ('history', ?, ?, current_timestamp)"
        " ON CONFLICT (scope, name) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at",
        [uid, position],
    )


def _commit_batch(store: Store, run_pk: int, uid: str, batch, lo: int, hi: int, last_step: int | None) -> int:
    with store.transaction() as con:
        n = M.replace_range(con, run_pk, batch, lo, hi, existing_last_step=last_step)
        if batch.num_rows:
            top = _max_step(batch)
            con.execute("UPDATE runs SET last_step = greatest(coalesce(last_step, -1), ?) WHERE run_pk = ?", [top, run_pk])
        _set_watermark(con, uid, hi)
    return n


def _max_step(batch) -> int:
    import pyarrow.compute as pc

    return int(pc.max(batch.column("step")).as_py())


def _stored_timestamps(store: Store, run_pk: int, lo: int, hi: int) -> dict[int, float]:
    with store.connect() as con:
        steps, values = M.series(con, [(run_pk, lo, hi)], "_timestamp")
    return dict(zip(steps.tolist(), values.tolist()))


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=0, abs_tol=1e-6)


def _find_divergence(client: WandbClient, run: RunInfo, store: Store, run_pk: int, last: int, floor: int, window: int) -> int:
    """First step whose stored `_timestamp` differs from W&B's (walking back window by window)."""
    hi = last + 1
    while hi > floor:
        lo = max(floor, hi - window)
        remote = {int(r["_step"]): r.get("_timestamp") for r in client.history(run.entity, run.project, run.run_id, lo, hi)}
        local = _stored_timestamps(store, run_pk, lo, hi)
        diverged = [s for s in local if not _same(local[s], remote.get(s))]
        if not diverged:
            return hi  # everything in this window agrees: the rewrite starts above it
        first = min(diverged)
        if first > lo:
            return first
        hi = lo
    return floor


def sync_run(
    store: Store,
    client: WandbClient,
    run: RunInfo,
    *,
    progress: Progress | None = None,
    use_parquet: bool = True,
) -> RunSyncResult:
    """Bring one run's metadata and history up to date; safe to interrupt at any point."""
    with store.transaction() as con:
        run_pk = upsert_run(con, run)
        last_step = con.execute("SELECT last_step FROM runs WHERE run_pk = ?", [run_pk]).fetchall()[0][0]
        mark = _watermark(con, run.uid)
    floor = (run.fork_step + 1) if run.fork_step is not None else 0
    remote_last = run.remote_last_step
    result = RunSyncResult(run=run.run_id, rows_added=0, first_step=None, last_step=last_step)
    if remote_last is None or remote_last < floor:
        return result
    window = 1000

    # Rewind detection: lastStep went backwards, or the last stored step changed.
    if last_step is not None:
        rewound = remote_last < last_step
        if not rewound:
            rows = client.history(run.entity, run.project, run.run_id, last_step, last_step + 1)
            remote_ts = rows[0].get("_timestamp") if rows else None
            local_ts = _stored_timestamps(store, run_pk, last_step, last_step + 1).get(last_step)
            rewound = local_ts is not None and not _same(local_ts, remote_ts)
        if rewound:
            start = _find_divergence(client, run, store, run_pk, min(last_step, remote_last + window), floor, window)
            with store.transaction() as con:
                con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ?", [run_pk, start])
                con.execute("DELETE FROM anomalies WHERE run_pk = ? AND step >= ?", [run_pk, start])
                M.refresh_last_step(con, run_pk)
                _set_watermark(con, run.uid, start)
                last_step = con.execute("SELECT last_step FROM runs WHERE run_pk = ?", [run_pk]).fetchall()[0][0]
            mark = start
            result.rewound_from = start

    start = max(floor, mark if mark is not None else (last_step + 1 if last_step is not None else floor))
    total = remote_last + 1 - start
    done = 0
    if progress:
        progress(run.run_id, 0, max(total, 0))
    if start > remote_last:
        result.last_step = last_step
        return result

    # Bulk: parquet exports cover finished history; far cheaper than JSON windows.
    if use_parquet and remote_last - start >= PARQUET_MIN_STEPS:
        added, start, last_step = _sync_parquet(store, client, run, run_pk, start, remote_last, last_step, progress, total)
        result.rows_added += added
        done = start - (remote_last + 1 - total)

    # Live tail and anything not exported: history windows, fetched one ahead.
    with ThreadPoolExecutor(max_workers=1) as pool:
        lo = start
        hi = min(lo + window, remote_last + 1)
        future = pool.submit(client.history, run.entity, run.project, run.run_id, lo, hi) if lo <= remote_last else None
        while future is not None:
            rows = future.result()
            batch = M.batch_from_rows(rows)
            per_step = max(1.0, batch.num_rows / max(1, hi - lo))
            next_window = int(min(10_000, max(100, TARGET_VALUES_PER_PAGE / per_step)))
            nlo, nhi = hi, min(hi + next_window, remote_last + 1)
            future = pool.submit(client.history, run.entity, run.project, run.run_id, nlo, nhi) if nlo <= remote_last else None
            result.rows_added += _commit_batch(store, run_pk, run.uid, batch, lo, hi, last_step)
            if batch.num_rows:
                last_step = max(last_step if last_step is not None else -1, _max_step(batch))
            done += hi - lo
            if progress:
                progress(run.run_id, done, total)
            lo, hi = nlo, nhi

    with store.connect() as con:
        first, last = con.execute("SELECT min(step), max(step) FROM metrics WHERE run_pk = ?", [run_pk]).fetchall()[0]
    result.first_step, result.last_step = first, last
    return result


def _sync_parquet(store, client, run, run_pk, start, remote_last, last_step, progress, total):
    """Load exported history in bounded step batches, each batch one transaction.

    Files are streamed with pyarrow (`iter_batches`), so memory stays bounded by the batch,
    not by the export's row-group size; each wide batch is unpivoted to long rows in DuckDB.
    Returns (rows added, next step to fetch, last step stored).
    """
    import pyarrow.parquet as pq

    ph = client.parquet_history(run.entity, run.project, run.run_id)
    live_steps = [int(r["_step"]) for r in ph.live_rows if "_step" in r]
    if not ph.urls or (live_steps and min(live_steps) <= start):
        return 0, start, last_step
    folder = paths.subdir("parquet") / hashlib.sha1(run.uid.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i, url in enumerate(sorted(ph.urls)):
        dest = folder / f"part-{i:04d}.parquet"
        client.download(url, dest)
        files.append(pq.ParquetFile(dest, pre_buffer=False, buffer_size=1 << 20))
    # partitions in step order (their URL order is not stable)
    files.sort(key=lambda f: _min_step(f))
    exported_max = max((_max_step_of(f) for f in files), default=None)
    if exported_max is None:
        return 0, start, last_step
    boundary = min(min(live_steps) if live_steps else exported_max + 1, exported_max + 1, remote_last + 1)
    added = 0
    done_to = start
    try:
        for f in files:
            if _max_step_of(f) < start or _min_step(f) >= boundary:
                continue
            numeric = [fld.name for fld in f.schema_arrow if fld.name != "_step" and _is_numeric_arrow(fld.type)]
            per_step = max(1, len(numeric))
            batch_rows = max(500, min(PARQUET_CHUNK_STEPS, TARGET_VALUES_PER_PAGE * 10 // per_step))
            for wide in f.iter_batches(batch_size=batch_rows, columns=["_step", *numeric], use_threads=False):
                steps = wide.column(0)
                lo_b, hi_b = int(steps[0].as_py()), int(steps[-1].as_py()) + 1
                if hi_b <= start or lo_b >= boundary:
                    continue
                lo, hi = max(lo_b, start), min(hi_b, boundary)
                n, top = _insert_wide(store, run, run_pk, wide, numeric, lo, hi, last_step)
                if top is not None:
                    last_step = max(last_step if last_step is not None else -1, top)
                added += n
                done_to = hi
                if progress:
                    progress(run.run_id, hi - (remote_last + 1 - total), total)
    finally:
        for f in files:
            f.close()
    return added, max(done_to, boundary) if done_to >= start else start, last_step


def _insert_wide(store, run, run_pk, wide, numeric, lo, hi, last_step):
    """One wide parquet batch → long rows for steps [lo, hi), with the watermark, atomically."""
    quoted = ", ".join(f'CAST("{c.replace(chr(34), chr(34) * 2)}" AS DOUBLE) AS "{c.replace(chr(34), chr(34) * 2)}"'
                       for c in numeric)
    with store.transaction() as con:
        con.register("_wide", wide)
        try:
            if last_step is not None and lo <= last_step:
                con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?", [run_pk, lo, hi])
            rel = (
                f"SELECT _step AS step, key, value FROM (UNPIVOT (SELECT CAST(_step AS BIGINT) AS _step, {quoted}"
                f" FROM _wide WHERE _step >= {int(lo)} AND _step < {int(hi)}) ON COLUMNS(* EXCLUDE (_step))"
                " INTO NAME key VALUE value)"
            )
            n = M.insert_from_relation(con, run_pk, rel)
        finally:
            con.unregister("_wide")
        top = con.execute("SELECT max(step) FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?",
                          [run_pk, lo, hi]).fetchall()[0][0]
        if top is not None:
            con.execute("UPDATE runs SET last_step = greatest(coalesce(last_step, -1), ?) WHERE run_pk = ?", [top, run_pk])
        _set_watermark(con, run.uid, hi)
    return n, top


def _min_step(f) -> int:
    return _step_stat(f, "min")


def _max_step_of(f) -> int:
    return _step_stat(f, "max")


def _step_stat(f, which: str) -> int:
    idx = f.schema_arrow.get_field_index("_step")
    vals = []
    for g in range(f.metadata.num_row_groups):
        st = f.metadata.row_group(g).column(idx).statistics
        if st is None or not st.has_min_max:
            import pyarrow.compute as pc

            col = f.read(columns=["_step"]).column(0)
            return int((pc.min if which == "min" else pc.max)(col).as_py())
        vals.append(st.min if which == "min" else st.max)
    return int(min(vals) if which == "min" else max(vals))


def _is_numeric_arrow(t) -> bool:
    import pyarrow.types as pt

    return pt.is_integer(t) or pt.is_floating(t) or pt.is_boolean(t) or pt.is_decimal(t)
