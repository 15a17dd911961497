"""Which metric keys exist: by prefix, and which of them a run logged.

Light on purpose (DuckDB's core only: no numpy, no pyarrow, no parquet reads), so a shell's
TAB (cli/complete.py) answers without the imports a history read needs. A run's keys are, in
order of cost: the key lists its parquet parts record (`part_keys`); the keys of its newest
TAIL_STEPS steps of long rows (rows go in by step window, so zone maps keep that read to the
last window: most keys of a live run are there); then, for what is left, one `LIMIT 1` probe per
key (rows of a window are ordered by key: zone maps find a key's first row without a scan) or,
past PROBES keys, one `SELECT DISTINCT key_id` over the run's long rows — the order of what each
costs on a hero-sized run (bench/NOTES.md, "Completion").
"""

from __future__ import annotations

from typing import Sequence

from marinctl.store import Connection

PROBES = 32             # up to this many keys, a probe each; past it, one scan
TAIL_STEPS = 5_000      # the newest steps read first


def starting(con: Connection, prefix: str) -> list[str]:
    """Every stored metric key (of any run) that starts with `prefix`, sorted."""
    return [r[0] for r in con.execute("SELECT key FROM metric_keys WHERE starts_with(key, ?) ORDER BY key",
                                      [prefix]).fetchall()]


def logged(con: Connection, run_pks: Sequence[int], keys: Sequence[str]) -> set[str]:
    """Those of `keys` that these runs logged at least once (parts' key lists, then a probe per key)."""
    if not keys or not run_pks:
        return set()
    if len(keys) > PROBES:      # a long IN list costs more to plan than the whole table costs to read
        wanted = set(keys)
        ids = {k: i for k, i in con.execute("SELECT key, key_id FROM metric_keys").fetchall() if k in wanted}
    else:
        ids = dict(con.execute(f"SELECT key, key_id FROM metric_keys WHERE key IN ({','.join('?' * len(keys))})",
                               list(keys)).fetchall())
    if not ids:
        return set()
    pks = ",".join(str(int(p)) for p in run_pks)
    in_parts = {r[0] for r in con.execute(
        f"SELECT DISTINCT key_id FROM part_keys WHERE key_id IN ({','.join(str(int(i)) for i in ids.values())})"
        f" AND part_id IN (SELECT part_id FROM history_parts WHERE run_pk IN ({pks}))").fetchall()}
    found = {key for key, kid in ids.items() if kid in in_parts}
    rest = {key: kid for key, kid in ids.items() if key not in found}
    if len(rest) > PROBES:
        recent = _recent(con, run_pks)
        found |= {key for key, kid in rest.items() if kid in recent}
        rest = {key: kid for key, kid in rest.items() if kid not in recent}
    if len(rest) > PROBES:
        long = {r[0] for r in con.execute(f"SELECT DISTINCT key_id FROM metrics WHERE run_pk IN ({pks})").fetchall()}
        return found | {key for key, kid in rest.items() if kid in long}
    return found | {key for key, kid in rest.items() if con.execute(
        f"SELECT 1 FROM metrics WHERE key_id = ? AND run_pk IN ({pks}) LIMIT 1", [kid]).fetchall()}


def _recent(con: Connection, run_pks: Sequence[int]) -> set[int]:
    """Key ids of the runs' long rows in their newest TAIL_STEPS steps (each run's own last step)."""
    lasts = con.execute(f"SELECT run_pk, last_step FROM runs WHERE run_pk IN ({','.join(str(int(p)) for p in run_pks)})"
                        " AND last_step IS NOT NULL").fetchall()
    if not lasts:
        return set()
    where = " OR ".join(f"(run_pk = {int(pk)} AND step >= {int(last) - TAIL_STEPS})" for pk, last in lasts)
    return {r[0] for r in con.execute(f"SELECT DISTINCT key_id FROM metrics WHERE {where}").fetchall()}
