"""The GraphQL side of the fake W&B server: SDL schema, scalars, run filters and resolvers.

The schema is the subset of W&B's public API that the wandb 0.31 SDK (Python and
wandb-core) and marinctl send (see tests/fakes/wandb_server.py for what was observed).
graphql-core's default resolver calls a callable attribute as `attr(info, **args)`, so each
GraphQL type is a small Python class whose methods take the field's arguments.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from graphql import GraphQLError, GraphQLScalarType, build_schema
from graphql.utilities import value_from_ast_untyped

from .synth import SynthRun
from .wandb_history import sample_evenly, system_events

if TYPE_CHECKING:
    from .wandb_server import WandbServer

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
        return system_events(self._r, samples)


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
