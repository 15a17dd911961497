'''A W&B-compatible GraphQL server over SYNTHETIC runs, for tests and benchmarks (loopback only).

    with WandbServer(hero_lineage(300), faults=Faults(rate_limit_every=7)) as server:
        os.environ["WANDB_BASE_URL"] = server.url
        ...
        server.stats["HistoryPage"]   # requests per GraphQL operation name

Built on graphql-core with an SDL schema (tests/fakes/wandb_schema.py), so fragments, aliases and
variables behave as on the real server.

What the wandb 0.31 SDK sends (found by running it against this server; queries the schema
cannot answer are recorded in `server.unknown` and printed to stderr, the last text of each
operation is kept in `server.queries`):

- `wandb.Api(api_key="x"*40, overrides={"base_url": url})` accepts a plain
  `http://127.0.0.1:PORT` base URL and needs no special headers. `Api()` itself sends
  `query Viewer { viewer { id entity username email flags teams { edges { node { name } } } } }`;
  `api.runs("e/p")` then sends `GetDefaultEntity { viewer { id entity } }` even with an explicit
  entity, and `Runs` (LightweightRunFragment, `$perPage` default 50, order `+created_at`).
  Touching `.config`/`.summary` sends `Run` with RunFragment (config systemMetrics
  summaryMetrics historyKeys ...). The key is sent as `Authorization: Basic base64("api:KEY")`.
- All of it goes through the spawned `wandb-core`; `wandb.teardown()` stops it.
- The SDK paginator stops at a runs page with no edges even when `hasNextPage` is true.
- `run.scan_history()`: `RunHistoryKeys` (lastStep), `RunParquetHistory(liveKeys: ["_step"])`
  (liveData must be a list of JSON objects; min `_step` marks the live boundary), a plain GET
  of each parquet URL into `$WANDB_CACHE_DIR/<entity>_<project>_<run>_<i>.runhistory.parquet`
  (reused when `use_cache=True`; the HTTP status is not checked, so a failed download caches an
  empty file that breaks later scans), then `HistoryPage` windows `[minStep, maxStep)` of
  `page_size` for windows reaching the live boundary. It appends the whole live window even
  where parquet already covered it, so steps between the window start and the boundary come
  back twice. Parquet rows carry None for keys not logged at that step; live rows omit them.
- `scan_history(keys=[...])` reads the parquet remotely with HTTP Range requests and, for the
  live part, sends `SampledHistoryPage` with spec `{"keys": [..., "_step"], "minStep": 0,
  "maxStep": lastStep, "samples": n}` over the whole range (duplicates again), and returns
  every parquet row (None where the key is missing), not only rows holding the keys.
- `run.history(samples=N)` sends `RunFullHistory { history(samples:) }` (JSON strings);
  with `keys=` it sends `RunSampledHistory { sampledHistory(specs:) }` (objects);
  `stream="system"` asks for `RunFullHistory { events(samples:) }` (JSON strings, `system.*` keys
  plus `_timestamp`, `_runtime`, `_wandb`; served by `wandb_history.system_events`).

Conventions: times are ISO 8601 UTC with `Z`; `config` is a JSONString of
`{key: {"value": v, "desc": null}}` plus `_wandb`; `summaryMetrics`/`systemMetrics` are
JSONStrings; `historyKeys` is a JSON object; run cursors are base64("arrayconnection:N")
offsets; a fork child's history includes its parent's rows <= fork_step.

Options that change what is served:
- `fork_from_first_logged` (on by default, as W&B serves forks): a fork child that logged the
  fork step itself (or earlier) is served its own rows from its first logged step and its
  parent's only below it (W&B's forking guide forks at `_step=200` and then logs 200, 201,
  ...). Off, the child's own rows start at `fork_step + 1` whatever it logged there.
- `on_request=fn`: `fn(op, n)` is called as request number `n` (from 0) of operation `op`
  arrives, before it is answered; `op` is a GraphQL operation name or "GET /files". Tests use
  it to act at a precise point of a client's sync (e.g. SIGKILL the client).
- `latency=S`: every request (GraphQL and file GETs) is answered S seconds late, as a real
  round trip would be (benchmarks of concurrent clients); requests wait side by side.
- `server.stats` counts requests per operation; `server.in_flight_max` is the most requests
  that were being answered at once (a bounded client's concurrency, seen from the server).
'''

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from graphql import GraphQLError, execute, parse, validate

from .loopback import Loopback
from .synth import SynthRun
from .wandb_history import HistoryView
from .wandb_schema import SCHEMA, Root

# --- faults ------------------------------------------------------------------------------

