"""The hero's optimizer groups (marin#8435): MuonH, AdamH and Adam; Levanter's schedule; the LR heuristic.

MuonH = Muon's direction (Nesterov momentum 0.95, then a 5-step quintic Newton–Schulz orthogonalisation)
followed by a *hyperball* step: each matrix W of radius R = ‖W₀‖_F moves to
R · normalize(W − lr · R · U/‖U‖_F), so every MuonH/AdamH matrix keeps its Frobenius norm for the
whole run and its `params/norm/*` is flat (drift there is a bug). AdamH is the same hyperball step
with Adam's direction; the hero uses it for lm_head at the MuonH LR. Adam (no weight decay) trains
what must move freely: router weight, attn_gate, token embedding, norm gains, short-conv kernels.
`router_bias` is a buffer no optimizer sees (QB replaces it, see moe.py).

Newton–Schulz runs once per *group of same-shape matrices*: every matrix of a shape (a transposed one
counts as the same, Newton–Schulz commutes with transposition) — all experts of all layers, say — is
stacked into one batch and orthogonalised by one chain of batched matmuls, in the compute dtype
(bf16 where the hardware has it, as the hero does; fp32 on CPUs without native bf16 matmuls).
Under FSDP2 each rank keeps its shard of the momentum; expert stacks are split between experts, so
a rank holds whole matrices and orthogonalises them locally; 2-D matrices split by rows are gathered
first and their norms are reduced across ranks.

Other optimizer kinds, for runs logged with them (`--from-config`): `adamh` (v16: AdamH for every
matrix, Adam for the rest) and `adamw` (isoflop-moe-v2: AdamW with weight decay on matrices, global
gradient clipping).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import torch

from repro import dist

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # the quintic used by Muon and by Marin's MuonH
_MUONH = re.compile(r"attn\.w_[qkvo]$|expert_mlp\.w_|shared\.w_|w_latent_(down|up)$|gated_norm\.w_(down|up)$"
                    r"|mlp\.w_(gate|up|down)$")


def group_of(name: str, ndim: int = 2) -> str:
    """The hero's optimizer group of a parameter path: "muonh", "adamh" (lm_head) or "adam"."""
    if name == "lm_head":
        return "adamh"
    if ndim >= 2 and _MUONH.search(name):
        return "muonh"
    return "adam"  # router, attn_gate, token_embed, norm gains, short-conv kernels


# --- Newton–Schulz, batched ------------------------------------------------------------------------

