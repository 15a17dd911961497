"""`marinctl store copy SRC DST`: a mirror copied between stores, the second time only what changed.

SRC and DST are each an embedded file or a DuckLake. The source is attached read-only beside the
destination in the destination's own DuckDB (`ATTACH`), so rows move in bulk SQL, never through
Python; every name without a catalog below is the destination's.

Ids differ between stores, so nothing is copied by id: a run is matched by its uid, a key by its
name, an alert by (run, cause, episode start), an event by its id. Each run lands in one
destination transaction together with a marker in `sync_state` (scope `copy`): what the run was
in the source when it was copied (`fingerprint`), and how far its history was (`through`) with a
checksum of it. The next copy skips a run whose fingerprint is unchanged, appends only the steps
past `through` when the history up to it is unchanged (a live run grew), and replaces the run's
history otherwise (a rewind, a part registered over long rows). A copy killed part way leaves
whole runs and resumes at the next. Parts (W&B's exported files) are copied as files into the
destination's parts folder, or written as long rows where it keeps none (a lake on S3).

Tables without run ids (`repo_files`, GitHub's events and positions) are merged by their keys;
a table a later migration adds that this module does not name is copied whole (its rows replace
the destination's) when both stores have it with the same columns.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from marinctl.errors import RuntimeFailure, UserError
from marinctl.store import dialect, first

__all__ = ["copy_stores", "copy_mirror", "SRC"]

SRC = "marinctl_src"
# what this module copies by name (anything else present in both stores is copied whole)
KNOWN = {"runs", "metric_keys", "metrics", "sync_state", "events", "anomalies", "repo_files", "history_parts",
         "part_keys", "part_nonfinite", "system_keys", "system_samples", "system_fetches", "alerts",
         "schema_migrations"}
_RUN_COLUMNS_SKIP = {"run_pk"}
_FACTS = ("n_values", "first_step", "last_step", "first_finite_step", "first_finite", "last_finite_step",
          "last_finite", "min_value")

Progress = Callable[[str, int, int], None]


def copy_stores(src, dst, progress: Progress | None = None) -> dict[str, int]:
    """Copy the mirror in store `src` into store `dst` (either kind): {"runs": runs copied or
    updated, "rows": history values moved}."""
    if src.describe() == dst.describe():
        raise UserError(f"the source and the destination are the same store ({src.describe()})",
                        "name two different stores: marinctl store copy SRC DST")
    from marinctl.errors import MarinctlError
    from marinctl.store.engine import duckdb

    try:
        src.ensure_schema()      # an older source is migrated first (as any command would)
    except MarinctlError:
        raise
    except duckdb.Error as exc:
        raise RuntimeFailure(f"cannot read {src.describe()} as a marinctl store: {str(exc).splitlines()[0]}",
                             "name a store marinctl made as SRC") from None
    with dst.copying() as (con, unit):
        src.attach_as(con, SRC)
        try:
            return copy_mirror(con, src.describe(), src.parts_root(), dst.parts_root(), unit, progress)
        finally:
            con.execute(f"DETACH {SRC}")


def copy_mirror(con, src_name: str, src_parts: Path | None, dst_parts: Path | None, unit,
                progress: Progress | None = None) -> dict[str, int]:
    """Copy every run of the attached source (catalog `SRC`) into the connection's own store.

    `unit()`: a context for one destination transaction (with whatever lock its store needs).
    Returns {"runs": runs copied or updated, "rows": values moved}.
    """
    _same_schema(con)
    uids = [r[0] for r in con.execute(f"SELECT uid FROM {SRC}.runs ORDER BY run_pk").fetchall()]
    moved_runs = moved_rows = 0
    for i, uid in enumerate(uids):
        with unit():
            rows = _copy_run(con, src_name, uid, src_parts, dst_parts)
        if rows is not None:
            moved_runs += 1
            moved_rows += rows
        if progress:
            progress(uid, i + 1, len(uids))
    with unit():
        _copy_shared(con)
    return {"runs": moved_runs, "rows": moved_rows}


# --- one run -------------------------------------------------------------------------------------

def _fingerprint(con, uid: str) -> str:
    """What would change when anything of the run changed in the source."""
    row = first(con.execute(
        f"SELECT r.last_step, r.synced_at, r.state, r.heartbeat_at, r.summary,"
        f" (SELECT count(*) FROM {SRC}.metrics m WHERE m.run_pk = r.run_pk),"
        f" (SELECT sum(step) FROM {SRC}.metrics m WHERE m.run_pk = r.run_pk),"
        f" (SELECT string_agg(file || ':' || lo || ':' || hi, ',' ORDER BY lo) FROM {SRC}.history_parts p"
        f"  WHERE p.run_pk = r.run_pk),"
        f" (SELECT count(*) || ':' || coalesce(max(detected_at)::VARCHAR, '') FROM {SRC}.anomalies a"
        f"  WHERE a.run_pk = r.run_pk),"
        f" (SELECT count(*) FROM {SRC}.system_samples s WHERE s.run_pk = r.run_pk),"
        f" (SELECT max(fetched_for) FROM {SRC}.system_fetches f WHERE f.run_pk = r.run_pk),"
        f" (SELECT count(*) || ':' || coalesce(max(delivered_at)::VARCHAR, '') || ':' || coalesce(sum(tries), 0)"
        f"  FROM {SRC}.alerts a WHERE a.run_uid = r.uid),"
        f" (SELECT count(*) FROM {SRC}.events e WHERE e.run_uid = r.uid)"
        f" FROM {SRC}.runs r WHERE r.uid = ?", [uid]))
    return json.dumps([str(v) for v in row])


def _history_sum(con, src_pk: int, through: int) -> str:
    """A checksum of the source's long rows of a run up to `through`, and its parts there."""
    row = first(con.execute(
        f"SELECT count(*), sum(step), sum(hash(key_id, step, value)) FROM {SRC}.metrics"
        f" WHERE run_pk = ? AND step <= ?", [src_pk, through]))
    parts = first(con.execute(f"SELECT string_agg(file || ':' || lo || ':' || hi, ',' ORDER BY lo)"
                              f" FROM {SRC}.history_parts WHERE run_pk = ? AND lo <= ?", [src_pk, through]))
    return json.dumps([str(v) for v in (*row, parts[0])])


