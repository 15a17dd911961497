"""The run panes' contents: who the run is (overview), what it was told (config), where it ended
(summary), where it ran (environment) and what it printed last (console).

`run_pane` reads once per run (a worker does, when the pane opens or the run changes); the
pane filters the rows as the user types, without reading again. Values are plain text
(untrusted: the TUI renders them inert).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from marinctl import numbers as N
from marinctl.views.run_header import HeaderStats, header_stats
from marinctl.analysis.schedule import config_of
from marinctl.store import Connection
from marinctl.store.runs import environment as stored_environment
from marinctl.store import series as S
from marinctl.store.lineage import Target

Row = tuple[str, str]


@dataclass
class RunPane:
    run: str
    overview: list[Row] = field(default_factory=list)
    config: list[Row] = field(default_factory=list)
    summary: list[Row] = field(default_factory=list)
    console: list[Row] = field(default_factory=list)     # (`@step`, line), oldest first
    environment: list[Row] | None = None                 # None: no source said (a W&B run, an old sync)


def flatten(doc: Any, prefix: str = "") -> list[Row]:
    """Nested dicts as sorted `a.b.c  value` rows (lists and scalars as compact JSON); an empty
    document has no rows (a nested empty dict is a row `a.b  {}`)."""
    if isinstance(doc, dict) and not doc and not prefix:
        return []
    if isinstance(doc, dict) and doc:
        rows: list[Row] = []
        for k in sorted(doc, key=str):
            rows += flatten(doc[k], f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(doc, float):
        text = N.sig(doc, 6, missing=str(doc))
    elif isinstance(doc, str):
        text = doc
    else:
        text = json.dumps(doc, default=str)
    return [(prefix, text)]


def matching_rows(rows: list[Row], query: str) -> list[Row]:
    """Rows whose key or value contains `query` (case-insensitive; a regex when it is one)."""
    if not query:
        return rows
    try:
        rx = re.compile(query, re.IGNORECASE)
    except re.error:
        rx = re.compile(re.escape(query), re.IGNORECASE)
    return [r for r in rows if rx.search(r[0]) or rx.search(r[1])]


def runtime_s(con: Connection, target: Target) -> float | None:
    """Seconds the run (lineage) has been training: `_timestamp` span, else W&B's `_runtime`, else heartbeat − start."""
    last = S.last_values(con, target.segments, ["_timestamp"])
    first = S.smallest_value(con, target.run_pks, "_timestamp")
    if "_timestamp" in last and first is not None:
        return last["_timestamp"][1] - first
    runtime = (target.leaf.get("summary") or {}).get("_runtime") if isinstance(target.leaf.get("summary"), dict) else None
    if isinstance(runtime, (int, float)):
        return float(runtime)
    start, beat = target.runs[0].get("created_at"), target.leaf.get("heartbeat_at")
    return (beat - start).total_seconds() if start and beat else None


def source_of(run: dict[str, Any]) -> str:
    """Where the run comes from: its W&B page, or the local file it is mirrored from."""
    if run.get("source") == "wandb":
        return run.get("url") or f"wandb {run.get('entity')}/{run.get('project')}/{run.get('run_id')}"
    kind = "repro (marinctl's trainer)" if run.get("source") == "repro" else "local .wandb"
    return f"{kind}: {run.get('path') or '?'}"


def overview_rows(con: Connection, target: Target, stats: HeaderStats | None = None) -> list[Row]:
    stats = stats or header_stats(con, target)
    leaf = target.leaf
    steps = N.count(stats.steps_done) + (f" of {N.count(stats.total_steps)}" if stats.total_steps else "")
    rows: list[Row] = [
        ("run", leaf.get("run_id") or "?"), ("name", leaf.get("name") or N.DASH),
        ("state", stats.liveness + (f" ({leaf.get('state')})" if leaf.get("state") not in (None, stats.liveness) else "")),
        ("runtime", N.duration(runtime_s(con, target))), ("steps", steps), ("tokens", N.si(stats.tokens)),
        ("source", source_of(leaf)),
    ]
    if leaf.get("run_group"):
        rows.append(("group", str(leaf["run_group"])))
    if leaf.get("tags"):
        rows.append(("tags", ", ".join(map(str, leaf["tags"]))))
    if leaf.get("created_at"):
        rows.append(("started", leaf["created_at"].strftime("%Y-%m-%d %H:%M UTC")))
    if len(target.runs) > 1:
        for run, (_, lo, hi) in zip(target.runs, target.segments):
            span = f"steps {N.count(lo or 0)}–{N.count(hi - 1) if hi is not None else N.count(run.get('last_step'))}"
            rows.append(("lineage", f"{run['run_id']}  {span}"))
    elif leaf.get("fork_parent"):
        rows.append(("forked from", f"{leaf['fork_parent']} at step {N.count(leaf.get('fork_step'))}"))
    return rows


def run_pane(con: Connection, target: Target, stats: HeaderStats | None = None, console_lines: int = 40) -> RunPane:
    """Overview, config, summary and last console lines of the run on screen (the leaf's documents for a lineage)."""
    summary = target.leaf.get("summary")
    summary = summary if isinstance(summary, dict) else {}
    console = [(f"@{N.count(step)}" if step is not None else N.DASH, line)
               for step, line in S.console_tail(con, [r["uid"] for r in target.runs], console_lines)]
    env = stored_environment(con, target.leaf["uid"]) if target.leaf.get("uid") else None
    return RunPane(target.name, overview_rows(con, target, stats), flatten(config_of(target.leaf)),
                   flatten({k: v for k, v in summary.items() if not str(k).startswith("_wandb")}), console,
                   environment_rows(env) if env is not None else None)


_BYTES_KEY = re.compile(r"(^|\.)(memory|disk)\..*(total|used)$|memory_total$")


def environment_rows(env: dict[str, Any]) -> list[Row]:
    """The environment's rows, memory and disk sizes in binary units (W&B records bytes as text)."""
    def indexed(doc: Any) -> Any:            # a list of GPUs as `gpu_nvidia.0.name` rows, not one JSON cell
        if isinstance(doc, dict):
            return {k: indexed(v) for k, v in doc.items()}
        if isinstance(doc, list) and doc and all(isinstance(v, dict) for v in doc):
            return {str(i): indexed(v) for i, v in enumerate(doc)}
        return doc

    rows = []
    for key, value in flatten(indexed(env)):
        if _BYTES_KEY.search(key) and value.isdigit():
            value = N.size(int(value))
        rows.append((key, value))
    return rows
