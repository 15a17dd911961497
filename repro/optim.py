"""The hero's optimizer groups: MuonH, AdamH and Adam, with Marin's linear schedule and LR heuristic.

MuonH = Muon's direction (Nesterov momentum 0.95, then a 5-step quintic Newton–Schulz
orthogonalisation, in bf16 like the hero) followed by a *hyperball* step: each matrix W of radius
R = ‖W₀‖_F moves to R · normalize(W − lr · R · U/‖U‖_F). So every MuonH/AdamH matrix keeps its
Frobenius norm for the whole run (Wen et al. 2025, "Hyperball optimization"); its `params/norm/*`
should be flat, and drift there is a bug. AdamH is the same hyperball step with Adam's direction.
Adam (no weight decay) trains what must move freely: router, token embedding, norm gains.
`router_bias` is a buffer: no optimizer ever sees it (QB replaces it, see model.py).
"""

from __future__ import annotations

import math

import torch

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # the quintic used by Muon and by Marin's MuonH


def newton_schulz(G: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximately orthogonalise each matrix in G (..., m, n): U·Vᵀ of its SVD, in bf16."""
    a, b, c = NS_COEFFS
    X = G.to(torch.bfloat16)
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)
    for _ in range(steps):
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    if transposed:
        X = X.mT
    return X.to(G.dtype)


def _matrix_norm(x: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of each trailing matrix, shaped to broadcast against x."""
    return x.norm(dim=(-2, -1), keepdim=True)


@torch.no_grad()
def hyperball_step(p: torch.Tensor, direction: torch.Tensor, lr: float, radius: torch.Tensor, eps: float) -> None:
    """p ← R · normalize(p − lr · R · d/‖d‖), per trailing matrix: the norm stays R."""
    step = direction / (_matrix_norm(direction) + eps)
    moved = p - lr * radius * step
    p.copy_(moved * (radius / (_matrix_norm(moved) + eps)))


class MuonH(torch.optim.Optimizer):
    """Muon direction + hyperball step, for 2-D (or stacked 3-D: experts) matrices."""

    def __init__(self, params, lr: float, momentum: float = 0.95, ns_steps: int = 5, eps: float = 1e-8):
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                    state["radius"] = _matrix_norm(p).clone()
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - group["momentum"])
                nesterov = p.grad.lerp(buf, group["momentum"])
                hyperball_step(p, newton_schulz(nesterov, group["ns_steps"]), group["lr"], state["radius"], group["eps"])


class AdamH(torch.optim.Optimizer):
    """Adam direction (bias-corrected m/√v) + hyperball step; the hero uses it for lm_head."""

    def __init__(self, params, lr: float, betas=(0.9, 0.95), eps: float = 1e-15, ball_eps: float = 1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, ball_eps=ball_eps))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                    state["radius"] = _matrix_norm(p).clone()
                state["step"] += 1
                t = state["step"]
                state["exp_avg"].lerp_(p.grad, 1 - b1)
                state["exp_avg_sq"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat = state["exp_avg"] / (1 - b1**t)
                v_hat = state["exp_avg_sq"] / (1 - b2**t)
                direction = m_hat / (v_hat.sqrt() + group["eps"])
                hyperball_step(p, direction, group["lr"], state["radius"], group["ball_eps"])


# --- groups -----------------------------------------------------------------------------------

MUONH_SUFFIXES = ("attn.w_q", "attn.w_k", "attn.w_v", "attn.w_o", "mlp.w_gate", "mlp.w_up", "mlp.w_down",
                  "mlp.shared_w_gate", "mlp.shared_w_up", "mlp.shared_w_down")


def group_of(name: str) -> str:
    """Which of the hero's optimizer groups a parameter path belongs to."""
    if name == "lm_head":
        return "adamh"
    if name.endswith(MUONH_SUFFIXES):
        return "muonh"
    return "adam"  # router, token_embed, norm gains


class Optimizers:
    """The three optimizers stepped together; `set_lr(mult)` applies the schedule to all of them."""

    def __init__(self, model: torch.nn.Module, muonh_lr: float, adam_lr: float, beta2: float, eps: float,
                 beta1: float = 0.9):
        groups: dict[str, list] = {"muonh": [], "adamh": [], "adam": []}
        for name, p in model.named_parameters():
            groups[group_of(name)].append(p)
        self.group_names = {name: group_of(name) for name, _ in model.named_parameters()}
        self.muonh = MuonH(groups["muonh"], lr=muonh_lr)
        self.adamh = AdamH(groups["adamh"], lr=muonh_lr, betas=(beta1, beta2), eps=eps)  # AdamH at the MuonH LR
        self.adam = torch.optim.Adam(groups["adam"], lr=adam_lr, betas=(beta1, beta2), eps=eps, foreach=False)
        self.peak = {"muonh": muonh_lr, "adam": adam_lr}
        self.all = (self.muonh, self.adamh, self.adam)

    def set_lr(self, mult: float) -> dict[str, float]:
        lrs = {"learning_rate": self.peak["muonh"] * mult, "adam_lr": self.peak["adam"] * mult}
        for opt in (self.muonh, self.adamh):
            for g in opt.param_groups:
                g["lr"] = lrs["learning_rate"]
        for g in self.adam.param_groups:
            g["lr"] = lrs["adam_lr"]
        return lrs

    def step(self) -> None:
        for opt in self.all:
            opt.step()

    def zero_grad(self) -> None:
        for opt in self.all:
            opt.zero_grad(set_to_none=True)


# --- schedule and heuristic -------------------------------------------------------------------

def warmup_steps(total_steps: int, warmup_fraction: float = 0.01) -> int:
    return max(1, math.ceil(warmup_fraction * total_steps))


def lr_multiplier(step: int, total_steps: int, warmup_fraction: float = 0.01, min_lr_ratio: float = 0.05) -> float:
    """Levanter's `linear` schedule: 0 → 1 over the warm-up, then linearly down to min_lr_ratio at the end."""
    w = warmup_steps(total_steps, warmup_fraction)
    if step < w:
        return step / w
    decay = max(1, total_steps - w)
    frac = min(1.0, (step - w) / decay)
    return 1.0 - (1.0 - min_lr_ratio) * frac


def heuristic(tokens: float, hidden: int, tokens_per_batch: float) -> dict[str, float]:
    """Marin's Aug MoeHeuristic (marin.md §1.4): Adam LR, MuonH = 13/3·Adam (both ≤ 0.05), eps, beta2."""
    adam = 0.087571 * tokens**-0.3461 * hidden**-0.3448 * math.sqrt(tokens_per_batch)
    return {
        "adam_lr": min(adam, 0.05),
        "muonh_lr": min(13 / 3 * adam, 0.05),
        "eps": 9.676e-18 * math.sqrt(tokens / tokens_per_batch),
        "beta2": min(max(0.999 ** (tokens_per_batch / 131072), 0.95), 0.9999),
    }
