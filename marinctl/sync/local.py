"""Mirror local and offline W&B runs (`.wandb` transaction logs) into the store, live.

Runs keep their W&B ids, config, summary and state; history rows become metrics; console
output (output_raw fragments reassembled into lines) becomes `console` events; stats records
(the system monitor's samples) become system samples (store/system.py).

Resumability: per file, the store keeps (store/state.py) the offset just past the last
complete record, the file's identity (device:inode), and what must survive between reads
(size/mtime last seen, pending console fragments, line counter, exit code). Every window
of records is written in ONE transaction together with the new position, so a sync killed
at any moment resumes without duplicates, and an unchanged file costs one stat.

State, as W&B's LEET does it: an exit record decides finished/failed; without one, a file
not written for STALE_AFTER is 'stale' and for CRASH_AFTER (LEET's RunCrashTimeout,
10 min) 'crashed'.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from marinctl.domain import Event, Progress, RunInfo, Warn
from marinctl.errors import UserError
from marinctl.sources import wandb_file as wf
from marinctl.sources import wandb_local as files
from marinctl.sources import wandb_records as records
from marinctl.store import Store, events, metrics, runs, state, system
from marinctl.store.state import Position

STALE_AFTER = 120.0
CRASH_AFTER = 600.0


def state_for(exit_code: int | None, mtime: float, now: float) -> str:
    """A local run's state from its exit record, else from how long ago its file was written.
    Exit code 255 is an interrupted run (the SDK's code for Ctrl-C / SIGTERM): 'killed', as W&B shows it."""
    if exit_code is not None:
        return "finished" if exit_code == 0 else "killed" if exit_code == 255 else "failed"
    age = now - mtime
    if age >= CRASH_AFTER:
        return "crashed"
    if age >= STALE_AFTER:
        return "stale"
    return "running"


@dataclass
class FileResult:
    run: str | None
    uid: str | None = None
    rows_added: int = 0
    first_step: int | None = None
    last_step: int | None = None
    changed: bool = False
    readable: bool = False      # the file has (had) at least one valid record
    waiting: bool = False       # a W&B log with no run record yet, written recently
    problem: str | None = None  # why nothing at all could be read from it

    def as_json(self) -> dict:
        return {"run": self.run, "rows_added": self.rows_added, "first_step": self.first_step,
                "last_step": self.last_step}


class FileSync:
    """Sync of one .wandb file; keeps warn-once bookkeeping across polls (for follow)."""

    def __init__(self, store: Store, path: Path, warn: Warn | None = None):
        self.store = store
        self.path = Path(path)
        self.name = str(self.path.resolve())
        self.warned: set[str] = set()
        self._warn = warn
        self._docs: tuple | None = None   # (run uid, config, summary) as last written, within one read
        self._seen: tuple | None = None   # ((token, size, mtime_ns), Position) after the last sync

    def warn(self, what: str, message: str) -> None:
        if what in self.warned or self._warn is None:
            return
        self.warned.add(what)
        self._warn(f"{self.path}: {message}")

    def sync(self, *, progress: Progress | None = None, now: float | None = None) -> FileResult:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self.warn("stat", f"cannot read ({exc.strerror})")
            return FileResult(None)
        now = time.time() if now is None else now
        token = f"{st.st_dev}:{st.st_ino}"
        seen = (token, st.st_size, st.st_mtime_ns)
        if self._seen is not None and self._seen[0] == seen:
            # polled again and nothing moved: answer from memory unless the liveness clock ticked
            extra = self._seen[1].extra
            if extra.get("run_uid") is None or state_for(extra.get("exit_code"), st.st_mtime, now) == extra.get("state"):
                return _result(extra)
        with self.store.connect() as con:
            pos = state.file_position(con, self.name)
        fresh = pos.token != token or st.st_size < pos.position and not pos.extra.get("skip_to")
        if fresh and pos.token is not None:
            pos = Position(0, None, {})   # replaced or rewritten: read it again from the start
        unchanged = (not fresh and st.st_size == pos.extra.get("size")
                     and st.st_mtime_ns == pos.extra.get("mtime_ns"))
        if unchanged:
            res = self._refresh_state(pos, st.st_mtime, now)
        else:
            self._docs = None   # re-read the run's config/summary from the store on each new read
            res = self._read(pos, token, st, now, progress)
        self._seen = (seen, pos)
        return res

    # .. unchanged file: only the liveness clock moves
    def _refresh_state(self, pos: Position, mtime: float, now: float) -> FileResult:
        res = _result(pos.extra)
        uid = pos.extra.get("run_uid")
        if uid is None:
            return res
        new = state_for(pos.extra.get("exit_code"), mtime, now)
        if new != pos.extra.get("state"):
            with self.store.transaction() as con:
                runs.set_liveness(con, uid, new)
                pos.extra["state"] = new
                state.save_file_position(con, self.name, pos)
            res.changed = True
        return res

    # .. new bytes
    def _read(self, pos: Position, token: str, st: os.stat_result, now: float,
              progress: Progress | None) -> FileResult:
        extra = pos.extra
        start = pos.position or 0
        with open(self.path, "rb") as fh:
            if start == 0:
                head = fh.read(wf.HEADER_SIZE)
                if not wf.has_header(head):
                    if st.st_size == 0 or (len(head) < wf.HEADER_SIZE and wf.HEADER.startswith(head)):
                        return FileResult(None, waiting=now - st.st_mtime < STALE_AFTER)
                    return FileResult(None, problem="not a W&B transaction log (no :W&B header at byte 0)")
                start = wf.HEADER_SIZE
            skip_to = extra.pop("skip_to", None)
            if skip_to is not None and skip_to > start:
                if st.st_size <= skip_to:
                    extra["skip_to"] = skip_to
                    self._finish(pos, token, st, now)
                    return _result(extra)
                start = skip_to
            live = extra.get("exit_code") is None and now - st.st_mtime < STALE_AFTER
            added, end, partial_at = self._scan_file(fh, pos, start, st, now, progress, live)
            if partial_at is not None and live and extra.get("exit_code") is not None:
                # the run's exit record arrived: a bad tail is corruption, not a write in flight
                more, end, partial_at = self._scan_file(fh, pos, end, st, now, progress, False)
                added += more
                live = False
        _release_decoded()
        waiting = extra.get("run_uid") is None and live
        if partial_at is not None and not live:
            self.warn("partial", f"incomplete record at byte {partial_at} (file truncated?);"
                                 " kept every complete record before it")
        self._finish(pos, token, st, now)
        res = _result(extra)
        res.rows_added, res.changed, res.waiting = added, True, waiting
        return res

    def _scan_file(self, fh, pos: Position, start: int, st, now: float, progress, live: bool):
        """Apply the file window by window up to the size stat() saw; (rows added, end, partial_at or None)."""
        extra = pos.extra
        added, sc = 0, None
        for sc in files.windows(fh, start, st.st_size, live=live):
            if sc.corrupt_at is not None:
                self.warn("corrupt", f"{sc.corrupt_reason} at byte {sc.corrupt_at}; skipped to the next"
                                     " 32 KiB block and kept every valid record")
            added += self._apply(pos, sc, st, now)
            if progress and extra.get("run_id"):
                progress(extra["run_id"], sc.end - start, st.st_size - start)
        if sc.skip_to is not None:
            extra["skip_to"] = sc.skip_to
            return added, sc.end, None
        return added, sc.end, sc.partial_at if sc.partial else None

    def _finish(self, pos: Position, token: str, st: os.stat_result, now: float) -> None:
        extra = pos.extra
        extra["size"], extra["mtime_ns"] = st.st_size, st.st_mtime_ns
        pos.token = token
        uid = extra.get("run_uid")
        with self.store.transaction() as con:
            if uid is not None:
                extra["state"] = state_for(extra.get("exit_code"), st.st_mtime, now)
                runs.set_liveness(con, uid, extra["state"], datetime.fromtimestamp(st.st_mtime, timezone.utc))
            state.save_file_position(con, self.name, pos)

    def _apply(self, pos: Position, sc: wf.Scan, st: os.stat_result, now: float) -> int:
        """Decode one window and write it with the new position in ONE transaction.

        The run's config and summary continue from what the store holds for it (another file
        of a resumed run included: W&B merges them). A file whose `_step` restarts at or below
        what the run's other files stored becomes a segment of its own (`resumed_segment`).
        """
        extra = pos.extra
        base = extra.get("base_uid") or extra.get("run_uid") or records.run_uid(sc.records, self.path)
        if self._docs is not None and self._docs[0] == base:
            config, summary = self._docs[1], self._docs[2]
        else:
            docs = None
            if base:
                with self.store.connect() as con:
                    docs = runs.documents(con, base)
            config, summary = docs if docs else ({}, {})
        win = records.decode_window(sc.records, extra.get("meta", {}), config, summary)
        if win.exit_code is not None:
            extra["exit_code"] = win.exit_code
        if win.meta:
            extra["meta"] = win.meta
        if not win.meta.get("run_id"):
            return 0   # no run record yet: nothing can be attributed; the position stays put
        run_info = records.run_info(win.meta, win.config, win.summary, self.path,
                                    state_for(extra.get("exit_code"), st.st_mtime, now), st.st_mtime)
        run_info.environment = win.environment
        self._docs = (run_info.uid, win.config, win.summary)   # what the runs row holds after this commit
        cols, added = win.history, 0
        with self.store.transaction() as con:
            if cols is not None and cols.row_steps and not extra.get("steps_checked"):
                extra["steps_checked"] = True
                self._resumed_segment(con, extra, run_info, cols)
            own = run_info
            if extra.get("base_uid"):
                own = replace(run_info, run_id=extra["run_id"], name=f"{run_info.name}{extra['run_id'][len(run_info.run_id):]}")
                runs.set_documents(con, run_info.uid, run_info.config, run_info.summary)
            extra["run_id"], extra["run_uid"] = own.run_id, own.uid
            lines = []
            if win.console:
                lines, extra["pending"], extra["lines"] = records.console_events(
                    own.uid, win.console, extra.get("pending"), extra.get("lines", 0), extra.get("last_step"))
            run_pk = runs.upsert_run(con, own)
            if cols is not None and cols.num_rows:
                added = _write_history(con, run_pk, cols)
                lo, hi = int(cols.steps.min()), int(cols.steps.max())
                first, last = extra.get("first_step"), extra.get("last_step")
                extra["first_step"] = lo if first is None else min(first, lo)
                extra["last_step"] = hi if last is None else max(last, hi)
                runs.raise_last_step(con, run_pk, hi)
            if lines:
                events.write_console(con, own.uid, lines)
            if win.system:
                system.add_samples(con, run_pk, win.system)
            pos.position = sc.end
            state.save_file_position(con, self.name, pos)
        return added

    def _resumed_segment(self, con, extra: dict, run: RunInfo, cols: wf.HistoryColumns) -> None:
        """Decide, at this file's first history row, whether it continues `run` or restarts its steps.

        A resumed offline run that logs without explicit steps starts `_step` at 0 again; W&B
        would silently replace (or drop) the rows it already has at those steps. We keep both:
        this file's rows go to the run `RUN~N` (its config and summary stay the run's), the
        user is warned, and an `infrastructure` event marks where the segment starts. A copy of
        a file already read (the same `_timestamp` at its first step) is the same rows, merged.
        """
        first = min(cols.row_steps)
        before = state.last_step_in_other_files(con, run.uid, self.name)
        if before is None or first > before or not self._rows_differ(con, run.uid, cols, first):
            return
        seg = runs.segment_id(con, run, str(self.path))
        extra["base_uid"], extra["run_id"] = run.uid, seg
        message = (f"run {run.run_id} was resumed with _step restarting at {first} (its other files already"
                   f" stored steps up to {before}); this file's rows are kept as run {seg}")
        self.warn("resumed", message)
        started = run.created_at or datetime.fromtimestamp(os.stat(self.path).st_mtime, timezone.utc)
        events.put_run_note(con, Event(f"resume:{run.uid}:{seg}", "local", "infrastructure", time=started,
                                 title=f"resumed: {run.run_id} restarted _step at {first}; rows kept as {seg}",
                                 body=message, run_uid=f"{run.source}:{seg}", step=first,
                                 fields={"run": run.run_id, "segment": seg, "restarted_at": first,
                                         "stored_up_to": before, "file": str(self.path)}))


    @staticmethod
    def _rows_differ(con, uid: str, cols: wf.HistoryColumns, first: int) -> bool:
        """Does the run hold another row at this file's first step (another `_timestamp`)? A copy
        of a file already read has the same one; a file without timestamps cannot be told apart."""
        import numpy as np

        at = np.flatnonzero((cols.steps == first) & (cols.keys.to_numpy(zero_copy_only=False) == "_timestamp"))
        run_pk = runs.pk_of(con, uid)
        if not len(at) or run_pk is None:
            return False
        stored = metrics.series(con, [(run_pk, first, first + 1)], "_timestamp")[1]
        return len(stored) == 1 and abs(float(stored[0]) - float(cols.values[at[-1]])) > 1e-6


def _write_history(con, run_pk: int, cols: wf.HistoryColumns) -> int:
    """Long rows of one window; steps already stored (a step logged again, a re-read) are merged."""
    import numpy as np
    import pyarrow as pa

    batch = pa.table({"step": pa.array(cols.steps, pa.int64()), "key": cols.keys,
                      "value": pa.array(cols.values, pa.float64())})
    return metrics.merge_range(con, run_pk, batch, int(cols.steps.min()), int(cols.steps.max()) + 1,
                               existing_last_step=runs.last_step(con, run_pk),
                               repeated_steps=len(np.unique(cols.row_steps)) != len(cols.row_steps))


def _release_decoded() -> None:
    """Hand the decoded windows' Arrow buffers back to the OS (mimalloc keeps freed pages for
    reuse), so a `watch` that read a run's file settles lighter."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _result(extra: dict) -> FileResult:
    return FileResult(extra.get("run_id"), extra.get("run_uid"), first_step=extra.get("first_step"), last_step=extra.get("last_step"),
                      readable=extra.get("run_uid") is not None)


# --- targets --------------------------------------------------------------------------------


def sync_path(store: Store, path, *, progress: Progress | None = None, warn: Warn | None = None) -> list[dict]:
    """One pass over a local target; returns the contract's per-run sync dicts."""
    return [r.as_json() for r in sync_files(store, path, progress=progress, warn=warn) if r.run is not None]


def sync_files(store: Store, path, *, progress: Progress | None = None, warn: Warn | None = None) -> list[FileResult]:
    """One pass over every `.wandb` file of a local target.

    Raises UserError when the path is missing, holds no .wandb files, or nothing in it is
    readable (not a W&B log, empty, or corrupt from the first byte).
    """
    found = files.run_files(path)
    results, readable, waiting, problems = [], False, False, []
    for f in found:
        fs = FileSync(store, f, warn)
        res = fs.sync(progress=progress)
        readable |= res.readable
        waiting |= res.waiting
        if res.problem:
            problems.append((fs, res.problem))
        results.append(res)
    if readable or len(found) > 1:
        for fs, problem in problems:
            fs.warn("problem", problem)
    if not readable:
        what = found[0] if len(found) == 1 else path
        if len(found) == 1 and problems:
            raise UserError(f"{what} is {problems[0][1]}",
                            "pass a run-*.wandb file written by wandb >= 0.18, its run dir or a wandb/ dir")
        if waiting:
            raise UserError(f"nothing readable in {what} yet: the run has not flushed a complete record",
                            "wandb flushes its log every 15 s; follow it with `marinctl sync --follow` or"
                            " `marinctl watch`")
        raise UserError(f"nothing readable in {what}: no valid W&B records",
                        "check the path: a run-*.wandb file written by wandb >= 0.18")
    return results


def follow(store: Store, path, *, interval: float = 1.0, stop: threading.Event,
           on_update: Callable[[list[dict]], None] | None = None,
           progress: Progress | None = None, warn: Warn | None = None) -> None:
    """Tail a local target until `stop` is set: new bytes, new runs, liveness changes.

    Calls `on_update(results)` after each poll that changed something in the store.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"no such file or directory: {path}", "pass a .wandb file, a run dir or a wandb/ dir")
    syncs: dict[str, FileSync] = {}
    while not stop.is_set():
        changed = []
        for f in files.find_run_files(path):
            fs = syncs.get(str(f))
            if fs is None:
                fs = syncs[str(f)] = FileSync(store, f, warn)
            try:
                res = fs.sync(progress=progress)
            except Exception as exc:  # noqa: BLE001 — a busy store or a vanished file: retry next poll
                fs.warn("retry", f"sync failed, retrying every {interval:g}s ({type(exc).__name__}: {exc})")
                continue
            if res.problem:
                fs.warn("problem", res.problem)
            if res.changed and res.run is not None:
                changed.append(res.as_json())
        if changed and on_update is not None:
            on_update(changed)
        stop.wait(interval)
