"""Mirror local and offline W&B runs (`.wandb` transaction logs) into the store, live.

Targets: a `.wandb` file, a run directory, a `wandb/` directory, or a project folder that
holds `wandb/`. Runs keep their W&B ids, config, summary and state; history rows become
metrics; console output (output_raw fragments reassembled into lines) becomes `console`
events.

Resumability: per file, `sync_state` scope 'wandb_file' keeps `position` = the offset just
past the last complete record, `token` = the file's identity (device:inode), and in
`extra` the size/mtime last seen plus whatever must survive between reads (pending console
fragments, line counter, exit code). Every window of records is written in ONE transaction
together with the new position, so a sync killed at any moment resumes without
duplicates, and an unchanged file costs one stat and one small query.

State, as W&B's LEET does it: an exit record decides finished/failed; without one, a file
not written for STALE_AFTER is 'stale' and for CRASH_AFTER (LEET's RunCrashTimeout,
10 min) 'crashed'.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from marinctl.errors import UserError
from marinctl.cli.output import info
from marinctl.sources import wandb_file as wf
from marinctl.sources import wandb_local_rows as rows
from marinctl.store import Store

SCOPE = "wandb_file"
STALE_AFTER = 120.0
CRASH_AFTER = 600.0
WINDOW_BYTES = 32 << 20
Progress = Callable[[str, int, int], None]


def is_local_target(target: str) -> bool:
    """True when TARGET names a local .wandb file, run dir or wandb/ dir (not a W&B path)."""
    text = target.strip()
    if not text or text.startswith(("http://", "https://", "github:")) or text == "marin":
        return False
    path = Path(text).expanduser()
    if path.exists():
        return True
    return text.endswith(".wandb") or text.startswith((".", "/", "~"))


def find_run_files(path: Path) -> list[Path]:
    """The .wandb files under a target, oldest first; `latest-run` links are not doubled."""
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    found = list(path.glob("*.wandb"))
    if not found:
        found = list(path.glob("*/*.wandb"))
    if not found:
        for sub in ("wandb", ".wandb"):
            if (path / sub).is_dir():
                found = list((path / sub).glob("*/*.wandb"))
                if found:
                    break
    seen, out = set(), []
    for f in found:
        try:
            key = f.resolve()
            mtime = f.stat().st_mtime
        except OSError:
            continue
        if key in seen:
            continue
        seen.add(key)
        out.append((mtime, f))
    return [f for _, f in sorted(out)]


# --- per-file state -------------------------------------------------------------------------


@dataclass
class FileState:
    position: int = 0
    token: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def run_uid(self) -> str | None:
        return self.extra.get("run_uid")


def _load_state(con, name: str) -> FileState:
    row = con.execute("SELECT position, token, extra FROM sync_state WHERE scope = ? AND name = ?",
                      [SCOPE, name]).fetchone()
    if row is None:
        return FileState()
    extra = row[2]
    if isinstance(extra, str):
        extra = json.loads(extra)
    return FileState(row[0] or 0, row[1], extra or {})


def _save_state(con, name: str, st: FileState) -> None:
    con.execute(
        "INSERT INTO sync_state (scope, name, position, token, extra, updated_at)"
        " VALUES (?, ?, ?, ?, ?, current_timestamp) ON CONFLICT (scope, name) DO UPDATE SET"
        " position = excluded.position, token = excluded.token, extra = excluded.extra,"
        " updated_at = excluded.updated_at",
        [SCOPE, name, st.position, st.token, json.dumps(st.extra)],
    )


def state_for(exit_code: int | None, mtime: float, now: float) -> str:
    if exit_code is not None:
        return "finished" if exit_code == 0 else "failed"
    age = now - mtime
    if age >= CRASH_AFTER:
        return "crashed"
    if age >= STALE_AFTER:
        return "stale"
    return "running"


# --- one file -------------------------------------------------------------------------------


@dataclass
class FileResult:
    run: str | None
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

    def __init__(self, store: Store, path: Path):
        self.store = store
        self.path = Path(path)
        self.name = str(self.path.resolve())
        self.warned: set[str] = set()
        self._docs: tuple | None = None   # (run uid, config, summary) as last written, within one read
        self._seen: tuple | None = None   # ((token, size, mtime_ns), FileState) after the last sync

    def warn(self, what: str, message: str) -> None:
        if what in self.warned:
            return
        self.warned.add(what)
        from marinctl.text import inert

        info(f"warning: {inert(str(self.path), single_line=True)}: {message}")

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
                return FileResult(extra.get("run_id"), first_step=extra.get("first_step"),
                                  last_step=extra.get("last_step"), readable=extra.get("run_uid") is not None)
        with self.store.connect() as con:
            state = _load_state(con, self.name)
        fresh = state.token != token or st.st_size < state.position and not state.extra.get("skip_to")
        if fresh and state.token is not None:
            state = FileState()   # replaced or rewritten: read it again from the start
        unchanged = (not fresh and st.st_size == state.extra.get("size")
                     and st.st_mtime_ns == state.extra.get("mtime_ns"))
        if unchanged:
            res = self._refresh_state(state, st.st_mtime, now)
        else:
            self._docs = None   # re-read the run's config/summary from the store on each new read
            res = self._read(state, token, st, now, progress)
        self._seen = (seen, state)
        return res

    # .. unchanged file: only the liveness clock moves
    def _refresh_state(self, state: FileState, mtime: float, now: float) -> FileResult:
        uid = state.run_uid
        res = FileResult(state.extra.get("run_id"), first_step=state.extra.get("first_step"),
                         last_step=state.extra.get("last_step"), readable=uid is not None)
        if uid is None:
            return res
        new = state_for(state.extra.get("exit_code"), mtime, now)
        if new != state.extra.get("state"):
            with self.store.transaction() as con:
                con.execute("UPDATE runs SET state = ? WHERE uid = ?", [new, uid])
                state.extra["state"] = new
                _save_state(con, self.name, state)
            res.changed = True
        return res

    # .. new bytes
    def _read(self, state: FileState, token: str, st: os.stat_result, now: float,
              progress: Progress | None) -> FileResult:
        extra = state.extra
        start = state.position or 0
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
                    self._finish(state, token, st, now)
                    return FileResult(extra.get("run_id"), first_step=extra.get("first_step"),
                                      last_step=extra.get("last_step"), readable=extra.get("run_uid") is not None)
                start = skip_to
            age = now - st.st_mtime
            live = extra.get("exit_code") is None and age < STALE_AFTER
            added, end, partial_at = self._scan_file(fh, state, start, st, now, progress, live)
            if partial_at is not None and live and extra.get("exit_code") is not None:
                # the run's exit record arrived: a bad tail is corruption, not a write in flight
                more, end, partial_at = self._scan_file(fh, state, end, st, now, progress, False)
                added += more
                live = False
        waiting = extra.get("run_uid") is None and live
        if partial_at is not None and not live:
            self.warn("partial", f"incomplete record at byte {partial_at} (file truncated?);"
                                 " kept every complete record before it")
        self._finish(state, token, st, now)
        return FileResult(extra.get("run_id"), rows_added=added, first_step=extra.get("first_step"),
                          last_step=extra.get("last_step"), changed=True,
                          readable=extra.get("run_uid") is not None, waiting=waiting)

    def _scan_file(self, fh, state, pos, st, now, progress, live):
        """Read, scan and apply the file window by window (bounded memory) up to the size
        stat() saw; returns (rows added, end offset, partial_at or None)."""
        extra = state.extra
        size, first, added = st.st_size, pos, 0
        while True:
            fh.seek(pos)
            buf = fh.read(max(0, min(WINDOW_BYTES, size - pos)))
            at_eof = pos + len(buf) >= size
            sc = wf.scan(buf, pos, live_tail=live and at_eof)
            if sc.corrupt_at is not None:
                self.warn("corrupt", f"{sc.corrupt_reason} at byte {sc.corrupt_at}; skipped to the next"
                                     " 32 KiB block and kept every valid record")
            added += self._apply(state, sc, st, now)
            if progress and extra.get("run_id"):
                progress(extra["run_id"], sc.end - first, size - first)
            if sc.skip_to is not None:
                if sc.skip_to < size:
                    pos = sc.skip_to          # corruption in a middle window: carry on past it
                    continue
                extra["skip_to"] = sc.skip_to
                return added, sc.end, None
            if at_eof or sc.end <= pos:
                return added, sc.end, sc.partial_at if sc.partial else None
            pos = sc.end                      # the window cut a record: the next read resumes there

    def _finish(self, state: FileState, token: str, st: os.stat_result, now: float) -> None:
        extra = state.extra
        extra["size"], extra["mtime_ns"] = st.st_size, st.st_mtime_ns
        state.token = token
        uid = extra.get("run_uid")
        with self.store.transaction() as con:
            if uid is not None:
                new = state_for(extra.get("exit_code"), st.st_mtime, now)
                hb = datetime.fromtimestamp(st.st_mtime, timezone.utc)
                con.execute("UPDATE runs SET state = ?, heartbeat_at = ? WHERE uid = ?", [new, hb, uid])
                extra["state"] = new
            _save_state(con, self.name, state)

    def _apply(self, state: FileState, sc: wf.Scan, st: os.stat_result, now: float) -> int:
        """Decode one window and write it with the new position in ONE transaction."""
        from marinctl.store import metrics as M
        from marinctl.store.runs import upsert_run

        extra = state.extra
        hist, runs, configs, summaries, outputs, exits = [], [], [], [], [], []
        recs = sc.records
        for i, (_end, rt, payload) in enumerate(recs):
            if rt == wf.HISTORY:
                hist.append(payload)
            elif rt == wf.SUMMARY:
                # The two summary records wandb-core writes with every log() just repeat that
                # step's history values, which we take from history itself; parse the rest.
                if _precedes_history(recs, i):
                    continue
                summaries.append((i, payload))
            elif rt == wf.RUN:
                runs.append((i, payload))
            elif rt == wf.CONFIG:
                configs.append((i, payload))
            elif rt == wf.OUTPUT_RAW:
                outputs.append((i, payload))
            elif rt == wf.EXIT:
                exits.append(payload)

        cols = wf.decode_history(hist) if hist else None
        meta = extra.get("meta", {})
        uid = extra.get("run_uid")
        if self._docs is not None and self._docs[0] == uid:
            config, summary = self._docs[1], self._docs[2]
        else:
            row = None
            if uid:
                with self.store.connect() as con:
                    row = con.execute("SELECT config, summary FROM runs WHERE uid = ?", [uid]).fetchall()
                    row = row[0] if row else None
            config = rows.json_dict(row[0]) if row else {}
            summary = rows.json_dict(row[1]) if row else {}

        for _, payload in runs:
            r = wf.parse_record(payload).run
            meta = rows.run_meta(r)
            cfg: dict = {}
            wf.apply_items(cfg, wf.decode_items(r.config.update))
            config = cfg | {k: v for k, v in config.items() if k not in cfg}
            wf.apply_items(summary, wf.decode_items(r.summary.update))
        for _, payload in configs:
            c = wf.parse_record(payload).config
            wf.apply_items(config, wf.decode_items(c.update), [rows.item_path(it) for it in c.remove])
        # Summary = updates in file order, with history's latest values standing in for the
        # per-log summary records we skipped (applied at the position of the last history).
        last_hist = max((i for i, (_e, rt, _p) in enumerate(recs) if rt == wf.HISTORY), default=-1)
        for when in ("before", "after"):
            if when == "after" and cols is not None:
                summary.update(cols.last_values)
                summary["_step"] = max(cols.row_steps)
            for i, payload in summaries:
                if (i < last_hist) == (when == "before"):
                    s = wf.parse_record(payload).summary
                    wf.apply_items(summary, wf.decode_items(s.update), [rows.item_path(it) for it in s.remove])
        for payload in exits:
            extra["exit_code"] = wf.parse_record(payload).exit.exit_code
        if meta:
            extra["meta"] = meta
        if not meta.get("run_id"):
            return 0   # no run record yet: nothing can be attributed; the position stays put
        run_info = rows.run_info(meta, config, summary, self.path,
                                 state_for(extra.get("exit_code"), st.st_mtime, now), st.st_mtime)
        extra["run_id"], extra["run_uid"] = run_info.run_id, run_info.uid
        self._docs = (run_info.uid, config, summary)   # what the runs row holds after this commit

        # console lines, stamped with the last history step seen before them
        events = []
        if outputs:
            console = rows.Console(extra.get("pending"))
            n = extra.get("lines", 0)
            hist_idx = [i for i, (_e, rt, _p) in enumerate(recs) if rt == wf.HISTORY]
            row_steps = cols.row_steps if cols is not None else []
            for i, payload in outputs:
                o = wf.parse_record(payload).output_raw
                stream = "stderr" if o.output_type == 0 else "stdout"
                k = bisect.bisect_left(hist_idx, i)
                step = row_steps[k - 1] if k > 0 else extra.get("last_step")
                t = o.timestamp.seconds + o.timestamp.nanos / 1e9 if o.timestamp.seconds else None
                for line in console.feed(stream, o.line):
                    events.append((f"output:{run_info.uid}:{n}", t, line, step, stream))
                    n += 1
            extra["pending"], extra["lines"] = console.pending, n

        added = 0
        with self.store.transaction() as con:
            run_pk = upsert_run(con, run_info)
            if cols is not None and cols.num_rows:
                added = rows.write_history(con, M, run_pk, cols)
                lo, hi = int(cols.steps.min()), int(cols.steps.max())
                first = extra.get("first_step")
                extra["first_step"] = lo if first is None else min(first, lo)
                last = extra.get("last_step")
                extra["last_step"] = hi if last is None else max(last, hi)
                con.execute("UPDATE runs SET last_step = greatest(coalesce(last_step, -1), ?) WHERE run_pk = ?",
                            [hi, run_pk])
            if events:
                rows.write_events(con, run_info.uid, events)
            state.position = sc.end
            _save_state(con, self.name, state)
        return added


def _precedes_history(recs, i: int) -> bool:
    """Is record i one of the (at most two) summary records right before a history record?"""
    for j in (i + 1, i + 2):
        if j >= len(recs):
            return False
        rt = recs[j][1]
        if rt == wf.HISTORY:
            return True
        if rt != wf.SUMMARY:
            return False
    return False


# --- targets --------------------------------------------------------------------------------


def _files_or_error(path: Path) -> list[Path]:
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"no such file or directory: {path}", "pass a .wandb file, a run dir or a wandb/ dir")
    files = find_run_files(path)
    if not files:
        raise UserError(f"no .wandb files in {path}",
                        "pass a wandb/ dir, an offline-run-*/ run dir or a run-*.wandb file")
    return files


def sync_path(store: Store, path, *, progress: Progress | None = None) -> list[dict]:
    """One pass over a local target; returns the contract's per-run sync dicts.

    Raises UserError when the path is missing, holds no .wandb files, or nothing in it is
    readable (not a W&B log, empty, or corrupt from the first byte).
    """
    files = _files_or_error(path)
    results, readable, waiting, problems = [], False, False, []
    for f in files:
        fs = FileSync(store, f)
        res = fs.sync(progress=progress)
        readable |= res.readable
        waiting |= res.waiting
        if res.problem:
            problems.append((fs, res.problem))
        if res.run is not None:
            results.append(res.as_json())
    if readable or len(files) > 1:
        for fs, problem in problems:
            fs.warn("problem", problem)
    if not readable:
        what = files[0] if len(files) == 1 else path
        if len(files) == 1 and problems:
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
           progress: Progress | None = None) -> None:
    """Tail a local target until `stop` is set: new bytes, new runs, liveness changes.

    Calls `on_update(results)` after each poll that changed something in the store.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"no such file or directory: {path}", "pass a .wandb file, a run dir or a wandb/ dir")
    syncs: dict[str, FileSync] = {}
    while not stop.is_set():
        changed = []
        for f in find_run_files(path):
            fs = syncs.get(str(f))
            if fs is None:
                fs = syncs[str(f)] = FileSync(store, f)
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