def _copy_run(con, src_name: str, uid: str, src_parts: Path | None, dst_parts: Path | None) -> int | None:
    """Bring one run of the destination to what the source holds; None when nothing changed."""
    marker_name = f"{src_name}|{uid}"
    fingerprint = _fingerprint(con, uid)
    mark = first(con.execute("SELECT token, extra FROM sync_state WHERE scope = 'copy' AND name = ?", [marker_name]))
    extra = (json.loads(mark[1]) if isinstance(mark[1], str) else mark[1] or {}) if mark else {}
    dst_pk = first(con.execute("SELECT run_pk FROM runs WHERE uid = ?", [uid]))
    if mark is not None and mark[0] == fingerprint and dst_pk is not None:
        return None
    src_pk = first(con.execute(f"SELECT run_pk FROM {SRC}.runs WHERE uid = ?", [uid]))[0]
    dst_pk = _copy_run_row(con, uid, dst_pk[0] if dst_pk else None)
    _intern_keys(con, src_pk)
    through = extra.get("through")
    appending = (mark is not None and through is not None
                 and extra.get("sum") == _history_sum(con, src_pk, int(through)))
    if appending:
        rows = _copy_history(con, src_pk, dst_pk, int(through) + 1, src_parts, dst_parts)
    else:
        _drop_history(con, dst_pk)
        rows = _copy_history(con, src_pk, dst_pk, None, src_parts, dst_parts)
    _copy_run_tables(con, src_pk, dst_pk, uid)
    last = first(con.execute(
        f"SELECT greatest((SELECT max(step) FROM {SRC}.metrics WHERE run_pk = ?),"
        f" (SELECT max(hi) - 1 FROM {SRC}.history_parts WHERE run_pk = ?))", [src_pk, src_pk]))[0]
    new_extra = {"through": last, "sum": _history_sum(con, src_pk, int(last)) if last is not None else None}
    con.execute("DELETE FROM sync_state WHERE scope = 'copy' AND name = ?", [marker_name])
    con.execute("INSERT INTO sync_state (scope, name, position, token, extra, updated_at)"
                " VALUES ('copy', ?, ?, ?, ?, current_timestamp)", [marker_name, last, fingerprint, json.dumps(new_extra)])
    return rows


