"""Many runs' history windows in one GraphQL request: W&B's own `history` field, aliased.

A project's short runs cost one round trip each when asked one at a time (the SDK's
`scan_history` asks three or four). GraphQL aliases let one request carry many `run(name:)`
selections — the same `history(minStep, maxStep, samples)` field `HistoryPage` asks for
(wandb-core's `query_runhistory_backend.graphql`), so the rows are the same rows — and, for a run already mirrored, its
`_timestamp` at the last stored step through `sampledHistory` (how a rewrite shows), and
where the run's system metrics moved, its `events` (the sampled stream a one-run sync asks for
alone), so a project's runs carry the same system charts as a run synced by itself.
Each window is decoded into a long Arrow batch here, in the fetching thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marinctl.sources.wandb import SYSTEM_SAMPLES, loads, system_samples

if TYPE_CHECKING:
    import pyarrow as pa

    from marinctl.sources.wandb import WandbClient


@dataclass
class Window:
    """One run's part of a request: steps [lo, hi), and the step whose `_timestamp` to return."""

    run_id: str
    lo: int
    hi: int
    check_step: int | None = None
    events: bool = False      # also the run's system metrics (W&B's sampled `events` stream)


@dataclass
class Got:
    """What came back for one window: its rows as a long batch, and the checked step's `_timestamp`
    (None when not asked, or when W&B no longer has that step); `missing` when the run is gone."""

    batch: pa.Table | None
    check_ts: float | None = None
    missing: bool = False     # W&B no longer has the run (deleted since it was listed)
    system: list[tuple[float, str, float]] | None = None   # (time, key, value) samples, when asked


def query_for(windows: list[Window]) -> tuple[str, dict]:
    """The aliased query text and its variables; names and steps travel as variables, never as text."""
    params = ["$entity: String!", "$project: String!"]
    fields, variables = [], {}
    for i, w in enumerate(windows):
        params += [f"$n{i}: String!", f"$lo{i}: Int64!", f"$hi{i}: Int64!", f"$s{i}: Int!"]
        variables.update({f"n{i}": w.run_id, f"lo{i}": int(w.lo), f"hi{i}": int(w.hi), f"s{i}": max(int(w.hi - w.lo), 1)})
        inner = f"history(minStep: $lo{i}, maxStep: $hi{i}, samples: $s{i})"
        if w.check_step is not None:
            params.append(f"$t{i}: [JSONString!]!")
            spec = {"keys": ["_step", "_timestamp"], "minStep": int(w.check_step), "maxStep": int(w.check_step),
                    "samples": 2}
            variables[f"t{i}"] = [json.dumps(spec)]
            inner += f" sampledHistory(specs: $t{i})"
        if w.events:
            params.append(f"$e{i}: Int!")
            variables[f"e{i}"] = SYSTEM_SAMPLES
            inner += f" events(samples: $e{i})"
        fields.append(f"w{i}: run(name: $n{i}) {{ {inner} }}")
    text = (f"query RunsHistoryBatch({', '.join(params)}) {{\n"
            f"  project(name: $project, entityName: $entity) {{\n    " + "\n    ".join(fields) + "\n  }\n}\n")
    return text, variables


def fetch(client: WandbClient, entity: str, project: str, windows: list[Window]) -> list[Got]:
    """Every window's rows in one request (retried as one), decoded; in `windows`' order."""
    return decode(request(client, entity, project, windows), windows)


def request(client: WandbClient, entity: str, project: str, windows: list[Window]) -> dict:
    """The request itself: the answer's `project` node, its rows still JSON text."""
    from marinctl.errors import UserError

    text, variables = query_for(windows)
    data = client.graphql(text, {"entity": entity, "project": project, **variables})
    proj = data.get("project")
    if proj is None:
        raise UserError(f"W&B project {entity}/{project} not found (or not public)",
                        f"check it at https://wandb.ai/{entity}/{project}")
    return proj


def decode(proj: dict, windows: list[Window]) -> list[Got]:
    """Each window's rows as a long batch (the CPU-bound half of `fetch`)."""
    from marinctl.sources.wandb_rows import batch_from_rows

    out = []
    for i, w in enumerate(windows):
        node = proj.get(f"w{i}")
        if node is None:
            out.append(Got(None, None, missing=True))
            continue
        rows = [r for r in _rows(node.get("history") or []) if isinstance(r, dict)]
        out.append(Got(batch_from_rows(r for r in rows if w.lo <= _step(r) < w.hi), _timestamp_at(node, w.check_step),
                       system=system_samples(node.get("events") or []) if w.events else None))
    return out


def _rows(raw: list) -> list:
    """History rows (W&B sends each as a JSON string) decoded in one parse: the strings joined as
    one JSON array, which costs orjson far less than a call per row."""
    if raw and all(isinstance(r, str) for r in raw):
        try:
            return loads("[" + ",".join(raw) + "]")
        except ValueError:
            pass   # one malformed row: decode them one by one, as W&B sent them
    return [loads(r) if isinstance(r, (str, bytes)) else r for r in raw]


def _step(row: dict) -> int:
    step = row.get("_step")
    return int(step) if isinstance(step, (int, float)) else -1


def _timestamp_at(node: dict, step: int | None) -> float | None:
    if step is None:
        return None
    for rows in node.get("sampledHistory") or []:
        for row in rows or []:
            row = loads(row) if isinstance(row, str) else row
            if isinstance(row, dict) and row.get("_step") == step and row.get("_timestamp") is not None:
                return float(row["_timestamp"])
    return None
