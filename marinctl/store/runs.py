"""The `runs` table: upsert run metadata, keep its progress and liveness, resolve a RUN.

`last_step` (the last history step stored) and `state`/`heartbeat_at` of local runs are
written here and nowhere else.
"""

from __future__ import annotations

import json
import re
from typing import Any

from marinctl.domain import RunInfo
from marinctl.errors import AmbiguousRun, UnknownRun
from marinctl.store import Connection, first

RUN_COLUMNS = (
    "run_pk, uid, source, entity, project, run_id, name, run_group, job_type, tags, state, "
    "created_at, heartbeat_at, config, summary, fork_parent, fork_step, last_step, "
    "remote_last_step, history_line_count, path, url, synced_at"
)

RUNG_NAMES = {"rung1": "d768", "rung2": "d1024", "rung3": "d1536", "rung4": "d2048"}


def upsert_run(con: Connection, run: RunInfo) -> int:
    """Insert or update a run's metadata; keeps local progress (last_step). Returns run_pk."""
    found = con.execute("SELECT run_pk FROM runs WHERE uid = ?", [run.uid]).fetchall()
    row = found[0] if found else None
    values = [
        run.source, run.entity, run.project, run.run_id, run.name, run.group, run.job_type,
        list(run.tags or []), run.state, run.created_at, run.heartbeat_at,
        json.dumps(run.config, default=str), json.dumps(run.summary, default=str),
        run.fork_parent, run.fork_step, run.remote_last_step, run.history_line_count,
        run.path, run.url,
        json.dumps(run.environment, default=str) if run.environment is not None else None,
    ]
    if row is None:
        con.execute(
            "INSERT INTO runs (uid, source, entity, project, run_id, name, run_group, job_type, tags,"
            " state, created_at, heartbeat_at, config, summary, fork_parent, fork_step,"
            " remote_last_step, history_line_count, path, url, environment, synced_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, current_timestamp)",
            [run.uid, *values],
        )
        return con.execute("SELECT run_pk FROM runs WHERE uid = ?", [run.uid]).fetchall()[0][0]
    con.execute(
        "UPDATE runs SET source=?, entity=?, project=?, run_id=?, name=?, run_group=?, job_type=?,"
        " tags=?, state=?, created_at=?, heartbeat_at=?, config=?, summary=?, fork_parent=?,"
        " fork_step=?, remote_last_step=?, history_line_count=?, path=coalesce(?, path),"
        " url=coalesce(?, url), environment=coalesce(?, environment), synced_at=current_timestamp"
        " WHERE run_pk=?",
        [*values, row[0]],
    )
    return row[0]


def sync_facts(con: Connection, uid: str) -> dict[str, Any] | None:
    """What the last sync stored of a run's remote state (None when never synced): its
    `state`, `heartbeat_at` and `remote_last_step`, to tell whether anything can have changed."""
    cur = con.execute("SELECT state, heartbeat_at, remote_last_step FROM runs WHERE uid = ?", [uid])
    row = first(cur)
    return dict(zip([d[0] for d in cur.description], row)) if row else None


def last_step(con: Connection, run_pk: int) -> int | None:
    """The last history step stored for a run (as sync recorded it)."""
    return first(con.execute("SELECT last_step FROM runs WHERE run_pk = ?", [run_pk]))[0]


def raise_last_step(con: Connection, run_pk: int, step: int) -> None:
    """Record that history up to `step` is stored (never lowers it)."""
    con.execute("UPDATE runs SET last_step = greatest(coalesce(last_step, -1), ?) WHERE run_pk = ?", [step, run_pk])


def refresh_last_step(con: Connection, run_pk: int) -> int | None:
    """Recompute `last_step` from the stored history (after a rewind deleted some of it)."""
    from marinctl.store import scan  # parquet parts and long rows alike (issue 13 #7)

    last = scan.step_range(con, [(run_pk, None, None)])[1]
    con.execute("UPDATE runs SET last_step = ? WHERE run_pk = ?", [last, run_pk])
    return last


