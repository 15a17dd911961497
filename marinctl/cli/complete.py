"""Shell completion that knows the store: RUNs, TARGETs and the chosen run's metric keys.

`marinctl --install-completion` installs typer's completion script; on each TAB the shell runs
marinctl with `_MARINCTL_COMPLETE` set, and typer asks the `autocompletion=` function of the
argument being typed (these). They read the store the command line names (`--home`/`--db`,
else the usual home) through `store.glance`: read-only, no migration, no waiting — a store that
is missing, held by a running `sync`, or older than this marinctl answers nothing rather than
stall the shell — and only through the store's light reads (`store/keys.py`, the runs table,
the fork walk), so a TAB imports no numpy or pyarrow. Nothing here prints; typer writes what is
returned.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

ALIASES = ("hero", "rung1", "rung2", "rung3", "rung4")


def runs(ctx, incomplete: str) -> list[str]:
    """RUN: stored run ids, and the aliases (`hero`, `rung1`…) that name a stored run."""
    with _store(ctx) as con:
        if con is None:
            return []
        return [n for n in _names(con) if n.startswith(incomplete)]


def targets(ctx, incomplete: str) -> list[str]:
    """watch/serve TARGET: what RUN completes, and `marin` (the hero lineage, ladder and issues)."""
    return (["marin"] if "marin".startswith(incomplete) else []) + runs(ctx, incomplete)


def rungs(ctx, incomplete: str) -> list[str]:
    """repro's RUNG|RUN: the four rungs (Marin's published table, stored or not) and stored run ids."""
    stored = runs(ctx, incomplete)
    return [r for r in ALIASES[1:] if r.startswith(incomplete)] + [r for r in stored if r not in ALIASES]


def keys(ctx, incomplete: str) -> list[str]:
    """KEY (`plot`, `explain --metric`): the metric keys of the run the line names (`--run` or
    RUN; else the hero lineage, or the only run) that start with what is typed."""
    with _store(ctx) as con:
        if con is None:
            return []
        return _run_keys(con, _chosen_run(ctx), incomplete)


def key_list(ctx, incomplete: str) -> list[str]:
    """`--keys K,K,…` (`export`): the last key of the list, completed as for KEY."""
    done, _, last = incomplete.rpartition(",")
    head = done + "," if done else ""
    given = set(done.split(",")) if done else set()
    with _store(ctx) as con:
        if con is None:
            return []
        return [head + k for k in _run_keys(con, _chosen_run(ctx), last) if k not in given]


# --- reading --------------------------------------------------------------------------------

@contextmanager
def _store(ctx) -> Iterator[Any]:
    from marinctl import paths
    from marinctl.store import glance

    root = ctx.find_root().params
    url = root.get("store") or paths.store_url()
    if url and not root.get("db"):
        from marinctl.store import lake_store

        try:
            lake = lake_store(url, root.get("store_data") or paths.store_data())
        except Exception:                # a half-typed --store: no candidates
            yield None
            return
        with lake.glance() as con:
            yield con
        return
    try:
        path = paths.locate(root.get("home"), root.get("db"))
    except Exception:                    # an unusable --home while typing: no candidates
        yield None
        return
    with glance(path) as con:
        yield con


def _names(con) -> list[str]:
    from marinctl.store import lineage
    from marinctl.store import runs as runs_mod

    aliases = ["hero"] if lineage.hero_leaf(con) is not None else []
    aliases += [a for a in ALIASES[1:] if runs_mod.find_rung_runs(con, a)]
    return aliases + runs_mod.run_ids(con)


def _chosen_run(ctx) -> str | None:
    return ctx.params.get("run") or None


def _run_keys(con, run: str | None, prefix: str) -> list[str]:
    """Keys starting with `prefix` that the run logged (with its fork ancestors: a child's history
    reads through them); none for a RUN the store does not know."""
    from marinctl.errors import MarinctlError
    from marinctl.store import keys as key_names
    from marinctl.store import lineage

    try:
        _, leaf = lineage.named_run(con, run)
    except MarinctlError:
        return []
    candidates = key_names.starting(con, prefix)
    present = key_names.logged(con, [r["run_pk"] for r in lineage.ancestry(con, leaf)], candidates)
    return [k for k in candidates if k in present]