@dataclass
class Rewind:
    """At request `at_request`, truncate `run_id` to steps < `at_step` (lastStep goes back);
    `regrow_after` requests later, log those steps again with noise seed `seed`."""

    run_id: str
    at_step: int
    seed: int = 999
    at_request: int = 0
    regrow_after: int = 1


@dataclass
class Faults:
    """Deterministic fault schedule for HTTP-level faults.

    Request indexes count every POST /graphql from 0. When `ops` is set, only requests for
    those operation names get faults, and indexes count just those requests (so
    `Faults(rate_limit_every=2, ops=("HistoryPage",))` answers every 2nd HistoryPage with 429).
    `empty_pages` counts runs-listing pages (the `runs` connection) from 0.
    """

    rate_limit_every: int = 0            # every Nth request -> 429 + Retry-After / RateLimit-Reset
    rate_limits: list[tuple[int, int]] = field(default_factory=list)    # (first request index, count) -> 429
    retry_after: float = 1.0
    server_errors: list[tuple[int, int]] = field(default_factory=list)  # (first request index, count)
    server_error_status: int = 503
    slow_every: int = 0                  # every Nth request waits slow_seconds before answering
    slow_seconds: float = 0.0
    truncate_every: int = 0              # every Nth request: Content-Length larger than bytes sent, close
    graphql_error_every: int = 0         # every Nth request: HTTP 200 with an `errors` array
    empty_pages: tuple[int, ...] = ()    # runs-listing page indexes answered empty, hasNextPage true, cursor unchanged
    rewind: Rewind | None = None
    ops: tuple[str, ...] | None = None

    def empty_page(self, page_index: int) -> bool:
        return page_index in self.empty_pages

    def http_fault(self, index: int, op: str, op_index: int) -> str | None:
        if self.ops is not None:
            if op not in self.ops:
                return None
            index = op_index
        for first, count in self.server_errors:
            if first <= index < first + count:
                return "server_error"
        for first, count in self.rate_limits:
            if first <= index < first + count:
                return "rate_limit"

        def every(n: int) -> bool:
            return n > 0 and (index + 1) % n == 0

        if every(self.rate_limit_every):
            return "rate_limit"
        if every(self.graphql_error_every):
            return "graphql_error"
        if every(self.truncate_every):
            return "truncate"
        if every(self.slow_every):
            return "slow"
        return None


