"""`repro` and `demo`: launch the stand-alone trainer and mirror its run into the store.

marinctl never imports repro's code: `repro` starts `python -m repro.train` as a process (through
torchrun for `--nproc N`), passes it the data home and where to write, streams its progress lines to
stderr, reads its one JSON document from stdout, and mirrors the run it logged through the sync
pipeline (`marinctl.sync.sync_targets`). `repro RUN` (a stored run) hands the trainer the run's own
logged config (read with `marinctl show RUN --json`, the contract's shape) as `--from-config`.
`demo` runs the rung1 proxy in the background and opens `watch` on its run folder; Ctrl-C, `q` or a
closed terminal stops the trainer (SIGINT to its process group, then SIGTERM, then SIGKILL), reaps it,
and mirrors what it logged (an interrupted run carries exit code 255 in its W&B exit record).
Trainer exit codes pass through: 0 done, 1 runtime failure, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from marinctl import paths
from marinctl.cli import complete, output
from marinctl.errors import RuntimeFailure, UserError

DEMO_STEPS = 60
DEMO_PROXY = ["--head-dim", "16", "--batch", "16"]  # a smaller proxy than `repro --cpu`: ~1 CPU-second a step
_LAUNCHER_NOISE = re.compile(r"^([WI]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ .*torch/distributed/|\*{10,}\s*$)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("repro", help="Rerun a ladder rung — or a stored run, from its own logged config — with the "
                              "stand-alone PyTorch trainer (`python -m repro.train`): `--cpu` trains the proxy "
                              "(the same recipe, shrunk by a documented rule) in minutes; without it, the true size "
                              "on CUDA. Logs an offline W&B run and mirrors it into the store, linked to its rung.")(repro)
    app.command("demo", help="Train the rung1 CPU proxy in the background and watch it live (Ctrl-C stops both). "
                             "Needs no network.")(demo)


# --- what to train ---------------------------------------------------------------------------------

def _target_args(ref: str) -> list[str]:
    """Trainer arguments naming what to train: a ladder rung, or a stored run's own config."""
    from marinctl.rungs import rung

    try:
        return [rung(ref)["rung"]]
    except UserError as not_a_rung:
        shown = _show(ref)
        if shown is None:
            raise UserError(f"{ref!r} is neither a ladder rung nor a stored run",
                            "see the rungs with `marinctl ladder` and the runs with `marinctl runs`") from not_a_rung
        configs = paths.subdir("repro") / "configs"
        configs.mkdir(parents=True, exist_ok=True)
        path = configs / (re.sub(r"[^A-Za-z0-9_.-]+", "_", ref)[:120] + ".json")
        path.write_text(json.dumps(shown))
        return ["--from-config", str(path), "--source-run", str(shown.get("run") or ref)]


def _show(ref: str) -> dict[str, Any] | None:
    """`marinctl show RUN --json` (the contract's shape), or None when no stored run matches."""
    from marinctl.store import open_store

    options, env = open_store().command_options()
    cmd = [sys.executable, "-m", "marinctl", "--home", str(paths.home()), *options, "show", ref, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    if done.returncode == 2:
        return None
    if done.returncode != 0:
        raise RuntimeFailure(f"could not read stored run {ref!r}: {done.stderr.strip().splitlines()[-1:] or done.returncode}",
                             f"marinctl show {ref}")
    return json.loads(done.stdout)


def _trainer_cmd(target: list[str], nproc: int, extra: list[str]) -> list[str]:
    home = paths.home()
    base = ["-m", "repro.train", *target, "--home", str(home), "--out", str(paths.subdir("repro")), *extra]
    if nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *base]
    return [sys.executable, *base]


# --- running the trainer ----------------------------------------------------------------------------

def _pump(stream, sink, keep: list[str] | None = None) -> threading.Thread:
    """Copy a child's lines to `sink` as they come (torchrun's own launcher chatter left out)."""
    def run() -> None:
        for line in iter(stream.readline, ""):
            if keep is not None:
                keep.append(line)
            if not _LAUNCHER_NOISE.match(line):
                sink.write(line)
                sink.flush()
        stream.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stop(child: subprocess.Popen) -> None:
    """Stop the child's whole process group (its wandb-core, torchrun's ranks): SIGINT, SIGTERM, SIGKILL;
    always reap it."""
    for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if child.poll() is not None:
            break
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        try:
            child.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    child.wait()