def _columns(con, catalog: str | None, table: str) -> list[str]:
    where = "table_catalog = current_database()" if catalog is None else f"table_catalog = '{catalog}'"
    return [r[0] for r in con.execute(
        f"SELECT column_name FROM information_schema.columns WHERE {where} AND table_name = ?"
        " ORDER BY ordinal_position", [table]).fetchall()]


def _copy_run_row(con, uid: str, dst_pk: int | None) -> int:
    cols = [c for c in _columns(con, SRC, "runs") if c not in _RUN_COLUMNS_SKIP and c in _columns(con, None, "runs")]
    listed = ", ".join(cols)
    if dst_pk is None:
        dst_pk = dialect.new_id(con, "runs", "run_pk")
    con.execute("DELETE FROM runs WHERE uid = ?", [uid])
    con.execute(f"INSERT INTO runs (run_pk, {listed}) SELECT ?, {listed} FROM {SRC}.runs WHERE uid = ?", [dst_pk, uid])
    return dst_pk


def _intern_keys(con, src_pk: int) -> None:
    dialect.intern(con, "metric_keys",
                   f"SELECT k.key FROM {SRC}.metric_keys k WHERE k.key_id IN (SELECT DISTINCT key_id FROM {SRC}.metrics"
                   f" WHERE run_pk = {int(src_pk)} UNION SELECT p.key_id FROM {SRC}.part_keys p JOIN {SRC}.history_parts h"
                   f" USING (part_id) WHERE h.run_pk = {int(src_pk)})")
    dialect.intern(con, "system_keys", f"SELECT k.key FROM {SRC}.system_keys k WHERE k.key_id IN"
                                        f" (SELECT DISTINCT key_id FROM {SRC}.system_samples WHERE run_pk = {int(src_pk)})")


def _drop_history(con, dst_pk: int) -> None:
    con.execute("DELETE FROM metrics WHERE run_pk = ?", [dst_pk])
    ids = [r[0] for r in con.execute("SELECT part_id FROM history_parts WHERE run_pk = ?", [dst_pk]).fetchall()]
    if ids:
        marks = ",".join(str(int(i)) for i in ids)
        for table in ("part_keys", "part_nonfinite", "history_parts"):
            con.execute(f"DELETE FROM {table} WHERE part_id IN ({marks})")


def _copy_history(con, src_pk: int, dst_pk: int, start: int | None, src_parts: Path | None,
                  dst_parts: Path | None) -> int:
    """The source run's long rows and parts from `start` on (None: all); returns values copied."""
    since = "" if start is None else f" AND m.step >= {int(start)}"
    n = first(con.execute(f"SELECT count(*) FROM {SRC}.metrics m WHERE m.run_pk = ?{since}", [src_pk]))[0]
    con.execute(f"INSERT INTO metrics SELECT ?, d.key_id, m.step, m.value FROM {SRC}.metrics m"
                f" JOIN {SRC}.metric_keys s ON s.key_id = m.key_id JOIN metric_keys d ON d.key = s.key"
                f" WHERE m.run_pk = ?{since} ORDER BY d.key_id, m.step", [dst_pk, src_pk])
    rows = int(n)
    part_since = "" if start is None else f" AND lo >= {int(start)}"
    parts = con.execute(f"SELECT part_id, file, lo, hi FROM {SRC}.history_parts WHERE run_pk = ?{part_since}"
                        " ORDER BY lo", [src_pk]).fetchall()
    for src_pid, rel, lo, hi in parts:
        rows += _copy_part(con, src_pid, rel, dst_pk, int(lo), int(hi), src_parts, dst_parts)
    return rows


