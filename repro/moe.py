"""The routed half of a hero block: router, QB bias, latent projections, capacity dispatch, experts.

Read it top to bottom: the two QB estimators → the grouped experts → `MoE.forward` (route → solve
next step's β → project to the latent → dispatch under capacity → experts → combine → project back).

Routing (levanter `HeroMoEMLP`): router logits s = x·W_router in fp32 from the full-width token;
top-(K+1) of s + router_bias picks K experts and the (K+1)-th value α_t is the token's threshold;
combine weights are σ(s) of the *unbiased* logits of the chosen experts, renormalised to sum 2.5.
QB ("quantile balancing", Marin's `experiments/grug/moe/model.py` and `train.py`, `_next_qb_betas`;
marin#3406): β_e is the (1 − K/E) quantile over tokens of the margin
s_te − α_t, so that with bias −β expert e would win exactly T·K/E tokens of this batch. β is solved
here, applied at the start of the next step (router_bias ← −β, mean-centred: a replacement, not an
increment), and the bias is a buffer no optimizer or gradient ever touches.
Estimators: HIST (the ladder and the hero: a 10,000-bin histogram per expert over the live global
[min, max] of the margins, counts summed over data-parallel ranks, β read from the top-cumulative
counts and interpolated inside the crossing bin) and TOPK (each rank's exact (T·K/E)-th largest
margin, then the token-weighted mean over ranks — Marin's `pmean`).
Latent MoE: routed experts live in a D/2 latent (x·W↓ then RMSNorm), the combined expert output is
projected back with W↑. Capacity: each expert keeps at most ⌈1.15·T·K/E⌉ assignments of the local
batch in token order; the rest are dropped (counted, and their combine weight is lost).
Dispatch is sort-free of Python loops and host syncs: argsort by expert, a cumulative count gives
each assignment its slot, one gather fills an (E, C, L) buffer, three batched matmuls run every
expert at once, one gather and a K-sum bring the outputs back.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from repro import dist
from repro.initialize import matrix

STAT_NAMES = ("dropped", "assignments", "routing_entropy", "load_balancing_loss", "router_z_loss", "max_load",
              "margin_min", "margin_max")
SUMMED_STATS = ("dropped", "assignments")  # added over data-parallel ranks; the rest are averaged


# --- QB estimators ------------------------------------------------------------------------------

@torch.no_grad()
def qb_beta_hist(margins_TE: torch.Tensor, top_k: int, bins: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(β_E, lo, hi): the global (1 − K/E) quantile of each expert's margins from a `bins`-bin histogram."""
    T, E = margins_TE.shape
    lo_hi = torch.stack([-margins_TE.min(), margins_TE.max()])
    dist.all_reduce(lo_hi, "max")
    lo, hi = -lo_hi[0], lo_hi[1]
    tokens = dist.all_reduce(torch.tensor(float(T), device=margins_TE.device), "sum")
    target = tokens * top_k / E
    width = (torch.maximum(hi, lo + 1e-6) - lo) / bins
    idx_TE = ((margins_TE - lo) / width).long().clamp_(0, bins - 1)
    flat = (idx_TE + torch.arange(E, device=idx_TE.device) * bins).reshape(-1)
    counts_EB = dist.all_reduce(torch.bincount(flat, minlength=E * bins), "sum").view(E, bins)  # int64: exact
    # Σ_{j ≥ b} counts (the count from the top) = tokens − cum[b − 1], so the crossing bin — the last b whose
    # count from the top reaches T·K/E — is the number of cum[b'] ≤ tokens − ⌈T·K/E⌉: one binary search a row
    cum_EB = counts_EB.cumsum(-1)
    total_E1 = cum_EB[:, -1:]
    b = torch.searchsorted(cum_EB, total_E1 - target.to(torch.float64).ceil().long(), right=True).squeeze(1)
    b = b.clamp(0, bins - 1)
    inside = counts_EB.gather(1, b[:, None]).squeeze(1)
    above = (total_E1.squeeze(1) - cum_EB.gather(1, b[:, None]).squeeze(1) + inside).float()
    inside = inside.float()
    beta_E = lo + b * width + width * (above - target) / inside.clamp(min=1.0)
    return beta_E, lo, hi


