"""What a TARGET names, as sync plans: parsed once, before any network call or write.

Forms (README, "Naming runs and targets"): `marin`, a W&B URL in wandb.ai or forge form,
`ENTITY/PROJECT[/RUN_ID]`, a local `wandb/` dir, run dir or `.wandb` file,
`github:OWNER/REPO#N`, `github:OWNER/REPO?label=NAME`, `github:OWNER/REPO/path`.
Unknown shapes are a UserError (exit 2), unless they name a stored run (`resolve_targets`).
`lock_key` says what a plan's sync locks; `plan_watch` answers `watch [TARGET]`: which
stored run to show and what to keep syncing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from marinctl.errors import UserError
if TYPE_CHECKING:   # only a type here: parsing targets stays light (no duckdb import)
    from marinctl.store import Store

MARIN_ENTITY = "marin-community"
MARIN_PROJECT = "marin_moe"
MARIN_GROUPS = ["moe-hero-ep", "moe-hero-ep-scaling-ladder"]
MARIN_GITHUB = [
    "github:marin-community/marin#8435",   # hero tracking issue
    "github:marin-community/marin#8506",   # hero status log (bot comments: SHA, job, fork point, checkpoint)
    "github:marin-community/marin/.agents/logbooks/7279-moe-hero-ep.md",
    "github:marin-community/marin/experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json",
    "github:marin-community/marin/experiments/grug/moe_hero_ep/",
]

_WANDB_HOSTS = ("wandb.ai", "forge.coreweave.com")


@dataclass
class Plan:
    """One unit of a sync: a W&B project or run, a local path, or a GitHub spec."""

    kind: str                         # 'wandb' | 'local' | 'github'
    raw: str
    entity: str | None = None
    project: str | None = None
    run_id: str | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def parse_target(raw: str) -> list[Plan]:
    """Turn one TARGET into sync plans; unknown shapes are a UserError (exit 2)."""
    text = raw.strip()
    if not text:
        raise UserError("empty sync target", "see `marinctl sync --help` for target forms")
    if text == "marin":
        plans = [Plan("wandb", text, MARIN_ENTITY, MARIN_PROJECT, filters={"group": {"$in": MARIN_GROUPS}})]
        return plans + [Plan("github", spec) for spec in MARIN_GITHUB]
    if text.startswith("github:"):
        from marinctl.sources.github_events import parse_spec

        parse_spec(text)  # a malformed spec fails here, before any network call
        return [Plan("github", text)]
    if text.startswith(("http://", "https://")):
        url = urlparse(text)
        host = (url.hostname or "").lower()
        if not any(host == h or host.endswith("." + h) for h in _WANDB_HOSTS):
            raise UserError(f"not a W&B URL: {raw}", "use https://wandb.ai/ENTITY/PROJECT/runs/RUN_ID or ENTITY/PROJECT/RUN_ID")
        parts = [unquote(p) for p in url.path.split("/") if p]
        if host.endswith("forge.coreweave.com") and parts[:1] == ["wandb"]:
            parts = parts[1:]
        if len(parts) >= 4 and parts[2] == "runs":
            return [Plan("wandb", text, parts[0], parts[1], parts[3])]
        if len(parts) >= 2 and parts[2:3] in ([], ["runs"], ["workspace"], ["table"]):
            return [Plan("wandb", text, parts[0], parts[1])]
        raise UserError(f"cannot read a project or run from the URL {raw}",
                        "use https://wandb.ai/ENTITY/PROJECT or https://wandb.ai/ENTITY/PROJECT/runs/RUN_ID")
    path = Path(text).expanduser()
    if path.exists() or text.endswith(".wandb") or text.startswith((".", "/", "~")):
        if not path.exists():
            raise UserError(f"no such file or directory: {raw}", "pass a .wandb file, a run dir or a wandb/ dir")
        return [Plan("local", text, path=path)]
    parts = text.split("/")
    if len(parts) in (2, 3) and all(re.fullmatch(r"[A-Za-z0-9_.+\-]+", p) for p in parts):
        return [Plan("wandb", text, parts[0], parts[1], parts[2] if len(parts) == 3 else None)]
    raise UserError(
        f"unknown sync target {raw!r}",
        "use `marin`, ENTITY/PROJECT[/RUN_ID], a W&B URL, a wandb/ dir or .wandb file, or github:OWNER/REPO#N",
    )


def resolve_targets(store: Store, targets: list[str]) -> list[Plan]:
    """Every TARGET as plans; one that is no TARGET form but names a stored run (its bare id)
    syncs that run again from where it came (W&B, or its `.wandb` file)."""
    plans = []
    for raw in targets:
        try:
            plans += parse_target(raw)
        except UserError:
            found = _stored_plan(store, raw)
            if found is None:
                raise
            plans.append(found)
    return plans


def _stored_plan(store: Store, raw: str) -> Plan | None:
    from marinctl.store import runs as runs_mod

    if not store.exists():
        return None
    with store.connect() as con:
        try:
            run = runs_mod.resolve_run(con, raw.strip())
        except UserError:
            return None
    if run["source"] == "wandb":
        return Plan("wandb", raw, run["entity"], run["project"], run["run_id"])
    if run.get("path") and Path(run["path"]).exists():
        return Plan("local", raw, path=Path(run["path"]))
    return None


def lock_key(plan: Plan) -> str:
    """What a sync of `plan` locks (store/synclock.py): the resolved run, project, file or spec,
    so one run named three ways (E/P/R, its URL, its bare id) is one lock."""
    if plan.kind == "wandb":
        if plan.run_id:
            return run_lock_key(plan.entity, plan.project, plan.run_id)
        return plan.raw if plan.filters else f"{plan.entity}/{plan.project}"
    if plan.kind == "local" and plan.path is not None:
        return str(plan.path.expanduser().resolve())
    return plan.raw


def run_lock_key(entity: str, project: str, run_id: str) -> str:
    """One W&B run's lock, whichever target syncs it (the run itself, or its project)."""
    return f"{entity}/{project}/{run_id}"


