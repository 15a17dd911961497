"""Which metric keys exist: by prefix, and which of them a run logged.

Light on purpose (DuckDB's core only: no numpy, no pyarrow, no parquet reads), so a shell's
TAB (cli/complete.py) answers without the imports a history read needs. A run's keys are the
key lists its parquet parts record (`part_keys`) and, for long rows, either one `LIMIT 1` probe
per key (rows are inserted ordered by key, so DuckDB's zone maps find a key's first row without
a scan) or, for more than PROBES keys, one `SELECT DISTINCT key_id` over the run's long rows: the
key column is run-length encoded, so that reads 81.6M rows in ~80 ms where 745 probes took
~550 ms (bench/bench_complete.py, 2 cores under load).
"""

from __future__ import annotations

from typing import Sequence

from marinctl.store import Connection

PROBES = 32             # up to this many keys, a probe each (~0.75 ms at hero scale); past it, one scan


def starting(con: Connection, prefix: str) -> list[str]:
    """Every stored metric key (of any run) that starts with `prefix`, sorted."""
    return [r[0] for r in con.execute("SELECT key FROM metric_keys WHERE starts_with(key, ?) ORDER BY key",
                                      [prefix]).fetchall()]


def logged(con: Connection, run_pks: Sequence[int], keys: Sequence[str]) -> set[str]:
    """Those of `keys` that these runs logged at least once (parts' key lists, then a probe per key)."""
    if not keys or not run_pks:
        return set()
    if len(keys) > PROBES:      # a long IN list costs more to plan (~30 ms for 745) than the whole table to read
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
    if len(ids) > PROBES:
        long = {r[0] for r in con.execute(f"SELECT DISTINCT key_id FROM metrics WHERE run_pk IN ({pks})").fetchall()}
        return {key for key, kid in ids.items() if kid in in_parts or kid in long}
    return {key for key, kid in ids.items()
            if kid in in_parts or con.execute(
                f"SELECT 1 FROM metrics WHERE key_id = ? AND run_pk IN ({pks}) LIMIT 1", [kid]).fetchall()}