def _copy_part(con, src_pid: int, rel: str, dst_pk: int, lo: int, hi: int, src_parts: Path | None,
               dst_parts: Path | None) -> int:
    from marinctl.store import parts

    if src_parts is None or not (src_parts / rel).is_file():
        raise RuntimeFailure(f"the source's history part {rel} is missing",
                             "sync the run again in the source store, then copy again")
    n = int(first(con.execute(f"SELECT coalesce(sum(n_values), 0) FROM {SRC}.part_keys WHERE part_id = ?",
                              [src_pid]))[0])
    if dst_parts is None:     # the destination keeps no part files: the part's rows as long rows
        staged = Path(shutil.copyfile(src_parts / rel, _staging(rel)))
        parts._as_long_rows(con, dst_pk, staged, parts.facts(staged, lo, hi))
        return n
    target = dst_parts / rel
    if not target.is_file() or target.stat().st_size != (src_parts / rel).stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        shutil.copyfile(src_parts / rel, tmp)
        tmp.replace(target)
    pid = dialect.new_id(con, "history_parts", "part_id")
    con.execute(f"INSERT INTO history_parts (part_id, run_pk, file, lo, hi, file_lo, file_hi, first_step, last_step,"
                f" num_rows, bytes, sorted) SELECT ?, ?, file, lo, hi, file_lo, file_hi, first_step, last_step,"
                f" num_rows, bytes, sorted FROM {SRC}.history_parts WHERE part_id = ?", [pid, dst_pk, src_pid])
    facts = ", ".join("p." + c for c in _FACTS)
    con.execute(f"INSERT INTO part_keys SELECT ?, d.key_id, {facts} FROM {SRC}.part_keys p"
                f" JOIN {SRC}.metric_keys s ON s.key_id = p.key_id JOIN metric_keys d ON d.key = s.key"
                f" WHERE p.part_id = ?", [pid, src_pid])
    con.execute(f"INSERT INTO part_nonfinite SELECT ?, d.key_id, p.step, p.value FROM {SRC}.part_nonfinite p"
                f" JOIN {SRC}.metric_keys s ON s.key_id = p.key_id JOIN metric_keys d ON d.key = s.key"
                f" WHERE p.part_id = ?", [pid, src_pid])
    return n


def _staging(rel: str) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="marinctl-copy-")) / Path(rel).name


def _copy_run_tables(con, src_pk: int, dst_pk: int, uid: str) -> None:
    """A run's detections, system metrics, alerts, console lines and positions: replaced whole."""
    con.execute("DELETE FROM anomalies WHERE run_pk = ?", [dst_pk])
    con.execute(f"INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class, details, detected_at)"
                f" SELECT ?, step, metric, kind, score, cause_class, details, detected_at FROM {SRC}.anomalies"
                f" WHERE run_pk = ?", [dst_pk, src_pk])
    con.execute("DELETE FROM system_samples WHERE run_pk = ?", [dst_pk])
    con.execute(f"INSERT INTO system_samples SELECT ?, d.key_id, s.time, s.value FROM {SRC}.system_samples s"
                f" JOIN {SRC}.system_keys k ON k.key_id = s.key_id JOIN system_keys d ON d.key = k.key"
                f" WHERE s.run_pk = ? ORDER BY d.key_id, s.time", [dst_pk, src_pk])
    con.execute("DELETE FROM system_fetches WHERE run_pk = ?", [dst_pk])
    con.execute(f"INSERT INTO system_fetches (run_pk, fetched_for, samples, fetched_at) SELECT ?, fetched_for, samples,"
                f" fetched_at FROM {SRC}.system_fetches WHERE run_pk = ?", [dst_pk, src_pk])
    _merge_alerts(con, uid)
    con.execute(f"DELETE FROM events WHERE run_uid = ? AND event_id IN (SELECT event_id FROM {SRC}.events"
                f" WHERE run_uid = ?)", [uid, uid])
    con.execute(f"INSERT INTO events SELECT * EXCLUDE (rn) FROM (SELECT *, row_number() OVER (PARTITION BY event_id)"
                f" AS rn FROM {SRC}.events WHERE run_uid = ? AND event_id NOT IN (SELECT event_id FROM events)) WHERE rn = 1",
                [uid])
    for scope in ("history", "detect"):
        con.execute("DELETE FROM sync_state WHERE scope = ? AND name = ?", [scope, uid])
        con.execute(f"INSERT INTO sync_state SELECT * FROM {SRC}.sync_state WHERE scope = ? AND name = ?", [scope, uid])