class _Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt inside, so the child is always stopped and reaped
    (even when marinctl was started from a shell that ignores SIGINT for background jobs)."""

    def __enter__(self):
        self.old = []
        if threading.current_thread() is threading.main_thread():
            def raise_interrupt(signum, frame):
                raise KeyboardInterrupt

            for sig, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, raise_interrupt),
                                 (signal.SIGHUP, raise_interrupt)):
                self.old.append((sig, signal.signal(sig, handler)))
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.old:
            signal.signal(sig, handler)


def _run_trainer(cmd: list[str]) -> tuple[int, str]:
    """Run the trainer to its end; its stderr streams to ours; returns (exit code, stdout)."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out: list[str] = []
    pumps = [_pump(child.stderr, sys.stderr), _pump(child.stdout, _Discard(), out)]
    try:
        with _Interrupts():
            child.wait()
    except KeyboardInterrupt:
        _stop(child)
    for pump in pumps:
        pump.join(timeout=10)
    return child.returncode, "".join(out)


class _Discard:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def _mirror(run_dir: str | None) -> str | None:
    """Mirror the run folder into the store through the sync pipeline; returns a note when it could not."""
    if not run_dir or not Path(run_dir).exists():
        return "nothing to mirror: the trainer logged no run folder"
    try:
        from marinctl.store import open_store
        from marinctl.sync import sync_targets

        sync_targets(open_store(), [run_dir])
    except Exception as exc:  # the .wandb file is the record; the mirror can be redone with `marinctl sync DIR`
        return f"store mirror failed ({exc.__class__.__name__}: {exc}); retry: marinctl sync {run_dir}"
    return None


def _exit_interrupted() -> None:
    """Exit 130 after Ctrl-C, said on stderr (typer would turn a KeyboardInterrupt into a return value)."""
    sys.stderr.write("marinctl: interrupted\n")
    raise SystemExit(130)


def _result_doc(stdout: str) -> dict[str, Any] | None:
    """The trainer's one JSON document."""
    try:
        return json.loads(stdout) if stdout.strip() else None
    except ValueError:
        return None


# --- the commands -------------------------------------------------------------------------------------

