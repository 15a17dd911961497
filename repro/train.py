"""The training loop: flat, top to bottom, logging the keys Levanter / grug log, to an offline W&B run.

Order inside a step (as in Marin's grug trainer): apply the QB betas solved on the previous step to
`router_bias`, set the scheduled LRs, forward + backward, optimizer step, log. Norms of every
parameter *and* of the router_bias buffers go out every `watch_interval` steps under Marin-like
paths (`params/norm/stacked_blocks.0.mlp.router_bias`); router_bias's gradient norm is logged as 0
because it has none. Eval on held-out text every 5 % of the run and at the end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from repro.data import Corpus
from repro.model import MoEDecoder, flops_per_token
from repro.optim import Optimizers, lr_multiplier
from repro.rungs import TrainConfig

EVAL_BATCHES = 2


@dataclass
class StepReport:
    step: int
    steps: int
    loss: float
    metrics: dict[str, float]


def seed_everything(seed: int) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def norms(model: MoEDecoder, grads: bool) -> dict[str, float]:
    """`params/norm/<path>` or `grad/norm/<path>` for every leaf incl. router_bias, plus `/total`."""
    prefix = "grad" if grads else "params"
    out: dict[str, float] = {}
    total_sq = 0.0
    for name, p in model.named_parameters():
        t = p.grad if grads else p
        v = 0.0 if t is None else float(t.detach().float().norm())
        out[f"{prefix}/norm/{name}"] = v
        total_sq += v * v
    for name, b in model.named_buffers():
        if name.endswith("router_bias"):
            v = 0.0 if grads else float(b.float().norm())  # a buffer: its gradient is zero by construction
            out[f"{prefix}/norm/{name}"] = v
            total_sq += v * v
    out[f"{prefix}/norm/total"] = math.sqrt(total_sq)
    return out


def router_metrics(layer_stats: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    out: dict[str, float] = {}
    ent, lb, z, ovf = [], [], [], []
    dropped = assignments = 0.0
    for i, s in enumerate(layer_stats):
        rate = float(s["dropped"] / s["assignments"])
        out[f"train/router/layer_{i}/routing_entropy"] = float(s["routing_entropy"])
        out[f"train/router/layer_{i}/load_balancing_loss"] = float(s["load_balancing_loss"])
        out[f"train/router/layer_{i}/router_z_loss"] = float(s["router_z_loss"])
        out[f"train/router/layer_{i}/capacity_overflow_rate"] = rate
        out[f"train/router/layer_{i}/max_load"] = float(s["max_load"])
        ent.append(float(s["routing_entropy"]))
        lb.append(float(s["load_balancing_loss"]))
        z.append(float(s["router_z_loss"]))
        ovf.append(rate)
        dropped += float(s["dropped"])
        assignments += float(s["assignments"])
    n = max(1, len(layer_stats))
    out["train/router/routing_entropy_mean"] = sum(ent) / n
    out["train/router/load_balancing_loss"] = sum(lb) / n
    out["train/router/router_z_loss"] = sum(z) / n
    out["train/router/capacity_overflow_rate_mean"] = sum(ovf) / n
    out["moe/dropped_assignments"] = dropped
    out["moe/drop_fraction"] = dropped / max(1.0, assignments)
    return out


@torch.no_grad()
def evaluate(model: MoEDecoder, corpus: Corpus, cfg: TrainConfig, autocast) -> dict[str, float]:
    """Held-out loss per domain (`eval/<domain>/loss`), micro `eval/loss`, `eval/macro_loss`."""
    model.eval()
    out, total, count = {}, 0.0, 0
    bs = min(cfg.batch_size, 8)
    for domain in sorted(corpus.held_out):
        losses = []
        for x, y in corpus.eval_batches(domain, bs, cfg.model.seq_len, EVAL_BATCHES):
            with autocast():
                _, stats = model(x.to(_device(model)), y.to(_device(model)))
            losses.append((float(stats["cross_entropy_loss"]), x.numel()))
        n = sum(k for _, k in losses)
        out[f"eval/{domain}/loss"] = sum(v * k for v, k in losses) / n
        total += sum(v * k for v, k in losses)
        count += n
    out["eval/loss"] = total / max(1, count)
    if len(corpus.held_out) > 1:
        out["eval/macro_loss"] = sum(out[f"eval/{d}/loss"] for d in corpus.held_out) / len(corpus.held_out)
    model.train()
    return out


def _device(model: torch.nn.Module) -> torch.device:
    return model.token_embed.device


def phase_at(step: int, cfg: TrainConfig) -> int:
    starts = cfg.phase_steps()
    return max(i for i, s in enumerate(starts) if step >= s)


def train(cfg: TrainConfig, corpus: Corpus, *, seed: int = 0, log: Callable[[dict[str, Any], int], None] | None = None,
          on_step: Callable[[StepReport], None] | None = None, device: str = "cpu", peak_flops: float | None = None,
          stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Run `cfg.steps` steps; `log(metrics, step)` receives every W&B row. Returns the final summary."""
    gen = seed_everything(seed)
    model = MoEDecoder(cfg.model).to(device)
    opt = Optimizers(model, cfg.muonh_lr, cfg.adam_lr, cfg.beta2, cfg.eps)
    # bf16 compute like the hero (fp32 weights, fp32 router and loss); on CPU it uses avx512_bf16 matmuls
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    use_bf16 = cfg.compute_dtype == "bfloat16"
    autocast = lambda: torch.autocast(device_type, dtype=torch.bfloat16, enabled=use_bf16)  # noqa: E731
    flops_tok = flops_per_token(cfg.model)
    micro = cfg.micro_batch or cfg.batch_size
    log = log or (lambda metrics, step: None)
    total_tokens, phase = 0, -1
    last: dict[str, Any] = {}
    for step in range(cfg.steps):
        if stop is not None and stop():
            break
        t0 = time.perf_counter()
        model.apply_qb()
        lrs = opt.set_lr(lr_multiplier(step, cfg.steps, cfg.warmup_fraction, cfg.min_lr_ratio))
        metrics: dict[str, Any] = {}
        if (p := phase_at(step, cfg)) != phase:
            phase = p
            metrics["mixture/stage"] = phase
            for name, w in corpus.phase_weights(phase).items():
                metrics[f"mixture/weight/{name}"] = w
        weights = corpus.phase_weights(phase)

        x, y = corpus.batch(weights, cfg.batch_size, cfg.model.seq_len, gen)
        loss_sum = ce_sum = z_sum = 0.0
        layer_stats: list[dict[str, torch.Tensor]] = []
        n_micro = math.ceil(cfg.batch_size / micro)
        for i in range(n_micro):
            xb, yb = x[i * micro:(i + 1) * micro].to(device), y[i * micro:(i + 1) * micro].to(device)
            with autocast():
                loss, stats = model(xb, yb)
            (loss / n_micro).backward()
            loss_sum += float(loss.detach()) / n_micro
            ce_sum += float(stats["cross_entropy_loss"]) / n_micro
            z_sum += float(stats["z_loss"]) / n_micro
            layer_stats = stats["layers"] if not layer_stats else [
                {k: a[k] + b[k] if k in ("dropped", "assignments") else b[k] for k in a} for a, b in zip(layer_stats, stats["layers"])]
        watch = step % cfg.watch_interval == 0 or step == cfg.steps - 1
        if watch:
            metrics.update(norms(model, grads=True))
        else:
            metrics["grad/norm/total"] = math.sqrt(sum(float(p.grad.float().pow(2).sum())
                                                       for p in model.parameters() if p.grad is not None))
        opt.step()
        opt.zero_grad()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        duration = time.perf_counter() - t0
        if watch:
            metrics.update(norms(model, grads=False))
        tokens = cfg.tokens_per_step
        total_tokens += tokens
        metrics.update({
            "train/loss": loss_sum, "train/cross_entropy_loss": ce_sum, "train/z_loss": z_sum,
            "optim/learning_rate": lrs["learning_rate"], "optim/adam_lr": lrs["adam_lr"],
            "global_step": step, "run_progress": step / cfg.steps,
            "throughput/duration": duration, "throughput/tokens_per_second": tokens / duration,
            "throughput/total_tokens": total_tokens,
            "throughput/gflops_per_second": flops_tok * tokens / duration / 1e9,
        })
        if peak_flops:
            metrics["throughput/mfu"] = 100.0 * flops_tok * tokens / duration / peak_flops
        metrics.update(router_metrics(layer_stats))
        if (step + 1) % cfg.eval_every == 0 or step == cfg.steps - 1 or step == 0:
            metrics.update(evaluate(model, corpus, cfg, autocast))
        log(metrics, step)
        last = metrics
        if on_step is not None:
            on_step(StepReport(step, cfg.steps, loss_sum, metrics))
    return {"steps_done": (last.get("global_step", -1) + 1) if last else 0,
            "final_loss": last.get("train/loss"), "final_eval_loss": last.get("eval/loss"),
            "total_tokens": total_tokens, "model": model}


