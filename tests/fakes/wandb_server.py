'''A W&B-compatible GraphQL server over SYNTHETIC runs, for tests and benchmarks (loopback only).

    with WandbServer(hero_lineage(300), faults=Faults(rate_limit_every=7)) as server:
        os.environ["WANDB_BASE_URL"] = server.url
        ...
        server.stats["HistoryPage"]   # requests per GraphQL operation name

Built on graphql-core with an SDL schema (SCHEMA_SDL below), so fragments, aliases and
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
  `stream="system"` asks for `events(samples:)`.

Conventions: times are ISO 8601 UTC with `Z`; `config` is a JSONString of
`{key: {"value": v, "desc": null}}` plus `_wandb`; `summaryMetrics`/`systemMetrics` are
JSONStrings; `historyKeys` is a JSON object; run cursors are base64("arrayconnection:N")
offsets; a fork child's history includes its parent's rows <= fork_step.
'''

from __future__ import annotations

import argparse
import base64
import json
import re
import shutil
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from graphql import (
    GraphQLError,
    GraphQLScalarType,
    build_schema,
    execute,
    parse,
    validate,
)
from graphql.utilities import value_from_ast_untyped

from .synth import SynthRun
from .wandb_history import HistoryView, sample_evenly

SCHEMA_SDL = r"""

scalar JSONString
scalar JSON
scalar Int64
scalar DateTime

type Query {
  viewer: User
  project(name: String, entityName: String): Project
  serverInfo: ServerInfo
  entity(name: String): Entity
}

type ServerInfo {
  features: [ServerFeature!]!
  cliVersionInfo: JSON
  latestLocalVersionInfo: LocalVersionInfo
}

type LocalVersionInfo {
  outOfDate: Boolean!
  latestVersionString: String!
  versionOnThisInstanceString: String!
}

type ServerFeature {
  name: String!
  isEnabled: Boolean!
}

type User {
  id: ID!
  name: String
  username: String
  email: String
  entity: String
  admin: Boolean
  flags: JSONString
  teams: EntityConnection
}

type EntityConnection {
  edges: [EntityEdge!]!
}

type EntityEdge {
  node: Entity
}

type Entity {
  id: ID!
  name: String!
}

type Project {
  id: ID!
  internalId: ID!
  name: String!
  entityName: String!
  readOnly: Boolean
  runCount(filters: JSONString): Int!
  runs(filters: JSONString, after: String, first: Int, order: String): RunConnection
  run(name: String!): Run
}

type RunConnection {
  totalCount: Int
  edges: [RunEdge!]!
  pageInfo: PageInfo!
}

type RunEdge {
  node: Run
  cursor: String!
}

type PageInfo {
  startCursor: String
  endCursor: String
  hasNextPage: Boolean!
  hasPreviousPage: Boolean!
}

type Run {
  id: ID!
  name: String!
  displayName: String
  sweepName: String
  state: String
  group: String
  jobType: String
  commit: String
  host: String
  readOnly: Boolean
  createdAt: DateTime
  heartbeatAt: DateTime
  updatedAt: DateTime
  description: String
  notes: String
  historyLineCount: Int
  tags: [String!]
  user: User
  projectId: Int
  project: Project
  config(keys: [String!]): JSONString
  summaryMetrics(keys: [String!]): JSONString
  systemMetrics: JSONString
  historyKeys(format: String): JSON
  history(minStep: Int64, maxStep: Int64, samples: Int): [String!]
  sampledHistory(specs: [JSONString!]!, packVersion: Int): [JSON]
  parquetHistory(liveKeys: [String!]!): ParquetHistory
  events(samples: Int): [String!]
}

type ParquetHistory {
  parquetUrls: [String!]!
  liveData: [JSON!]!
}
"""


def _schema():
    schema = build_schema(SCHEMA_SDL)

    def literal(node, _vars=None):
        return value_from_ast_untyped(node, _vars)

    def json_string_out(v):
        return v if isinstance(v, str) else json.dumps(v)

    def int64_in(v):
        return int(v)

    for name, ser, par in (
        ("JSONString", json_string_out, lambda v: v),
        ("JSON", lambda v: v, lambda v: v),
        ("Int64", int, int64_in),
        ("DateTime", lambda v: v, lambda v: v),
    ):
        t: GraphQLScalarType = schema.type_map[name]  # type: ignore[assignment]
        t.serialize = ser
        t.parse_value = par
        t.parse_literal = literal
    return schema


