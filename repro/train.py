"""`python -m repro.train RUNG`: train a Marin ladder rung (or its CPU proxy, or a logged run as itself).

    python -m repro.train rung1 --cpu                      # the rung1 proxy on this CPU, logged offline to W&B
    python -m repro.train rung1 --dry-run [--json]         # the true rung beside its proxy: params, memory, FLOPs
    python -m repro.train --from-config run.json --cpu     # a logged run's own config, shrunk by the proxy rule
    torchrun --standalone --nproc-per-node 2 -m repro.train rung1 --cpu   # data-parallel (FSDP2)

Without `--cpu` the run trains at its true size on CUDA (bf16 compute, fp32 weights). Output: progress
lines on stderr (rank 0), and with `--json` one JSON document on stdout:
`{"rung", "true", "proxy", "run", "run_dir", "result", "from_config"}` (`run` is the W&B run id).
Exit codes: 0 done, 1 runtime failure, 2 bad input, 130 interrupted (the W&B exit record then holds 255).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from repro import home as repro_home
from repro.errors import EXIT_INTERRUPTED, ReproError, RunFailure, UsageError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m repro.train", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rung", nargs="?", help="rung1..rung4, hero, or a width (d768); optional with --from-config")
    ap.add_argument("--cpu", action="store_true", help="train the CPU proxy (the rule is in repro/recipe.py)")
    ap.add_argument("--steps", type=int, help="steps to train (proxy default 120; the true run's own otherwise)")
    ap.add_argument("--seed", type=int, help="random seed (default 0, or the logged run's)")
    ap.add_argument("--batch", type=int, help="global batch in sequences (proxy default 32)")
    ap.add_argument("--seq-len", type=int, help="proxy sequence length (default 256)")
    ap.add_argument("--vocab", type=int, help="proxy BPE vocabulary (default 4096)")
    ap.add_argument("--head-dim", type=int, help="proxy head width (default 32; `marinctl demo` uses 16)")
    ap.add_argument("--data", type=Path, help="your own text: .txt (or a folder), .jsonl (field text), .parquet (column text)")
    ap.add_argument("--from-config", type=Path, help="a logged run's W&B config (JSON) to train as itself")
    ap.add_argument("--source-run", help="the id of the run --from-config came from (for the record)")
    ap.add_argument("--home", help="repro's data home (tokenizer, peak cache); default $REPRO_HOME, $MARINCTL_HOME, ~/.cache/repro")
    ap.add_argument("--out", type=Path, help="where W&B runs go (default <home>/repro)")
    ap.add_argument("--run-id", help="the W&B run id (default repro-<width>-<kind>-<time>-s<seed>)")
    ap.add_argument("--nproc", type=int, help="--dry-run: size memory per rank for N data-parallel ranks")
    ap.add_argument("--nproc-aware", action="store_true",
                    help="--dry-run: size memory per rank for the ranks torchrun gives (WORLD_SIZE)")
    ap.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                    help="compute dtype under autocast (auto: bf16 on CUDA and CPUs with native bf16, else fp32)")
    ap.add_argument("--threads", type=int, help="torch CPU threads per process (default: the cores not busy with other work)")
    ap.add_argument("--dry-run", action="store_true", help="describe the run; train nothing")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
    args = ap.parse_args(argv)
    if args.rung is None and args.from_config is None:
        ap.error("name a RUNG (rung1 … hero, d768 …) or pass --from-config FILE")
    for flag in ("steps", "batch", "seq_len", "vocab", "head_dim", "nproc", "threads"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1, not {value}")
    return args


# --- building the config ----------------------------------------------------------------------------

def build(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any] | None, dict[str, Any] | None]:
    """(true config, proxy config, published row, from-config report)."""
    from repro import recipe
    from repro.ladder import rung as rung_row

    report = None
    if args.from_config is not None:
        from repro.logged_config import from_logged

        config = _read_config(args.from_config)
        true_cfg, report = from_logged(config, args.source_run or args.from_config.stem)
        published = rung_row(true_cfg.rung) if true_cfg.rung else None
    else:
        true_cfg = recipe.true_config(args.rung)
        published = rung_row(args.rung)
    if args.steps and not args.cpu:
        true_cfg = recipe.with_steps(true_cfg, args.steps)
    proxy_kw = {k: v for k, v in (("batch_size", args.batch), ("seq_len", args.seq_len), ("vocab", args.vocab),
                                  ("head_dim", args.head_dim)) if v}
    proxy_cfg = recipe.cpu_proxy(true_cfg, steps=args.steps if args.cpu else None, **proxy_kw)
    return true_cfg, proxy_cfg, published, report


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(Path(path).expanduser().read_text())
    except OSError as exc:
        raise UsageError(f"--from-config {path}: {exc.strerror or exc}", "pass the JSON of a run's config") from None
    except ValueError as exc:
        raise UsageError(f"--from-config {path}: not JSON ({exc})", "pass the JSON of a run's config") from None
    if isinstance(config, dict) and isinstance(config.get("config"), dict):
        config = config["config"]  # `marinctl show RUN --json` gives {"run", "config", …}
    if not isinstance(config, dict):
        raise UsageError(f"--from-config {path}: expected a JSON object of config keys", "pass the JSON of a run's config")
    return config


def device_for(args: argparse.Namespace, true_cfg) -> str:
    if args.cpu:
        return "cpu"
    from repro.machine import cuda_memory_bytes

    if cuda_memory_bytes() is None:
        raise UsageError(f"{true_cfg.label} at its true size needs CUDA and this machine has none",
                         f"train the proxy: python -m repro.train {args.rung or '--from-config ' + str(args.from_config)} --cpu")
    return "cuda"


# --- dry run ---------------------------------------------------------------------------------------------

def dry_run(args, true_cfg, proxy_cfg, published, report) -> dict[str, Any]:
    from repro.plan import describe

    ranks = args.nproc or (int(os.environ.get("WORLD_SIZE", 1)) if args.nproc_aware else 1)
    device = "cuda" if not args.cpu and _has_cuda() else "cpu"
    doc = {"rung": true_cfg.rung, "true": describe(true_cfg, device="cuda", ranks=ranks, published=published),
           "proxy": describe(proxy_cfg, device="cpu", ranks=ranks), "run": None, "run_dir": None,
           "device": device, "ranks": ranks}
    if report is not None:
        doc["from_config"] = report
    return doc


def _has_cuda() -> bool:
    from repro.machine import cuda_memory_bytes

    return cuda_memory_bytes() is not None


# --- training ------------------------------------------------------------------------------------------

class Progress:
    """Rank 0's progress on stderr: a live line on a terminal, else a line every 5 % and at each eval."""

    def __init__(self, total: int):
        self.total, self.tty, self.t0 = total, sys.stderr.isatty(), time.time()
        self.every = max(1, total // 20)
        self.last_eval: float | None = None

    def __call__(self, report) -> None:
        m, done = report.metrics, report.step + 1
        if "eval/loss" in m:
            self.last_eval = m["eval/loss"]
        eta = (time.time() - self.t0) / done * (self.total - done)
        line = (f"step {done:>5}/{self.total} loss {report.loss:6.3f}"
                + (f" eval {self.last_eval:6.3f}" if self.last_eval is not None else "")
                + f" drop {100 * m.get('moe/drop_fraction', 0):4.1f}% {m.get('throughput/tokens_per_second', 0):,.0f} tok/s"
                + (f" mfu {m['throughput/mfu']:.0f}%" if "throughput/mfu" in m else "") + f" eta {eta:4.0f}s")
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K" + ("\n" if done == self.total else ""))
        elif "eval/loss" in m or done % self.every == 0 or done == self.total:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_training(args, cfg, device: str, report: dict[str, Any] | None) -> dict[str, Any]:
    import torch

    from repro import dist, loop, machine
    from repro.accounting import param_counts
    from repro.data import load_corpus
    from repro.logged_config import to_logged
    from repro.recipe import PROXY_VOCAB
    from repro.wandb_log import EXIT_FAILED, EXIT_FINISHED, EXIT_KILLED, default_run_id, finish_run, open_run

    machine.keep_freed_memory()
    ranks = dist.from_env()
    if device == "cpu":  # one process per core under torchrun; otherwise the cores that are free
        torch.set_num_threads(args.threads or (1 if ranks.world > 1 else machine.threads_for_load()))
    if cfg.batch_size % ranks.world:
        raise UsageError(f"a global batch of {cfg.batch_size} does not split over {ranks.world} ranks",
                         f"pass --batch {cfg.batch_size - cfg.batch_size % ranks.world or ranks.world}")
    seed = args.seed if args.seed is not None else ((report or {}).get("seed") or 0)
    home = repro_home.home(args.home)
    out = Path(args.out).expanduser() if args.out else repro_home.subdir(home, "repro")
    dtype = machine.compute_dtype(device, args.dtype)
    say = (lambda text: sys.stderr.write(text + "\n")) if ranks.main else (lambda text: None)
    say(f"preparing data and tokenizer (cached under {home / 'tokenizer'} after the first run)…")
    # the local BPE: the proxy's own vocabulary; a true-size run uses it inside the rung's 128,256-row embedding
    tokenizer_vocab = cfg.model.vocab_size if cfg.kind == "cpu-proxy" else min(cfg.model.vocab_size, PROXY_VOCAB)
    corpus = load_corpus(tokenizer_vocab, repro_home.subdir(home, "tokenizer"), args.data, cfg.model.seq_len)
    dist.init(ranks, device)
    peak = loop.Peak(machine.kept_peak(repro_home.subdir(home, "repro") / "peak.json", dtype, device))
    run = run_dir = None
    run_id = args.run_id or default_run_id(f"{cfg.width or 'run'}-{'cpu' if cfg.kind == 'cpu-proxy' else device}", seed)
    data = {"source": corpus.source, "domains": sorted(corpus.train), "tokenizer": corpus.tokenizer_path.name,
            "vocab_size": corpus.vocab_size, "phase_weights": [corpus.phase_weights(i) for i in range(len(cfg.phase_fractions))]}
    if ranks.main:
        run, run_dir = open_run(out, run_id, to_logged(cfg, seed=seed, data=data, compute_dtype=dtype, ranks=ranks.world,
                                                       threads=torch.get_num_threads() if device == "cpu" else None),
                                group=f"repro-{cfg.rung or cfg.source_run or 'run'}",
                                tags=["repro", cfg.kind] + [t for t in (cfg.rung, cfg.width) if t])
        threads = torch.get_num_threads()
        how = [f"{dtype} compute"] + ([f"{threads} thread{'s' * (threads != 1)}"] if device == "cpu" else []) + (
            [f"{ranks.world} ranks"] if ranks.world > 1 else [])
        say(f"{run_id}: {cfg.label}, {cfg.steps} steps × {cfg.batch_size} sequences on {device} ({', '.join(how)}); "
            f"logging to {run_dir}")
    summary: dict[str, Any] = {}
    exit_code, interrupted = EXIT_FAILED, False
    try:
        summary = loop.train(cfg, corpus, seed=seed, device=device, compute_dtype=dtype, ranks=ranks,
                             log=(lambda m, s: run.log(m, step=s)) if run else None,
                             on_step=Progress(cfg.steps), peak=peak)
        exit_code = EXIT_FINISHED
    except KeyboardInterrupt:
        interrupted, exit_code = True, EXIT_KILLED
    finally:
        # the record is finished whatever comes next: a second Ctrl-C (or the launcher's stop) must not cut it short
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        summary.pop("model", None)
        if run is not None:
            extra = {"parameter_count": param_counts(cfg.model)["total"], "num_devices": ranks.world,
                     "backend": device, "throughput/device_kind": machine.device_name(device),
                     "throughput/theoretical_flops_per_device": peak.flops,
                     "throughput/theoretical_flops": peak.flops * ranks.world}
            if peak.revised_at is not None:
                extra["throughput/peak_revised_at_step"] = peak.revised_at
                say(f"note: step {peak.revised_at} ran faster than the measured matmul peak; the peak was raised to it")
                machine.record_peak(repro_home.subdir(home, "repro") / "peak.json", machine.peak_key(device, dtype), peak.flops)
            finish_run(run, {**extra, **summary}, exit_code)
        dist.finish(clean=exit_code == EXIT_FINISHED)
    if interrupted:
        raise KeyboardInterrupt
    return {"run": run_id, "run_dir": str(run_dir) if run_dir else None, "device": device, "compute_dtype": dtype,
            "ranks": ranks.world, **summary}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _raise_interrupt)
    try:
        true_cfg, proxy_cfg, published, report = build(args)
        if args.dry_run:
            doc = dry_run(args, true_cfg, proxy_cfg, published, report)
            if args.json:
                print(json.dumps(doc, indent=1, default=str))
            else:
                from repro.plan import render

                title = f"{true_cfg.rung or true_cfg.source_run}: {true_cfg.label}"
                print("\n".join(render({**doc, "title": title})))
            return 0
        device = device_for(args, true_cfg)
        cfg = proxy_cfg if args.cpu else true_cfg
        result = run_training(args, cfg, device, report)
        if args.json and result.get("run_dir") is not None:  # rank 0
            doc = dry_run(args, true_cfg, proxy_cfg, published, report)
            doc.update({"run": result["run"], "run_dir": result["run_dir"], "kind": cfg.kind, "result": result})
            print(json.dumps(doc, indent=1, default=str))
        return 0
    except ReproError as exc:
        sys.stderr.write(f"repro: error: {exc.message}\n" + (f"  try: {exc.hint}\n" if exc.hint else ""))
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("repro: interrupted; the run is recorded as killed (exit code 255 in its W&B exit record)\n")
        return EXIT_INTERRUPTED
    except OSError as exc:
        sys.stderr.write(f"repro: error: {exc}\n")
        return RunFailure.exit_code


if __name__ == "__main__":
    sys.exit(main())
