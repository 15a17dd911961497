"""The `history_parts` registry: W&B's exported parquet parts kept as the stored form of history.

Re-encoding an export into long rows costs more than everything else a sync does
(bench/NOTES.md, "History parts"), so a downloaded part is kept as it is, under
`<db name>.history/<sha1(run uid)[:16]>/<fresh name>.parquet`, and registered for a step
range [lo, hi) of its run. Invariants, kept by every writer here and by
`metrics.replace_range`:
- no long row of a run lies inside one of its parts' ranges;
- one run's parts never overlap;
so every read is a plain union (store/scan.py).

Crash safety: a part is downloaded to `.part` and renamed, then registered — long rows in its
range deleted, its rows here, the watermark and `runs.last_step` — in ONE transaction. A kill
before the commit leaves a file no row names; `collect_garbage` deletes it at the run's next
sync. Names are fresh, so no file a reader may hold is ever overwritten.

What a read would otherwise decode a whole part for is computed here once, when a part is
registered or clipped (`facts`): the keys it holds with their first/last values, and every
NaN/Inf in it.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from marinctl.store import dialect, engine
from marinctl.store import Connection, first
from marinctl.store.part_files import Footer, forget, open_part, read_footer

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Facts", "Footer", "facts", "register", "cut", "rewind", "collect_garbage", "lost_from", "root_for", "root_of",
           "new_file", "read_footer"]

_KEY_FACTS = ("n_values", "first_step", "last_step", "first_finite_step", "first_finite", "last_finite_step",
              "last_finite", "min_value")


def root_for(db_path: Path) -> Path:
    """The folder holding a store's parts: `marinctl.duckdb` → `marinctl.history/`."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.stem + ".history")


