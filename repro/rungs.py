"""Training configs for the true rungs and their CPU proxies, from the shared ladder table.

The ladder table (`marinctl/data/rungs.json`, via `marinctl.rungs.rung`) is the single source of the
rung shapes. `true_config` turns a row into this repo's model + schedule at full size; `cpu_proxy`
shrinks it by one documented rule so it runs in minutes on 2 cores:

| what | true rung | proxy | kept |
|---|---|---|---|
| width | heads × 128 | heads × 32 (head_dim 128 → 32) | heads, local/global KV heads, GQA ratios, F = D/2 |
| depth | layers | max(4, layers // 2) | global every 4th + last layer |
| experts | 384, top-8 | 96, top-2 | K/E = 1/48, QB, capacity factor 1.15, 2 shared experts |
| vocabulary | 128,256 (Llama 3) | 4,096 (BPE trained on the local corpus) | z-loss 1e-4 |
| sequence | 4096, window 2048 | 256, window 128 | window / sequence = 1/2 |
| tokens | 791 per active param | `steps` × 16 × 256 (default 160 steps ≈ 655k tokens) | schedule shape, 1 % warm-up, min_lr_ratio 0.05, data-phase switches at 27.7 % and 80 %, eval every 5 % |
| LRs, beta2, eps | Marin's heuristic at the rung's tokens / width / batch | the rung's own values (the heuristic at the proxy's own size is in `--dry-run --json` as `heuristic_at_this_size`) | MuonH = 13/3 × Adam, the optimizer groups |
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from marinctl.rungs import rung as rung_row
from repro.model import ModelConfig, flops_per_token, param_counts
from repro.optim import heuristic, warmup_steps

PROXY_HEAD_DIM = 32
PROXY_EXPERTS, PROXY_TOP_K = 96, 2          # keeps K/E = 8/384 = 1/48
PROXY_VOCAB = 4096
PROXY_SEQ, PROXY_BATCH = 256, 16
DEFAULT_PROXY_STEPS = 160


@dataclass
class TrainConfig:
    rung: str
    label: str
    kind: str                      # "true" | "cpu-proxy"
    model: ModelConfig
    steps: int
    batch_size: int                # sequences per step
    muonh_lr: float
    adam_lr: float
    beta2: float
    eps: float
    warmup_fraction: float = 0.01
    min_lr_ratio: float = 0.05
    phase_fractions: list[float] = field(default_factory=lambda: [0.0, 0.27674, 0.8])
    eval_every: int = 0
    watch_interval: int = 10
    micro_batch: int = 0           # 0: the whole batch at once; GPUs accumulate micro-batches
    compute_dtype: str = "bfloat16"  # autocast dtype; weights stay fp32 (the hero's policy)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.seq_len

    @property
    def total_tokens(self) -> int:
        return self.steps * self.tokens_per_step

    def phase_steps(self) -> list[int]:
        """First step of each data phase: the rung's fractions of the schedule."""
        return [round(f * self.steps) for f in self.phase_fractions]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens_per_step"] = self.tokens_per_step
        d["total_tokens"] = self.total_tokens
        d["warmup_steps"] = warmup_steps(self.steps, self.warmup_fraction)
        d["phase_steps"] = self.phase_steps()
        return d


def _model_for(row: dict[str, Any], head_dim: int, layers: int, experts: int, top_k: int, vocab: int,
               seq: int, window: int) -> ModelConfig:
    d = row["heads"] * head_dim
    return ModelConfig(
        vocab_size=vocab, d_model=d, n_layers=layers, n_heads=row["heads"], head_dim=head_dim,
        local_kv_heads=row["local_kv"], global_kv_heads=row["global_kv"], n_experts=experts, top_k=top_k,
        expert_dim=d // 2, n_shared=row["shared_experts"], shared_dim=d // 2, seq_len=seq, sliding_window=window,
        global_every=row["global_every"], capacity_factor=row["capacity_factor"],
        z_loss_weight=row["z_loss_weight"], routing_renorm_sum=row["routing_renorm_sum"])


def true_config(name: str) -> TrainConfig:
    row = rung_row(name)
    model = _model_for(row, 128, row["layers"], row["experts"], row["top_k"], row["vocab_size"],
                       row["seq_len"], row["sliding_window"])
    return TrainConfig(
        rung=row["rung"], label=row["label"], kind="true", model=model, steps=row["steps"], batch_size=row["batch"],
        muonh_lr=row["muonh_lr"], adam_lr=row["adam_lr"], beta2=row["beta2"], eps=row["eps"],
        warmup_fraction=row["warmup_fraction"], min_lr_ratio=row["min_lr_ratio"],
        phase_fractions=list(row["data_phase_fractions"]), eval_every=row["eval_every"],
        watch_interval=row["watch_interval"], micro_batch=8)


