"""Marin's hero MoE decoder (`lib/levanter/src/levanter/models/hero.py`, grug `moe_hero_ep`) in PyTorch, one rung at any width.

Read it top to bottom: config → norms (RMSNorm, GatedNorm) → short convolution → half-RoPE →
attention → SwiGLU (dense and shared experts) → block → decoder and loss. The routed MoE (router,
QB bias, latent projections, capacity dispatch, grouped experts) is `moe.py`; the optimizer groups
are `optim.py`. Shape suffixes follow torchtitan: B batch, S sequence, T = B·S tokens, D hidden,
H query heads, G kv heads in use, M kv heads stored, Hd head dim, V vocabulary.

What a block does, as in the hero:
- `rms_attn` (RMSNorm with a gain) then `attn_gated_norm` (GatedNorm, rank 128: x·σ(silu(x·W↓)·W↑));
  attention with kv heads stored once (max of local/global) and sliced per layer (local layers use
  `local_kv_heads`, global layers — every `global_every`-th and the last — use `global_kv_heads` and
  see the whole causal prefix, local layers a sliding window); a short causal depthwise convolution
  (kernel 4, identity-initialised) after the K projection; parameter-free RMSNorm on q and k; RoPE on
  half of each head's dims on local layers only (global layers have none); q scaled by qk_mult 1.3;
  XSA (the component of each head's output along its own value is removed); the headwise gate
  2·σ(x·attn_gate) (attn_gate zero-initialised, so 1 at step 0); w_o; a short conv on the branch output.
- `rms_mlp` + `mlp_gated_norm`; the routed latent MoE (`moe.py`) plus two shared SwiGLU experts of
  width D/2 reading the same input; a short conv on the branch output.
- Around the stack: token embedding → `embed_norm` + `embed_gated_norm`; `final_norm` +
  `final_gated_norm` → lm_head (Marin's `output_proj`); loss = CE + 1e-4·mean(logsumexp²) (logit z-loss).
Init: every matrix std·truncnormal(±3) with std = 0.5/√D; gains 1; convs identity; attn_gate 0.
Precision (Marin's policy): fp32 weights, matmuls under the caller's autocast (bf16 on CUDA and on CPUs
with native bf16); the router logits, the QB solve, norms' statistics and the loss stay fp32. The same
code runs a CPU proxy and the true width on GPUs; only device and dtype differ.

Left out, and why:
- Packed-document boundaries (segment ids): our batches are random windows of a token stream with
  end-of-text separators, so attention and the short convs see across documents, as a plain LM does.
- Expert-parallel transport (ragged / pooled-wave all-to-all) and its sender-side drops: one process
  (or data-parallel ranks) holds every expert; capacity is the receiver cap per expert (moe.py).
- Fused RoPE's adjacent-pair layout: we rotate split halves; it is a fixed permutation of the rotated
  dims, the same function class at init and in training.
- With micro-batches (a true-size run on a GPU accumulates 8-sequence micro-batches), QB's β is the mean of
  the micro-batches' β; Marin solves it over the whole step's batch at once.
- The EMA copy, QB damping/freeze options and the router/attn_gate weight decay from step 54k
  (PR #8833): not part of the ladder rungs' recipe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from repro.initialize import matrix
from repro.moe import MoE


@dataclass
class ModelConfig:
    """Field names are Levanter's (`HeroConfig`); defaults are rung1 (d768) at its true size."""

    vocab_size: int = 128_256
    hidden_dim: int = 768
    num_layers: int = 8
    num_heads: int = 6
    head_dim: int = 128
    local_kv_heads: int = 1
    global_kv_heads: int = 1
    num_experts: int = 384
    num_experts_per_token: int = 8
    intermediate_dim: int = 384              # routed expert width
    latent_dim: int | None = 384             # None: routed experts read the hidden width directly
    num_shared_experts: int = 2
    shared_expert_intermediate_dim: int = 384
    num_dense_layers: int = 0                # leading dense SwiGLU layers (isoflop-moe-v2 has 2)
    dense_intermediate_dim: int = 0
    seq_len: int = 4096
    sliding_window: int = 2048
    global_every: int = 4
    capacity_factor: float = 1.15
    routing_renorm_sum: float = 2.5
    z_loss_weight: float = 1e-4
    qk_mult: float = 1.3
    rope_theta: float = 10_000.0
    rope: str = "half-local"                 # "half-local" (the hero) | "full" (every layer, whole head)
    sconv_kernel: int = 4                    # 0: no short convolutions
    sconv_sites: tuple[str, ...] = field(default=("k", "attn", "mlp"))
    gated_norm_rank: int = 128               # 0: plain RMSNorm
    attn_gate: bool = True
    xsa: bool = True
    qk_norm: bool = True
    qb_estimator: str = "hist"               # "hist" (10,000 bins, the ladder and hero) | "topk"
    qb_hist_bins: int = 10_000
    layer_norm_eps: float = 1e-5
    initializer_std: float | None = None     # None: 0.5/√hidden

    @property
    def init_std(self) -> float:
        return self.initializer_std if self.initializer_std is not None else 0.5 / math.sqrt(self.hidden_dim)

    @property
    def stored_kv_heads(self) -> int:
        return max(self.local_kv_heads, self.global_kv_heads)

    @property
    def expert_input_dim(self) -> int:
        return self.latent_dim if self.latent_dim is not None else self.hidden_dim

    def is_global(self, layer: int) -> bool:
        """Every `global_every`-th layer and the last one see the whole causal prefix (the hero's rule)."""
        return (layer + 1) % self.global_every == 0 or layer == self.num_layers - 1

    def is_moe(self, layer: int) -> bool:
        return layer >= self.num_dense_layers


