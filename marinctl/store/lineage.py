"""Fork lineages and the stitched view.

Marin's hero is a chain of forked W&B runs (`hero-12d8b6f0-dee637` →
`hero-wd-gate-router-p02-step54k` → `hero-ragged_a2a-ep-step81k` → …). A fork child
inherits its parent's history up to the fork step `f`. marinctl stores every row each run
logged itself (a child that logs the fork step, as W&B's forking guide does, has its own
row at `f`), and the stitched view takes a child's own rows from its first logged step `c`
on and its parent's only below that, never past the fork: the parent for [.., min(c, f+1)),
the child for [c, ..). `show` reports exactly those ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marinctl.errors import UnknownRun, UserError
from marinctl.store import Connection
from marinctl.store import runs as runs_mod

if TYPE_CHECKING:   # naming a RUN and walking its forks need no history reads (numpy, parts): a TAB answers fast
    from marinctl.store.metrics import Segment

HERO_GROUP = "moe-hero-ep"


@dataclass
class Target:
    """What a command reads: one run, or a stitched lineage of runs."""

    name: str
    runs: list[dict[str, Any]]                 # root .. leaf
    segments: list[Segment] = field(default_factory=list)
    stitched: bool = False

    @property
    def leaf(self) -> dict[str, Any]:
        return self.runs[-1]

    @property
    def run_pks(self) -> list[int]:
        return [r["run_pk"] for r in self.runs]

    def run_at(self, step: int) -> dict[str, Any]:
        """The run whose segment holds `step` (the leaf when beyond every segment)."""
        for run, (_, lo, hi) in zip(self.runs, self.segments):
            if (lo is None or step >= lo) and (hi is None or step < hi):
                return run
        return self.leaf

    def lineage_json(self) -> list[dict[str, Any]]:
        """The step range each run of the chain contributes: [from_step, to_step], inclusive."""
        out = []
        for run, (_, lo, hi) in zip(self.runs, self.segments):
            out.append({"run": run["run_id"], "from_step": lo if lo is not None else 0,
                        "to_step": (hi - 1) if hi is not None else run.get("last_step")})
        return out


def chain(con: Connection, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The fork chain ending at `run`, root first (stops at parents not in the store), each
    child with its `first_step` (its first own row: where its segment starts)."""
    from marinctl.store import metrics

    out = ancestry(con, run)
    for child in out[1:]:
        child["first_step"] = metrics.step_range(con, [(child["run_pk"], None, None)])[0]
    return out


def ancestry(con: Connection, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of the fork chain ending at `run`, root first, without their step ranges."""
    out = [run]
    seen = {run["uid"]}
    cur = run
    while cur.get("fork_parent"):
        row = con.execute(
            f"SELECT {runs_mod.RUN_COLUMNS} FROM runs WHERE run_id = ? AND coalesce(entity,'') = coalesce(?, '')"
            " AND coalesce(project,'') = coalesce(?, '') ORDER BY created_at LIMIT 1",
            [cur["fork_parent"], cur.get("entity"), cur.get("project")],
        )
        found_rows = row.fetchall()
        found = found_rows[0] if found_rows else None
        if found is None:
            break
        parent = runs_mod.row_to_dict(found, row.description)
        if parent["uid"] in seen:
            break
        seen.add(parent["uid"])
        out.append(parent)
        cur = parent
    out.reverse()
    return out


def segments_for(chain_runs: list[dict[str, Any]]) -> list[Segment]:
    """(run_pk, lo, hi) per run of a chain (root first); see the module doc for the ranges."""
    segs: list[Segment] = []
    for i, run in enumerate(chain_runs):
        lo = None if i == 0 else _own_from(run)
        hi = None
        if i + 1 < len(chain_runs):
            child = chain_runs[i + 1]
            hi = min(_own_from(child), (child["fork_step"] or 0) + 1)
        segs.append((run["run_pk"], lo, hi))
    return segs


def _own_from(child: dict[str, Any]) -> int:
    """A fork child's first own row: its first stored step (`chain` reads it), else fork_step + 1."""
    first = child.get("first_step")
    return int(first) if first is not None else (child["fork_step"] or 0) + 1


def hero_leaf(con: Connection) -> dict[str, Any] | None:
    cur = con.execute(
        f"SELECT {runs_mod.RUN_COLUMNS} FROM runs WHERE run_group = ? OR (run_id LIKE 'hero-%' AND source = 'wandb')"
        " ORDER BY coalesce(fork_step, -1) DESC, created_at DESC NULLS LAST LIMIT 1",
        [HERO_GROUP],
    )
    rows = cur.fetchall()
    row = rows[0] if rows else None
    return runs_mod.row_to_dict(row, cur.description) if row else None


class NoDefaultRun(UserError):
    """No RUN named, several stored and no hero lineage: the caller says how to name one (`--run`
    on the command line, TARGET or the sidebar in `watch`)."""

    def __init__(self, runs: int) -> None:
        super().__init__(f"the store holds {runs} runs and no hero lineage; say which with --run",
                         "list them with `marinctl runs`")
        self.runs = runs


def resolve_target(con: Connection, ref: str | None, *, stitched: bool = False) -> Target:
    """RUN as the contract names it; None means the hero lineage, else the only run stored."""
    lineage, run = named_run(con, ref)
    if lineage is not None:
        return stitched_target(lineage, run, con)
    if stitched and ref is not None:
        return stitched_target(run["run_id"], run, con)
    return single(run)


def named_run(con: Connection, ref: str | None) -> tuple[str | None, dict[str, Any]]:
    """(`"hero"`, its leaf) when RUN names the hero lineage (`hero`, or None with a hero stored),
    else (None, the run RUN names; None: the only run stored)."""
    if ref is None:
        leaf = hero_leaf(con)
        if leaf is not None:
            return "hero", leaf
        all_runs = runs_mod.list_runs(con)
        if len(all_runs) == 1:
            return None, all_runs[0]
        if not all_runs:
            raise UnknownRun("the store holds no runs yet", "mirror some with `marinctl sync` (or try `marinctl demo`)")
        raise NoDefaultRun(len(all_runs))
    if ref == "hero":
        leaf = hero_leaf(con)
        if leaf is None:
            raise UnknownRun("no hero run in the store", "mirror it with `marinctl sync marin`")
        return "hero", leaf
    return None, runs_mod.resolve_run(con, ref)


def single(run: dict[str, Any]) -> Target:
    return Target(name=run["run_id"], runs=[run], segments=[(run["run_pk"], None, None)])


def stitched_target(name: str, leaf: dict[str, Any], con: Connection) -> Target:
    runs = chain(con, leaf)
    return Target(name=name, runs=runs, segments=segments_for(runs), stitched=len(runs) > 1 or name == "hero")
