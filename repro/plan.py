"""`--dry-run`: what a run is (shape, parameters, memory, FLOPs, schedule) and whether this machine holds it.

Parameters are counted off the model itself (accounting.py); "active" is counted as Marin counts it
(no embeddings, no lm_head; the output says so). Memory is fp32 weights + fp32 grads + optimizer
state (MuonH one buffer per matrix, Adam/AdamH two), divided over the FSDP ranks; activations come
on top, so a device "holds" a run when that total is at most 80 % of its memory.
"""

from __future__ import annotations

import math
from typing import Any

from repro import accounting
from repro.machine import cuda_memory_bytes, host_memory_bytes
from repro.recipe import TrainConfig, heuristic_lrs_at

HEADROOM = 0.8          # the share of a device's memory that weights, grads and state may take
REFERENCE_GPU_GIB = 80  # what "needs N GPUs" is counted in (an H100 / A100 80 GB)


def describe(cfg: TrainConfig, *, device: str, ranks: int = 1, published: dict[str, Any] | None = None) -> dict[str, Any]:
    """`device` "cpu" (the proxy: host memory) or "cuda" (a true-size run: GPU memory, if there is a GPU)."""
    m = cfg.model
    acc = accounting.summary(m, cfg.optimizer, ranks)
    need = acc["memory_gib"]["total"]
    if device == "cpu":
        have_bytes = host_memory_bytes()
    else:  # the true size trains on CUDA only
        have_bytes = cuda_memory_bytes()
        device = "cuda" if have_bytes is not None else "no CUDA GPU here"
    have = None if have_bytes is None else have_bytes / 2**30
    total_need = need * ranks
    out: dict[str, Any] = {
        "label": cfg.label, "kind": cfg.kind, "rung": cfg.rung, "width": cfg.width, "source_run": cfg.source_run,
        "shape": {"hidden_dim": m.hidden_dim, "num_layers": m.num_layers, "num_heads": m.num_heads,
                  "head_dim": m.head_dim, "local_kv_heads": m.local_kv_heads, "global_kv_heads": m.global_kv_heads,
                  "num_experts": m.num_experts, "num_experts_per_token": m.num_experts_per_token,
                  "intermediate_dim": m.intermediate_dim, "latent_dim": m.latent_dim,
                  "num_shared_experts": m.num_shared_experts,
                  "shared_expert_intermediate_dim": m.shared_expert_intermediate_dim,
                  "num_dense_layers": m.num_dense_layers, "vocab_size": m.vocab_size, "seq_len": m.seq_len,
                  "sliding_window": m.sliding_window, "gated_norm_rank": m.gated_norm_rank,
                  "sconv_kernel": m.sconv_kernel, "qb_estimator": m.qb_estimator, "qb_hist_bins": m.qb_hist_bins},
        **acc,
        "steps": cfg.steps, "batch": cfg.batch_size, "tokens_per_step": cfg.tokens_per_step,
        "tokens": cfg.total_tokens, "flops": acc["flops_per_token"] * cfg.total_tokens,
        "optimizer": cfg.optimizer, "learning_rate": cfg.learning_rate, "adam_lr": cfg.adam_lr, "beta1": cfg.beta1,
        "beta2": cfg.beta2, "epsilon": cfg.epsilon, "warmup_steps": cfg.warmup_steps, "decay": cfg.decay,
        "min_lr_ratio": cfg.min_lr_ratio, "lr_schedule": cfg.lr_schedule, "phase_steps": cfg.phase_steps(),
        "eval_every": cfg.eval_every, "heuristic_at_this_size": heuristic_lrs_at(cfg),
        "fits": {"device": device, "device_memory_gib": have, "needs_gib": need,
                 "holds": have is not None and need <= HEADROOM * have,
                 f"gpus_of_{REFERENCE_GPU_GIB}_gib_needed": max(1, math.ceil(total_need / (HEADROOM * REFERENCE_GPU_GIB)))},
    }
    if published:
        out["published"] = {k: published[k] for k in ("label", "total_params", "active_params", "tokens", "flops", "steps")
                            if k in published}
        out["published"]["total_params_off_by"] = acc["total_params"] / published["total_params"] - 1
        out["published"]["active_params_off_by"] = acc["active_params"] / published["active_params"] - 1
    return out


def _big(v: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:.0f}"


def render(doc: dict[str, Any]) -> list[str]:
    """The plan as a side-by-side table of the true run and its proxy."""
    t, p = doc["true"], doc.get("proxy")
    cols = [("true run", t)] + ([("cpu proxy", p)] if p else [])
    lines = [f"{doc['title']}"]
    lines.append(f"  {'':<26}" + "".join(f"{name:>22}" for name, _ in cols))

    def row(label: str, fn) -> None:
        lines.append(f"  {label:<26}" + "".join(f"{fn(c):>22}" for _, c in cols))

    row("hidden / layers / heads", lambda c: f"{c['shape']['hidden_dim']} / {c['shape']['num_layers']} / {c['shape']['num_heads']}")
    row("kv heads (local, global)", lambda c: f"{c['shape']['local_kv_heads']}, {c['shape']['global_kv_heads']}")
    row("experts / top-k / latent", lambda c: f"{c['shape']['num_experts']} / {c['shape']['num_experts_per_token']} / {c['shape']['latent_dim']}")
    row("vocab / seq / window", lambda c: f"{c['shape']['vocab_size']} / {c['shape']['seq_len']} / {c['shape']['sliding_window']}")
    row("total params", lambda c: _big(c["total_params"]))
    row("active params (Marin's)", lambda c: _big(c["active_params"]))
    row("memory w+g+opt per rank", lambda c: f"{c['memory_gib']['total']:.2f} GiB")
    row("steps × batch", lambda c: f"{c['steps']:,} × {c['batch']:,}")
    row("tokens", lambda c: _big(c["tokens"]))
    row("FLOPs per token / run", lambda c: f"{c['flops_per_token']:.2e} / {c['flops']:.1e}")
    row("LR MuonH·AdamH / Adam", lambda c: f"{c['learning_rate']:.4g} / {c['adam_lr']:.4g}")
    row("warm-up; phase switches", lambda c: f"{c['warmup_steps']}; " + ",".join(map(str, c["phase_steps"][1:])))
    row("holds on this machine", lambda c: ("yes" if c["fits"]["holds"] else "no") + f" ({c['fits']['device']})")
    lines.append("  active params exclude embeddings and lm_head, as Marin counts them")
    if "published" in t:
        pub = t["published"]
        lines.append(f"  published {pub['label']}: {_big(pub['total_params'])} total, {_big(pub['active_params'])} active "
                     f"(this model: {100 * pub['total_params_off_by']:+.2f}%, {100 * pub['active_params_off_by']:+.2f}%)")
    if not t["fits"]["holds"]:
        n = t["fits"][f"gpus_of_{REFERENCE_GPU_GIB}_gib_needed"]
        lines.append(f"  the true run needs {t['fits']['needs_gib']:.0f} GiB for weights, grads and optimizer state: "
                     f"about {n} GPU(s) of {REFERENCE_GPU_GIB} GiB with --nproc {n}")
    return lines
