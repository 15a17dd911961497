"""Shell completion that knows the store, driven as a shell drives it.

Each test runs the installed `marinctl` entry point the way bash's completion function does
(`_MARINCTL_COMPLETE=complete_bash`, `COMP_WORDS`, `COMP_CWORD`; zsh's and fish's forms once
each) on a SYNTHETIC store (hero fork lineage, four ladder rungs), and compares the candidates
with what the store holds, read through the Python API. The store named on the command line
(`--home`) is the one read; a missing store, or one a writer holds, answers nothing at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.blackbox import ROOT

ENTRY = Path(sys.executable).with_name("marinctl")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from marinctl.store import Store
    from tests.tui_store import build_watch_store

    home = tmp_path_factory.mktemp("complete-home")
    build_watch_store(Store(home / "marinctl.duckdb"))
    return home


def complete(line: str, shell: str = "bash", env: dict[str, str] | None = None) -> list[str]:
    """The candidates marinctl offers for the last word of `line` (a trailing space: a new word)."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    base = {k: v for k, v in os.environ.items() if not k.startswith("_MARINCTL")}
    base["MARINCTL_HOME"] = str(ROOT / "no-such-home")                   # only --home on the line is read
    if shell == "bash":
        extra = {"_MARINCTL_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(cword)}
    else:
        extra = {"_MARINCTL_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_ARGS": line,
                 "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
    cmd = [str(ENTRY)] if ENTRY.exists() else [sys.executable, "-c", "import sys; sys.argv[0] = 'marinctl'; "
                                                              "from marinctl.cli import main; main()"]
    done = subprocess.run(cmd, env={**base, **extra, **(env or {})}, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, cwd=ROOT)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def stored(home):
    """What the store holds, read through the API: run ids, and each run's keys."""
    import marinctl

    with marinctl.open(home=home) as m:
        runs = {r["run"]: r for r in m.runs().arrow().read_all().to_pylist()}
        keys = {run: {k for (k,) in m.history(run).project("key").distinct().fetchall()} for run in runs}
    return runs, keys


def test_run_arguments_complete_stored_ids_and_aliases(home, stored):
    runs, _ = stored
    got = complete(f"marinctl --home {home} show ")
    assert set(got) == {"hero", "rung1", "rung2", "rung3", "rung4", *runs}
    assert len(runs) == 7
    assert complete(f"marinctl --home {home} show hero-w") == sorted(r for r in runs if r.startswith("hero-w"))
    assert complete(f"marinctl --home {home} explain step 5 --run rung") == ["rung1", "rung2", "rung3", "rung4"]
    assert complete(f"marinctl --home {home} anomalies --run lad") == sorted(r for r in runs if r.startswith("lad"))
    assert "marin" in complete(f"marinctl --home {home} watch ") and "hero" in complete(f"marinctl --home {home} serve h")


def test_keys_complete_for_the_chosen_run(home, stored):
    runs, keys = stored
    rung1 = next(r for r in runs if "d768" in r)
    hero = set().union(*(keys[r] for r in runs if r.startswith("hero-")))
    assert complete(f"marinctl --home {home} plot train/") == sorted(k for k in hero if k.startswith("train/"))
    got = complete(f"marinctl --home {home} plot --run rung1 train/router/")
    assert got == sorted(k for k in keys[rung1] if k.startswith("train/router/"))
    only_hero = sorted(k for k in hero - keys[rung1] if k.startswith("train/router/"))
    assert only_hero and not set(only_hero) & set(got)                   # a key only the hero logged is not offered
    assert complete(f"marinctl --home {home} explain step 5 --metric params/norm/tot") == ["params/norm/total"]
    assert complete(f"marinctl --home {home} plot --run no-such-run tr") == []


def test_export_keys_complete_the_last_of_the_list(home, stored):
    runs, keys = stored
    rung2 = next(r for r in runs if "d1024" in r)
    got = complete(f"marinctl --home {home} export rung2 --keys train/loss,optim/")
    assert got == ["train/loss," + k for k in sorted(keys[rung2]) if k.startswith("optim/")] and got


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_get_the_same_runs(home, shell):
    out = "\n".join(complete(f"marinctl --home {home} show rung", shell=shell))
    assert all(f"rung{i}" in out for i in range(1, 5)) and "hero" not in out


def test_completion_only_reads_and_never_waits(home, tmp_path):
    assert complete(f"marinctl --home {tmp_path / 'empty'} show ") == []
    assert not (tmp_path / "empty").exists()                            # a missing store is not created
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(home / "marinctl.duckdb", copy / "marinctl.duckdb")
    before = (copy / "marinctl.duckdb").read_bytes()
    assert "hero" in complete(f"marinctl --home {copy} show ")
    assert (copy / "marinctl.duckdb").read_bytes() == before and sorted(p.name for p in copy.iterdir()) == ["marinctl.duckdb"]

    from marinctl.store.engine import duckdb

    writer = duckdb.connect(str(copy / "marinctl.duckdb"))                # a sync holding the file read-write
    try:
        assert complete(f"marinctl --home {copy} show ") == []
    finally:
        writer.close()