SCHEMA = _schema()


def iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cursor_of(offset: int) -> str:
    return base64.b64encode(f"arrayconnection:{offset}".encode()).decode()


def offset_of(cursor: str | None) -> int:
    """Offset just after the cursor's row (a cursor names the last row returned)."""
    if not cursor:
        return 0
    return int(base64.b64decode(cursor).decode().rsplit(":", 1)[1]) + 1


# --- Mongo-style run filters -------------------------------------------------------------

FIELD_ALIASES = {
    "name": "name", "displayName": "displayName", "display_name": "displayName", "group": "group",
    "jobType": "jobType", "job_type": "jobType", "state": "state", "tags": "tags",
    "createdAt": "createdAt", "created_at": "createdAt", "heartbeatAt": "heartbeatAt",
    "heartbeat_at": "heartbeatAt", "username": "username", "sweep": "sweep",
}


def _run_field(run: SynthRun, name: str) -> Any:
    if name.startswith("config."):
        cur: Any = run.config
        parts = name.split(".")[1:]
        if parts and parts[-1] == "value":
            parts = parts[:-1]
        for p in parts:
            cur = cur.get(p) if isinstance(cur, dict) else None
        return cur
    if name.startswith(("summary_metrics.", "summaryMetrics.")):
        return run.summary.get(name.split(".", 1)[1])
    f = FIELD_ALIASES.get(name)
    return {
        "name": run.run_id, "displayName": run.display_name, "group": run.group, "jobType": run.job_type,
        "state": run.state, "tags": run.tags, "createdAt": run.created_at, "heartbeatAt": run.heartbeat_at,
        "username": "synthetic-user", "sweep": None,
    }.get(f) if f else None


def _cmp_value(field_value: Any, operand: Any) -> tuple[Any, Any]:
    if isinstance(field_value, datetime) and isinstance(operand, str):
        s = operand.replace("Z", "+00:00")
        dt = datetime.fromisoformat(s)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return field_value, dt
    return field_value, operand


def _op(value: Any, op: str, operand: Any) -> bool:
    if isinstance(value, list) and op not in ("$exists", "$size"):  # tags: any element matches
        if op == "$nin":
            return not any(v in operand for v in value)
        if op == "$ne":
            return operand not in value
        return any(_op(v, op, operand) for v in value)
    if op == "$exists":
        return (value is not None) == bool(operand)
    if op == "$eq":
        return value == operand
    if op == "$ne":
        return value != operand
    if op == "$in":
        return value in operand
    if op == "$nin":
        return value not in operand
    if op == "$regex":
        return value is not None and re.search(operand, str(value)) is not None
    if value is None:
        return False
    a, b = _cmp_value(value, operand)
    try:
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    except (KeyError, TypeError):
        raise GraphQLError(f"unsupported filter operator {op}")


def matches(run: SynthRun, flt: dict[str, Any] | None) -> bool:
    """Evaluate a W&B (MongoDB-style) runs filter against a SYNTHETIC run."""
    if not flt:
        return True
    for k, cond in flt.items():
        if k == "$and":
            ok = all(matches(run, c) for c in cond)
        elif k == "$or":
            ok = any(matches(run, c) for c in cond)
        elif k == "$nor":
            ok = not any(matches(run, c) for c in cond)
        else:
            value = _run_field(run, k)
            if isinstance(cond, dict) and any(c.startswith("$") for c in cond):
                ok = all(_op(value, op, operand) for op, operand in cond.items())
            else:
                ok = _op(value, "$eq", cond)
        if not ok:
            return False
    return True


ORDER_FIELDS = {"created_at": "createdAt", "createdAt": "createdAt", "heartbeat_at": "heartbeatAt",
                "heartbeatAt": "heartbeatAt", "name": "name", "display_name": "displayName"}


def sort_runs(runs: list[SynthRun], order: str | None) -> list[SynthRun]:
    order = order or "-created_at"
    desc = order.startswith("-")
    name = order.lstrip("+-")
    fld = ORDER_FIELDS.get(name, name)
    return sorted(runs, key=lambda r: (_run_field(r, fld) is None, _run_field(r, fld), r.run_id), reverse=desc)


# --- resolvers (graphql-core calls a callable attribute as attr(info, **args)) -------------