def _merge_alerts(con, uid: str) -> None:
    """The source's alerts of a run: one per (cause, episode start), fired once in either store."""
    cols = [c for c in _columns(con, SRC, "alerts") if c != "alert_id" and c in _columns(con, None, "alerts")]
    listed = ", ".join(cols)
    src_rows = con.execute(f"SELECT cause, episode_start FROM {SRC}.alerts WHERE run_uid = ?", [uid]).fetchall()
    for cause, start in src_rows:
        con.execute("DELETE FROM alerts WHERE run_uid = ? AND cause = ? AND episode_start = ?", [uid, cause, start])
        alert_id = dialect.new_id(con, "alerts", "alert_id")
        con.execute(f"INSERT INTO alerts (alert_id, {listed}) SELECT ?, {listed} FROM {SRC}.alerts"
                    f" WHERE run_uid = ? AND cause = ? AND episode_start = ?", [alert_id, uid, cause, start])


# --- what no run owns ----------------------------------------------------------------------------

def _copy_shared(con) -> None:
    con.execute(f"DELETE FROM repo_files WHERE (repo, path) IN (SELECT (repo, path) FROM {SRC}.repo_files)")
    con.execute(f"INSERT INTO repo_files SELECT * FROM {SRC}.repo_files")
    con.execute(f"DELETE FROM events WHERE run_uid IS NULL AND event_id IN (SELECT event_id FROM {SRC}.events"
                f" WHERE run_uid IS NULL)")
    con.execute(f"INSERT INTO events SELECT * FROM {SRC}.events WHERE run_uid IS NULL"
                f" AND event_id NOT IN (SELECT event_id FROM events)")
    con.execute(f"DELETE FROM sync_state WHERE scope = 'github' AND name IN (SELECT name FROM {SRC}.sync_state"
                f" WHERE scope = 'github')")
    con.execute(f"INSERT INTO sync_state SELECT * FROM {SRC}.sync_state WHERE scope = 'github'")
    for table in _tables(con, SRC):
        if table in KNOWN or table not in _tables(con, None):
            continue
        if _columns(con, SRC, table) != _columns(con, None, table):
            continue
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} SELECT * FROM {SRC}.{table}")


def _tables(con, catalog: str | None) -> set[str]:
    where = "table_catalog = current_database()" if catalog is None else f"table_catalog = '{catalog}'"
    return {r[0] for r in con.execute(f"SELECT table_name FROM information_schema.tables WHERE {where}"
                                      " AND table_schema = 'main'").fetchall()}


def _same_schema(con) -> None:
    have = first(con.execute(f"SELECT coalesce(max(version), 0) FROM {SRC}.schema_migrations"))[0]
    mine = first(con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations"))[0]
    if have > mine:
        raise UserError(f"the source store is at schema {have}, newer than this marinctl's ({mine})",
                        "upgrade marinctl, then copy again")
