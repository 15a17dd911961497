"""Start-up stays light: `--help` imports none of the heavy packages (layer rules: test_architecture.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("textual", "textual_plotext", "torch", "wandb", "scipy", "plotext")


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from marinctl.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_every_subcommand_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from marinctl.cli import app, main\n"
        "import typer.main\n"
        "cmd = typer.main.get_command(app)\n"
        "names = sorted(cmd.commands)\n"
        "for n in names:\n"
        "    try:\n        main([n, '--help'])\n    except SystemExit:\n        pass\n"
        f"print(names, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].endswith("[]"), out.stdout.splitlines()[-1]


_HEAVY_LOADED = ("sorted({m.split('.')[0] for m in sys.modules"
                 " if m.split('.')[0] in ('wandb', 'pyarrow', 'httpx', 'duckdb')})")

_SYNC_CHILD = f"""
import sys
from marinctl.cli import main
try:
    main(["sync", sys.argv[1]])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print({_HEAVY_LOADED})
import wandb                                  # the real SDK still imports cleanly afterwards
from wandb.proto import wandb_internal_pb2 as pb
assert pb.Record().SerializeToString() == b""
"""

_CATCH_UP_CHILD = f"""
import sys
from marinctl import paths
from marinctl.store import open_store
from marinctl.tui import first_read_work
sent = []
first_read_work.plan_and_read(open_store(paths.db_path()), sys.argv[1], (160, 50), sent.append, catch_up=True)
assert [m[0] for m in sent if m[0] in ("plan", "view", "changed")][:2] == ["plan", "view"], sent
print({_HEAVY_LOADED})
"""

_WATCH_CHILD = f"""
import asyncio, os, sys
sys.path.insert(0, os.getcwd())
from marinctl import paths
from tests.watch_pilot import open_watch, run_test, wait_for_text

async def look():
    async with run_test(open_watch(paths.db_path())) as pilot:
        await wait_for_text(pilot, "train/loss", "light-synthetic")
asyncio.run(look())
print({_HEAVY_LOADED})
"""


def test_a_local_run_syncs_without_the_wandb_sdk_and_draws_without_pyarrow(tmp_path):
    """Decoding a `.wandb` file loads wandb's protobufs alone, not the SDK nor the HTTP client, and the first frame
    of a run stored as long rows needs no pyarrow (exported parts only) nor DuckDB's Python package (reads use its
    compiled core, store/engine.py; their costs: bench/NOTES.md); the sync's Arrow writes load it and work. The
    watch helper's catch-up of a run never synced (its first view waits for it) writes history without it."""
    from tests.blackbox import sdk_env, sdk_write

    out = tmp_path / "runs"
    sdk_write(out, '''
        run = wandb.init(mode="offline", dir=out, id="light-synthetic", settings=S())
        for s in range(50):
            run.log({"train/loss": 5.0 - 0.01 * s}, step=s)
        run.finish()
    ''')
    loaded = []
    for child, home in ((_CATCH_UP_CHILD, "fresh"), (_SYNC_CHILD, "home"), (_WATCH_CHILD, "home")):
        env = {**sdk_env(), "MARINCTL_HOME": str(tmp_path / home)}
        proc = subprocess.run([sys.executable, "-c", child, str(out / "wandb")], capture_output=True, text=True,
                              cwd=ROOT, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        loaded.append(proc.stdout.strip().splitlines()[-1])
    # DuckDB 1.x (the version `marinctl[team]` pins for the DuckLake extensions) checks each query
    # parameter against pandas' types, importing pandas, which imports pyarrow, at the first
    # parameterised query; refusing the import costs more (DuckDB retries it at every parameterised
    # query: bench/NOTES.md, "DuckDB 1.5 and pandas"). DuckDB 2 asks only when pandas is loaded.
    import duckdb

    drawn = "['pyarrow']" if duckdb.__version__.startswith("1.") else "[]"
    assert loaded == ["['pyarrow']", "['duckdb', 'pyarrow']", drawn]