@torch.no_grad()
def qb_beta_topk(margins_TE: torch.Tensor, top_k: int) -> torch.Tensor:
    """β_E: this rank's exact (T·K/E)-th largest margin per expert, token-weighted mean over ranks."""
    T, E = margins_TE.shape
    count = max(1, (T * top_k) // E)
    beta_E = margins_TE.topk(count, dim=0).values[-1]
    packed = dist.all_reduce(torch.cat([beta_E * T, beta_E.new_tensor([float(T)])]), "sum")
    return packed[:E] / packed[E]


@torch.no_grad()
def top_k_rows(x_TE: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, ids) of each row's k largest, largest first. For the few a route picks (K+1 ≤ 4), k passes
    of max cost a fraction of `topk` on a CPU (bench/NOTES.md, "repro"); above that, `topk`."""
    if k > 4:
        return x_TE.topk(k, dim=-1)
    rest = x_TE.clone()
    vals, ids = [], []
    for i in range(k):
        v, j = rest.max(-1, keepdim=True)
        vals.append(v)
        ids.append(j)
        if i < k - 1:
            rest.scatter_(1, j, float("-inf"))
    return torch.cat(vals, 1), torch.cat(ids, 1)


# --- experts --------------------------------------------------------------------------------------

class Experts(nn.Module):
    """E SwiGLU experts stacked: (E, L, I) gate/up and (E, I, L) down, run as batched matmuls."""

    def __init__(self, num: int, dim: int, width: int, std: float):
        super().__init__()
        self.w_gate = matrix(num, dim, width, std=std)
        self.w_up = matrix(num, dim, width, std=std)
        self.w_down = matrix(num, width, dim, std=std)

    def forward(self, x_ECL: torch.Tensor) -> torch.Tensor:
        dtype = x_ECL.dtype
        w_gate, w_up, w_down = (w.to(dtype) for w in (self.w_gate, self.w_up, self.w_down))
        return torch.bmm(F.silu(torch.bmm(x_ECL, w_gate)) * torch.bmm(x_ECL, w_up), w_down)


# --- the MoE layer --------------------------------------------------------------------------------

class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D, E, L, std = cfg.hidden_dim, cfg.num_experts, cfg.expert_input_dim, cfg.init_std
        self.router = matrix(D, E, std=std)
        # a buffer, not a parameter: QB replaces it outside autograd, so it never has a gradient
        self.register_buffer("router_bias", torch.zeros(E))
        if cfg.latent_dim is not None:
            self.w_latent_down = matrix(D, L, std=std)
            self.latent_norm = nn.RMSNorm(L, eps=cfg.layer_norm_eps)
            self.w_latent_up = matrix(L, D, std=std)
        self.expert_mlp = Experts(E, L, cfg.intermediate_dim, std)
        self._beta_sum: torch.Tensor | None = None  # β solved this step (summed over micro-batches)
        self._beta_count = 0

    @torch.no_grad()
    def apply_qb(self) -> None:
        """router_bias ← −β, mean-centred. β is the mean over the step's micro-batches (one, usually)."""
        if self._beta_count:
            bias_E = -self._beta_sum / self._beta_count
            self.router_bias.copy_(bias_E - bias_E.mean())
            self._beta_sum, self._beta_count = None, 0

    @property
    def pending_beta(self) -> torch.Tensor | None:
        return None if not self._beta_count else self._beta_sum / self._beta_count

    def forward(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        T, D = x_TD.shape
        E, K = cfg.num_experts, cfg.num_experts_per_token

        # --- route, in fp32: the bias only chooses; the combine weights use the unbiased logits
        with torch.autocast(x_TD.device.type, enabled=False):
            logits_TE = x_TD.float() @ self.router.float()
        top_vals_TK1, top_ids_TK1 = top_k_rows(logits_TE.detach() + self.router_bias, K + 1)
        ids_TK, alpha_T = top_ids_TK1[:, :K], top_vals_TK1[:, K].detach()
        gates_TK = torch.sigmoid(logits_TE.gather(1, ids_TK))
        gates_TK = gates_TK * (cfg.routing_renorm_sum / (gates_TK.sum(-1, keepdim=True) + 1e-9))

        # --- QB: next step's β from this step's margins s − α (no gradient)
        margins_TE = logits_TE.detach() - alpha_T[:, None]
        lo = hi = margins_TE.new_zeros(())
        if self.training:
            if cfg.qb_estimator == "topk":
                beta_E = qb_beta_topk(margins_TE, K)
            else:
                beta_E, lo, hi = qb_beta_hist(margins_TE, K, cfg.qb_hist_bins)
            self._beta_sum = beta_E if self._beta_sum is None else self._beta_sum + beta_E
            self._beta_count += 1

        # --- latent: compress before dispatch
        if cfg.latent_dim is not None:
            x_TL = self.latent_norm(x_TD @ self.w_latent_down)
        else:
            x_TL = x_TD
        L = x_TL.shape[1]

        # --- dispatch: sort assignments by expert; the first C of each expert get a slot, the rest
        #     go to a dump slot (index E·C) that is never computed
        N = T * K
        C = math.ceil(cfg.capacity_factor * N / E)
        expert_N = ids_TK.reshape(N)
        order_N = torch.argsort(expert_N, stable=True)
        sorted_expert_N = expert_N[order_N]
        counts_E = torch.zeros(E, dtype=torch.long, device=x_TD.device).scatter_add_(0, expert_N, torch.ones_like(expert_N))
        starts_E = torch.cumsum(counts_E, 0) - counts_E
        pos_N = torch.arange(N, device=x_TD.device) - starts_E[sorted_expert_N]
        keep_N = pos_N < C
        sorted_slot_N = torch.where(keep_N, sorted_expert_N * C + pos_N, E * C)
        slot_N = torch.empty_like(sorted_slot_N).scatter_(0, order_N, sorted_slot_N)   # slot of assignment t·K+k
        token_of_slot = torch.full((E * C + 1,), T, device=x_TD.device, dtype=torch.long)
        token_of_slot.scatter_(0, slot_N, torch.arange(N, device=x_TD.device) // K)    # T: an empty slot
        x_ext = torch.cat([x_TL, x_TL.new_zeros(1, L)])
        y_ECL = self.expert_mlp(x_ext.index_select(0, token_of_slot[:E * C]).view(E, C, L))

        # --- combine: each token's K slots, weighted, summed; dropped assignments read a zero row
        y_ext = torch.cat([y_ECL.reshape(E * C, L), y_ECL.new_zeros(1, L)])
        out_TL = (y_ext.index_select(0, slot_N).view(T, K, L) * gates_TK.unsqueeze(-1).to(y_ext.dtype)).sum(1)
        out_TD = out_TL @ self.w_latent_up if cfg.latent_dim is not None else out_TL

        with torch.no_grad():
            frac_E = counts_E.float() / N
            stats = torch.stack([
                (N - keep_N.sum()).float(),
                torch.tensor(float(N), device=x_TD.device),
                -torch.special.xlogy(frac_E, frac_E).sum(),
                E * (frac_E * torch.softmax(logits_TE, -1).mean(0)).sum(),
                torch.logsumexp(logits_TE, -1).pow(2).mean(),
                counts_E.max().float() / (N / E),
                lo.float(), hi.float(),
            ])
        return out_TD, stats