class RunNode:
    """A SYNTHETIC run as the GraphQL `Run` type."""

    def __init__(self, server: "WandbServer", run: SynthRun):
        self._s = server
        self._r = run
        r = run
        self.id = base64.b64encode(f"Run:v1:{r.run_id}:{r.project}:{r.entity}".encode()).decode()
        self.name = r.run_id
        self.displayName = r.display_name
        self.sweepName = None
        self.state = r.state
        self.group = r.group
        self.jobType = r.job_type
        self.commit = r.config.get("git_commit")
        self.host = "synthetic-host"
        self.readOnly = False
        self.createdAt = iso(r.created_at)
        self.heartbeatAt = iso(r.heartbeat_at)
        self.updatedAt = iso(r.heartbeat_at)
        self.description = None
        self.notes = None
        self.tags = list(r.tags)
        self.user = {"id": "VXNlcjox", "name": "synthetic-user", "username": "synthetic-user"}
        self.projectId = zlib.crc32(f"{r.entity}/{r.project}".encode()) % 100_000

    def project(self, info):
        return ProjectNode(self._s, self._r.entity, self._r.project)

    def historyLineCount(self, info):
        return self._s.history.line_count(self._r)

    def config(self, info, keys=None):
        out = {k: {"value": v, "desc": None} for k, v in self._r.config.items() if keys is None or k in keys}
        if keys is None:
            out["_wandb"] = {"value": {"cli_version": "0.31.0", "is_synthetic": True, "t": {}}, "desc": None}
        return json.dumps(out)

    def summaryMetrics(self, info, keys=None):
        summary = {k: v for k, v in self._r.summary.items() if keys is None or k in keys}
        if keys is None:
            summary["_wandb"] = {"runtime": int(self._r.summary.get("_runtime", 0))}
        return json.dumps(summary)

    def systemMetrics(self, info):
        return json.dumps({"system.gpu.0.gpu": 97.0, "system.memory": 41.5})

    def historyKeys(self, info, format=None):
        return self._s.history.keys_info(self._r)

    def history(self, info, minStep=None, maxStep=None, samples=None):
        h = self._s.history
        if minStep is None and maxStep is None:
            rows = h.json_rows(self._r, -(2**62), 2**62)
            return sample_evenly(rows, 500 if samples is None else samples)
        lo = -(2**62) if minStep is None else int(minStep)
        hi = 2**62 if maxStep is None else int(maxStep)
        rows = h.json_rows(self._r, lo, hi)
        return rows if samples is None else rows[: max(int(samples), 0)]

    def sampledHistory(self, info, specs, packVersion=None):
        out = []
        for spec in specs:
            spec = json.loads(spec) if isinstance(spec, str) else spec
            out.append(self._s.history.sampled(self._r, spec))
        return out

    def parquetHistory(self, info, liveKeys):
        until = self._s.exported_until_of(self._r)
        urls = self._s.export_urls(self._r, until)
        live = self._s.history.rows(self._r, until, None, keys=[k for k in liveKeys if k != "_step"])
        if "_step" not in liveKeys:
            for row in live:
                row.pop("_step", None)
        return {"parquetUrls": urls, "liveData": live}

    def events(self, info, samples=None):
        rows = [json.dumps({"_timestamp": self._r.created_at.timestamp() + 15 * i, "_runtime": 15 * i,
                            "_wandb": True, "system.gpu.0.gpu": 97.0}) for i in range(10)]
        return rows


class ProjectNode:
    def __init__(self, server: "WandbServer", entity: str, name: str):
        self._s = server
        self.entityName = entity
        self.name = name
        self.internalId = base64.b64encode(f"Project:{entity}/{name}".encode()).decode()
        self.id = self.internalId
        self.readOnly = False

    def _runs(self, filters) -> list[SynthRun]:
        flt = json.loads(filters) if isinstance(filters, str) else (filters or {})
        return [r for r in self._s.runs.values()
                if r.entity == self.entityName and r.project == self.name and matches(r, flt)]

    def runCount(self, info, filters=None):
        return len(self._runs(filters))

    def runs(self, info, filters=None, after=None, first=None, order=None):
        selected = sort_runs(self._runs(filters), order)
        start = offset_of(after)
        n = 50 if first is None else int(first)
        page_index = self._s._next_listing_page()
        if self._s.faults.empty_page(page_index):
            return {"totalCount": len(selected), "edges": [],
                    "pageInfo": {"startCursor": after, "endCursor": after, "hasNextPage": True,
                                 "hasPreviousPage": start > 0}}
        chunk = selected[start:start + n]
        edges = [{"node": RunNode(self._s, r), "cursor": cursor_of(start + i)} for i, r in enumerate(chunk)]
        end = edges[-1]["cursor"] if edges else after
        return {"totalCount": len(selected), "edges": edges,
                "pageInfo": {"startCursor": edges[0]["cursor"] if edges else after, "endCursor": end,
                             "hasNextPage": start + len(chunk) < len(selected), "hasPreviousPage": start > 0}}

    def run(self, info, name):
        r = self._s.runs.get(name)
        if r is None or r.entity != self.entityName or r.project != self.name:
            return None
        return RunNode(self._s, r)


