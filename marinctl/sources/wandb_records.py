"""What a window of decoded `.wandb` records says: run metadata, config, summary, history, console, system stats.

`decode_window` is pure: it takes the records one read produced and what the run's
documents held before, and returns what they hold after, the history columns, the
console fragments (each stamped with the history step logged before it) and the system
samples of its stats records. Turning those into stored rows is the sync pipeline's job
(sync/local.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from marinctl.domain import Event, RunInfo
from marinctl.sources import wandb_file as wf
from marinctl.sources import wandb_summary


class Console:
    """output_raw fragments to lines: '\\n' ends a line, a bare '\\r' rewrites it (progress bars)."""

    def __init__(self, pending: dict[str, str] | None = None):
        self.pending = dict(pending or {})

    def feed(self, stream: str, text: str) -> list[str]:
        buf = self.pending.get(stream, "") + text
        lines = []
        while True:
            i = buf.find("\n")
            if i < 0:
                break
            line = buf[:i]
            buf = buf[i + 1:]
            if line.endswith("\r"):
                line = line[:-1]
            lines.append(line.rsplit("\r", 1)[-1])
        if "\r" in buf:
            head, _, tail = buf.rpartition("\r")
            buf = tail if tail else head.rsplit("\r", 1)[-1] + "\r"
        self.pending[stream] = buf
        return lines


# W&B's server names the stats a run records `system.<key>` (`cpu` in the file is `system.cpu`
# in `events` and on the web): local samples take the same spelling, so one key means one thing.
SYSTEM_PREFIX = "system."


def item_path(item) -> list[str]:
    return [item.key] if item.key else list(item.nested_key)


def run_meta(r) -> dict:
    meta = {
        "run_id": r.run_id, "entity": r.entity or None, "project": r.project or None,
        "name": r.display_name or None, "group": r.run_group or None, "job_type": r.job_type or None,
        "tags": list(r.tags), "notes": r.notes or None, "host": r.host or None,
    }
    if r.HasField("start_time") and r.start_time.seconds:
        meta["start_time"] = r.start_time.seconds + r.start_time.nanos / 1e9
    if r.HasField("branch_point") and r.branch_point.run:
        meta["fork_parent"] = r.branch_point.run
        meta["fork_step"] = int(r.branch_point.value)
    return meta


def run_info(meta: dict, config: dict, summary: dict, path: Path, state: str, mtime: float) -> RunInfo:
    """The RunInfo of a local run; `repro` when marinctl's own trainer wrote it."""
    from marinctl.sources.forks import find_fork

    user_config = {k: v for k, v in config.items() if not k.startswith("_wandb")}
    if meta.get("fork_parent") is None:
        fork = find_fork(user_config)   # Marin's tracker config: fork_from = "parent?_step=N"
        if fork:
            meta = {**meta, "fork_parent": fork[0], "fork_step": fork[1]}
    marker = user_config.get("marinctl")
    source = "repro" if isinstance(marker, dict) and marker.get("repro_of") else "local"
    created = meta.get("start_time")
    return RunInfo(
        source=source, run_id=meta["run_id"], entity=meta.get("entity"), project=meta.get("project"),
        name=meta.get("name") or meta["run_id"], group=meta.get("group"), job_type=meta.get("job_type"),
        tags=meta.get("tags") or [], state=state,
        created_at=datetime.fromtimestamp(created, timezone.utc) if created else None,
        heartbeat_at=datetime.fromtimestamp(mtime, timezone.utc),
        config=user_config, summary={k: v for k, v in summary.items() if k != "_wandb"},
        fork_parent=meta.get("fork_parent"), fork_step=meta.get("fork_step"), path=str(path),
    )


def run_uid(records: list, path: Path) -> str | None:
    """The uid of the run whose run record is among `records` (None when there is none).

    Read before decoding a file's first window, so a resumed run's second file starts from
    the config and summary its first file left (W&B merges them on resume)."""
    for _end, rt, payload in records:
        if rt == wf.RUN:
            r = wf.parse_record(payload).run
            cfg: dict = {}
            wf.apply_items(cfg, wf.decode_items(r.config.update))
            return run_info(run_meta(r), cfg, {}, path, "running", 0.0).uid
    return None


@dataclass
class Window:
    """What one window of records decoded to."""

    meta: dict[str, Any]
    config: dict[str, Any]
    summary: dict[str, Any]
    history: wf.HistoryColumns | None = None
    exit_code: int | None = None                      # set when the window holds the exit record
    console: list[tuple[str, str, int | None, float | None]] = field(default_factory=list)
    # (stream, text fragment, history step logged before it or None, unix time or None)
    system: list[tuple[float, str, float]] = field(default_factory=list)   # (unix time, `system.` key, value)
    environment: dict[str, Any] | None = None         # the environment records' fields, when the window has any