def local_targets(targets: list[str]) -> list[str]:
    """The targets that name local `.wandb` files or directories (followed, not polled)."""
    out = []
    for t in targets:
        try:
            if all(p.kind == "local" for p in parse_target(t)):
                out.append(t)
        except UserError:
            continue
    return out


def local_bytes(targets: list[str]) -> int:
    """The size of the `.wandb` files under local targets: what reading them to the end reads at most."""
    from marinctl.sources.wandb_local import find_run_files

    return sum(f.stat().st_size for t in targets for f in find_run_files(Path(t).expanduser()))


def plan_watch(store: Store, raw: str | None) -> tuple[str | None, list[str]]:
    """(what to show, what to sync) for `watch [TARGET]`; bad TARGETs raise UserError.

    No TARGET: the hero lineage, synced when it came from W&B. A stored RUN is shown and
    kept in sync from where it came (W&B, or its `.wandb` file while that exists).
    """
    from marinctl.store import lineage
    from marinctl.store import runs as runs_mod

    with store.connect() as con:
        if raw is None:
            hero = lineage.hero_leaf(con)
            return None, (["marin"] if hero is not None and hero["source"] == "wandb" else [])
        if raw in ("marin", "hero"):
            return "hero", ["marin"]
        if raw in runs_mod.RUNG_NAMES:
            return raw, ["marin"]
        path = Path(raw).expanduser()
        if path.exists():
            return runs_mod.uid_at_path(con, str(path.resolve())), [raw]
        try:
            run = runs_mod.resolve_run(con, raw)
        except UserError:
            run = None
        if run is not None:
            if run["source"] == "wandb":
                return run["uid"], [f"{run['entity']}/{run['project']}/{run['run_id']}"]
            return run["uid"], ([run["path"]] if run.get("path") and Path(run["path"]).exists() else [])
    plans = parse_target(raw)
    return (plans[0].run_id if len(plans) == 1 else None), [raw]