def set_liveness(con: Connection, uid: str, state: str, heartbeat_at=None) -> None:
    """A local run's state (running/stale/crashed/finished/failed) and, when known, its heartbeat."""
    if heartbeat_at is None:
        con.execute("UPDATE runs SET state = ? WHERE uid = ?", [state, uid])
    else:
        con.execute("UPDATE runs SET state = ?, heartbeat_at = ? WHERE uid = ?", [state, heartbeat_at, uid])


def documents(con: Connection, uid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(config, summary) stored for a run uid, or None when the run is not stored."""
    row = first(con.execute("SELECT config, summary FROM runs WHERE uid = ?", [uid]))
    return (_as_dict(row[0]), _as_dict(row[1])) if row else None


def environment(con: Connection, uid: str) -> dict[str, Any] | None:
    """The environment a run ran in (os, python, host, hardware …), None when no source has said."""
    row = first(con.execute("SELECT environment FROM runs WHERE uid = ?", [uid]))
    return _as_dict(row[0]) if row and row[0] is not None else None


def set_documents(con: Connection, uid: str, config: dict[str, Any], summary: dict[str, Any]) -> None:
    """A run's config and summary, as a later file of the same W&B run left them (a resume)."""
    con.execute("UPDATE runs SET config = ?, summary = ? WHERE uid = ?",
                [json.dumps(config, default=str), json.dumps(summary, default=str), uid])


def segment_id(con: Connection, run: RunInfo, path: str) -> str:
    """The run id under which `path` keeps a resumed segment of `run` whose `_step` restarted:
    the one it already has, else `RUN~2`, `RUN~3`, ... (the first segment keeps the run id)."""
    rows = con.execute("SELECT run_id, path FROM runs WHERE starts_with(uid, ?)", [run.uid + "~"]).fetchall()
    for run_id, at in rows:
        if at == path:
            return run_id
    taken = {r[0] for r in rows}
    n = 2
    while f"{run.run_id}~{n}" in taken:
        n += 1
    return f"{run.run_id}~{n}"


def _as_dict(v: Any) -> dict[str, Any]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    return v if isinstance(v, dict) else {}


def pk_of(con: Connection, uid: str) -> int | None:
    row = first(con.execute("SELECT run_pk FROM runs WHERE uid = ?", [uid]))
    return row[0] if row else None


def uid_at_path(con: Connection, path: str) -> str | None:
    """The newest run mirrored from a local file under `path` (a .wandb file or a folder)."""
    row = first(con.execute("SELECT uid FROM runs WHERE path LIKE ? ORDER BY created_at DESC NULLS LAST LIMIT 1",
                            [path + "%"]))
    return row[0] if row else None


def lineage_rows(con: Connection) -> list[dict[str, Any]]:
    """(run_pk, uid, run_id, fork_parent, fork_step, source) of every run, local ones first, then by start."""
    cur = con.execute("SELECT run_pk, uid, run_id, fork_parent, fork_step, source FROM runs"
                      " ORDER BY source = 'wandb', created_at NULLS FIRST")
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def last_synced(con: Connection):
    """When any run was last synced (None before the first sync)."""
    return first(con.execute("SELECT max(synced_at) FROM runs"))[0]


def repro_runs(con: Connection, width: str) -> list[dict[str, Any]]:
    """Local reproductions whose id or name carries a rung width (e.g. 'd768')."""
    cur = con.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE source = 'repro' AND (run_id LIKE ? OR name LIKE ?)"
                      " ORDER BY created_at NULLS FIRST", [f"%{width}%", f"%{width}%"])
    return [row_to_dict(r, cur.description) for r in cur.fetchall()]


def row_to_dict(row: tuple, description) -> dict[str, Any]:
    out = {d[0]: v for d, v in zip(description, row)}
    for k in ("config", "summary"):
        if isinstance(out.get(k), str):
            out[k] = json.loads(out[k])
    return out