def newton_schulz(G: torch.Tensor, steps: int = 5, eps: float = 1e-7, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Approximately orthogonalise each matrix of G (..., m, n): U·Vᵀ of its SVD."""
    a, b, c = NS_COEFFS
    X = G.to(dtype).reshape(-1, *G.shape[-2:])
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)
    A, B, Y = torch.empty_like(X[:, :, : X.shape[1]]), torch.empty_like(X[:, :, : X.shape[1]]), torch.empty_like(X)
    for _ in range(steps):  # three batched matmuls into reused buffers, one elementwise pass
        torch.bmm(X, X.mT, out=A)
        torch.bmm(A, A, out=B)
        B.add_(A, alpha=b / c)                             # (bA + cA²)/c
        B.diagonal(dim1=-2, dim2=-1).add_(a / c)           # + aI/c: aX + (bA + cA²)X is one product
        torch.baddbmm(Y, B, X, beta=0, alpha=c, out=Y)     # c·(…)X (beta 0: no copy of an addend into Y)
        X, Y = Y, X
    if transposed:
        X = X.mT
    return X.reshape(G.shape).to(G.dtype)


def _matrix_norms(x: torch.Tensor, row_sharded: bool) -> torch.Tensor:
    """Frobenius norm of each trailing matrix (reduced over ranks when rows are split), broadcastable."""
    if not row_sharded:
        return torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True, dtype=torch.float32)
    sq = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True, dtype=torch.float32).square()
    return dist.all_reduce(sq, "sum").sqrt()


@torch.no_grad()
def hyperball_step(p: torch.Tensor, direction: torch.Tensor, direction_norm: torch.Tensor, lr: float,
                   radius: torch.Tensor, eps: float, row_sharded: bool) -> None:
    """p ← R · normalize(p − lr · R · d/‖d‖), per matrix, in place: the norm stays R."""
    p.addcmul_(direction, -(lr * radius / (direction_norm + eps)))
    p.mul_(radius / (_matrix_norms(p, row_sharded) + eps))


class MuonH(torch.optim.Optimizer):
    """Muon direction + hyperball step, for matrices (2-D) and stacks of them (3-D: experts)."""

    def __init__(self, params, lr: float, momentum: float = 0.95, ns_steps: int = 5, eps: float = 1e-8,
                 ns_dtype: torch.dtype = torch.bfloat16):
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps, eps=eps, ns_dtype=ns_dtype))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            jobs = []  # (param, local tensor, row_sharded, full nesterov direction as (B, m, n))
            for p in group["params"]:
                if p.grad is None:
                    continue
                w, g = dist.local(p), dist.local(p.grad)
                row_sharded = dist.is_row_sharded(p)
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                    state["radius"] = _matrix_norms(w, row_sharded)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - group["momentum"])
                nesterov = g.lerp(buf, group["momentum"])
                if row_sharded:
                    nesterov = dist.gather_rows(nesterov, p.shape[0])
                jobs.append((p, w, row_sharded, nesterov if nesterov.ndim == 3 else nesterov.unsqueeze(0)))
            # one Newton–Schulz chain per matrix shape (orientation ignored)
            by_shape: dict[tuple[int, int], list[int]] = defaultdict(list)
            for i, (*_, d) in enumerate(jobs):
                by_shape[tuple(sorted(d.shape[-2:]))].append(i)
            for shape, members in by_shape.items():
                mats = [jobs[i][3] if jobs[i][3].shape[-2] == shape[0] else jobs[i][3].mT for i in members]
                if sum(m.shape[0] for m in mats) == 0:
                    continue
                U = newton_schulz(torch.cat(mats), group["ns_steps"], dtype=group["ns_dtype"])
                start = 0
                for i, m in zip(members, mats):
                    p, w, row_sharded, d = jobs[i]
                    u = U[start:start + m.shape[0]]
                    start += m.shape[0]
                    u = u if d.shape[-2] == shape[0] else u.mT
                    u_norm = torch.linalg.vector_norm(u, dim=(-2, -1), keepdim=True, dtype=torch.float32)
                    if w.ndim == 2:
                        u, u_norm = u[0], u_norm[0]
                        if row_sharded:
                            u = dist.my_rows(u)
                    hyperball_step(w, u.to(w.dtype), u_norm, group["lr"], self.state[p]["radius"], group["eps"],
                                   row_sharded)


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
                w, g = dist.local(p), dist.local(p.grad)
                row_sharded = dist.is_row_sharded(p)
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(g)
                    state["exp_avg_sq"] = torch.zeros_like(g)
                    state["radius"] = _matrix_norms(w, row_sharded)
                state["step"] += 1
                t = state["step"]
                state["exp_avg"].lerp_(g, 1 - b1)
                state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
                direction = (state["exp_avg"] / (1 - b1**t)) / ((state["exp_avg_sq"] / (1 - b2**t)).sqrt() + group["eps"])
                d_norm = _matrix_norms(direction, row_sharded)
                hyperball_step(w, direction, d_norm, group["lr"], state["radius"], group["ball_eps"], row_sharded)


# --- the groups, stepped together ----------------------------------------------------------------------

class Optimizers:
    """Every optimizer of a run, stepped together; `set_lr(mult)` applies the schedule to all of them.

    kind "muonh" (the hero): MuonH / AdamH (lm_head, at the MuonH LR) / Adam.
    kind "adamh": AdamH for every matrix and lm_head at `lr`, Adam at `adam_lr` for the rest.
    kind "adamw": AdamW at `lr` for everything, weight decay on matrices, clipping at `max_grad_norm`.
    """

    def __init__(self, model: torch.nn.Module, kind: str, lr: float, adam_lr: float, beta1: float, beta2: float,
                 eps: float, weight_decay: float = 0.0, max_grad_norm: float | None = None,
                 ns_dtype: torch.dtype = torch.bfloat16):
        self.kind, self.model, self.max_grad_norm = kind, model, max_grad_norm
        named = list(model.named_parameters())
        self.group_names = {n: self._group(kind, n, p) for n, p in named}
        groups: dict[str, list] = defaultdict(list)
        for n, p in named:
            groups[self.group_names[n]].append(p)
        betas = (beta1, beta2)
        self.all: list[tuple[str, torch.optim.Optimizer]] = []
        if groups["muonh"]:
            self.all.append(("lr", MuonH(groups["muonh"], lr=lr, ns_dtype=ns_dtype)))
        if groups["adamh"]:
            self.all.append(("lr", AdamH(groups["adamh"], lr=lr, betas=betas, eps=eps)))
        if groups["adam"]:
            self.all.append(("adam_lr", torch.optim.Adam(groups["adam"], lr=adam_lr, betas=betas, eps=eps)))
        if groups["adamw"] or groups["adamw_no_decay"]:
            self.all.append(("lr", torch.optim.AdamW(
                [{"params": groups["adamw"], "weight_decay": weight_decay},
                 {"params": groups["adamw_no_decay"], "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)))
        self.peak = {"lr": lr, "adam_lr": adam_lr}

    @staticmethod
    def _group(kind: str, name: str, p: torch.Tensor) -> str:
        if kind == "adamw":
            return "adamw" if p.ndim >= 2 and name != "token_embed" else "adamw_no_decay"
        group = group_of(name, p.ndim)
        return "adamh" if kind == "adamh" and group == "muonh" else group

    def set_lr(self, mult: float) -> dict[str, float]:
        """Scheduled LRs as Levanter logs them: `learning_rate` (MuonH/AdamH/AdamW) and `adam_lr`."""
        for which, opt in self.all:
            for g in opt.param_groups:
                g["lr"] = self.peak[which] * mult
        return {"learning_rate": self.peak["lr"] * mult, "adam_lr": self.peak["adam_lr"] * mult}

    def step(self) -> None:
        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        for _, opt in self.all:
            opt.step()

    def zero_grad(self) -> None:
        for _, opt in self.all:
            opt.zero_grad(set_to_none=True)


# --- schedule and heuristic -----------------------------------------------------------------------------

def _steps(fraction_or_steps: float | None, total: int) -> int:
    if fraction_or_steps is None:
        return 0
    return int(fraction_or_steps) if fraction_or_steps >= 1 else math.ceil(fraction_or_steps * total)


def warmup_steps(total_steps: int, warmup: float = 0.01) -> int:
    return max(1, _steps(warmup, total_steps)) if warmup else 0


def lr_multiplier(step: int, total_steps: int, warmup: float = 0.01, min_lr_ratio: float = 0.05,
                  decay: float | None = None, schedule: str = "linear") -> float:
    """Levanter's schedule: 0 → 1 over the warm-up, flat, then down to min_lr_ratio over the last
    `decay` of the run (None: everything after the warm-up), linearly or by a cosine."""
    w = warmup_steps(total_steps, warmup)
    if step < w:
        return step / w
    d = total_steps - w if decay is None else _steps(decay, total_steps)
    start = total_steps - d
    if schedule == "constant" or step < start or d <= 0:
        return 1.0
    frac = min(1.0, (step - start) / d)
    shape = frac if schedule != "cosine" else (1 - math.cos(math.pi * frac)) / 2
    return 1.0 - (1.0 - min_lr_ratio) * shape


def heuristic(tokens: float, hidden: int, tokens_per_batch: float) -> dict[str, float]:
    """Marin's Aug MoeHeuristic (`experiments/grug/moe_hero_ep/heuristic.py`; marin#7856, #8003):
    Adam LR, MuonH = 13/3·Adam (both ≤ 0.05), eps, beta2."""
    adam = 0.087571 * tokens**-0.3461 * hidden**-0.3448 * math.sqrt(tokens_per_batch)
    return {
        "adam_lr": min(adam, 0.05),
        "muonh_lr": min(13 / 3 * adam, 0.05),
        "eps": 9.676e-18 * math.sqrt(tokens / tokens_per_batch),
        "beta2": min(max(0.999 ** (tokens_per_batch / 131072), 0.95), 0.9999),
    }
