"""The runs a viewer can pick, in the order the sidebar shows them.

The hero lineage first (stitched, then each fork segment with the step it starts at), then
the ladder rungs small to large (a rung's reproduction labelled so), then every other run.
Each entry carries its run as the filter language reads it (run_query.py `record`), so
watch's run filter selects the same runs `runs --where` lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from marinctl.views.run_header import liveness
from marinctl.store import Connection


@dataclass
class SidebarEntry:
    ref: str            # what resolve_target accepts
    label: str
    kind: str           # 'hero' | 'segment' | 'rung' | 'repro' | 'local' | 'run'
    liveness: str
    last_step: int | None
    segment_start: int | None = None    # a hero segment's first step
    record: dict[str, Any] = field(default_factory=dict, repr=False)   # what `--where` reads of its run


def sidebar_entries(con: Connection, now: datetime | None = None) -> list[SidebarEntry]:
    """Hero lineage first (stitched, with its segments), ladder rungs, then local/repro/other runs."""
    from marinctl import rungs
    from marinctl.run_query import record
    from marinctl.store import lineage
    from marinctl.store.runs import find_rung_runs, list_runs

    out: list[SidebarEntry] = []
    used: set[str] = set()
    leaf = lineage.hero_leaf(con)
    if leaf is not None:
        t = lineage.stitched_target("hero", leaf, con)
        out.append(SidebarEntry("hero", "hero (stitched)", "hero", liveness(leaf["state"], leaf["heartbeat_at"], now),
                                leaf.get("last_step"), record=record(leaf)))
        for run, (_, lo, _) in zip(t.runs, t.segments):
            used.add(run["uid"])
            out.append(SidebarEntry(run["uid"], run["run_id"], "segment",
                                    liveness(run["state"], run["heartbeat_at"], now), run.get("last_step"), lo or 0,
                                    record=record(run)))
    for r in rungs.rungs():
        if r["rung"] == "hero":
            continue
        for run in find_rung_runs(con, r["rung"]):
            if run["uid"] in used:
                continue
            used.add(run["uid"])
            kind = "repro" if run["source"] == "repro" else "rung"
            out.append(SidebarEntry(run["uid"], f"{r['rung']} {r['name']}" + (" repro" if kind == "repro" else ""), kind,
                                    liveness(run["state"], run["heartbeat_at"], now), run.get("last_step"),
                                    record=record(run)))
    for run in list_runs(con):
        if run["uid"] in used:
            continue
        kind = run["source"] if run["source"] in ("local", "repro") else "run"
        out.append(SidebarEntry(run["uid"], run["run_id"], kind, liveness(run["state"], run["heartbeat_at"], now),
                                run.get("last_step"), record=record(run)))
    return out
