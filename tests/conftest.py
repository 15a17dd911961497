"""Shared fixtures: every test gets its own data home and a real throwaway DuckDB file."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and so would
# every process it starts: the Ctrl-C tests (sync --follow, repro) need children that hear SIGINT as
# a terminal sends it. A handled signal is reset to the default in a child at exec; an ignored one is not.
signal.signal(signal.SIGINT, signal.default_int_handler)


# A test deadlocked in C code with the GIL taken (DuckDB, gloo) hears no signal, so pytest-timeout
# cannot fail it: faulthandler's own C thread then prints every thread's stack to the real stderr
# and ends the run, DEADLOCK_S after the test started (CI once waited silently to its limit).
DEADLOCK_S = 900
_stderr_fd: int | None = None


def pytest_configure(config):
    global _stderr_fd
    _stderr_fd = os.dup(2)    # fd 2 itself is captured while a test runs


@pytest.fixture(autouse=True)
def _deadlock_guard():
    if _stderr_fd is not None:
        faulthandler.dump_traceback_later(DEADLOCK_S, exit=True, file=_stderr_fd)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("MARINCTL_HOME", str(home))
    for var in ("WANDB_API_KEY", "WANDB_BASE_URL", "GITHUB_TOKEN", "GH_TOKEN", "GITHUB_API_URL", "MARINCTL_STORE",
                "MARINCTL_STORE_DATA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc-none"))
    from marinctl import paths

    paths.set_overrides(None, None)
    paths.set_store(None, None)
    yield home
    paths.set_overrides(None, None)
    paths.set_store(None, None)


@pytest.fixture(scope="session")
def pg_cluster():
    """One throwaway PostgreSQL cluster on a free loopback port for every team-store test of the
    session (tests/lake.py), stopped at the end however the session ends. No PostgreSQL: the
    test fails, naming the package (CI's `.ci/run` installs it)."""
    from tests.lake import PgCluster

    cluster = PgCluster()
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        pytest.fail(str(exc), pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def lake(pg_cluster, tmp_path):
    """A fresh database on the session's cluster: (DuckLake URL, data folder), not yet initialised."""
    db = pg_cluster.new_database()
    return pg_cluster.url(db), tmp_path / "lake-data"


@pytest.fixture
def store(tmp_path):
    from marinctl.store import Store

    return Store(tmp_path / "test.duckdb")


@pytest.fixture
def cli(tmp_path):
    """Run marinctl's main() in-process; returns (exit_code, stdout, stderr)."""
    from tests.blackbox import in_process

    return in_process


# --- GPU: hidden from every test, unless a test is marked `gpu` --------------------------
# repro trains on CUDA when it sees a GPU, so a test naming a true-size rung ("needs CUDA", exit 2) would
# start that run on a machine with one. Every test runs with CUDA hidden, from the processes it starts
# (CUDA_VISIBLE_DEVICES="") and from torch in this process. A test marked `gpu` keeps the GPU and runs
# only when asked for (`pytest -m gpu`): deselected otherwise, and failing, not skipping, without a GPU.

def pytest_collection_modifyitems(config, items):
    if "gpu" in (config.getoption("markexpr") or ""):
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]


@pytest.fixture(autouse=True)
def _no_gpu_unless_marked(request, monkeypatch):
    if request.node.get_closest_marker("gpu"):
        return
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    torch = sys.modules.get("torch")
    if torch is not None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# --- fake servers: started and stopped in one place ---------------------------------------

@pytest.fixture
def wandb_server(monkeypatch):
    """`wandb_server(runs, **kw)`: a started, quiet loopback W&B fake (tests/fakes/wandb_server.py)
    serving `runs`. WANDB_BASE_URL names the last one started, for commands run in-process and the
    processes a test starts; every one stops when the test ends, however it ends."""
    from tests.fakes.wandb_server import WandbServer

    started = []

    def start(runs, **kw):
        kw.setdefault("verbose", False)
        server = WandbServer(runs, **kw).start()
        started.append(server)
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def github_server(monkeypatch):
    """`github_server(**kw)`: a started loopback GitHub fake (tests/fakes/github_server.py);
    GITHUB_API_URL names the last one started; every one stops when the test ends."""
    from tests.fakes.github_server import FakeGitHub

    started = []

    def start(**kw):
        server = FakeGitHub(**kw).__enter__()
        started.append(server)
        monkeypatch.setenv("GITHUB_API_URL", server.url)
        return server

    yield start
    for server in reversed(started):
        server.__exit__(None, None, None)


@pytest.fixture
def watch_store(store):
    """The SYNTHETIC hero lineage, ladder, anomaly and event of tests/tui_store.py, in `store`."""
    from tests.tui_store import build_watch_store

    build_watch_store(store)
    return store