# --- W&B offline logging ----------------------------------------------------------------------

def open_wandb_run(cfg: TrainConfig, wandb_dir: Path, seed: int, corpus: Corpus, extra: dict[str, Any] | None = None):
    """An offline run under `wandb_dir`, flushed every second so `watch` can tail it live."""
    import wandb

    from marinctl.rungs import rung as rung_row

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    width = rung_row(cfg.rung)["name"]  # d768: how the store links runs to rungs
    run_id = f"repro-{cfg.rung}-{width}-{'cpu' if cfg.kind == 'cpu-proxy' else 'gpu'}-{stamp}-s{seed}"
    config = {
        "rung": cfg.rung, "kind": cfg.kind, "seed": seed, "train": cfg.to_dict(),
        "data": {"source": corpus.source, "domains": sorted(corpus.train), "vocab_size": corpus.vocab_size,
                 "tokenizer": corpus.tokenizer_path.name},
        "marinctl": {"repro_of": cfg.rung, "kind": cfg.kind},
        **(extra or {}),
    }
    run = wandb.init(mode="offline", dir=str(wandb_dir), project="marinctl-repro", id=run_id, name=run_id,
                     group=f"repro-{cfg.rung}", job_type="repro", tags=["repro", cfg.rung, cfg.kind], config=config,
                     settings=wandb.Settings(x_disable_stats=True, x_transaction_log_flush_interval=1.0,
                                             console="off", silent=True))
    return run


def close_wandb_run(run, summary: dict[str, Any]) -> None:
    import wandb

    for k, v in summary.items():
        if isinstance(v, (int, float)) and v is not None:
            run.summary[k] = v
    run.finish()
    wandb.teardown()