# --- norms ----------------------------------------------------------------------------------------

class RMSNormFunction(torch.autograd.Function):
    """x / rms(x) (· gain), statistics in fp32 (or the input's float64), with its backward written out:
    gx = r·(g·w − x̂·mean(g·w·x̂)), gw = Σ g·x̂. (torch has no CPU kernel for the fused RMSNorm backward, so
    autograd runs the decomposed formula: ~15 passes over the activation; this is ~6: bench/NOTES.md,
    "repro".)"""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        xf = x if x.dtype == torch.float64 else x.float()
        r = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps).rsqrt_()
        xhat = xf * r
        ctx.save_for_backward(xhat, r, weight)
        ctx.in_dtype = x.dtype
        return (xhat * weight if weight is not None else xhat).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        xhat, r, weight = ctx.saved_tensors
        g = grad.to(xhat.dtype)
        gw = g * weight if weight is not None else g
        dot = torch.linalg.vecdot(gw, xhat, dim=-1).unsqueeze(-1).div_(xhat.shape[-1])
        grad_x = torch.addcmul(gw, xhat, dot, value=-1).mul_(r).to(ctx.in_dtype)
        grad_w = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = (g * xhat).reshape(-1, xhat.shape[-1]).sum(0).to(weight.dtype)
        return grad_x, grad_w, None


