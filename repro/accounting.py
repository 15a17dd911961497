"""Parameter counts, FLOPs per token and memory of a model config, read off the model itself.

The model is built on torch's `meta` device (shapes, no memory), so the counts can never drift from
the code: even the 535B hero is counted in a fraction of a second. Two "active" counts:
- `active` is Marin's (`_active_params` in experiments/grug/moe_hero_ep/small_scale_abl_launch.py),
  the one the published table and the 791-tokens-per-active-parameter budget use: attention Q, K,
  V, O + router + the K-of-E routed experts + latent projections + shared experts (+ dense MLPs),
  summed over layers. It excludes the embeddings and lm_head, and also the small pieces Marin's
  formula leaves out (GatedNorm matrices, attention gates, norm gains, short-conv kernels).
- `active_all` is every non-embedding, non-lm_head parameter one token touches, those included.
The total counts every parameter and the router-bias buffers (Marin's tree holds them as arrays):
for the hero it is exactly 535,477,106,688, the figure of marin#9277.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from repro.model import ModelConfig, MoEDecoder

_MARIN_ACTIVE = re.compile(r"attn\.w_[qkvo]$|mlp\.router$|mlp\.w_latent_(down|up)$|shared\.w_|mlp\.w_(gate|up|down)$")
_ROUTED = re.compile(r"\.expert_mlp\.")
_EMBED, _LM_HEAD = "token_embed", "lm_head"


def _meta_model(cfg: ModelConfig) -> MoEDecoder:
    with torch.device("meta"):
        return MoEDecoder(cfg)


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """total, active (Marin's), active_all, embedding, lm_head, routed_experts — as ints."""
    model = _meta_model(cfg)
    share = cfg.num_experts_per_token / cfg.num_experts
    total = active = active_all = routed = 0
    for name, p in model.named_parameters():
        n = p.numel()
        total += n
        if name in (_EMBED, _LM_HEAD):
            continue
        used = n * share if _ROUTED.search(name) else n
        routed += n if _ROUTED.search(name) else 0
        active_all += used
        if _ROUTED.search(name) or _MARIN_ACTIVE.search(name):
            active += used
    buffers = sum(b.numel() for name, b in model.named_buffers() if name.endswith("router_bias"))
    return {"total": total + buffers, "active": round(active), "active_all": round(active_all),
            "embedding": cfg.vocab_size * cfg.hidden_dim, "lm_head": cfg.hidden_dim * cfg.vocab_size,
            "routed_experts": routed, "router_bias_buffers": buffers}


def optimizer_state_floats(cfg: ModelConfig, optimizer: str = "muonh") -> int:
    """Floats of optimizer state: MuonH keeps one momentum per matrix, AdamH/Adam/AdamW two moments."""
    from repro.optim import group_of

    model = _meta_model(cfg)
    floats = 0
    for name, p in model.named_parameters():
        group = group_of(name, p.ndim) if optimizer == "muonh" else "adam"
        floats += p.numel() * (1 if group == "muonh" else 2)
    return floats


def _mean_context(seq_len: int, window: int | None) -> float:
    """Average number of keys a query sees under a causal (optionally windowed) mask."""
    w = seq_len if window is None else min(window, seq_len)
    # positions 0..w-1 see t+1 keys, the rest see w
    return (w * (w + 1) / 2 + (seq_len - w) * w) / seq_len


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token (forward + backward = 3 × forward): 6 × every matmul weight one token
    uses (routed experts at K/E, lm_head included, embeddings a lookup) + 12·H·Hd × mean context."""
    model = _meta_model(cfg)
    share = cfg.num_experts_per_token / cfg.num_experts
    matmul = 0.0
    for name, p in model.named_parameters():
        if p.ndim < 2 or name == _EMBED or name.endswith("sconv_k.weight") or ".sconv_" in name:
            continue
        matmul += p.numel() * (share if _ROUTED.search(name) else 1.0)
    attn = 0.0
    for layer in range(cfg.num_layers):
        window = None if cfg.is_global(layer) else cfg.sliding_window
        attn += 12 * cfg.num_heads * cfg.head_dim * _mean_context(cfg.seq_len, window)
    return 6 * matmul + attn


def memory_bytes(cfg: ModelConfig, optimizer: str = "muonh", ranks: int = 1) -> dict[str, float]:
    """fp32 weights, fp32 grads and optimizer state, per rank when FSDP shards them over `ranks`
    (activations not included: they depend on the micro-batch)."""
    n = param_counts(cfg)["total"]
    weights, grads = 4.0 * n, 4.0 * n
    state = 4.0 * optimizer_state_floats(cfg, optimizer)
    total = weights + grads + state
    return {"weights": weights / ranks, "grads": grads / ranks, "optimizer_state": state / ranks,
            "total": total / ranks}


def summary(cfg: ModelConfig, optimizer: str = "muonh", ranks: int = 1) -> dict[str, Any]:
    counts = param_counts(cfg)
    gib = {k: v / 2**30 for k, v in memory_bytes(cfg, optimizer, ranks).items()}
    return {"total_params": counts["total"], "active_params": counts["active"],
            "active_params_all": counts["active_all"],
            "active_counts": "Marin's: attention + router + top-k routed experts + latent projections + shared "
                             "experts; excludes embeddings and lm_head (active_params_all adds GatedNorm, gates, "
                             "gains, convs)",
            "embedding_params": counts["embedding"], "lm_head_params": counts["lm_head"],
            "routed_expert_params": counts["routed_experts"],
            "flops_per_token": flops_per_token(cfg), "memory_gib": gib, "memory_ranks": ranks}