def list_runs(con: Connection) -> list[dict[str, Any]]:
    cur = con.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at NULLS LAST, uid")
    return [row_to_dict(r, cur.description) for r in cur.fetchall()]


def run_ids(con: Connection) -> list[str]:
    """Every stored run's id (the name RUN takes), sorted, once each."""
    return [r[0] for r in con.execute("SELECT DISTINCT run_id FROM runs ORDER BY run_id").fetchall()]


def get_run(con: Connection, run_pk: int) -> dict[str, Any]:
    cur = con.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_pk = ?", [run_pk])
    return row_to_dict(cur.fetchall()[0], cur.description)


_URL = re.compile(r"https?://[^/]+/(?:wandb/)?([^/]+)/([^/]+)/runs/([^/?#]+)")


def parse_run_ref(ref: str) -> tuple[str | None, str | None, str]:
    """Split a RUN reference into (entity, project, run_id); entity/project may be None."""
    from urllib.parse import unquote

    m = _URL.match(ref)
    if m:
        return m.group(1), m.group(2), unquote(m.group(3))
    parts = ref.split("/")
    if len(parts) == 3 and all(parts):
        return parts[0], parts[1], parts[2]
    return None, None, ref


def resolve_run(con: Connection, ref: str) -> dict[str, Any]:
    """Find one run by uid, W&B id, URL, display name or rung alias; exit-2 error otherwise.

    `hero` is handled by callers that support the stitched lineage (store.lineage).
    """
    if ref in RUNG_NAMES:
        found = find_rung_runs(con, ref)
        if found:
            return found[-1]
        raise UnknownRun(
            f"no synced run for {ref} ({RUNG_NAMES[ref]})",
            "sync the ladder with `marinctl sync marin`, or list what is stored with `marinctl runs`",
        )
    entity, project, run_id = parse_run_ref(ref)
    cur = con.execute(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE uid = ? OR run_id = ? OR name = ?"
        " ORDER BY (uid = ?) DESC, (run_id = ?) DESC, heartbeat_at DESC NULLS LAST",
        [ref, run_id, ref, ref, run_id],
    )
    rows = [row_to_dict(r, cur.description) for r in cur.fetchall()]
    if entity:
        rows = [r for r in rows if r["entity"] == entity and r["project"] == project] or rows
    if not rows:
        raise UnknownRun(f"unknown run {ref!r}: it is not in the store", "list stored runs with `marinctl runs`")
    exact = [r for r in rows if r["uid"] == ref or r["run_id"] == run_id]
    pick = exact or rows
    ids = {r["uid"] for r in pick}
    if len(ids) > 1 and not any(r["uid"] == ref for r in pick):
        raise AmbiguousRun(
            f"run {ref!r} is ambiguous: {', '.join(sorted(ids))}",
            "name it as ENTITY/PROJECT/RUN_ID (see `marinctl runs`)",
        )
    return pick[0]


def find_rung_runs(con: Connection, rung: str) -> list[dict[str, Any]]:
    """Cloud or local runs of a ladder rung: by the ladder group and the width in the id/name.
    Reproductions (`repro_runs`) are overlays linked to a rung, never the rung itself."""
    width = RUNG_NAMES.get(rung, rung)
    cur = con.execute(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE (run_group LIKE '%scaling-ladder%' OR run_id LIKE 'ladder-%'"
        ") AND source <> 'repro' AND (run_id LIKE ? OR name LIKE ?) ORDER BY source = 'wandb', created_at NULLS FIRST",
        [f"%{width}%", f"%{width}%"],
    )
    rows = [row_to_dict(r, cur.description) for r in cur.fetchall()]
    # Prefer logged (cloud) rungs over local reproductions when both exist.
    cloud = [r for r in rows if r["source"] == "wandb"]
    return cloud or rows
