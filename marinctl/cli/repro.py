"""`repro` (rerun a ladder rung locally: a CPU proxy, or the true size on a GPU) and `demo`.

torch and the `repro/` package are imported inside the commands only, so `marinctl --help` stays fast.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from marinctl import paths
from marinctl.cli import output
from marinctl.errors import RuntimeFailure, UserError


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("repro", help="Rerun a ladder rung locally: `--cpu` trains a shrunk proxy of the same recipe in "
                              "minutes (QB router bias, MuonH/AdamH/Adam, schedule and data-phase fractions kept); "
                              "without it, the true rung on a CUDA GPU. Logs an offline W&B run and mirrors it into "
                              "the store, linked to the rung.")(repro)
    app.command("demo", help="Train the rung1 CPU proxy in the background and watch it live (Ctrl-C stops both). "
                             "Needs no network.")(demo)


def _rung_name(ref: str) -> str:
    """A ladder rung by alias/width, or a stored run whose config names one (`marinctl repro RUN_ID`)."""
    from marinctl.rungs import rung, rungs

    try:
        return rung(ref)["rung"]
    except UserError as not_a_rung:
        from marinctl.store import open_store
        from marinctl.store.runs import resolve_run

        store = open_store()
        try:
            with store.connect() as con:
                run = resolve_run(con, ref)
        except UserError:
            raise not_a_rung from None
        config = run.get("config") or {}
        if isinstance(config, str):
            import json

            config = json.loads(config or "{}")
        linked = (config.get("marinctl") or {}).get("repro_of") if isinstance(config.get("marinctl"), dict) else None
        if linked:
            return rung(linked)["rung"]
        hidden = _find_number(config, ("hidden_dim", "hidden_size", "d_model", "hidden"))
        for r in rungs():
            if hidden == r["hidden"]:
                return r["rung"]
        raise UserError(f"run {ref!r} does not describe a ladder rung (hidden width {hidden})",
                        "name a rung instead: `marinctl repro rung1 --cpu`") from None


def _find_number(config: Any, keys: tuple[str, ...]) -> int | None:
    if isinstance(config, dict):
        for k, v in config.items():
            if k in keys and isinstance(v, (int, float)):
                return int(v)
            if isinstance(v, dict) and (found := _find_number(v, keys)) is not None:
                return found
    return None


def _peak_flops() -> float:
    from repro.machine import cached_peak_flops

    return cached_peak_flops(paths.subdir("repro") / "peak.json")


def _mirror(run_dir: Path) -> str | None:
    """Sync the offline run into the store (if the local .wandb reader is installed). Returns a note."""
    try:
        from marinctl.sources.wandb_local import sync_path
    except ImportError:
        return "store mirror skipped: marinctl.sources.wandb_local is not available"
    from marinctl.store import open_store

    try:
        sync_path(open_store(), run_dir)
    except Exception as exc:  # the mirror is a convenience; the .wandb file is the record
        return f"store mirror failed: {exc.__class__.__name__}: {exc}"
    return None


class _Progress:
    """One live line on stderr (a plain line per eval when stderr is not a terminal)."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.tty = total, quiet, sys.stderr.isatty()
        self.t0 = time.time()
        self.last_eval: float | None = None

    def __call__(self, report) -> None:
        if self.quiet:
            return
        m = report.metrics
        done = report.step + 1
        bar_w = 24
        fill = int(bar_w * done / self.total)
        eta = (time.time() - self.t0) / done * (self.total - done)
        line = f"step {done:>5}/{self.total} [{'█' * fill}{'·' * (bar_w - fill)}] loss {report.loss:6.3f}"
        if "eval/loss" in m:
            self.last_eval = m["eval/loss"]
        if self.last_eval is not None:
            line += f"  eval {self.last_eval:6.3f}"
        line += (f"  drop {100 * m.get('moe/drop_fraction', 0):4.1f}%  {m.get('throughput/tokens_per_second', 0):,.0f} tok/s"
                 f"  eta {eta:4.0f}s")
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K")
            if done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif "eval/loss" in m or done == self.total:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def _print_plan(result: dict[str, Any]) -> None:
    def row(label: str, key: str, fmt) -> str:
        t, p = result["true"].get(key), result["proxy"].get(key)
        return f"  {label:<22}{fmt(t) if t is not None else '-':>18}  {fmt(p) if p is not None else '-':>18}"

    def big(n: float) -> str:
        for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if abs(n) >= div:
                return f"{n / div:.2f}{unit}"
        return f"{n:.0f}"

    def dur(s: float) -> str:
        for unit, div in (("y", 3.15e7), ("d", 86400), ("h", 3600), ("min", 60)):
            if s >= div:
                return f"{s / div:.1f} {unit}"
        return f"{s:.1f} s"

    t, p = result["true"], result["proxy"]
    lines = [f"{result['rung']}  {t['label']}", f"  {'':<22}{'true rung':>18}  {'cpu proxy':>18}"]
    shape = lambda c: f"d{c['d_model']} L{c['layers']} E{c['experts']}/K{c['top_k']}"  # noqa: E731
    lines.append(f"  {'shape':<22}{shape(t['shape']):>18}  {shape(p['shape']):>18}")
    lines.append(f"  {'heads / kv (loc,glob)':<22}{'%d / %d,%d' % (t['shape']['heads'], t['shape']['local_kv'], t['shape']['global_kv']):>18}"
                 f"  {'%d / %d,%d' % (p['shape']['heads'], p['shape']['local_kv'], p['shape']['global_kv']):>18}")
    lines.append(f"  {'vocab / seq / window':<22}{'%d/%d/%d' % (t['shape']['vocab'], t['shape']['seq_len'], t['shape']['window']):>18}"
                 f"  {'%d/%d/%d' % (p['shape']['vocab'], p['shape']['seq_len'], p['shape']['window']):>18}")
    lines += [row("total params", "total_params", big), row("active params", "active_params", big)]
    lines.append(f"  {'memory (w+g+opt)':<22}{t['memory_gib']['total']:>14.1f} GiB  {p['memory_gib']['total']:>14.2f} GiB")
    lines += [row("steps", "steps", lambda v: f"{v:,}"), row("tokens", "tokens", big), row("FLOPs (6·N_act·D)", "flops", lambda v: f"{v:.2e}"),
              row("MuonH / AdamH LR", "muonh_lr", lambda v: f"{v:.4g}"), row("Adam LR", "adam_lr", lambda v: f"{v:.4g}"),
              row("warm-up steps", "warmup_steps", str), row("phase switch steps", "phase_steps", lambda v: ",".join(map(str, v[1:]))),
              row("time at measured peak", "time_s_at_measured_peak", dur)]
    if "published" in t:
        pub = t["published"]
        lines.append(f"  published: {big(pub['total_params'])} total, {big(pub['active_params'])} active, "
                     f"{big(pub['tokens'])} tokens, {pub['flops']:.1e} FLOPs (this model has no latent MoE, so its counts differ)")
    if "measured_flops_per_s" in t:
        lines.append(f"  measured fp32 matmul peak here: {t['measured_flops_per_s'] / 1e9:.0f} GFLOP/s")
    for line in lines:
        typer.echo(line)


