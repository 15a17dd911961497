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
from marinctl.store import Connection, dialect, first

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
        run.updated_at, run.listing_digest,
    ]
    if row is None:
        run_pk = dialect.new_id(con, "runs", "run_pk")
        con.execute(
            "INSERT INTO runs (run_pk, uid, source, entity, project, run_id, name, run_group, job_type, tags,"
            " state, created_at, heartbeat_at, config, summary, fork_parent, fork_step,"
            " remote_last_step, history_line_count, path, url, environment, updated_at, listing_digest, synced_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, current_timestamp)",
            [run_pk, run.uid, *values],
        )
        return run_pk
    con.execute(
        "UPDATE runs SET source=?, entity=?, project=?, run_id=?, name=?, run_group=?, job_type=?,"
        " tags=?, state=?, created_at=?, heartbeat_at=?, config=?, summary=?, fork_parent=?,"
        " fork_step=?, remote_last_step=?, history_line_count=?, path=coalesce(?, path),"
        " url=coalesce(?, url), environment=coalesce(?, environment), updated_at=?, listing_digest=?,"
        " synced_at=current_timestamp"
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
    from marinctl.store import scan  # parquet parts and long rows alike

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


def uids_at_path(con: Connection, path: str) -> list[str]:
    """Every run mirrored from a local file under `path` (a .wandb file or a folder)."""
    return [r[0] for r in con.execute("SELECT uid FROM runs WHERE path LIKE ? ORDER BY run_pk", [path + "%"]).fetchall()]


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


# --- many runs at once: a project sync -------------------------------------------------------

def listed_facts(con: Connection, uids: list[str]) -> dict[str, dict[str, Any]]:
    """What a project sync needs to tell, from W&B's listing alone, whether each run moved — for
    many runs in one read: the listing digest and remote state last stored, the last stored step,
    the history watermark (next step to fetch), how far detection has scored and what the stored
    system metrics were fetched for. Unknown runs are absent."""
    if not uids:
        return {}
    cur = con.execute(
        "SELECT r.uid, r.run_pk, r.state, r.heartbeat_at, r.remote_last_step, r.history_line_count,"
        " r.listing_digest, r.last_step, h.position AS mark, d.position AS scored_to,"
        " f.fetched_for AS system_for"
        " FROM runs r"
        " LEFT JOIN sync_state h ON h.scope = 'history' AND h.name = r.uid"
        " LEFT JOIN sync_state d ON d.scope = 'detect' AND d.name = r.uid"
        " LEFT JOIN system_fetches f ON f.run_pk = r.run_pk"
        " WHERE r.uid IN (SELECT unnest(?::VARCHAR[]))", [list(uids)])
    cols = [d[0] for d in cur.description]
    return {row[0]: dict(zip(cols, row)) for row in cur.fetchall()}


def upsert_runs(con: Connection, infos: list[RunInfo]) -> dict[str, int]:
    """`upsert_run` for many runs in three statements (a project's page of runs): returns uid → run_pk."""
    if not infos:
        return {}
    import pyarrow as pa

    from marinctl.store import engine

    table = pa.table({
        "uid": [r.uid for r in infos], "source": [r.source for r in infos], "entity": [r.entity for r in infos],
        "project": [r.project for r in infos], "run_id": [r.run_id for r in infos], "name": [r.name for r in infos],
        "run_group": [r.group for r in infos], "job_type": [r.job_type for r in infos],
        "tags": pa.array([list(r.tags or []) for r in infos], pa.list_(pa.string())),
        "state": [r.state for r in infos],
        "created_at": pa.array([r.created_at for r in infos], pa.timestamp("us", "UTC")),
        "heartbeat_at": pa.array([r.heartbeat_at for r in infos], pa.timestamp("us", "UTC")),
        "config": [json.dumps(r.config, default=str) for r in infos],
        "summary": [json.dumps(r.summary, default=str) for r in infos],
        "fork_parent": [r.fork_parent for r in infos], "fork_step": pa.array([r.fork_step for r in infos], pa.int64()),
        "remote_last_step": pa.array([r.remote_last_step for r in infos], pa.int64()),
        "history_line_count": pa.array([r.history_line_count for r in infos], pa.int64()),
        "path": [r.path for r in infos], "url": [r.url for r in infos],
        "environment": [json.dumps(r.environment, default=str) if r.environment is not None else None for r in infos],
        "updated_at": pa.array([r.updated_at for r in infos], pa.timestamp("us", "UTC")),
        "listing_digest": [r.listing_digest for r in infos],
    })
    columns = ("source, entity, project, run_id, name, run_group, job_type, tags, state, created_at, heartbeat_at,"
               " config, summary, fork_parent, fork_step, remote_last_step, history_line_count, path, url,"
               " environment, updated_at, listing_digest")
    known = {r[0] for r in con.execute("SELECT uid FROM runs WHERE uid IN (SELECT unnest(?::VARCHAR[]))",
                                       [[r.uid for r in infos]]).fetchall()}
    engine.register(con, "_listed", table)
    try:
        if known:
            con.execute(
                "UPDATE runs SET source = n.source, entity = n.entity, project = n.project, run_id = n.run_id,"
                " name = n.name, run_group = n.run_group, job_type = n.job_type, tags = n.tags, state = n.state,"
                " created_at = n.created_at, heartbeat_at = n.heartbeat_at, config = n.config, summary = n.summary,"
                " fork_parent = n.fork_parent, fork_step = n.fork_step, remote_last_step = n.remote_last_step,"
                " history_line_count = n.history_line_count, path = coalesce(n.path, runs.path),"
                " url = coalesce(n.url, runs.url), environment = coalesce(n.environment, runs.environment),"
                " updated_at = n.updated_at, listing_digest = n.listing_digest, synced_at = current_timestamp"
                " FROM _listed n WHERE runs.uid = n.uid")
        if len(known) < len(infos):
            pk = ("(SELECT coalesce(max(run_pk), 0) FROM runs) + row_number() OVER (ORDER BY uid)"
                  if dialect.is_lake(con) else "nextval('run_pk_seq')")
            con.execute(f"INSERT INTO runs (run_pk, uid, {columns}, synced_at) SELECT {pk}, uid, {columns},"
                        " current_timestamp FROM _listed WHERE uid NOT IN (SELECT uid FROM runs)")
    finally:
        con.unregister("_listed")
    rows = con.execute("SELECT uid, run_pk FROM runs WHERE uid IN (SELECT unnest(?::VARCHAR[]))",
                       [[r.uid for r in infos]]).fetchall()
    return dict(rows)


def raise_last_steps(con: Connection, steps: dict[int, int]) -> None:
    """`raise_last_step` for many runs at once: {run_pk: step}."""
    if steps:
        con.execute("UPDATE runs SET last_step = greatest(coalesce(runs.last_step, -1), t.step)"
                    " FROM (SELECT unnest(?::INTEGER[]) AS pk, unnest(?::BIGINT[]) AS step) t WHERE runs.run_pk = t.pk",
                    [list(steps), list(steps.values())])
