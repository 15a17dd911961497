"""Where the live tail's time goes: GraphQL `history` windows decoded into long rows (PROFILE).

After the parquet exports, a full sync still fetches the live tail (5,000 steps of the
SYNTHETIC hero-shaped run, ~224 values a step) as JSON rows. Per stage, summed over the
windows today's sync asks for: waiting on the server (first pass: the fake builds the JSON;
second pass: its cache answers, so that is transfer alone), the outer GraphQL JSON decode,
the per-row JSON decode (stdlib json vs orjson, if installed), `batch_from_rows`, and the
store commit (one transaction per window, as today, vs one for the whole tail).

    python bench/profile_tail.py [--steps 20000] [--tail 5000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from bench.harness import FakeServer  # noqa: E402
from marinctl.sources.wandb import HISTORY_QUERY  # noqa: E402
from marinctl.store import Store  # noqa: E402
from marinctl.store import metrics as M  # noqa: E402


def windows(lo: int, hi: int) -> list[tuple[int, int]]:
    """The windows today's sync asks for: 1,000 steps, then ~200k values a page (~890 steps here)."""
    out, a, size = [], lo, 1000
    while a < hi:
        out.append((a, min(a + size, hi)))
        a += size
        size = 892
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--tail", type=int, default=5_000)
    args = ap.parse_args()
    try:
        import orjson
    except ImportError:
        orjson = None
    with FakeServer(args.steps, args.tail) as fs, httpx.Client(timeout=120) as http, \
            tempfile.TemporaryDirectory() as home:
        wins = windows(args.steps - args.tail, args.steps)
        for pass_no in (1, 2):
            t = dict.fromkeys(["server+transfer", "outer json", "rows json", "rows orjson", "batch_from_rows",
                               "commit per window", "commit once"], 0.0)
            batches, values = [], 0
            for lo, hi in wins:
                body = {"query": HISTORY_QUERY, "variables": {"entity": "marin-community", "project": "marin_moe",
                                                              "run": fs.run_id, "minStep": lo, "maxStep": hi,
                                                              "pageSize": hi - lo}}
                a = time.perf_counter()
                raw = http.post(f"{fs.url}/graphql", json=body).content
                b = time.perf_counter()
                page = json.loads(raw)["data"]["project"]["run"]["history"]
                c = time.perf_counter()
                rows = [json.loads(r) for r in page]
                d = time.perf_counter()
                if orjson is not None:
                    [orjson.loads(r) for r in page]
                e = time.perf_counter()
                batch = M.batch_from_rows(rows)
                f = time.perf_counter()
                t["server+transfer"] += b - a
                t["outer json"] += c - b
                t["rows json"] += d - c
                t["rows orjson"] += e - d
                t["batch_from_rows"] += f - e
                batches.append((lo, hi, batch))
                values += batch.num_rows
            for mode in ("commit per window", "commit once"):
                store = Store(Path(home) / f"{mode.replace(' ', '_')}{pass_no}.duckdb")
                store.ensure_schema()
                with store.transaction() as con:
                    con.execute("INSERT INTO runs (uid, source, run_id) VALUES ('x', 'wandb', 'x')")
                a = time.perf_counter()
                if mode == "commit per window":
                    for lo, hi, batch in batches:
                        with store.transaction() as con:
                            M.replace_range(con, 1, batch, lo, hi, existing_last_step=lo - 1)
                else:
                    import pyarrow as pa

                    with store.transaction() as con:
                        M.replace_range(con, 1, pa.concat_tables([x[2] for x in batches]), wins[0][0], wins[-1][1],
                                        existing_last_step=wins[0][0] - 1)
                t[mode] = time.perf_counter() - a
            print(f"pass {pass_no} ({'server builds JSON' if pass_no == 1 else 'server cache warm'}): "
                  f"{len(wins)} windows, {args.tail:,} steps, {values:,} values")
            for k, v in t.items():
                print(f"  {k:20} {v:6.2f} s")


if __name__ == "__main__":
    main()
