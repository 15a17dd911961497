"""What a step logs, under Levanter's / grug's W&B keys, gathered as tensors and read back once per step.

- `params/norm/<path>` and `grad/norm/<path>` for every parameter and every router-bias buffer
  (its gradient norm is 0: it has none), plus `/total`, every `watch_interval` steps (grad/norm/total
  every step). Paths follow Marin's tree: `stacked_blocks.3.mlp.router_bias`.
- `train/router/layer_{i}/…` and their means, `moe/dropped_assignments`, `moe/drop_fraction`.
- `eval/<domain>/loss`, `eval/loss`, `eval/macro_loss` on fixed held-out windows.
Every value stays a tensor until `read_back`, which stacks them and moves them to the host in one
transfer; data-parallel ranks reduce norms and counts in one all-reduce each.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from repro import dist
from repro.moe import STAT_NAMES, SUMMED_STATS


def read_back(values: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """Tensors → floats with one device-to-host transfer."""
    keys = [k for k, v in values.items() if isinstance(v, torch.Tensor)]
    out = {k: float(v) for k, v in values.items() if not isinstance(v, torch.Tensor)}
    if keys:
        floats = torch.stack([values[k].detach().float().reshape(()) for k in keys]).tolist()
        out.update(zip(keys, floats))
    return out


def _watched(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """(path, tensor, is_buffer) for every parameter and router-bias buffer, in a fixed order."""
    for name, p in model.named_parameters():
        yield name, p, False
    for name, b in model.named_buffers():
        if name.endswith("router_bias"):
            yield name, b, True


def norms(model: torch.nn.Module, grads: bool) -> dict[str, torch.Tensor]:
    """`{prefix}/norm/<path>` for every leaf and `{prefix}/norm/total` (prefix `grad` or `params`)."""
    prefix = "grad" if grads else "params"
    names, squares = [], []
    for name, t, is_buffer in _watched(model):
        if grads:
            t = None if is_buffer else t.grad
        names.append(name)
        if t is None:
            squares.append(torch.zeros((), device=_device(model)))
        else:
            # an FSDP shard's own sum of squares; buffers are replicated, so only rank 0 counts them
            sq = dist.local(t).detach().float().pow(2).sum()
            squares.append(sq if not is_buffer or not dist.active() or dist.from_env().main else sq * 0)
    sq = dist.all_reduce(torch.stack(squares), "sum")
    out = {f"{prefix}/norm/{n}": v for n, v in zip(names, sq.sqrt().unbind())}
    out[f"{prefix}/norm/total"] = sq.sum().sqrt()
    return out


def grad_norm_total(model: torch.nn.Module) -> torch.Tensor:
    squares = [dist.local(p.grad).detach().float().pow(2).sum() for p in model.parameters() if p.grad is not None]
    return dist.all_reduce(torch.stack(squares).sum(), "sum").sqrt()


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def router_metrics(stats_LS: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-layer and mean router keys from the (MoE layers × STAT_NAMES) tensor of the step (summed over
    micro-batches for the counts, averaged for the rest), reduced over ranks."""
    world = 1 if not dist.active() else torch.distributed.get_world_size()
    stats = dist.all_reduce(stats_LS.clone(), "sum")
    col = {name: i for i, name in enumerate(STAT_NAMES)}
    for name in STAT_NAMES:
        if name not in SUMMED_STATS:
            stats[:, col[name]] /= world
    dropped, assigned = stats[:, col["dropped"]], stats[:, col["assignments"]]
    out: dict[str, torch.Tensor] = {}
    for i in range(stats.shape[0]):
        out[f"train/router/layer_{i}/routing_entropy"] = stats[i, col["routing_entropy"]]
        out[f"train/router/layer_{i}/load_balancing_loss"] = stats[i, col["load_balancing_loss"]]
        out[f"train/router/layer_{i}/router_z_loss"] = stats[i, col["router_z_loss"]]
        out[f"train/router/layer_{i}/capacity_overflow_rate"] = dropped[i] / assigned[i]
        out[f"train/router/layer_{i}/max_load"] = stats[i, col["max_load"]]
    out["train/router/routing_entropy_mean"] = stats[:, col["routing_entropy"]].mean()
    out["train/router/load_balancing_loss"] = stats[:, col["load_balancing_loss"]].mean()
    out["train/router/router_z_loss"] = stats[:, col["router_z_loss"]].mean()
    out["train/router/capacity_overflow_rate_mean"] = (dropped / assigned).mean()
    out["train/router/qb_margin_min"] = stats[:, col["margin_min"]].min()
    out["train/router/qb_margin_max"] = stats[:, col["margin_max"]].max()
    out["moe/dropped_assignments"] = dropped.sum()
    out["moe/drop_fraction"] = dropped.sum() / assigned.sum()
    return out


def combine_micro(acc: torch.Tensor | None, stats_LS: torch.Tensor, n_micro: int) -> torch.Tensor:
    """Add one micro-batch's router stats: counts add up, the rest average over the micro-batches."""
    weight = torch.full((stats_LS.shape[1],), 1.0 / n_micro, device=stats_LS.device)
    for i, name in enumerate(STAT_NAMES):
        if name in SUMMED_STATS:
            weight[i] = 1.0
    part = stats_LS * weight
    return part if acc is None else acc + part


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: dict[str, list[tuple[torch.Tensor, torch.Tensor]]], autocast,
             rows: slice, device: str) -> dict[str, Any]:
    """Held-out loss per domain (`eval/<domain>/loss`), micro `eval/loss`, `eval/macro_loss`. Each rank
    evaluates its rows of every batch; token-weighted sums are reduced over ranks."""
    model.eval()
    sums = []
    for domain in sorted(batches):
        total = torch.zeros(2, device=device)
        for x, y in batches[domain]:
            xb, yb = x[rows].to(device), y[rows].to(device)
            if xb.numel() == 0:
                continue
            with autocast():
                _, stats = model(xb, yb)
            total += torch.stack([stats["cross_entropy_loss"].float() * yb.numel(), torch.tensor(float(yb.numel()), device=device)])
        sums.append(total)
    model.train()
    summed = dist.all_reduce(torch.stack(sums), "sum")
    out: dict[str, Any] = {}
    for domain, (loss_sum, n) in zip(sorted(batches), summed.unbind()):
        out[f"eval/{domain}/loss"] = loss_sum / n
    out["eval/loss"] = summed[:, 0].sum() / summed[:, 1].sum()
    if len(batches) > 1:
        out["eval/macro_loss"] = torch.stack([out[f"eval/{d}/loss"] for d in sorted(batches)]).mean()
    return out
