"""The training loop: flat, top to bottom, one step as Marin's grug trainer orders it.

A step: apply the QB betas solved on the previous step to every `router_bias`; set the scheduled
LRs; draw the global batch (the same on every rank, from the seed) and keep this rank's rows;
forward + backward per micro-batch under the compute dtype's autocast; gradient norms; optimizer
step; parameter norms every `watch_interval` steps; one read-back of every logged value; eval every
5 % of the run, at step 0 and at the end. Steps are zero-based, as Levanter logs them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from repro import dist, metrics
from repro.accounting import flops_per_token
from repro.data import Corpus
from repro.model import MoEDecoder
from repro.optim import Optimizers, lr_multiplier
from repro.recipe import TrainConfig

EVAL_BATCHES, EVAL_ROWS = 2, 8


@dataclass
class StepReport:
    step: int
    steps: int
    loss: float
    metrics: dict[str, float]


@dataclass
class Peak:
    """The per-device FLOP/s MFU is measured against; raised (and said so) if a step ever beats it."""

    flops: float
    revised_at: int | None = None


def seed_everything(seed: int) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def phase_at(step: int, cfg: TrainConfig) -> int:
    return max(i for i, s in enumerate(cfg.phase_steps()) if step >= s)


def train(cfg: TrainConfig, corpus: Corpus, *, seed: int = 0, device: str = "cpu", compute_dtype: str = "float32",
          ranks: dist.Ranks | None = None, log: Callable[[dict[str, Any], int], None] | None = None,
          on_step: Callable[[StepReport], None] | None = None, peak: Peak | None = None,
          stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Run `cfg.steps` steps; rank 0's `log(metrics, step)` receives every W&B row. Returns the summary."""
    ranks = ranks or dist.Ranks()
    if cfg.batch_size % ranks.world:
        raise ValueError(f"global batch {cfg.batch_size} does not split over {ranks.world} ranks")
    gen = seed_everything(seed)
    model = MoEDecoder(cfg.model).to(device)
    if ranks.world > 1:
        dist.shard(model, device)
    dtype = getattr(torch, compute_dtype)
    opt = Optimizers(model, cfg.optimizer, cfg.learning_rate, cfg.adam_lr, cfg.beta1, cfg.beta2, cfg.epsilon,
                     cfg.weight_decay, cfg.max_grad_norm, ns_dtype=dtype)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    autocast = lambda: torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32)  # noqa: E731
    flops_tok = flops_per_token(cfg.model)
    per_rank = cfg.batch_size // ranks.world
    rows = slice(ranks.rank * per_rank, (ranks.rank + 1) * per_rank)
    micro = min(cfg.micro_batch or per_rank, per_rank)
    n_micro = math.ceil(per_rank / micro)
    # fixed held-out windows, EVAL_ROWS per rank per batch
    eval_batches = {d: list(corpus.eval_batches(d, EVAL_ROWS * ranks.world, cfg.model.seq_len, EVAL_BATCHES))
                    for d in sorted(corpus.held_out)}
    eval_rows = slice(ranks.rank * EVAL_ROWS, (ranks.rank + 1) * EVAL_ROWS)
    log = log or (lambda metrics_, step_: None)
    total_tokens, phase, done = 0, -1, 0
    last: dict[str, float] = {}
    started = time.perf_counter()
    for step in range(cfg.steps):
        if stop is not None and stop():
            break
        t0 = time.perf_counter()
        model.apply_qb()
        lrs = opt.set_lr(lr_multiplier(step, cfg.steps, cfg.warmup, cfg.min_lr_ratio, cfg.decay, cfg.lr_schedule))
        values: dict[str, Any] = {}
        if (p := phase_at(step, cfg)) != phase:
            phase = p
            values["mixture/stage"] = float(phase)
            for name, w in corpus.phase_weights(phase).items():
                values[f"mixture/weight/{name}"] = w
        x, y = corpus.batch(corpus.phase_weights(phase), cfg.batch_size, cfg.model.seq_len, gen)
        x, y = x[rows].to(device), y[rows].to(device)
        t_loaded = time.perf_counter()

        loss_sum = ce_sum = z_sum = torch.zeros((), device=device)
        router = None
        for i in range(n_micro):
            if ranks.world > 1:  # FSDP2 reduce-scatters gradients once, after the step's last micro-batch
                model.set_requires_gradient_sync(i == n_micro - 1)
            xb, yb = x[i * micro:(i + 1) * micro], y[i * micro:(i + 1) * micro]
            with autocast():
                loss, stats = model(xb, yb)
            (loss / n_micro).backward()
            loss_sum = loss_sum + loss.detach() / n_micro
            ce_sum = ce_sum + stats["cross_entropy_loss"] / n_micro
            z_sum = z_sum + stats["z_loss"] / n_micro
            if stats["router"] is not None:
                router = metrics.combine_micro(router, stats["router"], n_micro)
        watch = step % cfg.watch_interval == 0 or step == cfg.steps - 1
        values.update(metrics.norms(model, grads=True) if watch else {"grad/norm/total": metrics.grad_norm_total(model)})
        opt.step()
        opt.zero_grad()
        if watch:
            values.update(metrics.norms(model, grads=False))
        losses = dist.all_reduce(torch.stack([loss_sum, ce_sum, z_sum]), "sum") / ranks.world
        values.update({"train/loss": losses[0], "train/cross_entropy_loss": losses[1], "train/z_loss": losses[2]})
        if router is not None:
            values.update(metrics.router_metrics(router))
        if (step + 1) % cfg.eval_every == 0 or step == cfg.steps - 1 or step == 0:
            values.update(metrics.evaluate(model, eval_batches, autocast, eval_rows, device))
        row = metrics.read_back(values)  # the step's one device-to-host transfer
        duration = time.perf_counter() - t0

        tokens = cfg.tokens_per_step
        total_tokens += tokens
        achieved = flops_tok * tokens / duration
        row.update({
            "optim/learning_rate": lrs["learning_rate"], "optim/adam_lr": lrs["adam_lr"],
            "global_step": float(step), "run_progress": step / cfg.steps,
            "throughput/duration": duration, "throughput/loading_time": t_loaded - t0,
            "throughput/tokens_per_second": tokens / duration,
            "throughput/examples_per_second": cfg.batch_size / duration,
            "throughput/total_tokens": float(total_tokens),
            "throughput/total_gflops": flops_tok * total_tokens / 1e9,
            "throughput/gflops_per_second": achieved / 1e9,
        })
        if peak is not None:
            if achieved / ranks.world > peak.flops:  # the measured peak was low: raise it, and say so
                peak.flops, peak.revised_at = achieved / ranks.world, step
            # ≤ 100 by construction; min() keeps float rounding (100·a/a can be 100.00000000000001) from saying otherwise
            row["throughput/mfu"] = 100.0 * min(1.0, achieved / (peak.flops * ranks.world))
        if ranks.main:
            log(row, step)
        last, done = row, step + 1
        if on_step is not None and ranks.main:
            on_step(StepReport(step, cfg.steps, row["train/loss"], row))
    return {"steps_done": done, "final_loss": last.get("train/loss"), "final_eval_loss": last.get("eval/loss"),
            "total_tokens": total_tokens, "wall_seconds": time.perf_counter() - started,
            "throughput/flops_per_token_analytic": flops_tok, "model": model}