def root_of(con: Connection) -> Path | None:
    """The parts folder of the store this connection has open (None: a lake on S3, which keeps
    no part files; their rows go to the long table)."""
    if dialect.is_lake(con):
        root = first(con.execute("SELECT getvariable('marinctl_parts_root')"))[0]
        return Path(root) if root else None
    path = first(con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()"))[0]
    return root_for(Path(path))


def run_folder(root: Path, uid: str) -> Path:
    return root / hashlib.sha1(uid.encode()).hexdigest()[:16]


def new_file(root: Path, uid: str) -> Path:
    """A never-used file name for a part of this run (its folder created)."""
    folder = run_folder(root, uid)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{uuid.uuid4().hex}.parquet"


# --- facts: what a part holds, computed once ----------------------------------------------------

@dataclass
class Facts:
    """A part file as used for steps [lo, hi): per-key facts, its NaN/Inf values, its extent."""

    lo: int
    hi: int
    file_lo: int
    file_hi: int
    num_rows: int
    bytes: int
    sorted: bool
    keys: pa.Table          # key + _KEY_FACTS columns
    nonfinite: pa.Table     # key, step, value

    @property
    def first_step(self) -> int | None:
        col = self.keys.column("first_step")
        return None if not len(col) else int(min(col.to_pylist()))

    @property
    def last_step(self) -> int | None:
        col = self.keys.column("last_step")
        return None if not len(col) else int(max(col.to_pylist()))

    def used_for(self, lo: int, hi: int) -> "Facts | None":
        """These facts for the same file used for [lo, hi), when that range holds all of the
        file's rows these facts cover (None: compute them for [lo, hi))."""
        if lo <= self.lo and self.hi <= hi and self.lo <= self.file_lo and self.file_hi <= self.hi:
            return replace(self, lo=lo, hi=hi)
        return None


def facts(path: Path, lo: int, hi: int) -> Facts:
    """Decode every key of `path` over [lo, hi) once: the costliest read of a part, so its facts are kept."""
    import pyarrow as pa
    pf = open_part(path)
    footer = pf.footer()
    acc: dict[str, list] = {}
    nf_keys: list[str] = []
    nf_steps: list[np.ndarray] = []
    nf_values: list[np.ndarray] = []
    for steps, keep, cols in pf.chunks(sorted(pf.keys), lo, hi):
        # one column group at a time as 2-D arrays (keys × rows, rows contiguous): no loop per value
        names = [k for k, _, _ in cols]
        vals = np.stack([v for _, v, _ in cols])
        m = np.stack([ok for _, _, ok in cols]) & keep[None, :]
        fin = m & np.isfinite(vals)
        numbers = m & ~np.isnan(vals)
        count = m.sum(axis=1)
        any_fin = fin.any(axis=1)
        low = np.where(numbers, vals, np.inf).min(axis=1)
        first_any, last_any = _ends(m, steps)
        first_fin, last_fin = _ends(fin, steps)
        for j in np.nonzero(count)[0]:
            row = [int(count[j]), int(steps[first_any[j]]), int(steps[last_any[j]]), None, None, None, None,
                   float(low[j]) if numbers[j].any() else float("nan")]
            if any_fin[j]:
                row[3:7] = [int(steps[first_fin[j]]), float(vals[j, first_fin[j]]),
                            int(steps[last_fin[j]]), float(vals[j, last_fin[j]])]
            acc[names[j]] = row if names[j] not in acc else _merge(acc[names[j]], row)
        bad = m & ~fin
        bad_cols, bad_rows = np.nonzero(bad) if bad.any() else ((), ())
        if len(bad_rows):
            nf_keys += [names[j] for j in bad_cols]
            nf_steps.append(steps[bad_rows])
            nf_values.append(vals[bad_cols, bad_rows])
    with pf.lock:
        all_steps = pf.file.read(columns=["_step"]).column(0).to_numpy(zero_copy_only=False)
    names = sorted(acc)
    cols = list(zip(*(acc[k] for k in names))) if names else [[] for _ in _KEY_FACTS]
    keys = pa.table({"key": pa.array(names, pa.string()),
                     **{name: pa.array(list(c), pa.float64() if name in ("first_finite", "last_finite", "min_value")
                                       else pa.int64()) for name, c in zip(_KEY_FACTS, cols)}})
    nonfinite = pa.table({"key": pa.array(nf_keys, pa.string()),
                          "step": pa.array(np.concatenate(nf_steps) if nf_steps else [], pa.int64()),
                          "value": pa.array(np.concatenate(nf_values) if nf_values else [], pa.float64())})
    out = Facts(lo, hi, footer.file_lo, footer.file_hi, footer.num_rows, os.path.getsize(path),
                bool(len(all_steps) < 2 or np.all(np.diff(all_steps) > 0)), keys, nonfinite)
    # Arrow's allocator keeps the pages a whole part was decoded into (every column of the part)
    # unless asked: hand them back before detection reads its frames
    pa.default_memory_pool().release_unused()
    return out


def _ends(mask: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row index of the first and the last step each row of `mask` (keys × rows) marks."""
    if len(steps) < 2 or np.all(steps[1:] >= steps[:-1]):   # rows in step order: first/last True
        n = mask.shape[1]
        return mask.argmax(axis=1), n - 1 - mask[:, ::-1].argmax(axis=1)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    return np.where(mask, steps, big).argmin(axis=1), np.where(mask, steps, small).argmax(axis=1)


def _merge(a: list, b: list) -> list:
    """Facts of one key over two row groups."""
    out = [a[0] + b[0], min(a[1], b[1]), max(a[2], b[2]), a[3], a[4], a[5], a[6], float(np.fmin(a[7], b[7]))]
    if b[3] is not None and (a[3] is None or b[3] < a[3]):
        out[3:5] = b[3:5]
    if b[5] is not None and (a[5] is None or b[5] > a[5]):
        out[5:7] = b[5:7]
    return out


# --- writing the registry (inside the caller's transaction) --------------------------------------

def register(con: Connection, run_pk: int, path: Path, part: Facts) -> int:
    """Make `path` the run's stored history for [part.lo, part.hi); returns the new part id.

    Long rows and parts already in the range are cut out first. Call inside a transaction
    together with the watermark update.
    """
    root = root_of(con)
    if root is None:
        return _as_long_rows(con, run_pk, Path(path), part)
    con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?", [run_pk, part.lo, part.hi])
    cut(con, run_pk, part.lo, part.hi)
    return _insert(con, run_pk, str(Path(path).relative_to(root)), part)


def _as_long_rows(con: Connection, run_pk: int, path: Path, part: Facts) -> int:
    """A store that keeps no part files (a lake on S3): the part's values over [lo, hi) written as
    long rows, the downloaded file removed. Returns 0 (no part is registered)."""
    import pyarrow as pa

    from marinctl.store import metrics

    pf = open_part(path)
    steps_out, keys_out, values_out = [], [], []
    for steps, keep, cols in pf.chunks(sorted(pf.keys), part.lo, part.hi):
        for key, vals, valid in cols:
            m = valid & keep
            if m.any():
                steps_out.append(steps[m])
                values_out.append(vals[m])
                keys_out.append(np.full(int(m.sum()), key, dtype=object))
    batch = pa.table({"step": pa.array(np.concatenate(steps_out) if steps_out else [], pa.int64()),
                      "key": pa.array(np.concatenate(keys_out) if keys_out else [], pa.string()),
                      "value": pa.array(np.concatenate(values_out) if values_out else [], pa.float64())})
    metrics.replace_range(con, run_pk, batch, part.lo, part.hi)
    forget(path)
    path.unlink(missing_ok=True)
    return 0


def _insert(con: Connection, run_pk: int, rel: str, part: Facts) -> int:
    pid = dialect.new_id(con, "history_parts", "part_id")
    con.execute("INSERT INTO history_parts (part_id, run_pk, file, lo, hi, file_lo, file_hi, first_step, last_step,"
                " num_rows, bytes, sorted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [pid, run_pk, rel, part.lo, part.hi, part.file_lo, part.file_hi, part.first_step, part.last_step,
                 part.num_rows, part.bytes, part.sorted])
    engine.register(con, "_part_keys", part.keys)
    engine.register(con, "_part_nonfinite", part.nonfinite)
    try:
        dialect.intern(con, "metric_keys", "SELECT key FROM _part_keys")
        con.execute(f"INSERT INTO part_keys SELECT {pid}, k.key_id, {', '.join('p.' + c for c in _KEY_FACTS)}"
                    " FROM _part_keys p JOIN metric_keys k USING (key)")
        con.execute(f"INSERT INTO part_nonfinite SELECT {pid}, k.key_id, p.step, p.value"
                    " FROM _part_nonfinite p JOIN metric_keys k USING (key)")
    finally:
        con.unregister("_part_keys")
        con.unregister("_part_nonfinite")
    return pid


def cut(con: Connection, run_pk: int, lo: int, hi: int | None = None) -> None:
    """Remove steps [lo, hi) from the run's parts: parts inside go, a part straddling an end keeps
    its outside piece (same file, facts recomputed for the piece). Files are not touched."""
    top = 2 ** 62 if hi is None else int(hi)
    rows = con.execute("SELECT part_id, file, lo, hi FROM history_parts WHERE run_pk = ? AND hi > ? AND lo < ?",
                       [run_pk, lo, top]).fetchall()
    if not rows:
        return
    root = root_of(con)
    for pid, rel, plo, phi in rows:
        _delete(con, pid)
        for a, b in ((plo, lo), (top, phi)):
            if a < b and (root / rel).exists():
                _insert(con, run_pk, rel, facts(root / rel, a, b))


def _delete(con: Connection, pid: int) -> None:
    for table in ("history_parts", "part_keys", "part_nonfinite"):
        con.execute(f"DELETE FROM {table} WHERE part_id = ?", [pid])


def rewind(con: Connection, run_pk: int, at: int) -> None:
    """History from step `at` on was rewritten upstream: forget it (long rows deleted, parts clipped)."""
    con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ?", [run_pk, at])
    cut(con, run_pk, at, None)


# --- files on disk ---------------------------------------------------------------------------------

def collect_garbage(con: Connection, uid: str) -> int:
    """Delete the run's files no part names (a kill between download and commit, parts a rewind
    dropped, `.part` leftovers). Call under the run's sync lock. Returns files deleted."""
    root = root_of(con)
    if root is None:
        return 0
    folder = run_folder(root, uid)
    if not folder.is_dir():
        return 0
    keep = {r[0] for r in con.execute("SELECT file FROM history_parts").fetchall()}
    gone = 0
    for f in folder.iterdir():
        if f.is_file() and str(f.relative_to(root)) not in keep:
            forget(f)
            f.unlink(missing_ok=True)
            gone += 1
    return gone


def lost_from(con: Connection, run_pk: int) -> int | None:
    """The first step of a registered part whose file is gone or shorter than registered (None: all there)."""
    root = root_of(con)
    if root is None:
        return None
    lost = []
    for rel, lo, size in con.execute("SELECT file, lo, bytes FROM history_parts WHERE run_pk = ?", [run_pk]).fetchall():
        try:
            ok = (root / rel).stat().st_size == size
        except OSError:
            ok = False
        if not ok:
            lost.append(lo)
    return min(lost) if lost else None
