"""From decoded `.wandb` records to store rows: run metadata, history batches, console lines.

Split from wandb_local (which owns files, offsets and liveness) so that module stays about
*when* to read and this one about *what* a record becomes in the store.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from marinctl.sources import wandb_file as wf


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


def item_path(item) -> list[str]:
    return [item.key] if item.key else list(item.nested_key)


def json_dict(v) -> dict:
    if v is None:
        return {}
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    return v if isinstance(v, dict) else {}


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


def run_info(meta: dict, config: dict, summary: dict, path: Path, state: str, mtime: float):
    from marinctl.domain import RunInfo

    user_config = {k: v for k, v in config.items() if not k.startswith("_wandb")}
    if meta.get("fork_parent") is None:
        from marinctl.sources.wandb import find_fork

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


def write_history(con, M, run_pk: int, cols: wf.HistoryColumns) -> int:
    """Write long rows; steps already stored (a step logged again, or a re-read) are merged."""
    import numpy as np
    import pyarrow as pa

    lo, hi = int(cols.steps.min()), int(cols.steps.max()) + 1
    batch = pa.table({"step": pa.array(cols.steps, pa.int64()), "key": cols.keys,
                      "value": pa.array(cols.values, pa.float64())})
    last = con.execute("SELECT last_step FROM runs WHERE run_pk = ?", [run_pk]).fetchall()[0][0]
    if last is not None and lo <= last:
        # keep stored rows of these steps that the new records do not override
        con.register("_new", batch)
        try:
            old = con.sql(
                "SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
                " WHERE m.run_pk = $1 AND m.step >= $2 AND m.step < $3"
                " AND NOT EXISTS (SELECT 1 FROM _new n WHERE n.step = m.step AND n.key = k.key)",
                params=[run_pk, lo, hi]).to_arrow_table()
        finally:
            con.unregister("_new")
        if old.num_rows:
            batch = pa.concat_tables([old.cast(batch.schema), batch])
        # the same step twice in one window: the later record wins per key
        if len(np.unique(cols.row_steps)) != len(cols.row_steps):
            batch = _dedupe(batch)
        M.replace_range(con, run_pk, batch, lo, hi)
        return batch.num_rows - old.num_rows
    if len(np.unique(cols.row_steps)) != len(cols.row_steps):
        batch = _dedupe(batch)
    M.replace_range(con, run_pk, batch, lo, hi, existing_last_step=last)
    return batch.num_rows


def _dedupe(batch):
    import pyarrow as pa

    rows = {}
    for s, k, v in zip(batch.column("step").to_pylist(), batch.column("key").to_pylist(),
                       batch.column("value").to_pylist()):
        rows[(s, k)] = v
    return pa.table({"step": pa.array([s for s, _ in rows], pa.int64()),
                     "key": pa.array([k for _, k in rows], pa.string()),
                     "value": pa.array(list(rows.values()), pa.float64())})


def write_events(con, uid: str, events: list) -> None:
    import pyarrow as pa

    from marinctl.text import inert

    tbl = pa.table({
        "event_id": [e[0] for e in events],
        "time": pa.array([datetime.fromtimestamp(e[1], timezone.utc) if e[1] else None for e in events],
                         pa.timestamp("us", tz="UTC")),
        "title": [inert(e[2], single_line=True)[:200] for e in events],
        "body": [e[2] for e in events],
        "step": pa.array([e[3] for e in events], pa.int64()),
        "fields": [json.dumps({"stream": e[4]}) for e in events],
    })
    con.register("_ev", tbl)
    try:
        con.execute(
            "INSERT OR REPLACE INTO events (event_id, source, kind, time, title, author, url, body, run_uid,"
            " step, fields) SELECT event_id, 'local', 'console', time, title, NULL, NULL, body, ?, step,"
            " CAST(fields AS JSON) FROM _ev", [uid])
    finally:
        con.unregister("_ev")
