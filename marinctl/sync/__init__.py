"""The one sync pipeline: plan → fetch (sources) → write (store) → align events, detect (analysis).

`sync_targets` is the entry `marinctl sync`, `watch` and repro mirroring call. Each TARGET
becomes plans (sync/targets.py); each plan's source hands back plain records and batches,
which the store writes with their positions in one transaction per unit of work
(sync/wandb.py, sync/local.py, sync/github.py). Once history lands, analysis re-aligns
GitHub events to steps and scores the new steps for anomalies, and what it returns is
written through the store (sync/derive.py). Progress and warnings go back to the caller
through the `progress`/`warn` callbacks; nothing here prints. Tailing local files record by
record is `sync.local.follow`. Importing this package stays light: each stage imports its
sources when it runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from marinctl.domain import Progress, Warn
if TYPE_CHECKING:   # only a type here: parsing targets stays light (no duckdb import)
    from marinctl.store import Store
from marinctl.sync.targets import Plan, lock_key, parse_target, plan_watch, resolve_targets

__all__ = ["sync_targets", "parse_target", "resolve_targets", "lock_key", "plan_watch", "Plan"]


def sync_targets(store: Store, targets: list[str], *, progress: Progress | None = None, warn: Warn | None = None,
                 detect: bool = True, client=None, following: bool = False, tally=None, select=None,
                 detect_all: bool = False) -> dict[str, Any]:
    """Sync every target; returns the contract's JSON: {"runs": [...], "events_added": N, ...}.

    `following` (sync --follow, watch): GitHub is polled at most every 5 minutes and a
    GitHub rate limit skips GitHub until it resets instead of ending the loop. Warnings are
    passed to `warn` as they happen and listed under "warnings". `client`: the W&B client
    to use (tests, benchmarks); by default one per W&B plan.

    A whole W&B project (no run id) goes through sync/project.py: `tally(runs done, runs, rows)`
    follows it, `select(RunInfo)` keeps the runs to mirror (`--where`), and `detect_all` scores
    every run it brought in even past project.DETECT_INLINE (`--detect`).
    """
    started = time.perf_counter()
    from marinctl.sync import derive


    plans = resolve_targets(store, targets or ["marin"])
    report: dict[str, Any] = {"runs": [], "events_added": 0, "timing": {"total_s": 0.0, "wandb_http_s": 0.0}}

    def note(message: str) -> None:
        report.setdefault("warnings", []).append(message)
        if warn is not None:
            warn(message)

    synced: list[str] = []    # run uids this pass brought up to date (detection scores their new steps)
    landed = False            # history or events arrived: every event is aligned again
    for plan in plans:
        if plan.kind == "wandb" and not plan.run_id:
            from marinctl.sources.wandb import WandbClient
            from marinctl.sync import project

            own = client is None
            wb = client or WandbClient()
            try:
                done = project.sync_project(store, wb, plan, progress=progress, tally=tally, select=select,
                                            detect_all=detect_all)
            finally:
                if own:
                    wb.close()
            report["timing"]["wandb_http_s"] += getattr(wb, "http_seconds", 0.0)
            report["runs"] += [r.as_json() for r in done.results]
            synced += done.to_score
            landed |= any(r.rows_added for r in done.results)
            if done.deferred:
                report["detection_deferred"] = report.get("detection_deferred", 0) + len(done.deferred)
                note(f"anomaly detection left for {len(done.deferred)} runs of {plan.entity}/{plan.project} "
                     f"(each is scored when synced alone or watched; `marinctl sync {plan.raw} --detect` scores all now)")
            if done.system_left:
                note(f"system metrics (GPU, CPU, memory) left for {done.system_left} runs of {plan.entity}/{plan.project}: "
                     f"each gets them when synced alone (`marinctl sync {plan.entity}/{plan.project}/RUN_ID`) or watched")
            continue
        if plan.kind == "wandb":   # each source's module loads when a plan needs it (a local sync: no HTTP client)
            from marinctl.sync import wandb

            runs, http_s = wandb.sync_plan(store, plan, progress=progress, client=client)
            report["timing"]["wandb_http_s"] += http_s
        elif plan.kind == "local":
            from marinctl.sync import local

            runs = local.sync_files(store, plan.path, progress=progress, warn=note)
        else:
            from marinctl.sources.github import RateLimitStop
            from marinctl.sync import github

            runs, changed = [], 0
            try:
                changed = github.sync_github(store, plan.raw, progress=progress, realign=False,
                                             min_interval=300 if following else 0.0)
            except RateLimitStop as exc:
                if not following:
                    raise
                note(exc.message)
            report["events_added"] += changed
            landed |= changed > 0 or not following   # a one-off sync realigns even when nothing changed
        report["runs"] += [r.as_json() for r in runs if r.run is not None]
        synced += [r.uid for r in runs if r.uid]
        landed |= any(r.rows_added for r in runs)
    derive.after_sync(store, synced if detect else [], realign=landed)
    report["synced"] = synced   # run uids (an alert pass reads them: sync/alerts.py); not part of the JSON
    report["timing"]["total_s"] = round(time.perf_counter() - started, 3)
    report["timing"]["wandb_http_s"] = round(report["timing"]["wandb_http_s"], 3)
    return report