def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Parameter-free RMS norm over the last dim (used on q and k)."""
    return RMSNormFunction.apply(x, None, eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFunction.apply(x, self.weight, self.eps)


class GatedNorm(nn.Module):
    """x · σ(silu(x·W↓)·W↑) with rank-128 W↓, W↑: a learned per-dimension gate after RMSNorm that
    lets MuonH/AdamH (whose matrices keep a fixed norm) still scale activations."""

    def __init__(self, dim: int, rank: int, std: float):
        super().__init__()
        self.w_down = matrix(dim, rank, std=std)
        self.w_up = matrix(rank, dim, std=std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(F.silu(x @ self.w_down) @ self.w_up)


def rms(cfg: ModelConfig) -> RMSNorm:
    return RMSNorm(cfg.hidden_dim, cfg.layer_norm_eps)


def gated_norm(cfg: ModelConfig) -> nn.Module:
    """The GatedNorm that follows each RMSNorm, or nothing when the recipe has none."""
    return GatedNorm(cfg.hidden_dim, cfg.gated_norm_rank, cfg.init_std) if cfg.gated_norm_rank else nn.Identity()


# --- short convolution ----------------------------------------------------------------------------

class CausalDepthwiseConv(torch.autograd.Function):
    """out[t] = Σ_lag w[lag]·x[t−lag], written tap by tap into one output with in-place multiply-adds on
    shifted slices, backward likewise (autograd's pad-mul-add chain makes a padded copy, a product and a
    sum per tap each way, several times slower at the proxy's size: bench/NOTES.md, "repro")."""

    @staticmethod
    def forward(ctx, x_BSC: torch.Tensor, w_KC: torch.Tensor) -> torch.Tensor:
        taps = min(w_KC.shape[0], x_BSC.shape[1])
        out = x_BSC * w_KC[0]
        for lag in range(1, taps):
            out[:, lag:].addcmul_(x_BSC[:, :-lag], w_KC[lag])
        ctx.save_for_backward(x_BSC, w_KC)
        return out

    @staticmethod
    def backward(ctx, grad_BSC):
        x_BSC, w_KC = ctx.saved_tensors
        taps = min(w_KC.shape[0], x_BSC.shape[1])
        grad_x = grad_BSC * w_KC[0]
        grad_w = torch.zeros(w_KC.shape, dtype=torch.float32, device=w_KC.device)
        grad_w[0] = (grad_BSC * x_BSC).sum((0, 1), dtype=torch.float32)
        for lag in range(1, taps):
            grad_x[:, :-lag].addcmul_(grad_BSC[:, lag:], w_KC[lag])
            grad_w[lag] = (grad_BSC[:, lag:] * x_BSC[:, :-lag]).sum((0, 1), dtype=torch.float32)
        return grad_x, grad_w.to(w_KC.dtype)


class ShortConv(nn.Module):
    """Depthwise causal conv over the sequence: out[t] = Σ_lag w[lag]·x[t−lag]; identity at init."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        w = torch.zeros(kernel, channels)
        w[0] = 1.0
        self.weight = nn.Parameter(w)

    def forward(self, x_BSC: torch.Tensor) -> torch.Tensor:
        return CausalDepthwiseConv.apply(x_BSC, self.weight.to(x_BSC.dtype))


def short_conv(cfg: ModelConfig, site: str, channels: int) -> nn.Module:
    """The short conv at `site` ("k", "attn", "mlp"), or nothing when the recipe has none there."""
    return ShortConv(channels, cfg.sconv_kernel) if cfg.sconv_kernel and site in cfg.sconv_sites else nn.Identity()


# --- rotary ---------------------------------------------------------------------------------------

def rotary_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin (S, R/2) for the R rotated dims of a head (R = Hd/2 for the hero's half-RoPE)."""
    rot = cfg.head_dim // 2 if cfg.rope == "half-local" else cfg.head_dim
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, rot, 2, device="cpu").float() / rot)
    angles = torch.outer(torch.arange(cfg.seq_len, device="cpu").float(), inv_freq)
    return angles.cos(), angles.sin()  # built on the CPU even inside a meta-device count (accounting.py)


