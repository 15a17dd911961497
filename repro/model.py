"""A small MoE decoder that trains like Marin's hero / ladder recipe, in one file.

Read it top to bottom: config → norm → rotary → attention → MoE (router, QB bias, capacity
dispatch, experts, shared experts) → block → model. Shape suffixes follow torchtitan's MoE:
B batch, S sequence, T = B·S tokens, D model width, H query heads, G kv heads, Hd head dim,
E routed experts, K experts per token, F expert width, C expert capacity, N = T·K assignments,
V vocabulary.

What it keeps from the recipe (what shapes the training dynamics): routed experts picked top-K of E
with QB ("quantile balancing") router bias — the bias only *chooses* experts, is replaced every step
by −β (mean-centred) solved from a quantile of the routing margins, applied on the next step, and is a
buffer that never sees a gradient; sigmoid combine weights from the *unbiased* logits renormalised to
sum 2.5; shared SwiGLU experts; capacity factor 1.15 with dropped assignments counted; GQA with
sliding-window local layers and a global layer every 4th (and the last); RMSNorm pre-norm; logit
z-loss 1e-4; fp32 router; truncated-normal init at 0.5/sqrt(D).

Simplifications against Marin's JAX original (experiments/grug/moe_hero_ep, levanter hero.py):
- No latent MoE: experts read the model width D directly (the hero projects to a hidden/2 latent
  first), so the parameter counts here are not the published ones.
- No GatedNorm (plain RMSNorm with a gain), no SConv short convolutions (k/attn/mlp sites, kernel 4),
  no headwise attention gate `2·sigmoid(x @ attn_gate)`, no XSA.
- Full RoPE on every head dim (the hero uses fused half-RoPE) and no qk_mult 1.3.
- QB's β comes from an exact per-batch top-k (`TOPK`-style) quantile, not the 10,000-bin `HIST`
  estimator over a global [min, max]; one process, so no pmean across devices; no damping, no
  freeze step, no EMA copy.
- Capacity is one receiver-side cap per expert over the whole local batch; no expert-parallel
  transport (ragged / pooled-wave all-to-all), so no sender drops.
- The two shared experts are kept as two [D, F] SwiGLUs stacked in one tensor.
- Precision follows the hero's policy (fp32 weights, bf16 compute) through torch autocast rather
  than explicit casts; the router, the QB solve and the loss stay fp32.
- No router weight decay (the hero's PR #8833 decays router and attn_gate from step 54k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 4096
    d_model: int = 192
    n_layers: int = 4
    n_heads: int = 6
    head_dim: int = 32
    local_kv_heads: int = 1
    global_kv_heads: int = 1
    n_experts: int = 96
    top_k: int = 2
    expert_dim: int = 96         # F: hidden/2 in the recipe
    n_shared: int = 2
    shared_dim: int = 96         # hidden/2 in the recipe
    seq_len: int = 256
    sliding_window: int = 128
    global_every: int = 4
    capacity_factor: float = 1.15
    z_loss_weight: float = 1e-4
    routing_renorm_sum: float = 2.5
    rope_theta: float = 10000.0

    @property
    def init_std(self) -> float:
        return 0.5 / math.sqrt(self.d_model)

    def is_global(self, layer: int) -> bool:
        """Global attention every `global_every`-th layer and on the last one (the hero's rule)."""
        return (layer + 1) % self.global_every == 0 or layer == self.n_layers - 1


def _param(*shape: int, std: float) -> nn.Parameter:
    w = torch.empty(*shape)
    nn.init.trunc_normal_(w, std=std, a=-2 * std, b=2 * std)
    return nn.Parameter(w)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rotary_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables, each (S, Hd/2)."""
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
    angles = torch.outer(torch.arange(cfg.seq_len).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x_BHSHd: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x_BHSHd.float().chunk(2, dim=-1)
    S = x_BHSHd.shape[2]
    cos, sin = cos[:S], sin[:S]
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.type_as(x_BHSHd)


class Attention(nn.Module):
    """GQA; local layers see a sliding window, global layers the whole causal prefix."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        self.is_global = cfg.is_global(layer)
        self.n_kv = cfg.global_kv_heads if self.is_global else cfg.local_kv_heads
        D, Hd, std = cfg.d_model, cfg.head_dim, cfg.init_std
        self.w_q = _param(cfg.n_heads * Hd, D, std=std)
        self.w_k = _param(self.n_kv * Hd, D, std=std)
        self.w_v = _param(self.n_kv * Hd, D, std=std)
        self.w_o = _param(D, cfg.n_heads * Hd, std=std)

    def forward(self, x_BSD: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                local_mask_SS: torch.Tensor) -> torch.Tensor:
        B, S, _ = x_BSD.shape
        H, G, Hd = self.cfg.n_heads, self.n_kv, self.cfg.head_dim
        q_BHSHd = F.linear(x_BSD, self.w_q).view(B, S, H, Hd).transpose(1, 2)
        k_BGSHd = F.linear(x_BSD, self.w_k).view(B, S, G, Hd).transpose(1, 2)
        v_BGSHd = F.linear(x_BSD, self.w_v).view(B, S, G, Hd).transpose(1, 2)
        q_BHSHd, k_BGSHd = apply_rotary(q_BHSHd, *rope), apply_rotary(k_BGSHd, *rope)
        if self.is_global:
            y_BHSHd = F.scaled_dot_product_attention(q_BHSHd, k_BGSHd, v_BGSHd, is_causal=True, enable_gqa=True)
        else:
            y_BHSHd = F.scaled_dot_product_attention(q_BHSHd, k_BGSHd, v_BGSHd, attn_mask=local_mask_SS[:S, :S],
                                                     enable_gqa=True)
        return F.linear(y_BHSHd.transpose(1, 2).reshape(B, S, H * Hd), self.w_o)


def qb_betas(logits_TE: torch.Tensor, alpha_T: torch.Tensor, top_k: int) -> torch.Tensor:
    """QB: per expert, the (T·K/E)-th largest margin s_te − α_t, i.e. the (1 − K/E) quantile.

    The next step's bias is −β (mean-centred): with it, expert e wins token t exactly when
    s_te − α_t > β_e, which holds for T·K/E tokens per expert on this batch.
    """
    T, E = logits_TE.shape
    count = max(1, (T * top_k) // E)
    margins_TE = logits_TE - alpha_T[:, None]
    return margins_TE.topk(count, dim=0).values[-1]  # (E,)


class MoE(nn.Module):
    """Routed SwiGLU experts (top-K of E, QB-balanced, capacity-capped) plus shared SwiGLU experts."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        D, E, F_, S_, std = cfg.d_model, cfg.n_experts, cfg.expert_dim, cfg.n_shared, cfg.init_std
        self.router = _param(D, E, std=std)
        # NOTE: a buffer, not a parameter: QB replaces it outside autograd; it never has a gradient.
        self.register_buffer("router_bias", torch.zeros(E))
        self.w_gate = _param(E, D, F_, std=std)
        self.w_up = _param(E, D, F_, std=std)
        self.w_down = _param(E, F_, D, std=std)
        self.shared_w_gate = _param(S_, D, cfg.shared_dim, std=std)
        self.shared_w_up = _param(S_, D, cfg.shared_dim, std=std)
        self.shared_w_down = _param(S_, cfg.shared_dim, D, std=std)
        self.pending_beta: torch.Tensor | None = None  # (E,) solved this step, applied next step

    @torch.no_grad()
    def apply_qb(self) -> None:
        """Start of a step: router_bias ← −β, mean-centred (a replacement, not an increment)."""
        if self.pending_beta is not None:
            bias_E = -self.pending_beta
            self.router_bias.copy_(bias_E - bias_E.mean())
            self.pending_beta = None

    def forward(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cfg = self.cfg
        T, D = x_TD.shape
        E, K = cfg.n_experts, cfg.top_k

        # --- route: fp32 logits; the bias only chooses, the combine weights use unbiased logits
        logits_TE = x_TD.float() @ self.router.float()
        biased_TE = logits_TE + self.router_bias
        top_vals_TK1, top_ids_TK1 = biased_TE.topk(K + 1, dim=-1)
        expert_ids_TK = top_ids_TK1[:, :K]
        alpha_T = top_vals_TK1[:, K].detach()  # the (K+1)-th biased logit: per-token threshold
        gates_TK = torch.sigmoid(logits_TE.gather(1, expert_ids_TK))
        gates_TK = gates_TK / gates_TK.sum(-1, keepdim=True) * cfg.routing_renorm_sum
        if self.training:
            self.pending_beta = qb_betas(logits_TE.detach(), alpha_T, K)

        # --- dispatch: sort assignments by expert, keep the first C per expert (capacity)
        N = T * K
        C = math.ceil(cfg.capacity_factor * N / E)
        expert_N = expert_ids_TK.reshape(N)
        order_N = torch.argsort(expert_N, stable=True)
        sorted_expert_N = expert_N[order_N]
        counts_E = torch.bincount(expert_N, minlength=E)
        starts_E = torch.cumsum(counts_E, 0) - counts_E
        pos_N = torch.arange(N, device=x_TD.device) - starts_E[sorted_expert_N]
        keep_N = pos_N < C
        kept = order_N[keep_N]                   # assignment index (t·K + k) of each kept slot
        slot = (sorted_expert_N * C + pos_N)[keep_N]
        token = kept // K
        buf_ECD = x_TD.new_zeros(E * C, D).index_copy(0, slot, x_TD[token]).view(E, C, D)

        # --- experts: one batched SwiGLU over (E, C, D)
        h_ECF = F.silu(torch.bmm(buf_ECD, self.w_gate)) * torch.bmm(buf_ECD, self.w_up)
        y_ECD = torch.bmm(h_ECF, self.w_down)

        # --- combine: weight each kept slot by its gate and add it back to its token
        weight = gates_TK.reshape(N)[kept].to(y_ECD.dtype)
        contrib = y_ECD.reshape(E * C, D)[slot] * weight[:, None]
        out_TD = torch.zeros_like(x_TD).index_add_(0, token, contrib.to(x_TD.dtype))

        # --- shared experts: every token, dense
        hs_STF = F.silu(torch.einsum("td,sdf->stf", x_TD, self.shared_w_gate)) * torch.einsum(
            "td,sdf->stf", x_TD, self.shared_w_up)
        out_TD = out_TD + torch.einsum("stf,sfd->td", hs_STF, self.shared_w_down)

        with torch.no_grad():
            frac_E = counts_E.float() / N
            probs_TE = torch.sigmoid(logits_TE)
            probs_TE = probs_TE / probs_TE.sum(-1, keepdim=True)
            nz = frac_E[frac_E > 0]
            stats = {
                "routing_entropy": -(nz * nz.log()).sum(),
                "load_balancing_loss": E * (frac_E * probs_TE.mean(0)).sum(),
                "router_z_loss": torch.logsumexp(logits_TE, -1).pow(2).mean(),
                "dropped": (N - keep_N.sum()).float(),
                "assignments": torch.tensor(float(N)),
                "max_load": counts_E.max().float() / (N / E),
            }
        return out_TD, stats


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg, layer)
        self.mlp_norm = RMSNorm(cfg.d_model)
        self.mlp = MoE(cfg)

    def forward(self, x_BSD, rope, local_mask_SS):
        x_BSD = x_BSD + self.attn(self.attn_norm(x_BSD), rope, local_mask_SS)
        B, S, D = x_BSD.shape
        y_TD, stats = self.mlp(self.mlp_norm(x_BSD).reshape(B * S, D))
        return x_BSD + y_TD.view(B, S, D), stats


class MoEDecoder(nn.Module):
    """Parameter names follow Marin's tree paths: token_embed, stacked_blocks.{i}.attn.w_q,
    stacked_blocks.{i}.mlp.router_bias, final_norm, lm_head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embed = _param(cfg.vocab_size, cfg.d_model, std=cfg.init_std)
        self.stacked_blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = RMSNorm(cfg.d_model)
        self.lm_head = _param(cfg.vocab_size, cfg.d_model, std=cfg.init_std)
        cos, sin = rotary_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        i = torch.arange(cfg.seq_len)
        local = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < cfg.sliding_window)
        self.register_buffer("local_mask", local, persistent=False)

    def apply_qb(self) -> None:
        for block in self.stacked_blocks:
            block.mlp.apply_qb()

    def forward(self, idx_BS: torch.Tensor, targets_BS: torch.Tensor | None = None):
        """Returns (loss, stats): loss = CE + z_loss_weight·mean(logsumexp(logits)²)."""
        x_BSD = F.embedding(idx_BS, self.token_embed)
        rope = (self.rope_cos, self.rope_sin)
        layer_stats = []
        for block in self.stacked_blocks:
            x_BSD, stats = block(x_BSD, rope, self.local_mask)
            layer_stats.append(stats)
        logits_BSV = F.linear(self.final_norm(x_BSD), self.lm_head).float()
        if targets_BS is None:
            return logits_BSV, layer_stats
        # one fused log-softmax pass serves both: per-token CE = lse − target logit, so
        # lse = CE + target logit gives the z-loss (mean lse²) without a second pass over V
        nll_BS = F.cross_entropy(logits_BSV.flatten(0, 1), targets_BS.reshape(-1), reduction="none").view_as(targets_BS)
        lse_BS = nll_BS + logits_BSV.gather(-1, targets_BS.unsqueeze(-1)).squeeze(-1)
        ce = nll_BS.mean()
        z = lse_BS.pow(2).mean()
        loss = ce + self.cfg.z_loss_weight * z
        return loss, {"cross_entropy_loss": ce.detach(), "z_loss": z.detach(), "layers": layer_stats}


# --- parameter accounting (analytic; used by --dry-run and MFU) ---------------------------------

def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Total and active parameter counts of this model at `cfg` (no allocation)."""
    D, Hd, E, K, F_ = cfg.d_model, cfg.head_dim, cfg.n_experts, cfg.top_k, cfg.expert_dim
    attn = 0
    for i in range(cfg.n_layers):
        g = cfg.global_kv_heads if cfg.is_global(i) else cfg.local_kv_heads
        attn += 2 * D * cfg.n_heads * Hd + 2 * D * g * Hd
    per_expert = 3 * D * F_
    shared = cfg.n_shared * 3 * D * cfg.shared_dim
    router = D * E
    norms = (2 * cfg.n_layers + 1) * D
    embed = 2 * cfg.vocab_size * D
    L = cfg.n_layers
    total = attn + L * (E * per_expert + shared + router) + norms + embed
    active_non_embed = attn + L * (K * per_expert + shared + router) + norms
    return {"total": total, "active": active_non_embed + embed, "active_non_embedding": active_non_embed,
            "routed_experts": L * E * per_expert, "embedding": embed}


def flops_per_token(cfg: ModelConfig) -> float:
    """6·N_active (matmuls incl. lm_head, fwd+bwd) plus causal attention scores."""
    n = param_counts(cfg)
    matmul = 6 * (n["active_non_embedding"] + cfg.vocab_size * cfg.d_model)
    attn = 0.0
    for i in range(cfg.n_layers):
        span = cfg.seq_len / 2 if cfg.is_global(i) else min(cfg.sliding_window, cfg.seq_len / 2)
        attn += 6 * 2 * cfg.n_heads * cfg.head_dim * span
    return matmul + attn
