"""What a run trains: the model, the schedule and the optimizer — for a true rung, its CPU proxy, or a logged run.

`true_config(rung)` is the rung as Marin trains it (`rungs.json`, from Marin's
`experiments/grug/moe_hero_ep/launch_scaling_ladder.py` and marin#8435 §5). `cpu_proxy(cfg)`
shrinks any config by one documented rule so it trains in minutes on 2 CPU cores. No dimension ever
grows: a logged run already smaller than the proxy somewhere keeps its own size there.

| what | true rung | proxy (`--cpu`) | kept |
|---|---|---|---|
| width | heads × 128 | heads × 32 (head_dim → 32, `--head-dim`; `demo` uses 16) | heads, local/global KV heads; latent = expert = shared width = D/2 |
| GatedNorm rank | 128 | × the same factor (32) | GatedNorm at attn/mlp/embed/final |
| depth | layers | max(4, layers // 2) | global every 4th + last layer; dense layers halved (≥ 1 if any) |
| experts | E, top-K (384, 8) | E/4, K/4 with K ≥ 2 (96, 2) | K/E (1/48), QB HIST, capacity 1.15, 2 shared experts |
| vocabulary | 128,256 (Llama 3) | 4,096 (BPE trained on the local corpus; `--vocab`) | logit z-loss 1e-4 |
| sequence | 4096, window 2048 | 256, window 128 (`--seq-len`) | window / sequence = 1/2 |
| batch | 1024 sequences | 32 sequences, 8,192 tokens (`--batch`; `demo`: 16) | — |
| steps | 791 tokens per active param | `--steps` (default 120; `demo`: 60) | schedule shape, 1 % warm-up, min_lr_ratio 0.05, data phases at 27.7 % / 80 %, eval every 5 % |
| LRs, β2, ε | Marin's heuristic at the rung's size | the rung's own | MuonH = 13/3 × Adam, the optimizer groups |

A logged run's own config (`--from-config`, logged_config.py) goes through the same rule under `--cpu`,
and trains as logged without it (on CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from repro.ladder import rung as rung_row
from repro.model import ModelConfig
from repro.optim import warmup_steps

PROXY_HEAD_DIM = 32
PROXY_EXPERT_DIVISOR = 4          # 384/8 → 96/2: K/E kept
PROXY_VOCAB = 4096
PROXY_SEQ, PROXY_BATCH = 256, 32
DEFAULT_PROXY_STEPS = 120
PROXY_RULE = ("head_dim 128→32 (width ×1/4, GatedNorm rank ×1/4), layers max(4, L/2), experts and top-k ÷4 "
              "(K≥2, K/E kept), vocab 4096 BPE, seq 256 / window ×1/16, batch 32, the rung's LRs and schedule shape")


@dataclass
class TrainConfig:
    label: str
    kind: str                          # "true" | "cpu-proxy"
    model: ModelConfig
    steps: int
    batch_size: int                    # global, in sequences
    learning_rate: float               # MuonH / AdamH (or AdamW) peak LR
    adam_lr: float
    beta2: float
    epsilon: float
    beta1: float = 0.9
    optimizer: str = "muonh"           # "muonh" | "adamh" | "adamw"
    warmup: float = 0.01               # fraction of steps (or steps when ≥ 1)
    decay: float | None = None         # None: decay over everything after the warm-up
    min_lr_ratio: float = 0.05
    lr_schedule: str = "linear"
    weight_decay: float = 0.0
    max_grad_norm: float | None = None
    phase_fractions: list[float] = field(default_factory=lambda: [0.0, 0.27674, 0.8])
    eval_every: int = 0
    watch_interval: int = 10
    micro_batch: int = 0               # 0: the whole (per-rank) batch at once
    rung: str | None = None            # the ladder rung this reruns (the store's overlay link)
    width: str | None = None           # the rung's width name, d768
    proxy_rule: str | None = None
    source_run: str | None = None      # a logged run this config was read from

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.seq_len

    @property
    def total_tokens(self) -> int:
        return self.steps * self.tokens_per_step

    @property
    def warmup_steps(self) -> int:
        return warmup_steps(self.steps, self.warmup)

    def phase_steps(self) -> list[int]:
        """First step of each data phase: the rung's fractions of this run's own schedule."""
        return [round(f * self.steps) for f in self.phase_fractions]

def _eval_every(steps: int) -> int:
    """Every 5 % of the run (Marin's `round(num_steps/20)`)."""
    return max(1, round(steps / 20))


def true_config(name: str) -> TrainConfig:
    row = rung_row(name)
    d = row["hidden"]
    model = ModelConfig(
        vocab_size=row["vocab_size"], hidden_dim=d, num_layers=row["layers"], num_heads=row["heads"], head_dim=128,
        local_kv_heads=row["local_kv"], global_kv_heads=row["global_kv"], num_experts=row["experts"],
        num_experts_per_token=row["top_k"], intermediate_dim=d // 2, latent_dim=d // 2,
        num_shared_experts=row["shared_experts"], shared_expert_intermediate_dim=d // 2, seq_len=row["seq_len"],
        sliding_window=row["sliding_window"], global_every=row["global_every"],
        capacity_factor=row["capacity_factor"], z_loss_weight=row["z_loss_weight"],
        routing_renorm_sum=row["routing_renorm_sum"], qb_estimator=row["qb_estimator"],
        qb_hist_bins=row["qb_hist_bins"])
    return TrainConfig(
        label=row["label"], kind="true", model=model, steps=row["steps"], batch_size=row["batch"],
        learning_rate=row["muonh_lr"], adam_lr=row["adam_lr"], beta2=row["beta2"], epsilon=row["eps"],
        warmup=row["warmup_fraction"], min_lr_ratio=row["min_lr_ratio"], lr_schedule=row["schedule"],
        phase_fractions=list(row["data_phase_fractions"]), eval_every=row["eval_every"],
        watch_interval=row["watch_interval"], micro_batch=8, rung=row["rung"], width=row["name"])


def _scaled(width: int, factor: float, minimum: int = 8) -> int:
    return max(minimum, int(round(width * factor)))


def cpu_proxy(cfg: TrainConfig, steps: int | None = None, vocab: int = PROXY_VOCAB, batch_size: int = PROXY_BATCH,
              seq_len: int = PROXY_SEQ, head_dim: int = PROXY_HEAD_DIM) -> TrainConfig:
    """`cfg` shrunk by the rule in this module's docstring (any config: a rung's or a logged run's); no
    dimension ever grows (a logged run already smaller than the proxy keeps its own size there)."""
    m = cfg.model
    head_dim = min(head_dim, m.head_dim)
    f = head_dim / m.head_dim
    k = min(m.num_experts_per_token, max(2, m.num_experts_per_token // PROXY_EXPERT_DIVISOR))
    experts = max(k + 1, round(m.num_experts * k / m.num_experts_per_token))
    layers = min(m.num_layers, max(4, m.num_layers // 2))
    dense = 0 if not m.num_dense_layers else min(layers - 1, max(1, m.num_dense_layers // 2))
    seq_len, vocab, batch_size = min(seq_len, m.seq_len), min(vocab, m.vocab_size), min(batch_size, cfg.batch_size)
    model = replace(
        m, vocab_size=vocab, hidden_dim=m.num_heads * head_dim, head_dim=head_dim, num_layers=layers,
        num_experts=experts, num_experts_per_token=k, intermediate_dim=_scaled(m.intermediate_dim, f),
        latent_dim=None if m.latent_dim is None else _scaled(m.latent_dim, f),
        shared_expert_intermediate_dim=_scaled(m.shared_expert_intermediate_dim, f, 0),
        num_dense_layers=dense, dense_intermediate_dim=_scaled(m.dense_intermediate_dim, f, 0),
        gated_norm_rank=_scaled(m.gated_norm_rank, f, 0) if m.gated_norm_rank else 0,
        seq_len=seq_len, sliding_window=max(1, round(seq_len * m.sliding_window / m.seq_len)),
        initializer_std=None)
    steps = steps or DEFAULT_PROXY_STEPS
    rule = PROXY_RULE if (head_dim, vocab, seq_len, batch_size) == (min(PROXY_HEAD_DIM, m.head_dim), PROXY_VOCAB, PROXY_SEQ,
                                                                   PROXY_BATCH) else (
        f"{PROXY_RULE}; overridden: head_dim {head_dim}, vocab {vocab}, seq {seq_len}, batch {batch_size}")
    return replace(cfg, label=f"{cfg.label} proxy", kind="cpu-proxy", model=model, steps=steps, batch_size=batch_size,
                   eval_every=_eval_every(steps), micro_batch=0, proxy_rule=rule)


def with_steps(cfg: TrainConfig, steps: int) -> TrainConfig:
    return replace(cfg, steps=steps, eval_every=_eval_every(steps))


def heuristic_lrs_at(cfg: TrainConfig) -> dict[str, float]:
    """Marin's heuristic evaluated at this config's own tokens, width and batch (for --dry-run)."""
    from repro.optim import heuristic

    return heuristic(tokens=cfg.total_tokens, hidden=cfg.model.hidden_dim, tokens_per_batch=cfg.tokens_per_step)
