"""Helpers for tests that use marinctl only as a person does: the CLI, the wandb SDK, the fakes.

Nothing here imports marinctl. Runs are written by the real wandb SDK (offline, in a child
process so no `wandb-core` outlives it), history is read back through `marinctl export`,
`show --json` and friends, and remote runs come from the loopback fakes in tests/fakes/.
Every run written here is SYNTHETIC and says so in its name.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
MARINCTL = [sys.executable, "-m", "marinctl"]

# The prelude every SDK writer script starts with: `out` (the folder), `S()` (fresh settings;
# wandb mutates a Settings object it was given, so never share one), `logged` (what the
# script reports back as ground truth, dumped to out/logged.json at the end).
_PRELUDE = textwrap.dedent('''
    import json, math, os, sys, time
    import wandb
    out = sys.argv[1]
    def S(**kw):
        return wandb.Settings(x_disable_stats=True, console="off", silent=True, **kw)
    logged = {}
''')
_EPILOGUE = textwrap.dedent('''
    from repro.wandb_log import teardown  # bounded: wandb's own can wait for ever
    teardown()
    with open(os.path.join(out, "logged.json"), "w") as f:
        json.dump(logged, f, allow_nan=True)
''')


def sdk_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MARINCTL_", "WANDB_BASE_URL", "WANDB_API_KEY"))}
    env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true"}, **extra)
    return env


def sdk_write(out: Path, body: str, *, timeout: float = 180) -> dict[str, Any]:
    """Run `body` (Python using the wandb SDK, see _PRELUDE) in a child; returns its `logged`."""
    out.mkdir(parents=True, exist_ok=True)
    script = _PRELUDE + textwrap.dedent(body) + _EPILOGUE
    proc = subprocess.run([sys.executable, "-c", script, str(out)], env=sdk_env(), cwd=out,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"SDK writer failed:\n{proc.stderr[-3000:]}"
    return json.loads((out / "logged.json").read_text())


def wandb_files(root: Path) -> dict[str, list[Path]]:
    """run id -> its `.wandb` files (a resumed run has several), oldest folder first."""
    found: dict[str, list[Path]] = {}
    for p in sorted(root.rglob("run-*.wandb")):
        if "latest-run" in p.parts:
            continue
        found.setdefault(p.name[len("run-"):-len(".wandb")], []).append(p)
    return found


def leet_summary(path: Path) -> dict[str, Any]:
    """W&B's own reader (`wandb leet inspect --summary --json`): the summary W&B computes for a file."""
    exe = Path(sys.executable).with_name("wandb")
    proc = subprocess.run([str(exe), "leet", "inspect", "--summary", "--json", str(path)],
                          capture_output=True, text=True, timeout=60, env=sdk_env())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --- reading marinctl's output ------------------------------------------------------------------

def in_process(*args: str) -> tuple[int, str, str]:
    """`marinctl ARGS` through the CLI's own entry point in this process (the `cli` fixture; a lake's
    reader on another "machine", whose DuckDB has its extensions loaded once): (exit code, stdout, stderr)."""
    from contextlib import redirect_stderr, redirect_stdout

    from marinctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def cli_in(cli, world: Any, *args: str) -> str:
    """stdout of `marinctl --home WORLD.home ARGS` (exit 0 asserted), read once per world: a module's
    fixture world (`home`, and a `cache` dict) serves many tests the same answer."""
    if args not in world.cache:
        code, out, err = cli("--home", str(world.home), *args)
        assert code == 0, err
        world.cache[args] = out
    return world.cache[args]


def explain_in(cli, world: Any, run: str, step: int) -> dict:
    """`explain step STEP --run RUN --json` on a fixture world, parsed strictly."""
    return strict_json(cli_in(cli, world, "explain", "step", str(step), "--run", run, "--json"))


def run_cli(cli, *args: str, ok: bool = True) -> tuple[int, str, str]:
    code, out, err = cli(*args)
    if ok:
        assert code == 0, f"marinctl {' '.join(args)} -> exit {code}\n{err}"
    return code, out, err


def cli_json(cli, *args: str) -> Any:
    """`marinctl ARGS` (which must print JSON) parsed strictly: bare NaN/Infinity are not JSON."""
    _, out, _ = run_cli(cli, *args)
    return strict_json(out)