def repro(
    rung: Annotated[str, typer.Argument(metavar="RUNG", help="rung1..rung4, hero, a width (d768), or a stored RUN whose config names one.")],
    cpu: Annotated[bool, typer.Option("--cpu", help="Train the shrunk CPU proxy (minutes on 2 cores).")] = False,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Steps to train (default: 160 for --cpu, the rung's own otherwise).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same run on CPU).")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the true rung and the proxy side by side; train nothing.")] = False,
    data: Annotated[Optional[Path], typer.Option("--data", help="Your own text: .txt (or a folder of them), .jsonl (field text) or .parquet (column text).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    if steps is not None and steps < 1:
        raise UserError(f"--steps must be at least 1, not {steps}", "try `marinctl repro rung1 --cpu --steps 100`")
    if data is not None and not Path(data).expanduser().exists():
        raise UserError(f"--data {data}: no such file or folder", "pass a .txt, .jsonl or .parquet file")
    name = _rung_name(rung)

    from repro import rungs as R
    from repro.machine import cuda_memory_bytes

    true_cfg = R.true_config(name)
    if steps is not None and not cpu:
        true_cfg = R.with_steps(true_cfg, steps)
    proxy_cfg = R.cpu_proxy(name, steps=steps if cpu else None)
    peak = _peak_flops() if dry_run else None
    result: dict[str, Any] = {
        "rung": name,
        "proxy": R.summary(proxy_cfg, peak),
        "true": R.summary(true_cfg, peak, published=R.published_row(name)),
        "run": None,
    }
    if dry_run:
        output.print_json(result) if json_out else _print_plan(result)
        return

    if cpu:
        cfg, device = proxy_cfg, "cpu"
    else:
        need = R.gib_needed(true_cfg)
        have = cuda_memory_bytes()
        if have is None:
            raise UserError(f"{name} at its true size ({true_cfg.label}) needs a CUDA GPU with about {need} GiB "
                            f"(fp32 weights, grads and optimizer state) and this machine has none",
                            f"run the proxy: `marinctl repro {name} --cpu` (see the sizes: `marinctl repro {name} --dry-run`)")
        if not R.fits_on_gpu(true_cfg, have):
            raise UserError(f"{name} at its true size needs about {need} GiB of GPU memory; this GPU has "
                            f"{have / 2**30:.0f} GiB (multi-GPU FSDP is not built yet)",
                            f"run the proxy: `marinctl repro {name} --cpu`")
        cfg, device = true_cfg, "cuda"

    result["run"] = _train_and_log(cfg, device, seed, data, quiet=json_out, peak=None if device == "cuda" else _peak_flops())
    if json_out:
        output.print_json(result)
    else:
        run = result["run"]
        typer.echo(f"{run['id']}: {run['steps_done']} steps, train loss {run['final_loss']:.3f}, "
                   f"eval loss {run['final_eval_loss']:.3f}")
        typer.echo(f"  wandb offline run: {run['dir']}")
        typer.echo(f"  publish later: wandb sync {run['dir']}")
        typer.echo(f"  {run['note'] or 'mirrored into the store; watch it: marinctl watch ' + run['id']}")


def _train_and_log(cfg, device: str, seed: int, data: Path | None, quiet: bool, peak: float | None) -> dict[str, Any]:
    from repro.data import load_corpus
    from repro.model import param_counts
    from repro.train import close_wandb_run, open_wandb_run, train

    if not quiet:
        sys.stderr.write("preparing data and tokenizer (cached after the first run)…\n")
    corpus = load_corpus(min(cfg.model.vocab_size, 4096), data, cfg.model.seq_len)
    wandb_dir = paths.subdir("repro")
    run = open_wandb_run(cfg, wandb_dir, seed, corpus)
    run_dir = Path(run.dir).parent  # …/wandb/offline-run-…/files → the run folder
    if not quiet:
        sys.stderr.write(f"{run.id}: {cfg.label}, {cfg.steps} steps on {device}; logging to {run_dir}\n")
    progress = _Progress(cfg.steps, quiet)
    evals_since_mirror = [0]

    def log(metrics: dict[str, Any], step: int) -> None:
        run.log(metrics, step=step)

    def on_step(report) -> None:
        progress(report)
        if "eval/loss" in report.metrics:
            evals_since_mirror[0] += 1
            if evals_since_mirror[0] % 5 == 0:
                _mirror(run_dir)

    summary: dict[str, Any] = {}
    interrupted = False
    try:
        with _interrupt_on_signals():
            summary = train(cfg, corpus, seed=seed, log=log, on_step=on_step, device=device, peak_flops=peak)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        summary.pop("model", None)
        close_wandb_run(run, {"parameter_count": param_counts(cfg.model)["total"], **summary})
    time.sleep(0.3)  # the last record lands just after finish() returns (stack.md §2)
    note = _mirror(run_dir)
    if interrupted:
        raise KeyboardInterrupt
    return {"id": run.id, "dir": str(run_dir), "wandb_file": str(next(run_dir.glob("*.wandb"), "")),
            "device": device, "note": note, **summary}


@contextmanager
def _interrupt_on_signals():
    """Ctrl-C, SIGTERM and SIGHUP all raise KeyboardInterrupt inside, so the run (and `demo`) always cleans
    up — even when started from a shell that set SIGINT to ignored for background jobs."""
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # SIGHUP too: a closed terminal or tmux window must not orphan the background trainer.
    old = (signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, raise_interrupt),
           signal.signal(signal.SIGHUP, raise_interrupt))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])
        signal.signal(signal.SIGHUP, old[2])


def demo(
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes of the view.")] = 2.0,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Steps for the proxy (default 160).")] = None,
) -> None:
    """`repro rung1 --cpu` in a child process group + the watch TUI on its wandb folder."""
    cmd = [sys.executable, "-m", "marinctl", "--home", str(paths.home()), "repro", "rung1", "--cpu"]
    if steps:
        cmd += ["--steps", str(steps)]
    wandb_root = paths.subdir("repro") / "wandb"
    before = set(wandb_root.glob("offline-run-*")) if wandb_root.exists() else set()
    log_path = paths.subdir("repro") / "demo.log"
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    with open(log_path, "w") as log_file:
        child = subprocess.Popen(cmd, stdout=log_file if interactive else None, stderr=log_file if interactive else None,
                                 start_new_session=True)
    try:
        with _interrupt_on_signals():
            _show(wandb_root, before, child, log_path, interactive, interval)
    except KeyboardInterrupt:
        pass
    finally:
        _stop(child)
    if child.returncode not in (0, None, -signal.SIGTERM, -signal.SIGINT, 130):
        raise RuntimeFailure(f"the background repro exited with code {child.returncode}", f"see {log_path}")