def apply_rotary(x_BSHHd: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first R dims of every head (split halves); leave the rest as they are."""
    S, half = x_BSHHd.shape[1], cos.shape[-1]
    cos, sin = cos[:S, None, :], sin[:S, None, :]
    x1, x2, rest = x_BSHHd[..., :half], x_BSHHd[..., half:2 * half], x_BSHHd[..., 2 * half:]
    rotated = (x1 * cos - x2 * sin, x1 * sin + x2 * cos)
    return torch.cat([*(r.type_as(x_BSHHd) for r in rotated), rest], dim=-1)


# --- attention ------------------------------------------------------------------------------------

def windowed_attention(q_BSHHd: torch.Tensor, k_BSGHd: torch.Tensor, v_BSGHd: torch.Tensor, window: int,
                       scale: float, window_SS: torch.Tensor) -> torch.Tensor:
    """Causal attention over each query's last `window` positions, (B, S, H, Hd) in and out. Queries go in
    blocks of Q that each see only the Q + P keys able to reach them (P ≥ window − 1, a multiple of Q), so
    the product costs (Q + P)/S of the full S × S one (SDPA computes every pair a mask allows or not).
    Padding keys (before position 0, after the end) are masked; padding queries are dropped."""
    B, S, H, Hd = q_BSHHd.shape
    G = k_BSGHd.shape[2]
    Q = max(16, window // 4)
    P = -(-(window - 1) // Q) * Q
    N, span = -(-S // Q), Q + P
    if span >= S:  # nothing to skip
        return F.scaled_dot_product_attention(q_BSHHd.transpose(1, 2), k_BSGHd.transpose(1, 2), v_BSGHd.transpose(1, 2),
                                              attn_mask=window_SS[:S, :S], scale=scale, enable_gqa=True).transpose(1, 2)
    tail = N * Q - S
    q_BNQHHd = F.pad(q_BSHHd, (0, 0, 0, 0, 0, tail)).view(B * N, Q, H, Hd)

    def key_windows(x_BSGHd: torch.Tensor) -> torch.Tensor:  # block n's keys: positions n·Q − P … n·Q + Q − 1
        padded = F.pad(x_BSGHd, (0, 0, 0, 0, P, tail))
        return padded.unfold(1, span, Q).permute(0, 1, 2, 4, 3).reshape(B * N, G, span, Hd)

    query = torch.arange(Q, device=q_BSHHd.device)[:, None] + P        # positions relative to the block's key 0
    key = torch.arange(span, device=q_BSHHd.device)[None, :]
    lag = query - key
    starts = torch.arange(N, device=q_BSHHd.device)[:, None, None] * Q - P
    mask_NQK = (lag >= 0) & (lag < window) & (key + starts >= 0)
    mask = mask_NQK.unsqueeze(0).expand(B, N, Q, span).reshape(B * N, 1, Q, span)
    y = F.scaled_dot_product_attention(q_BNQHHd.transpose(1, 2), key_windows(k_BSGHd), key_windows(v_BSGHd),
                                       attn_mask=mask, scale=scale, enable_gqa=True)
    return y.transpose(1, 2).reshape(B, N * Q, H, Hd)[:, :S]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        self.is_global = cfg.is_global(layer)
        self.n_kv = cfg.global_kv_heads if self.is_global else cfg.local_kv_heads
        self.rotate = cfg.rope == "full" or not self.is_global
        D, H, M, Hd, std = cfg.hidden_dim, cfg.num_heads, cfg.stored_kv_heads, cfg.head_dim, cfg.init_std
        self.w_q = matrix(D, H * Hd, std=std)
        self.w_k = matrix(D, M * Hd, std=std)
        self.w_v = matrix(D, M * Hd, std=std)
        self.w_o = matrix(H * Hd, D, std=std)
        self.attn_gate = nn.Parameter(torch.zeros(D, H)) if cfg.attn_gate else None
        self.sconv_k = short_conv(cfg, "k", M * Hd)

    def forward(self, x_BSD: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                window_SS: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        B, S, _ = x_BSD.shape
        H, M, G, Hd = cfg.num_heads, cfg.stored_kv_heads, self.n_kv, cfg.head_dim
        # one matmul for q, k, v and the head gate's logits (three MuonH matrices and an Adam one, concatenated
        # for the product only: the gate's own (D, H) product ran at a tenth of the matmul rate)
        gate = [self.attn_gate] if self.attn_gate is not None else []
        q_BSX, k_BSX, v_BSX, *gate_BSH = (x_BSD @ torch.cat([self.w_q, self.w_k, self.w_v, *gate], 1)).split(
            [H * Hd, M * Hd, M * Hd, *(H for _ in gate)], -1)
        q_BSHHd = q_BSX.view(B, S, H, Hd)
        k_BSGHd = self.sconv_k(k_BSX).view(B, S, M, Hd)   # this layer's logical kv heads: the first G
        v_BSGHd = v_BSX.view(B, S, M, Hd)
        if G < M:
            k_BSGHd, v_BSGHd = k_BSGHd[:, :, :G], v_BSGHd[:, :, :G]
        if cfg.qk_norm:
            q_BSHHd, k_BSGHd = rms_norm(q_BSHHd), rms_norm(k_BSGHd)
        if self.rotate:
            q_BSHHd, k_BSGHd = apply_rotary(q_BSHHd, *rope), apply_rotary(k_BSGHd, *rope)
        # qk_mult folded into the softmax scale: softmax(qk_mult·q·kᵀ/√Hd), without a pass over q
        scale = cfg.qk_mult / math.sqrt(Hd)
        if self.is_global or cfg.sliding_window >= S:
            y_BHSHd = F.scaled_dot_product_attention(q_BSHHd.transpose(1, 2), k_BSGHd.transpose(1, 2),
                                                     v_BSGHd.transpose(1, 2), is_causal=True, scale=scale,
                                                     enable_gqa=True)
            y_BSHHd = y_BHSHd.transpose(1, 2)
        else:
            y_BSHHd = windowed_attention(q_BSHHd, k_BSGHd, v_BSGHd, cfg.sliding_window, scale, window_SS)
        # back to (B, S, H, Hd), the layout SDPA writes, with query heads grouped under their kv head
        y_BSGRHd = y_BSHHd.reshape(B, S, G, H // G, Hd)
        v_BSG1Hd = v_BSGHd.unsqueeze(3)
        if cfg.xsa:  # exclusive self attention: drop the part of each head's output along its own value
            along = (y_BSGRHd * v_BSG1Hd).sum(-1, keepdim=True) / (v_BSG1Hd.pow(2).sum(-1, keepdim=True) + 1e-6)
            y_BSGRHd = y_BSGRHd - along * v_BSG1Hd
        if self.attn_gate is not None:  # headwise gate 2·σ(x·attn_gate), one scalar per (token, head)
            gate_BSH = 2 * torch.sigmoid(gate_BSH[0])
            y_BSGRHd = y_BSGRHd * gate_BSH.view(B, S, G, H // G, 1).to(y_BSGRHd.dtype)
        return y_BSGRHd.reshape(B, S, H * Hd) @ self.w_o


# --- SwiGLU: dense layers and shared experts ------------------------------------------------------

class SwiGLU(nn.Module):
    """n SwiGLUs of width I reading the same input, summed (n = 2 shared experts; n = 1 a dense MLP).
    Stored stacked (n, D, I) so MuonH orthogonalises each expert's matrix on its own; run as one
    matmul of width n·I."""

    def __init__(self, dim: int, width: int, n: int, std: float):
        super().__init__()
        self.w_gate = matrix(n, dim, width, std=std)
        self.w_up = matrix(n, dim, width, std=std)
        self.w_down = matrix(n, width, dim, std=std)

    def forward(self, x_TD: torch.Tensor) -> torch.Tensor:
        n, D, width = self.w_gate.shape
        gate_up = x_TD @ torch.cat([self.w_gate, self.w_up]).transpose(0, 1).reshape(D, 2 * n * width)
        gate, up = gate_up.split(n * width, dim=-1)
        return (F.silu(gate) * up) @ self.w_down.reshape(n * width, D)


# --- block ----------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        D, std = cfg.hidden_dim, cfg.init_std
        self.rms_attn, self.attn_gated_norm = rms(cfg), gated_norm(cfg)
        self.attn = Attention(cfg, layer)
        self.sconv_attn = short_conv(cfg, "attn", D)
        self.rms_mlp, self.mlp_gated_norm = rms(cfg), gated_norm(cfg)
        if cfg.is_moe(layer):
            self.mlp: nn.Module = MoE(cfg)
            self.shared = (SwiGLU(D, cfg.shared_expert_intermediate_dim, cfg.num_shared_experts, std)
                           if cfg.num_shared_experts and cfg.shared_expert_intermediate_dim else None)
        else:
            self.mlp = SwiGLU(D, cfg.dense_intermediate_dim, 1, std)
            self.shared = None
        self.sconv_mlp = short_conv(cfg, "mlp", D)

    def forward(self, x_BSD, rope, window_SS):
        attn_in = self.attn_gated_norm(self.rms_attn(x_BSD))
        x_BSD = x_BSD + self.sconv_attn(self.attn(attn_in, rope, window_SS))
        B, S, D = x_BSD.shape
        mlp_in_TD = self.mlp_gated_norm(self.rms_mlp(x_BSD)).reshape(B * S, D)
        if isinstance(self.mlp, MoE):
            mlp_out_TD, stats = self.mlp(mlp_in_TD)
        else:
            mlp_out_TD, stats = self.mlp(mlp_in_TD), None
        if self.shared is not None:
            mlp_out_TD = mlp_out_TD + self.shared(mlp_in_TD)
        return x_BSD + self.sconv_mlp(mlp_out_TD.view(B, S, D)), stats


# --- decoder and loss -----------------------------------------------------------------------------

class CrossEntropyZLoss(torch.autograd.Function):
    """loss = mean(lse − target logit) + w·mean(lse²) over (T, V) fp32 logits, in three passes over V:
    log-softmax forward (kept instead of the logits); backward its exp, times (1 + 2w·lse)/T,
    minus 1/T at the targets. (Autograd's log-softmax + gather route allocates and zero-fills the (T, V)
    gradient twice.)"""

    @staticmethod
    def forward(ctx, logits_TV: torch.Tensor, targets_T: torch.Tensor, z_weight: float):
        logp_TV = F.log_softmax(logits_TV, dim=-1)
        lse_T = logits_TV[:, 0] - logp_TV[:, 0]
        ce = -logp_TV.gather(1, targets_T[:, None]).mean()
        z = lse_T.pow(2).mean()
        ctx.save_for_backward(logp_TV, targets_T, lse_T)
        ctx.z_weight = z_weight
        return ce + z_weight * z, ce.detach(), z.detach()

    @staticmethod
    def backward(ctx, grad_loss, _grad_ce, _grad_z):
        logp_TV, targets_T, lse_T = ctx.saved_tensors
        T = logp_TV.shape[0]
        grad_TV = logp_TV.exp()  # softmax
        grad_TV.mul_((grad_loss * (1 + 2 * ctx.z_weight * lse_T) / T)[:, None])
        grad_TV.scatter_add_(1, targets_T[:, None], (-grad_loss / T).expand(T, 1).to(grad_TV.dtype))
        return grad_TV, None, None


class MoEDecoder(nn.Module):
    """Parameter paths follow Marin's tree (token_embed, stacked_blocks.{i}.attn.w_q,
    stacked_blocks.{i}.mlp.router_bias, …); lm_head is Marin's `output_proj`, (D, V)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embed = matrix(cfg.vocab_size, cfg.hidden_dim, std=cfg.init_std)
        self.embed_norm, self.embed_gated_norm = rms(cfg), gated_norm(cfg)
        self.stacked_blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_layers))
        self.final_norm, self.final_gated_norm = rms(cfg), gated_norm(cfg)
        self.lm_head = matrix(cfg.hidden_dim, cfg.vocab_size, std=cfg.init_std)
        cos, sin = rotary_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        i = torch.arange(cfg.seq_len, device="cpu")
        window = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < cfg.sliding_window)
        self.register_buffer("window_mask", window, persistent=False)

    def moe_layers(self) -> list[MoE]:
        return [b.mlp for b in self.stacked_blocks if isinstance(b.mlp, MoE)]

    def apply_qb(self) -> None:
        """Start of a step: every router bias ← −β of the previous step, mean-centred."""
        for moe in self.moe_layers():
            moe.apply_qb()

    def hidden(self, idx_BS: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x_BSD = self.embed_gated_norm(self.embed_norm(F.embedding(idx_BS, self.token_embed)))
        rope = (self.rope_cos, self.rope_sin)
        layer_stats = []
        for block in self.stacked_blocks:
            x_BSD, stats = block(x_BSD, rope, self.window_mask)
            if stats is not None:
                layer_stats.append(stats)
        return self.final_gated_norm(self.final_norm(x_BSD)), layer_stats

    def forward(self, idx_BS: torch.Tensor, targets_BS: torch.Tensor):
        """(loss, stats): loss = CE + z_loss_weight·mean(logsumexp(logits)²), everything a tensor (no host sync)."""
        h_BSD, layer_stats = self.hidden(idx_BS)
        logits_TV = (h_BSD @ self.lm_head).float().flatten(0, 1)
        loss, ce, z = CrossEntropyZLoss.apply(logits_TV, targets_BS.reshape(-1), self.cfg.z_loss_weight)
        stats = {"cross_entropy_loss": ce.detach(), "z_loss": z.detach(),
                 "router": torch.stack(layer_stats) if layer_stats else None}
        return loss, stats