def home_json(home: Path, *args: str, env: dict[str, str], timeout: float = 300) -> Any:
    """`marinctl --home HOME ARGS` in its own process (which must succeed and print JSON), parsed."""
    proc = subprocess.run([*MARINCTL, "--home", str(home), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def strict_json(text: str) -> Any:
    def refuse(token: str):
        raise AssertionError(f"output is not strict JSON: bare {token}")
    return json.loads(text, parse_constant=refuse)


def export_rows(cli, run: str, *extra: str) -> list[tuple[int, str, str]]:
    """`marinctl export RUN` as (step, key, value-as-printed) rows, header checked."""
    _, out, _ = run_cli(cli, "export", run, *extra)
    rows = list(csv.reader(io.StringIO(out)))
    assert rows and rows[0] == ["step", "key", "value"], out[:200]
    return [(int(s), k, v) for s, k, v in rows[1:]]


NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def as_number(text: str) -> float:
    """A value as the CLI contract prints it: a number, or NaN/Infinity/-Infinity spelled out."""
    if text in NONFINITE:
        return NONFINITE[text]
    return float(text)


def same(a: float, b: float) -> bool:
    return (a != a and b != b) or a == b


def export_values(cli, run: str, *extra: str, user_keys: bool = True) -> dict[tuple[int, str], float]:
    """{(step, key): value} of `marinctl export RUN`; W&B's own `_` keys dropped unless asked."""
    out: dict[tuple[int, str], float] = {}
    for step, key, value in export_rows(cli, run, *extra):
        if user_keys and key.startswith("_"):
            continue
        assert (step, key) not in out, f"duplicate row {step} {key}"
        out[(step, key)] = as_number(value) if value != "" else None
    return out


def logged_values(rows: list[dict[str, Any]]) -> dict[tuple[int, str], float]:
    """Ground truth from a writer's `rows` ([{"_step": s, key: value, ...}]), numbers only."""
    out = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith("_") or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            out[(int(r["_step"]), k)] = float(v)
    return out


def assert_same_values(got: dict, want: dict) -> None:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(want) & set(got) if not same(got[k], want[k]))
    assert not (missing or extra or wrong), (
        f"{len(missing)} missing (e.g. {missing[:4]}), {len(extra)} unexpected (e.g. {extra[:4]}), "
        f"{len(wrong)} wrong (e.g. {[(k, got[k], want[k]) for k in wrong[:3]]})")


def stderr_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


_HUMAN = re.compile(r"^([-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)\s*([kKMGTP]?)$")


def parse_number(text: str) -> float:
    """'1,234' / '1.2e+05' / '122.9k' / '1.5M' as a float (the forms marinctl prints)."""
    m = _HUMAN.match(text.strip())
    assert m, f"not a number: {text!r}"
    scale = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}[m.group(2)]
    return float(m.group(1).replace(",", "")) * scale


# --- fake servers ----------------------------------------------------------------------------------

def start_wandb(runs, **kw):
    """A started loopback W&B server (stop it yourself); quiet unless asked."""
    from tests.fakes.wandb_server import WandbServer

    kw.setdefault("verbose", False)
    return WandbServer(runs, **kw).start()


def sync_served(runs, *args: str, env: dict[str, str], timeout: float = 300, **server_kw) -> subprocess.CompletedProcess:
    """`marinctl sync ARGS`, a real process, against a loopback W&B fake serving `runs` that is started
    for it and stopped after it however it ends: how a module's world is filled once (the per-test
    servers are conftest's `wandb_server`)."""
    from tests.fakes.wandb_server import WandbServer

    with WandbServer(runs, **{"verbose": False, **server_kw}) as server:
        return marinctl_run(["sync", *args], env={**env, "WANDB_BASE_URL": server.url}, timeout=timeout)


def ops(server, since: int = 0) -> list[str]:
    """GraphQL operation names the server answered, in order, from request `since` on."""
    return [op for op, _ in server.requests[since:]]


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def marinctl_proc(args: list[str], *, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(MARINCTL + args, env=env, cwd=kw.pop("cwd", ROOT), **kw)


def marinctl_run(args: list[str], *, env: dict[str, str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(MARINCTL + args, env=env, cwd=kw.pop("cwd", ROOT), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def wait_until(cond: Callable[[], bool], timeout: float = 30.0, step: float = 0.05) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def interrupt(proc: subprocess.Popen, timeout: float = 30) -> bool:
    """Ctrl-C to the process group (started with `start_new_session=True`), as a terminal sends it;
    SIGKILL when it has not ended within `timeout`. True when Ctrl-C alone ended it."""
    if proc.poll() is not None:
        return True
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return False