def _show(wandb_root: Path, before: set[Path], child: subprocess.Popen, log_path: Path, interactive: bool,
          interval: float) -> None:
    """The watch TUI on the child's run folder when there is a terminal and a TUI; else the log."""
    run_dir = _wait_for_run_dir(wandb_root, before, child)
    try:
        from marinctl.tui.app import run_watch
    except ImportError:
        run_watch = None
    if run_watch is not None and interactive and run_dir is not None:
        run_watch(str(run_dir), interval)
    elif interactive:
        sys.stderr.write(f"training in the background (log: {log_path}); no watch view available, following the log\n")
        _follow(log_path, child)
    else:
        child.wait()


def _wait_for_run_dir(root: Path, before: set[Path], child: subprocess.Popen, timeout: float = 120.0) -> Path | None:
    t0 = time.time()
    while time.time() - t0 < timeout and child.poll() is None:
        new = sorted(set(root.glob("offline-run-*")) - before) if root.exists() else []
        if new:
            return new[-1]
        time.sleep(0.5)
    return None


def _follow(log_path: Path, child: subprocess.Popen) -> None:
    with open(log_path, errors="replace") as f:
        while True:
            chunk = f.read()
            if chunk:
                sys.stderr.write(chunk)
                sys.stderr.flush()
            elif child.poll() is not None:
                return
            time.sleep(0.5)


def _stop(child: subprocess.Popen) -> None:
    """Stop the child's whole process group (its wandb-core too): SIGINT, then SIGTERM, then SIGKILL."""
    if child.poll() is not None:
        return
    for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
