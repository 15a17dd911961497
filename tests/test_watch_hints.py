"""Every command the watch screen tells a person to run is one that works.

`watch` said "say which with --run" where `watch` takes the run as TARGET (`--run` is no option
of it: exit 2). The hints the screen can show are collected from the modules whose text reaches
it (the screen's own, the view data, the store errors a view reports), each is parsed by the real
CLI's command tree, and those that only read the store are run through `marinctl` on a SYNTHETIC
store. A store of runs without the hero lineage is then opened with Pilot and the commands on the
screen are run the same way.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.fakes.load import load_into_store
from tests.fakes.synth import ladder_runs
from tests.watch_pilot import open_watch, wait_for_text

ROOT = Path(__file__).resolve().parent.parent
HINT = re.compile(r"`(marinctl [^`]+)`")
# what the watch screen shows comes from these: its own text, the view data, the store's run lookups
SHOWN_BY_WATCH = ["marinctl/tui", "marinctl/views", "marinctl/store/lineage.py", "marinctl/store/runs.py"]
READS_ONLY = {"runs", "show", "export", "plot", "explain", "anomalies", "events", "mix"}


def strings(path: Path) -> list[str]:
    """The string literals of a module that can be shown (docstrings are not)."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
    return out


def source_hints() -> set[str]:
    found = set()
    for where in SHOWN_BY_WATCH:
        path = ROOT / where
        for module in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            for text in strings(module):
                found.update(HINT.findall(text))
    return found


def words(hint: str, run: str) -> list[str]:
    """A hint's words after `marinctl`, its placeholders filled in for the SYNTHETIC store."""
    fill = {"RUN": run, "TARGET": run, "KEY": "train/loss", "N": "100"}
    return [fill.get(w, w) for w in hint.split()[1:]]


def parse(args: list[str]) -> str:
    """Parse `args` as `marinctl` would (options and arguments checked, nothing run); the command's
    name, or the usage error's message."""
    import typer.main

    from marinctl.cli import app

    command = typer.main.get_command(app)
    ctx = command.make_context("marinctl", [], resilient_parsing=True)
    rest = list(args)
    try:
        while hasattr(command, "get_command") and rest:
            name, rest = rest[0], rest[1:]
            command = command.get_command(ctx, name)
            if command is None:
                return f"no command {name}"
            if hasattr(command, "get_command") and rest:
                ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
                continue
            command.make_context(name, rest, parent=ctx)
            return command.name
    except Exception as exc:  # noqa: BLE001 — typer's bundled click raises its own UsageError
        return f"usage error: {exc}"
    return "no command"


@pytest.fixture(scope="module")
def rungs_db(tmp_path_factory) -> Path:
    """Four SYNTHETIC ladder rungs and no hero lineage."""
    from marinctl.store import Store

    path = tmp_path_factory.mktemp("hints") / "marinctl.duckdb"
    load_into_store(Store(path), ladder_runs(60))
    return path


def first_run(db: Path) -> str:
    from marinctl.store import Store
    from marinctl.store.runs import list_runs

    with Store(db).connect() as con:
        return list_runs(con)[0]["run_id"]


def test_every_hint_the_watch_screen_can_show_is_a_marinctl_command(rungs_db, cli):
    hints = source_hints()
    assert {"marinctl watch RUN", "marinctl runs", "marinctl sync marin"} <= hints, hints   # the crawl found them
    run = first_run(rungs_db)
    wrong = {h: parse(words(h, run)) for h in hints}
    assert {h: why for h, why in wrong.items() if h.split()[1] != why} == {}
    for hint in sorted(h for h in hints if h.split()[1] in READS_ONLY):
        code, _, err = cli("--db", str(rungs_db), *words(hint, run))
        assert code == 0, (hint, err)


def test_the_parser_tells_a_bad_hint(rungs_db):
    """(A guard on the check: the hint watch used to show, and others that do not work, fail it.)"""
    assert parse(["watch", "--run", "x"]).startswith("usage error")
    assert parse(["watch", "a", "b"]).startswith("usage error")
    assert parse(["runs", "--run", "x"]).startswith("usage error")
    assert parse(["no-such-command"]) == "no command no-such-command"
    assert parse(["explain", "step", "5", "--run", "x"]) == "step"


@pytest.mark.asyncio
async def test_a_store_of_runs_without_the_hero_says_how_to_open_one(rungs_db, cli):
    app = open_watch(rungs_db)                  # no TARGET: the hero lineage, which this store lacks
    async with app.run_test(size=(220, 40)) as pilot:
        text = await wait_for_text(pilot, "no hero lineage")
        commands = HINT.findall(text)
        assert "--run" not in text and "marinctl watch RUN" in commands, text
        run = first_run(rungs_db)
        for command in commands:
            assert parse(words(command, run)) == command.split()[1], command
            if command.split()[1] in READS_ONLY:
                code, _, err = cli("--db", str(rungs_db), *words(command, run))
                assert code == 0, (command, err)
        await pilot.press("tab", "down", "enter")      # what it says: pick one in the sidebar
        await wait_for_text(pilot, "▏step")
