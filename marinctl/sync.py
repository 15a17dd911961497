"""Headless sync orchestration shared by `marinctl sync` and the watch TUI's worker.

A TARGET string (contract: `marin`, a W&B URL in wandb.ai or forge form,
`ENTITY/PROJECT[/RUN_ID]`, a local `wandb/` dir, run dir or `.wandb` file,
`github:OWNER/REPO#N`, `github:OWNER/REPO/path`) is parsed into a plan and dispatched to
its source. After history lands, anomaly detection runs incrementally on the new steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from marinctl.errors import UserError
from marinctl.store import Store

MARIN_ENTITY = "marin-community"
MARIN_PROJECT = "marin_moe"
MARIN_GROUPS = ["moe-hero-ep", "moe-hero-ep-scaling-ladder"]

Progress = Callable[[str, int, int], None]


@dataclass
class Target:
    kind: str                         # 'wandb' | 'local' | 'github'
    raw: str
    entity: str | None = None
    project: str | None = None
    run_id: str | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


_WANDB_HOSTS = ("wandb.ai", "forge.coreweave.com")


def parse_target(raw: str) -> list[Target]:
    """Turn one TARGET into sync plans; unknown shapes are a UserError (exit 2)."""
    text = raw.strip()
    if not text:
        raise UserError("empty sync target", "see `marinctl sync --help` for target forms")
    if text == "marin":
        plans = [Target("wandb", text, MARIN_ENTITY, MARIN_PROJECT, filters={"group": {"$in": MARIN_GROUPS}})]
        try:
            from marinctl.sources.github_sync import DEFAULT_MARIN_SPECS
        except ImportError:
            DEFAULT_MARIN_SPECS = []
        plans += [Target("github", spec) for spec in DEFAULT_MARIN_SPECS]
        return plans
    if text.startswith("github:"):
        from marinctl.sources.github_sync import parse_spec

        parse_spec(text)  # a malformed spec fails here, before any network call
        return [Target("github", text)]
    if text.startswith(("http://", "https://")):
        url = urlparse(text)
        host = (url.hostname or "").lower()
        if not any(host == h or host.endswith("." + h) for h in _WANDB_HOSTS):
            raise UserError(f"not a W&B URL: {raw}", "use https://wandb.ai/ENTITY/PROJECT/runs/RUN_ID or ENTITY/PROJECT/RUN_ID")
        parts = [unquote(p) for p in url.path.split("/") if p]
        if host.endswith("forge.coreweave.com") and parts[:1] == ["wandb"]:
            parts = parts[1:]
        if len(parts) >= 4 and parts[2] == "runs":
            return [Target("wandb", text, parts[0], parts[1], parts[3])]
        if len(parts) >= 2 and parts[2:3] in ([], ["runs"], ["workspace"], ["table"]):
            return [Target("wandb", text, parts[0], parts[1])]
        raise UserError(f"cannot read a project or run from the URL {raw}",
                        "use https://wandb.ai/ENTITY/PROJECT or https://wandb.ai/ENTITY/PROJECT/runs/RUN_ID")
    path = Path(text).expanduser()
    if path.exists() or text.endswith(".wandb") or text.startswith((".", "/", "~")):
        if not path.exists():
            raise UserError(f"no such file or directory: {raw}", "pass a .wandb file, a run dir or a wandb/ dir")
        return [Target("local", text, path=path)]
    parts = text.split("/")
    if len(parts) in (2, 3) and all(re.fullmatch(r"[A-Za-z0-9_.+\-]+", p) for p in parts):
        return [Target("wandb", text, parts[0], parts[1], parts[2] if len(parts) == 3 else None)]
    raise UserError(
        f"unknown sync target {raw!r}",
        "use `marin`, ENTITY/PROJECT[/RUN_ID], a W&B URL, a wandb/ dir or .wandb file, or github:OWNER/REPO#N",
    )


def sync_targets(store: Store, targets: list[str], *, progress: Progress | None = None,
                 detect: bool = True, client=None, following: bool = False) -> dict[str, Any]:
    """Sync every target; returns the contract's JSON: {"runs": [...], "events_added": N}.

    `following` (sync --follow, watch): GitHub is polled at most every 5 minutes and a
    GitHub rate limit skips GitHub until it resets instead of ending the loop.
    """
    import time

    started = time.perf_counter()
    plans = [plan for raw in (targets or ["marin"]) for plan in parse_target(raw)]
    report: dict[str, Any] = {"runs": [], "events_added": 0, "timing": {"total_s": 0.0, "wandb_http_s": 0.0}}
    history_landed = False
    for plan in plans:
        if plan.kind == "wandb":
            results = _sync_wandb(store, plan, progress=progress, detect=detect, client=client,
                                  timing=report["timing"])
            report["runs"] += results
            history_landed |= any(r["rows_added"] for r in results)
        elif plan.kind == "local":
            from marinctl.sources import wandb_local

            results = wandb_local.sync_path(store, plan.path, progress=progress)
            report["runs"] += results
            history_landed |= any(r.get("rows_added") for r in results)
            if detect:
                _detect(store, [r["run"] for r in results])
        elif plan.kind == "github":
            from marinctl.sources import github_sync
            from marinctl.sources.github import RateLimitStop

            if following:
                try:
                    report["events_added"] += github_sync.sync_github(store, plan.raw, progress=progress, min_interval=300)
                except RateLimitStop as exc:
                    report.setdefault("warnings", []).append(exc.message)
            else:
                report["events_added"] += github_sync.sync_github(store, plan.raw, progress=progress)
    if history_landed:
        _realign_events(store)
    report["timing"]["total_s"] = round(time.perf_counter() - started, 3)
    report["timing"]["wandb_http_s"] = round(report["timing"]["wandb_http_s"], 3)
    return report


def _realign_events(store: Store) -> None:
    """Events synced before their run's history get their steps once the history lands."""
    try:
        from marinctl.sources.github_sync import realign
    except ImportError:
        return
    realign(store)


