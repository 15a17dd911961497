"""W&B's public GraphQL API over plain httpx: list runs, read metadata, full history and system metrics.

Why not the wandb SDK: since 0.27 `wandb.Api()` spawns a `wandb-core` process, needs
an API key even for public projects, and yields history one Python dict at a time.
marinctl speaks the same GraphQL (the SDK's queries: `wandb/apis/public/runs.py`,
`core/api/graphql/query_runhistory_backend.graphql`, `query_parquethistory.graphql` in
wandb/wandb) and hands history to
DuckDB in bulk. Public projects are read anonymously; `WANDB_API_KEY` or the netrc entry
`wandb login` wrote is sent as HTTP basic auth `api:KEY` when present, and never printed.
"""

from __future__ import annotations

import json
import netrc
import os
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator
from urllib.parse import urlparse

import httpx
import orjson
from tenacity import Retrying, retry_if_exception_type

from marinctl import __version__
from marinctl.domain import RunInfo
from marinctl.errors import RuntimeFailure, Unreachable, UserError
from marinctl.sources.forks import find_fork
from marinctl.sources.http import (Concurrency, Pacer, Retryable, RetryStop, RetryWait, announce, network_failure,
                                   say_retry, server_wait)

DEFAULT_BASE_URL = "https://api.wandb.ai"
CONCURRENCY = 8   # requests in flight at once (a project's runs fetched side by side); MARINCTL_WANDB_CONCURRENCY
CLOUD_HOSTS = ("api.wandb.ai", "api.forge.coreweave.com")

RUN_FIELDS = """
    id name displayName state group jobType createdAt heartbeatAt updatedAt tags
    historyLineCount config summaryMetrics historyKeys
"""

RUNS_QUERY = f"""
query Runs($project: String!, $entity: String!, $cursor: String, $perPage: Int, $order: String, $filters: JSONString) {{
  project(name: $project, entityName: $entity) {{
    runCount(filters: $filters)
    runs(filters: $filters, after: $cursor, first: $perPage, order: $order) {{
      edges {{ node {{ {RUN_FIELDS} }} cursor }}
      pageInfo {{ endCursor hasNextPage }}
    }}
  }}
}}
"""

RUN_QUERY = f"""
query Run($project: String!, $entity: String!, $name: String!) {{
  project(name: $project, entityName: $entity) {{
    run(name: $name) {{ {RUN_FIELDS} }}
  }}
}}
"""

HISTORY_QUERY = """
query HistoryPage($entity: String!, $project: String!, $run: String!, $minStep: Int64!, $maxStep: Int64!, $pageSize: Int!) {
  project(name: $project, entityName: $entity) {
    run(name: $run) { history(minStep: $minStep, maxStep: $maxStep, samples: $pageSize) }
  }
}
"""

TIMESTAMPS_QUERY = """
query RunTimestamps($entity: String!, $project: String!, $run: String!, $specs: [JSONString!]!) {
  project(name: $project, entityName: $entity) {
    run(name: $run) { sampledHistory(specs: $specs) }
  }
}
"""

PARQUET_QUERY = """
query RunParquetHistory($entity: String!, $project: String!, $runName: String!, $liveKeys: [String!]!) {
  project(name: $project, entityName: $entity) {
    run(name: $runName) { parquetHistory(liveKeys: $liveKeys) { parquetUrls liveData } }
  }
}
"""

EVENTS_QUERY = """
query RunSystemEvents($entity: String!, $project: String!, $name: String!, $samples: Int) {
  project(name: $project, entityName: $entity) {
    run(name: $name) { events(samples: $samples) }
  }
}
"""
SYSTEM_SAMPLES = 500   # what the SDK's `run.history(stream="system")` asks for; W&B samples the stream down to it


def _run_node(data: dict[str, Any], entity: str, project: str, run_id: str) -> dict[str, Any]:
    """The `project { run { … } }` node of a per-run query's answer; a missing run is named."""
    run = (data.get("project") or {}).get("run")
    if run is None:
        raise UserError(f"W&B run {entity}/{project}/{run_id} not found")
    return run


def api_key(base_url: str) -> str | None:
    """WANDB_API_KEY, else the netrc entry for the API host (as `wandb login` writes it)."""
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"].strip()
    host = urlparse(base_url).hostname or ""
    try:
        auth = netrc.netrc(os.environ.get("NETRC") or None)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return None
    for machine in (host, "api.wandb.ai"):
        entry = auth.authenticators(machine)
        if entry and entry[2]:
            return entry[2]
    return None


