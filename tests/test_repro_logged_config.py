"""Reading a logged run's own config (Levanter/grug names) into repro, and logging repro's own the same way.

The configs below are SYNTHETIC, shaped like Marin's logged runs (`experiments/grug/moe_scaling/launch.py`,
the H100 ladder of marin#8679): an
isoflop-moe-v2 point (E=64, K=4, two leading dense layers, AdamW) and H100 ladder rungs (d512, d768,
d1280) of the hero recipe, with W&B's `{"value": …}` wrapping.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from repro import recipe  # noqa: E402
from repro.errors import UsageError  # noqa: E402
from repro.logged_config import flatten, from_logged, to_logged  # noqa: E402
from repro.optim import heuristic  # noqa: E402


def wandb_wrapped(config: dict) -> dict:
    return {key: {"value": value, "desc": None} for key, value in config.items()}


def isoflop_v2(d: int = 1024, batch: int = 256) -> dict:
    return wandb_wrapped({
        "trainer": {"num_train_steps": 4000, "train_batch_size": batch, "seed": 7},
        "model": {"hidden_dim": d, "intermediate_dim": d // 2, "shared_expert_intermediate_dim": d, "num_shared_experts": 1,
                  "num_layers": 11, "num_heads": d // 128, "num_kv_heads": d // 512, "num_experts": 64,
                  "num_experts_per_token": 4, "num_dense_layers": 2, "seq_len": 4096, "vocab_size": 128256},
        "optimizer": {"type": "adam", "learning_rate": min(0.01, 0.33 * math.sqrt(batch) / d), "beta1": 0.95,
                      "beta2": max(0.95, 0.98 ** (batch / 128)), "epsilon": 1e-15, "weight_decay": 0.1, "warmup": 0.1,
                      "decay": 0.2, "min_lr_ratio": 0.0, "max_grad_norm": 1.0, "lr_schedule": "linear"},
    })


def h100_rung(d: int, layers: int, heads: int, local_kv: int, global_kv: int, steps: int) -> dict:
    tpb = 1024 * 4096
    h = heuristic(steps * tpb, d, tpb)
    return wandb_wrapped({
        "trainer": {"num_train_steps": steps, "train_batch_size": 1024},
        "model": {"hidden_dim": d, "intermediate_dim": d // 2, "latent_dim": d // 2, "shared_expert_intermediate_dim": d // 2,
                  "num_shared_experts": 2, "num_layers": layers, "num_heads": heads, "num_kv_heads": max(local_kv, global_kv),
                  "local_kv_heads": local_kv, "global_kv_heads": global_kv, "head_dim": 128, "num_experts": 384,
                  "num_experts_per_token": 8, "max_seq_len": 4096, "sliding_window": 2048, "global_every": 4,
                  "capacity_factor": 1.15, "qk_mult": 1.3, "sconv": True, "qb_estimator": "QbEstimator.HIST",
                  "qb_hist_bins": 10000},
        "optimizer": {"type": "GrugMoeMuonHConfig", "learning_rate": h["muonh_lr"], "adam_lr": h["adam_lr"],
                      "beta1": 0.9, "beta2": h["beta2"], "epsilon": h["eps"], "warmup": 0.01, "min_lr_ratio": 0.05,
                      "lr_schedule": "linear"},
    })


def test_an_isoflop_moe_run_reruns_as_itself():
    cfg, report = from_logged(isoflop_v2(), "synthetic-isoflop-moe-v2-1e19-d1024")
    m = cfg.model
    assert (m.hidden_dim, m.num_layers, m.num_heads, m.local_kv_heads, m.global_kv_heads) == (1024, 11, 8, 2, 2)
    assert (m.num_experts, m.num_experts_per_token, m.num_dense_layers) == (64, 4, 2)
    assert (m.intermediate_dim, m.num_shared_experts, m.shared_expert_intermediate_dim, m.seq_len) == (512, 1, 1024, 4096)
    assert (cfg.steps, cfg.batch_size, cfg.optimizer) == (4000, 256, "adamw")
    assert (cfg.weight_decay, cfg.max_grad_norm, cfg.warmup, cfg.decay, cfg.min_lr_ratio) == (0.1, 1.0, 0.1, 0.2, 0.0)
    assert cfg.learning_rate == pytest.approx(0.33 * 16 / 1024) and cfg.beta1 == 0.95
    assert cfg.rung is None and cfg.source_run == "synthetic-isoflop-moe-v2-1e19-d1024"
    assert report["read"]["num_experts_per_token"] == "model.num_experts_per_token"
    assert report["read"]["num_dense_layers"] == "model.num_dense_layers" and report["seed"] == 7
    # what the config does not say comes from the hero recipe, and is listed
    assert {"latent_dim", "sconv_kernel", "gated_norm_rank", "qk_mult", "dense_intermediate_dim"} <= set(report["defaulted"])
    assert report["defaulted"]["dense_intermediate_dim"] == 512 * 4 + 1024  # routed top-k + shared: the MoE's active width


@pytest.mark.parametrize("d,layers,heads,local_kv,global_kv,steps,rung", [
    (512, 6, 4, 1, 1, 6000, None), (768, 8, 6, 1, 1, 11420, "rung1"), (1280, 14, 10, 2, 1, 14000, None)])
def test_h100_ladder_rungs_rerun_at_their_own_width(d, layers, heads, local_kv, global_kv, steps, rung):
    cfg, report = from_logged(h100_rung(d, layers, heads, local_kv, global_kv, steps), f"synthetic-h100-d{d}")
    m = cfg.model
    assert (m.hidden_dim, m.num_layers, m.num_heads, m.local_kv_heads, m.global_kv_heads) == (d, layers, heads, local_kv, global_kv)
    assert (m.latent_dim, m.num_experts, m.num_experts_per_token, m.qb_estimator) == (d // 2, 384, 8, "hist")
    assert cfg.optimizer == "muonh" and cfg.steps == steps and cfg.rung == rung  # a ladder width links to its rung
    assert report["read"]["seq_len"] == "model.max_seq_len"
    proxy = recipe.cpu_proxy(cfg)
    assert proxy.model.num_experts_per_token / proxy.model.num_experts == pytest.approx(8 / 384)
    assert proxy.model.hidden_dim == heads * 32


def test_what_repro_logs_reads_back_as_the_same_run():
    cfg = recipe.cpu_proxy(recipe.true_config("rung2"), steps=40)
    logged = to_logged(cfg, seed=3, data={"phase_weights": [{"a": 1.0}, {"a": 1.0}, {"a": 1.0}]}, compute_dtype="float32",
                       ranks=1)
    flat = flatten(wandb_wrapped(logged))
    assert flat["trainer.num_train_steps"] == 40 and flat["optimizer.lr_schedule"] == "linear"
    assert flat["optimizer.warmup"] == 0.01 and flat["optimizer.decay"] is None and flat["model.num_experts_per_tok"] == 2
    assert logged["data"]["train_weights"][1][0] == round(0.27674 * 40) and logged["marinctl"]["repro_of"] == "rung2"
    back, report = from_logged(wandb_wrapped(logged), "again")
    assert back.model.init_std == cfg.model.init_std  # logged as a number, read back as one
    assert replace(back.model, initializer_std=None) == cfg.model and (back.steps, back.batch_size, back.learning_rate) == (40, cfg.batch_size, cfg.learning_rate)
    assert back.rung == "rung2" and report["seed"] == 3


def test_a_config_without_a_model_is_bad_input():
    with pytest.raises(UsageError, match="no model width"):
        from_logged({"trainer": {"num_train_steps": 3}}, "synthetic-dense")
    bad = isoflop_v2()
    bad["model"]["value"]["num_experts_per_token"] = 64
    with pytest.raises(UsageError, match="top-k 64 of 64"):
        from_logged(bad, "synthetic-bad")