class Root:
    def __init__(self, server: "WandbServer"):
        self._s = server

    def viewer(self, info):
        if not info.context.get("auth"):
            return None  # W&B answers a missing/invalid key with viewer: null, not 401
        return {"id": "VXNlcjox", "name": "synthetic-user", "username": "synthetic-user",
                "email": "synthetic@example.invalid", "entity": self._s.default_entity, "admin": False,
                "flags": "{}", "teams": {"edges": [{"node": {"id": "RW50aXR5OjE=", "name": self._s.default_entity}}]}}

    def project(self, info, name=None, entityName=None):
        entity = entityName or self._s.default_entity
        if not any(r.entity == entity and r.project == name for r in self._s.runs.values()):
            return None
        return ProjectNode(self._s, entity, name)

    def entity(self, info, name=None):
        return {"id": "RW50aXR5OjE=", "name": name or self._s.default_entity}

    def serverInfo(self, info):
        return {"features": [], "cliVersionInfo": {"max_cli_version": "0.31.0"},
                "latestLocalVersionInfo": {"outOfDate": False, "latestVersionString": "0.0.0-synthetic",
                                           "versionOnThisInstanceString": "0.0.0-synthetic"}}


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
        if self.path.split("?")[0].rstrip("/") != "/graphql":
            self.owner._count("POST " + self.path)
            return self._send(404, b'{"error":"not found"}')
        status, body, headers, mode = self.owner.handle_graphql(raw, self.headers)
        if mode == "slow":
            time.sleep(self.owner.faults.slow_seconds)
        self._send(status, body, headers=headers, truncate=(mode == "truncate"))

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith("/files/"):
            self.owner._count("GET /files")
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


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class WandbServer:
    """W&B-compatible GraphQL server over SYNTHETIC runs on 127.0.0.1:<free port>.

    runs: the SynthRuns to serve (mutating them later is picked up: caches key on run.version).
    faults: a `Faults` schedule. exported_until: run_id -> first step NOT in the parquet
    export (default: whole history for finished runs, 80% for running ones).
    inherit_forks: serve a fork child's history with its parent's rows <= fork_step.
    """

    def __init__(self, runs: list[SynthRun], *, faults: Faults | None = None,
                 exported_until: dict[str, int] | None = None, inherit_forks: bool = True,
                 parquet_steps_per_file: int = 50_000, port: int = 0, verbose: bool = True):
        self.runs: dict[str, SynthRun] = {r.run_id: r for r in runs}
        self.faults = faults or Faults()
        self.exported_until = dict(exported_until or {})
        self.history = HistoryView(self.runs, inherit=inherit_forks)
        self.parquet_steps_per_file = parquet_steps_per_file
        self.default_entity = runs[0].entity if runs else "marin-community"
        self.stats: Counter[str] = Counter()
        self.requests: list[tuple[str, dict]] = []   # (operation, variables) in arrival order
        self.unknown: list[str] = []                 # validation errors: fields the schema lacks
        self.queries: dict[str, str] = {}            # operation name -> last query text seen
        self.auth_requests = 0
        self.verbose = verbose
        self._port = port
        self._lock = threading.Lock()
        self._index = 0
        self._listing_pages = 0
        self._docs: dict[str, Any] = {}
        self._exports: dict[str, tuple[tuple, list[Path]]] = {}
        self._files: dict[str, Path] = {}
        self._tmp: Path | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._rewind_done = False

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> "WandbServer":
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = _QuietServer(("127.0.0.1", self._port), handler)
        self._tmp = Path(tempfile.mkdtemp(prefix="synthetic-wandb-"))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="synthetic-wandb", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "WandbServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

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
    def _count(self, op: str) -> None:
        with self._lock:
            self.stats[op] += 1

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
            self.queries[op] = query
            self.requests.append((op, body.get("variables") or {}))
            self.auth_requests += int(auth)
        mode = self.faults.http_fault(index, op, op_index)
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