def repro(
    rung: Annotated[str, typer.Argument(metavar="RUNG|RUN", help="rung1..rung4, hero, a width (d768), or a stored run id (rerun from its own logged config).", autocompletion=complete.rungs)],
    cpu: Annotated[bool, typer.Option("--cpu", help="Train the CPU proxy (the rule is in repro/recipe.py).")] = False,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Steps to train (proxy default 120; the true run's own otherwise).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed (default 0, or a stored run's own).")] = None,
    nproc: Annotated[int, typer.Option("--nproc", help="Data-parallel ranks, launched through torchrun (FSDP2).")] = 1,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the true run and the proxy side by side; train nothing.")] = False,
    data: Annotated[Optional[Path], typer.Option("--data", help="Your own text: .txt (or a folder of them), .jsonl (field text) or .parquet (column text).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    if steps is not None and steps < 1:
        raise UserError(f"--steps must be at least 1, not {steps}", "try `marinctl repro rung1 --cpu --steps 100`")
    if nproc < 1:
        raise UserError(f"--nproc must be at least 1, not {nproc}", "try `marinctl repro rung1 --cpu --nproc 2`")
    if data is not None and not Path(data).expanduser().exists():
        raise UserError(f"--data {data}: no such file or folder", "pass a .txt, .jsonl or .parquet file")
    extra = ["--cpu"] if cpu else []
    for flag, value in (("--steps", steps), ("--seed", seed)):
        if value is not None:
            extra += [flag, str(value)]
    if data is not None:
        extra += ["--data", str(Path(data).expanduser())]
    target = _target_args(rung)
    if dry_run:
        code, stdout = _run_trainer(_trainer_cmd(target, 1, extra + ["--dry-run", "--nproc", str(nproc)]
                                                 + (["--json"] if json_out else [])))
        if code:
            raise SystemExit(code)
        doc = _result_doc(stdout) if json_out else None
        output.print_json(doc) if doc is not None else sys.stdout.write(stdout)
        return

    code, stdout = _run_trainer(_trainer_cmd(target, nproc, extra + ["--json"]))
    doc = _result_doc(stdout)
    note = _mirror(doc.get("run_dir")) if doc else None
    if code == 130:
        _exit_interrupted()
    if code or doc is None:
        raise SystemExit(code or 1)
    doc["mirror"] = note or "mirrored into the store"
    if json_out:
        output.print_json(doc)
        return
    result = doc.get("result") or {}
    nan = float("nan")
    typer.echo(f"{doc['run']}: {result.get('steps_done')} steps, train loss {result.get('final_loss') or nan:.3f}, "
               f"eval loss {result.get('final_eval_loss') or nan:.3f}")
    typer.echo(f"  wandb offline run: {doc['run_dir']}  (publish later: wandb sync {doc['run_dir']})")
    typer.echo(f"  {note or 'mirrored into the store; watch it: marinctl watch ' + doc['run']}")


def demo(
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes of the view.")] = 2.0,
    steps: Annotated[int, typer.Option("--steps", help=f"Steps for the proxy (default {DEMO_STEPS}; more show more of the schedule).")] = DEMO_STEPS,
    data: Annotated[Optional[Path], typer.Option("--data", help="Train on your own text instead of the built-in corpus.")] = None,
) -> None:
    """The rung1 proxy in its own process group + the watch TUI on its run folder."""
    if steps < 1:
        raise UserError(f"--steps must be at least 1, not {steps}", f"try `marinctl demo --steps {DEMO_STEPS}`")
    if data is not None and not Path(data).expanduser().exists():
        raise UserError(f"--data {data}: no such file or folder", "pass a .txt, .jsonl or .parquet file")
    run_id = f"repro-d768-cpu-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-demo"
    extra = ["--cpu", "--steps", str(steps), "--run-id", run_id, *DEMO_PROXY]
    if data is not None:
        extra += ["--data", str(Path(data).expanduser())]
    cmd = _trainer_cmd(["rung1"], 1, extra)
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    log_path = paths.subdir("repro") / "demo.log"
    sys.stderr.write(f"starting the rung1 proxy… ({steps} steps; trainer log: {log_path})\n")
    with open(log_path, "w") as log_file:
        child = subprocess.Popen(cmd, stdout=log_file, stderr=log_file if interactive else subprocess.PIPE, text=True,
                                 start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    pump = None if interactive else _pump(child.stderr, sys.stderr)
    run_dir, interrupted = None, False
    try:
        with _Interrupts():
            run_dir = _wait_for_run_dir(paths.subdir("repro") / "wandb", run_id, child)
            if interactive and run_dir is not None:
                from marinctl.tui.app import run_watch
                from marinctl.tui.options import WatchOptions

                run_watch(WatchOptions(str(run_dir), interval, starting="starting the rung1 proxy…"))  # returns when the user quits
            else:
                child.wait()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        finished_alone = child.poll() is not None  # exited before we stopped it: its code is its own
        _stop(child)
        if pump is not None:
            pump.join(timeout=10)
    run_dir = run_dir or _wait_for_run_dir(paths.subdir("repro") / "wandb", run_id, child, timeout=0)
    note = _mirror(str(run_dir) if run_dir else None)
    if note:
        sys.stderr.write(note + "\n")
    if interrupted:
        _exit_interrupted()
    if finished_alone and child.returncode != 0:
        raise RuntimeFailure(f"the background trainer exited with code {child.returncode}", f"see {log_path}")


def _wait_for_run_dir(root: Path, run_id: str, child: subprocess.Popen, timeout: float = 600.0) -> Path | None:
    """The trainer's W&B run folder (`offline-run-<time>-<run id>`), once it exists."""
    t0 = time.time()
    while True:
        found = sorted(root.glob(f"offline-run-*-{run_id}")) if root.exists() else []
        if found:
            return found[-1]
        if child.poll() is not None or time.time() - t0 >= timeout:
            return None
        time.sleep(0.3)