def base_url() -> str:
    return (os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


@dataclass
class ParquetHistory:
    urls: list[str]
    live_rows: list[dict[str, Any]]


class WandbClient:
    """A small, polite GraphQL client. All failures surface as marinctl errors."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        pace: float | None = None,
        max_attempts: int | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        concurrency: int | None = None,
    ):
        self.base_url = (url or base_url()).rstrip("/")
        key = key if key is not None else api_key(self.base_url)
        self._has_key = bool(key)
        if pace is None:
            env = os.environ.get("MARINCTL_WANDB_PACE")
            is_cloud = urlparse(self.base_url).hostname in CLOUD_HOSTS
            pace = float(env) if env else (0.5 if is_cloud else 0.0)
        self._pacer = Pacer(pace)
        self._max_attempts = max_attempts or int(os.environ.get("MARINCTL_HTTP_ATTEMPTS", "8"))
        concurrency = concurrency or int(os.environ.get("MARINCTL_WANDB_CONCURRENCY") or CONCURRENCY)
        self.slots = Concurrency(concurrency)
        self._count = threading.Lock()
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            auth=("api", key) if key else None,
            headers={"User-Agent": f"marinctl/{__version__}"},
            transport=transport,
            follow_redirects=True,
        )
        self.requests = 0
        self.http_seconds = 0.0  # time spent waiting on the server (diagnostics, bench)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "WandbClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------
    def _post_once(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        with self.slots.slot():
            self._pacer.wait()
            announce("W&B", self.base_url)
            t0 = time.perf_counter()
            try:
                resp = self._client.post(f"{self.base_url}/graphql", json={"query": query, "variables": variables})
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                raise Retryable(network_failure(exc, self.base_url)) from exc
            finally:
                with self._count:
                    self.requests += 1
                    self.http_seconds += time.perf_counter() - t0
        if resp.status_code == 429:
            wait = server_wait(resp.headers) or 2.0
            self._pacer.hold(min(wait, RetryWait().cap))   # every thread of this client waits it out
            self.slots.throttle()
            raise Retryable("rate limited (429)", wait)
        if resp.status_code in (401, 403):
            who = "the API key from WANDB_API_KEY/netrc" if self._has_key else "anonymous access"
            raise RuntimeFailure(
                f"W&B rejected {who} (HTTP {resp.status_code}) at {self.base_url}",
                "check the key with `wandb login --verify`, or unset WANDB_API_KEY for public projects",
            )
        if resp.status_code >= 500 or resp.status_code == 408:
            raise Retryable(f"server error {resp.status_code}", server_wait(resp.headers))
        if resp.status_code >= 400:
            raise RuntimeFailure(f"W&B answered HTTP {resp.status_code} at {self.base_url}/graphql")
        try:
            payload = loads(resp.content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise Retryable("truncated or malformed response body") from exc
        if not isinstance(payload, dict):
            raise Retryable("unexpected response shape")
        errors = payload.get("errors")
        if errors:
            messages = "; ".join(str(e.get("message", e)) for e in errors if isinstance(e, dict)) or str(errors)
            if re.search(r"not found|does not exist|could not find", messages, re.I):
                raise UserError(f"W&B: {messages}", "check the name; list runs you have with `marinctl runs`")
            raise Retryable(f"GraphQL error: {messages[:200]}")
        if "data" not in payload:
            raise Retryable("response without data")
        self.slots.relax()
        return payload["data"]

    def graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        retrying = Retrying(
            retry=retry_if_exception_type(Retryable),
            wait=RetryWait(),
            stop=RetryStop(self._max_attempts),
            before_sleep=say_retry("W&B", self.base_url, self._max_attempts),
            reraise=True,
        )
        try:
            return retrying(self._post_once, query, variables)
        except Retryable as exc:
            raise Unreachable(
                f"W&B at {self.base_url} kept failing ({exc}); nothing stored was lost",
                "run the same `marinctl sync` again later; it resumes where it stopped",
            ) from exc

    # -- runs --------------------------------------------------------------------------
    def list_runs(
        self,
        entity: str,
        project: str,
        *,
        filters: dict[str, Any] | None = None,
        order: str = "+created_at",
        per_page: int = 100,
    ) -> Iterator[RunInfo]:
        """Every run matching `filters`, de-duplicated by name (cursors are offsets, pages can shift)."""
        for page, _ in self.list_pages(entity, project, filters=filters, order=order, per_page=per_page):
            yield from page

    def list_pages(
        self,
        entity: str,
        project: str,
        *,
        filters: dict[str, Any] | None = None,
        order: str = "+created_at",
        per_page: int = 100,
    ) -> Iterator[tuple[list[RunInfo], int | None]]:
        """The listing page by page: (runs new on this page, the server's count of matching runs).
        One request per page; a page holds each run's metadata and nothing of its history."""
        seen: set[str] = set()
        cursor: str | None = None
        stalled = 0
        while True:
            data = self.graphql(RUNS_QUERY, {
                "entity": entity, "project": project, "cursor": cursor, "perPage": per_page,
                "order": order, "filters": json.dumps(filters or {}),
            })
            proj = data.get("project")
            if proj is None:
                raise UserError(
                    f"W&B project {entity}/{project} not found (or not public)",
                    f"check it at https://wandb.ai/{entity}/{project}; list mirrored runs with `marinctl runs`",
                )
            runs = proj["runs"]
            page = []
            for edge in runs.get("edges") or []:
                node = edge.get("node") or {}
                if node.get("name") in seen:
                    continue
                seen.add(node["name"])
                page.append(parse_run(node, entity, project))
            count = proj.get("runCount")
            yield page, int(count) if isinstance(count, int) else None
            info = runs.get("pageInfo") or {}
            if not info.get("hasNextPage"):
                return
            next_cursor = info.get("endCursor")
            stalled = stalled + 1 if next_cursor == cursor else 0
            if stalled >= 3:  # a cursor that never advances would loop forever
                return
            cursor = next_cursor

    def run(self, entity: str, project: str, run_id: str) -> RunInfo:
        data = self.graphql(RUN_QUERY, {"entity": entity, "project": project, "name": run_id})
        proj = data.get("project")
        if proj is None:
            raise UserError(f"W&B project {entity}/{project} not found (or not public)",
                            f"check it at https://wandb.ai/{entity}/{project}")
        node = proj.get("run")
        if node is None:
            raise UserError(f"W&B run {entity}/{project}/{run_id} not found",
                            f"list the project's runs with `marinctl sync {entity}/{project}` then `marinctl runs`")
        return parse_run(node, entity, project)

    # -- history -----------------------------------------------------------------------
    def history(self, entity: str, project: str, run_id: str, min_step: int, max_step: int) -> list[dict[str, Any]]:
        """Full rows with min_step <= _step < max_step (an empty window is not the end)."""
        data = self.graphql(HISTORY_QUERY, {
            "entity": entity, "project": project, "run": run_id,
            "minStep": int(min_step), "maxStep": int(max_step), "pageSize": int(max_step - min_step),
        })
        run = _run_node(data, entity, project, run_id)
        rows = []
        for raw in run.get("history") or []:
            row = loads(raw) if isinstance(raw, str) else raw
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def timestamps(self, entity: str, project: str, run_id: str, min_step: int, max_step: int) -> dict[int, float]:
        """{step: _timestamp} for min_step <= _step < max_step: two keys per row, not whole rows
        (how a sync finds where W&B rewrote history). A window is asked for with one more sample
        than it can hold steps, so nothing is sampled away."""
        spec = {"keys": ["_step", "_timestamp"], "minStep": int(min_step), "maxStep": int(max_step) - 1,
                "samples": int(max_step - min_step) + 1}
        data = self.graphql(TIMESTAMPS_QUERY, {"entity": entity, "project": project, "run": run_id,
                                               "specs": [json.dumps(spec)]})
        run = _run_node(data, entity, project, run_id)
        out: dict[int, float] = {}
        for rows in run.get("sampledHistory") or []:
            for row in rows or []:
                row = loads(row) if isinstance(row, str) else row
                if isinstance(row, dict) and row.get("_step") is not None and row.get("_timestamp") is not None:
                    step = int(row["_step"])
                    if min_step <= step < max_step:
                        out[step] = float(row["_timestamp"])
        return out

    def system_events(self, entity: str, project: str, run_id: str,
                      samples: int = SYSTEM_SAMPLES) -> list[tuple[float, str, float]]:
        """The run's system metrics (`events`: W&B's sampled stream, keys `system.*`) as
        (unix time, key, value) samples; rows without `_timestamp` and non-numbers are dropped."""
        data = self.graphql(EVENTS_QUERY, {"entity": entity, "project": project, "name": run_id,
                                           "samples": int(samples)})
        return system_samples(_run_node(data, entity, project, run_id).get("events") or [])

    def parquet_history(self, entity: str, project: str, run_id: str) -> ParquetHistory:
        data = self.graphql(PARQUET_QUERY, {
            "entity": entity, "project": project, "runName": run_id, "liveKeys": ["_step"],
        })
        run = _run_node(data, entity, project, run_id)
        ph = run.get("parquetHistory") or {}
        live = ph.get("liveData") or []
        live = [loads(r) if isinstance(r, str) else r for r in live]
        return ParquetHistory(urls=list(ph.get("parquetUrls") or []), live_rows=[r for r in live if isinstance(r, dict)])

    def download(self, url: str, dest) -> int:
        """GET a parquet export (signed URL: no auth header sent to other hosts)."""
        def once() -> int:
            self._pacer.wait()
            t0 = time.perf_counter()
            try:
                with httpx.stream("GET", url, timeout=120.0, follow_redirects=True) as resp:
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise Retryable(f"download failed: HTTP {resp.status_code}", server_wait(resp.headers))
                    if resp.status_code >= 400:
                        raise RuntimeFailure(f"history export download failed: HTTP {resp.status_code}")
                    tmp = dest.with_suffix(dest.suffix + ".part")
                    n = 0
                    with open(tmp, "wb") as fh:
                        for chunk in resp.iter_bytes(1 << 20):
                            fh.write(chunk)
                            n += len(chunk)
                    expected = resp.headers.get("content-length")
                    if expected is not None and int(expected) != n:
                        raise Retryable("truncated download")
                    tmp.replace(dest)
                    return n
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                raise Retryable(f"download: {type(exc).__name__}") from exc
            finally:
                self.http_seconds += time.perf_counter() - t0

        retrying = Retrying(retry=retry_if_exception_type(Retryable), wait=RetryWait(),
                            stop=RetryStop(self._max_attempts), reraise=True,
                            before_sleep=say_retry("the W&B history export", "its storage URL", self._max_attempts))
        try:
            return retrying(once)
        except Retryable as exc:
            raise Unreachable(f"history export download kept failing ({exc})",
                                 "run the same `marinctl sync` again later") from exc


# -- parsing (no I/O: tested on fixtures) ---------------------------------------------------
def loads(text: str | bytes) -> Any:
    """JSON through orjson (several times faster on history rows, bench/NOTES.md), falling back
    to the standard parser for what orjson refuses but W&B may send (bare NaN/Infinity)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _json_string(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return loads(value)
        except (json.JSONDecodeError, ValueError):
            return {}
    return value or {}


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    s = str(value)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        from datetime import timezone

        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def unwrap_config(raw: dict[str, Any]) -> dict[str, Any]:
    """W&B stores config as {key: {"value": v, "desc": …}}; internal keys are dropped."""
    out = {}
    for k, v in raw.items():
        if k in ("_wandb", "wandb_version"):
            continue
        out[k] = v["value"] if isinstance(v, dict) and "value" in v else v
    return out


def listing_digest(node: dict[str, Any]) -> str:
    """A fingerprint of everything W&B listed for a run (state, heartbeat, updatedAt, line count,
    last step, config, summary, tags …): equal digests mean the run has not moved since."""
    import hashlib

    return hashlib.blake2b(orjson.dumps(node, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def parse_run(node: dict[str, Any], entity: str, project: str) -> RunInfo:
    config = unwrap_config(_json_string(node.get("config")))
    summary = _json_string(node.get("summaryMetrics"))
    keys = _json_string(node.get("historyKeys"))
    fork = find_fork(config)
    last = keys.get("lastStep") if isinstance(keys, dict) else None
    return RunInfo(
        source="wandb",
        run_id=node["name"],
        entity=entity,
        project=project,
        name=node.get("displayName"),
        group=node.get("group"),
        job_type=node.get("jobType"),
        tags=list(node.get("tags") or []),
        state=node.get("state"),
        created_at=_time(node.get("createdAt")),
        heartbeat_at=_time(node.get("heartbeatAt")),
        config=config,
        summary=summary if isinstance(summary, dict) else {},
        fork_parent=fork[0] if fork else None,
        fork_step=fork[1] if fork else None,
        remote_last_step=int(last) if isinstance(last, (int, float)) else None,
        history_line_count=node.get("historyLineCount"),
        url=f"https://wandb.ai/{entity}/{project}/runs/{node['name']}",
        updated_at=_time(node.get("updatedAt")),
        listing_digest=listing_digest(node),
    )


def system_samples(events: list) -> list[tuple[float, str, float]]:
    """W&B's `events` rows (JSON text each) as (unix time, `system.` key, value) samples; rows
    without `_timestamp` and values that are not numbers are dropped."""
    from marinctl.sources.wandb_rows import as_float

    out = []
    for raw in events:
        row = loads(raw) if isinstance(raw, str) else raw
        t = as_float(row.get("_timestamp")) if isinstance(row, dict) else None
        if t is None:
            continue
        for key, value in row.items():
            v = as_float(value) if key.startswith("system.") else None
            if v is not None:
                out.append((t, key, v))
    return out