def decode_window(records: list, meta: dict, config: dict, summary: dict) -> Window:
    """Decode (end, type, payload) records; `config`/`summary` are updated in place and returned."""
    stats = [payload for _end, rt, payload in records if rt == wf.STATS]
    if stats:   # the rest below reads records by position (a summary right before its history)
        records = [r for r in records if r[1] != wf.STATS]
    hist, runs, configs, outputs, exits, envs = [], [], [], [], [], []
    for i, (_end, rt, payload) in enumerate(records):
        if rt == wf.HISTORY:
            hist.append(payload)
        elif rt == wf.RUN:
            runs.append(payload)
        elif rt == wf.CONFIG:
            configs.append(payload)
        elif rt == wf.OUTPUT_RAW:
            outputs.append((i, payload))
        elif rt == wf.EXIT:
            exits.append(payload)
        elif rt == wf.ENVIRONMENT:
            envs.append(payload)

    cols = wf.decode_history(hist) if hist else None
    for payload in runs:
        r = wf.parse_record(payload).run
        meta = run_meta(r)
        cfg: dict = {}
        wf.apply_items(cfg, wf.decode_items(r.config.update))
        config = cfg | {k: v for k, v in config.items() if k not in cfg}
        wf.apply_items(summary, wf.decode_items(r.summary.update))
    for payload in configs:
        c = wf.parse_record(payload).config
        wf.apply_items(config, wf.decode_items(c.update), [item_path(it) for it in c.remove])
    wandb_summary.apply(summary, records)   # W&B's summary: every summary record in file order
    out = Window(meta, config, summary, cols, system=decode_stats(stats))
    for payload in exits:
        out.exit_code = wf.parse_record(payload).exit.exit_code
    if envs:
        out.environment = decode_environment(envs)
    if outputs:
        hist_idx = [i for i, (_e, rt, _p) in enumerate(records) if rt == wf.HISTORY]
        row_steps = cols.row_steps if cols is not None else []
        for i, payload in outputs:
            o = wf.parse_record(payload).output_raw
            k = bisect.bisect_left(hist_idx, i)
            t = o.timestamp.seconds + o.timestamp.nanos / 1e9 if o.timestamp.seconds else None
            out.console.append(("stderr" if o.output_type == 0 else "stdout", o.line,
                                row_steps[k - 1] if k > 0 else None, t))
    return out


def decode_environment(payloads: list) -> dict[str, Any]:
    """Environment records (what replaced wandb-metadata.json: os, python, host, program, CPU, GPU,
    memory, disk, git …) merged in file order, fields as W&B's own reader (`wandb leet`) names them.
    The writer's id is W&B's bookkeeping and the user's e-mail address is not the run's: both dropped."""
    from google.protobuf.json_format import MessageToDict

    env: dict[str, Any] = {}
    for payload in payloads:
        env.update(MessageToDict(wf.parse_record(payload).environment, preserving_proto_field_name=True))
    return {k: v for k, v in env.items() if k not in ("writer_id", "email")}


def decode_stats(payloads: list) -> list[tuple[float, str, float]]:
    """Stats records (what W&B's system monitor sampled) as (unix time, `system.` key, value); non-numbers dropped."""
    from marinctl.sources.wandb_rows import as_float

    out = []
    for payload in payloads:
        s = wf.parse_record(payload).stats
        if s.stats_type != 0 or not s.timestamp.seconds:   # SYSTEM is the only type; a sample needs its time
            continue
        t = s.timestamp.seconds + s.timestamp.nanos / 1e9
        for item in s.item:
            value = as_float(wf.json_value(item.value_json))
            if value is not None:
                out.append((t, SYSTEM_PREFIX + item.key, value))
    return out


def console_events(uid: str, fragments, pending: dict[str, str] | None, count: int,
                   step_before: int | None) -> tuple[list[Event], dict[str, str], int]:
    """Console fragments to numbered line events (`output:<uid>:<n>`); returns (events, pending text, count).

    A fragment logged before any history of its window takes `step_before` (the run's last step).
    """
    from marinctl.text import inert

    console = Console(pending)
    events = []
    for stream, text, step, t in fragments:
        for line in console.feed(stream, text):
            events.append(Event(f"output:{uid}:{count}", "local", "console",
                                time=datetime.fromtimestamp(t, timezone.utc) if t else None,
                                title=inert(line, single_line=True)[:200], body=line,
                                fields={"stream": stream}, run_uid=uid,
                                step=step if step is not None else step_before))
            count += 1
    return events, console.pending, count