def _sync_wandb(store: Store, plan: Target, *, progress, detect: bool, client=None,
                timing: dict | None = None) -> list[dict[str, Any]]:
    from marinctl.sources.wandb import WandbClient
    from marinctl.sources.wandb_sync import sync_run

    own = client is None
    client = client or WandbClient()
    try:
        if plan.run_id:
            runs = [client.run(plan.entity, plan.project, plan.run_id)]
        else:
            runs = list(client.list_runs(plan.entity, plan.project, filters=plan.filters or None))
            if not runs:
                raise UserError(f"no runs found in W&B project {plan.entity}/{plan.project}"
                                + (" matching the marin groups" if plan.filters else ""),
                                f"check https://wandb.ai/{plan.entity}/{plan.project}")
        # Parents before children, so a fork child's lineage is complete when it lands.
        runs.sort(key=lambda r: (r.fork_step is not None, r.fork_step or 0, r.created_at.timestamp() if r.created_at else 0.0))
        results = []
        for run in runs:
            res = sync_run(store, client, run, progress=progress)
            results.append(res.as_json())
            if detect:
                _detect(store, [run.run_id], uid=run.uid)
        return results
    finally:
        if timing is not None:
            timing["wandb_http_s"] += getattr(client, "http_seconds", 0.0)
        if own:
            client.close()


def _detect(store: Store, run_ids: list[str], uid: str | None = None) -> None:
    """Incremental anomaly detection after new history, when the analysis module is present."""
    try:
        from marinctl.analysis.detectors import detect_incremental
    except ImportError:
        return
    with store.transaction() as con:
        for run_id in run_ids:
            if uid:
                row = con.execute("SELECT run_pk FROM runs WHERE uid = ?", [uid]).fetchall()
            else:
                row = con.execute("SELECT run_pk FROM runs WHERE run_id = ? ORDER BY synced_at DESC LIMIT 1", [run_id]).fetchall()
            if row:
                detect_incremental(con, row[0][0])