# --- HTTP --------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "synthetic-wandb/0"
    owner: "WandbServer"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None,
              truncate: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if truncate:
            self.send_header("Content-Length", str(len(body) + 1000))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with self.owner.answering():
            self._post(raw)

    def _post(self, raw: bytes) -> None:
        if self.path.split("?")[0].rstrip("/") != "/graphql":
            self.owner._count("POST " + self.path)
            return self._send(404, b'{"error":"not found"}')
        status, body, headers, mode = self.owner.handle_graphql(raw, self.headers)
        if mode == "slow":
            time.sleep(self.owner.faults.slow_seconds)
        self._send(status, body, headers=headers, truncate=(mode == "truncate"))

    def do_GET(self) -> None:
        with self.owner.answering():
            self._get()

    def _get(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith("/files/"):
            n = self.owner._count("GET /files")
            self.owner._notify("GET /files", n)
            f = self.owner.file_path(path[len("/files/"):])
            if f is None:
                return self._send(404, b"not found", "text/plain")
            data = f.read_bytes()
            rng = self.headers.get("Range")
            m = re.match(r"bytes=(\d*)-(\d*)$", rng or "")
            if m:
                a, b = m.groups()
                if a == "":
                    start, end = max(len(data) - int(b), 0), len(data) - 1
                else:
                    start, end = int(a), (int(b) if b else len(data) - 1)
                end = min(end, len(data) - 1)
                return self._send(206, data[start:end + 1], "application/octet-stream",
                                  {"Content-Range": f"bytes {start}-{end}/{len(data)}", "Accept-Ranges": "bytes"})
            return self._send(200, data, "application/octet-stream", {"Accept-Ranges": "bytes"})
        self.owner._count("GET " + path)
        if path in ("/", "/healthz"):
            return self._send(200, b'{"ok":true,"synthetic":true}')
        self.owner.unknown.append(f"GET {path}")
        return self._send(404, b"not found", "text/plain")

    do_HEAD = do_GET


class WandbServer:
    """W&B-compatible GraphQL server over SYNTHETIC runs on 127.0.0.1:<free port>.

    runs: the SynthRuns to serve (mutating them later is picked up: caches key on run.version).
    faults: a `Faults` schedule. exported_until: run_id -> first step NOT in the parquet
    export (default: whole history for finished runs, 80% for running ones).
    inherit_forks: serve a fork child's history with its parent's rows <= fork_step.
    """

    def __init__(self, runs: list[SynthRun], *, faults: Faults | None = None,
                 exported_until: dict[str, int] | None = None, inherit_forks: bool = True,
                 parquet_steps_per_file: int = 50_000, port: int = 0, verbose: bool = True,
                 fork_from_first_logged: bool = True, on_request=None, latency: float = 0.0):
        self.runs: dict[str, SynthRun] = {r.run_id: r for r in runs}
        self.faults = faults or Faults()
        self.exported_until = dict(exported_until or {})
        self.history = HistoryView(self.runs, inherit=inherit_forks, fork_from_first_logged=fork_from_first_logged)
        self.on_request = on_request
        self.latency = latency
        self.in_flight = 0
        self.in_flight_max = 0
        self.parquet_steps_per_file = parquet_steps_per_file
        self.default_entity = runs[0].entity if runs else "marin-community"
        self.stats: Counter[str] = Counter()
        self.requests: list[tuple[str, dict]] = []   # (operation, variables) in arrival order
        self.unknown: list[str] = []                 # validation errors: fields the schema lacks
        self.queries: dict[str, str] = {}            # operation name -> last query text seen
        self.auth_requests = 0
        self.faulted: set[tuple[str, int]] = set()   # (operation, its request number) answered with a fault
        self.verbose = verbose
        self._port = port
        self._lock = threading.Lock()
        self._index = 0
        self._listing_pages = 0
        self._docs: dict[str, Any] = {}
        self._exports: dict[str, tuple[tuple, list[Path]]] = {}
        self._files: dict[str, Path] = {}
        self._tmp: Path | None = None
        self._loop: Loopback | None = None
        self._rewind_done = False

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> "WandbServer":
        handler = type("Handler", (_Handler,), {"owner": self})
        self._loop = Loopback(handler, name="synthetic-wandb", port=self._port).start()
        self._tmp = Path(tempfile.mkdtemp(prefix="synthetic-wandb-"))
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "WandbServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._loop is not None, "server not started"
        return self._loop.url

    @contextlib.contextmanager
    def answering(self):
        """One request being answered: counted in flight, delayed by `latency`."""
        with self._lock:
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            if self.latency > 0:
                time.sleep(self.latency)
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    # --- data control ------------------------------------------------------------------
    def add_run(self, run: SynthRun) -> None:
        self.runs[run.run_id] = run

    def truncate(self, run_id: str, at_step: int) -> None:
        with self._lock:
            self.runs[run_id].truncate(at_step)

    def regrow(self, run_id: str, to_step: int, seed: int) -> None:
        with self._lock:
            self.runs[run_id].extend(to_step, seed=seed)

    def exported_until_of(self, run: SynthRun) -> int:
        if run.run_id in self.exported_until:
            return self.exported_until[run.run_id]
        last = self.history.last_step(run)
        if run.state == "running":
            return int(0.8 * (last + 1))
        return last + 1

    def export_urls(self, run: SynthRun, until: int) -> list[str]:
        """Parquet partitions of served steps < until, written once per data version."""
        key = (self.history.version(run), until)
        with self._lock:
            cached = self._exports.get(run.run_id)
            if cached is None or cached[0] != key:
                assert self._tmp is not None
                folder = self._tmp / f"{run.run_id}-v{abs(hash(key)) % 10**8}"
                files = self.history.write_parquet(run, until, folder, self.parquet_steps_per_file)
                for f in files:
                    self._files[f"{folder.name}/{f.name}"] = f
                cached = self._exports[run.run_id] = (key, files)
        return [f"{self.url}/files/{f.parent.name}/{f.name}" for f in cached[1]]

    def file_path(self, name: str) -> Path | None:
        return self._files.get(name)

    # --- request handling --------------------------------------------------------------
    def _count(self, op: str) -> int:
        """Count one request of `op`; returns its number (from 0) among requests of `op`."""
        with self._lock:
            self.stats[op] += 1
            return self.stats[op] - 1

    def _notify(self, op: str, n: int) -> None:
        if self.on_request is not None:
            self.on_request(op, n)

    def _next_listing_page(self) -> int:
        with self._lock:
            self._listing_pages += 1
            return self._listing_pages - 1

    def _document(self, query: str):
        doc = self._docs.get(query)
        if doc is None:
            doc = parse(query)
            errors = validate(SCHEMA, doc)
            if errors:
                msgs = [e.message for e in errors]
                self.unknown.extend(msgs)
                if self.verbose:
                    print(f"[synthetic-wandb] rejected query: {msgs}\n{query}", file=sys.stderr)
                return None, msgs
            self._docs[query] = doc
        return doc, None

    def _maybe_rewind(self, index: int) -> None:
        rw = self.faults.rewind
        if rw is None or rw.run_id not in self.runs:
            return
        if index == rw.at_request:
            run = self.runs[rw.run_id]
            rw_last = run.last_step
            self._rewind_last = rw_last
            self.truncate(rw.run_id, rw.at_step)
        elif index == rw.at_request + rw.regrow_after and getattr(self, "_rewind_last", None) is not None:
            self.regrow(rw.run_id, self._rewind_last, rw.seed)
            self._rewind_last = None

    def handle_graphql(self, raw: bytes, headers) -> tuple[int, bytes, dict, str | None]:
        with self._lock:
            index = self._index
            self._index += 1
        self._maybe_rewind(index)
        try:
            body = json.loads(raw or b"{}")
            query = body["query"]
        except (ValueError, KeyError, TypeError):
            self._count("<bad request>")
            return 400, b'{"errors":[{"message":"bad request"}]}', {}, None
        auth = (headers.get("Authorization") or "").startswith(("Basic ", "Bearer "))
        try:
            doc, errors = self._document(query)
        except GraphQLError as exc:
            doc, errors = None, [exc.message]
        op = body.get("operationName")
        if doc is not None and not op:
            op = next((d.name.value for d in doc.definitions
                       if getattr(d, "operation", None) is not None and d.name is not None), None)
        op = op or "<anonymous>"
        with self._lock:
            op_index = sum(self.stats[o] for o in (self.faults.ops or ()))
            self.stats[op] += 1
            op_number = self.stats[op] - 1
            self.queries[op] = query
            self.requests.append((op, body.get("variables") or {}))
            self.auth_requests += int(auth)
        self._notify(op, op_number)
        mode = self.faults.http_fault(index, op, op_index)
        if mode in ("server_error", "rate_limit", "graphql_error", "truncate"):
            with self._lock:
                self.faulted.add((op, op_number))
        if mode == "server_error":
            return self.faults.server_error_status, b'{"errors":[{"message":"synthetic server error"}]}', {}, None
        if mode == "rate_limit":
            ra = self.faults.retry_after
            return 429, b'{"errors":[{"message":"Rate limit exceeded"}]}', {
                "Retry-After": f"{ra:g}", "RateLimit-Limit": "1000", "RateLimit-Remaining": "0",
                "RateLimit-Reset": f"{ra:g}"}, None
        if mode == "graphql_error":
            return 200, json.dumps({"data": None, "errors": [
                {"message": "synthetic transient error", "path": []}]}).encode(), {}, None
        if doc is None:
            return 400, json.dumps({"errors": [{"message": m} for m in errors or []]}).encode(), {}, None
        result = execute(SCHEMA, doc, root_value=Root(self), context_value={"auth": auth, "server": self},
                         variable_values=body.get("variables") or {}, operation_name=body.get("operationName") or None)
        out: dict[str, Any] = {"data": result.data}
        if result.errors:
            out["errors"] = [e.formatted for e in result.errors]
            if self.verbose:
                print(f"[synthetic-wandb] {op} errors: {[e.message for e in result.errors]}", file=sys.stderr)
        return 200, json.dumps(out, separators=(",", ":")).encode(), {}, mode


# --- command line -------------------------------------------------------------------------

def preset(name: str) -> list[SynthRun]:
    from .synth import hero_lineage, ladder_runs, marin_run

    if name == "hero-small":
        return hero_lineage(300) + ladder_runs(400)
    if name == "hero-medium":
        return hero_lineage(5000, extra_scalar_keys=40, layers=8) + ladder_runs(2000)
    if name == "hero-400k":  # one hero-scale run: 400k steps, ~150 dense keys, ~600 watch keys
        return [marin_run("hero-synthetic-400k", steps=400_000, layers=27, extra_scalar_keys=120)]
    raise SystemExit(f"unknown preset {name!r}: use hero-small, hero-medium or hero-400k")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve SYNTHETIC Marin-shaped runs over W&B's GraphQL API (loopback).")
    ap.add_argument("--runs", default="hero-small", help="hero-small | hero-medium | hero-400k")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until Ctrl-C)")
    args = ap.parse_args(argv)
    runs = preset(args.runs)
    with WandbServer(runs, port=args.port) as server:
        print(server.url, flush=True)
        try:
            if args.seconds > 0:
                time.sleep(args.seconds)
            else:
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass
        print(json.dumps(dict(server.stats)), file=sys.stderr)


if __name__ == "__main__":
    main()