def cpu_proxy(name: str, steps: int | None = None, vocab: int = PROXY_VOCAB, batch_size: int = PROXY_BATCH,
              seq_len: int = PROXY_SEQ) -> TrainConfig:
    """The rung shrunk by the rule in this module's docstring."""
    row = rung_row(name)
    steps = steps or DEFAULT_PROXY_STEPS
    window = max(1, round(seq_len * row["sliding_window"] / row["seq_len"]))
    model = _model_for(row, PROXY_HEAD_DIM, max(4, row["layers"] // 2), PROXY_EXPERTS, PROXY_TOP_K, vocab,
                       seq_len, window)
    return TrainConfig(
        rung=row["rung"], label=f"{row['label']} proxy", kind="cpu-proxy", model=model, steps=steps,
        batch_size=batch_size, muonh_lr=row["muonh_lr"], adam_lr=row["adam_lr"], beta2=row["beta2"], eps=row["eps"],
        warmup_fraction=row["warmup_fraction"], min_lr_ratio=row["min_lr_ratio"],
        phase_fractions=list(row["data_phase_fractions"]), eval_every=max(1, round(steps / 20)),
        watch_interval=row["watch_interval"])


def with_steps(cfg: TrainConfig, steps: int) -> TrainConfig:
    eval_every = max(1, round(steps / 20))
    return replace(cfg, steps=steps, eval_every=eval_every)


def summary(cfg: TrainConfig, flops_per_s: float | None = None, published: dict[str, Any] | None = None) -> dict[str, Any]:
    """The numbers `--dry-run` prints: params, memory for weights + optimizer state, FLOPs, time."""
    n = param_counts(cfg.model)
    # fp32 weights; optimizer state: MuonH 1 buffer, AdamH / Adam 2 moments (the hero offloads MuonH state).
    routed = n["routed_experts"]
    embed = n["embedding"]
    lm_head = embed // 2
    adam_like = embed  # token_embed (Adam) + lm_head (AdamH)
    muonh = n["total"] - adam_like - cfg.model.n_layers * cfg.model.d_model * cfg.model.n_experts
    state_floats = muonh + 2 * (n["total"] - muonh)
    weight_bytes = 4 * n["total"]
    state_bytes = 4 * state_floats
    grad_bytes = 4 * n["total"]
    flops = 6 * n["active"] * cfg.total_tokens
    out = {
        "rung": cfg.rung, "label": cfg.label, "kind": cfg.kind,
        "shape": {"d_model": cfg.model.d_model, "layers": cfg.model.n_layers, "heads": cfg.model.n_heads,
                  "head_dim": cfg.model.head_dim, "local_kv": cfg.model.local_kv_heads,
                  "global_kv": cfg.model.global_kv_heads, "experts": cfg.model.n_experts, "top_k": cfg.model.top_k,
                  "expert_dim": cfg.model.expert_dim, "shared": cfg.model.n_shared, "vocab": cfg.model.vocab_size,
                  "seq_len": cfg.model.seq_len, "window": cfg.model.sliding_window},
        "total_params": n["total"], "active_params": n["active"], "routed_expert_params": routed,
        "lm_head_params": lm_head,
        "memory_gib": {"weights": weight_bytes / 2**30, "grads": grad_bytes / 2**30,
                       "optimizer_state": state_bytes / 2**30,
                       "total": (weight_bytes + grad_bytes + state_bytes) / 2**30},
        "steps": cfg.steps, "batch": cfg.batch_size, "tokens": cfg.total_tokens,
        "flops": float(flops), "flops_per_token": flops_per_token(cfg.model),
        "muonh_lr": cfg.muonh_lr, "adam_lr": cfg.adam_lr, "beta2": cfg.beta2, "eps": cfg.eps,
        "warmup_steps": warmup_steps(cfg.steps, cfg.warmup_fraction), "phase_steps": cfg.phase_steps(),
        "eval_every": cfg.eval_every,
    }
    out["heuristic_at_this_size"] = heuristic(tokens=cfg.total_tokens, hidden=cfg.model.d_model,
                                              tokens_per_batch=cfg.tokens_per_step)
    if flops_per_s:
        out["time_s_at_measured_peak"] = flops / flops_per_s
        out["measured_flops_per_s"] = flops_per_s
    if published:
        out["published"] = {k: published[k] for k in ("total_params", "active_params", "tokens", "flops") if k in published}
    return out


def published_row(name: str) -> dict[str, Any]:
    return rung_row(name)


def fits_on_gpu(cfg: TrainConfig, memory_bytes: float) -> bool:
    need = summary(cfg)["memory_gib"]["total"] * 2**30 * 1.25  # + activations/workspace headroom
    return need <= memory_bytes


def gib_needed(cfg: TrainConfig) -> float:
    return math.ceil(summary(cfg)["memory_gib"]["total"] * 1.25)
