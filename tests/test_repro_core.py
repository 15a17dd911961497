"""repro's model and optimizer pieces, checked against brute force and formulas (CPU, seconds)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from repro.model import MoE, MoEDecoder, ModelConfig, qb_betas  # noqa: E402
from repro.optim import AdamH, MuonH, Optimizers, group_of, heuristic, lr_multiplier, newton_schulz  # noqa: E402

torch.set_num_threads(2)


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=2, head_dim=16, local_kv_heads=1, global_kv_heads=1,
                n_experts=16, top_k=2, expert_dim=16, n_shared=2, shared_dim=16, seq_len=16, sliding_window=8)
    base.update(kw)
    return ModelConfig(**base)


def test_qb_beta_equals_brute_force_quantile():
    g = torch.Generator().manual_seed(1)
    T, E, K = 200, 16, 2
    logits = torch.randn(T, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.3
    biased = logits + bias
    alpha = biased.sort(dim=1, descending=True).values[:, K]  # (K+1)-th largest biased logit
    beta = qb_betas(logits, alpha, K)
    count = T * K // E
    for e in range(E):
        margins = sorted((logits[t, e] - alpha[t]).item() for t in range(T))
        assert beta[e].item() == pytest.approx(margins[-count], abs=1e-6)  # the count-th largest


def test_qb_bias_is_replaced_mean_centred_and_balances_next_step():
    torch.manual_seed(0)
    moe = MoE(tiny(n_experts=16, top_k=2)).train()
    x = torch.randn(512, 32) + 0.5 * torch.randn(1, 32)  # a shared direction skews raw routing
    moe(x)
    beta = moe.pending_beta.clone()
    moe.apply_qb()
    assert torch.allclose(moe.router_bias, -(beta - beta.mean()), atol=1e-6)
    assert abs(moe.router_bias.mean().item()) < 1e-6
    assert moe.pending_beta is None
    moe.apply_qb()  # nothing pending: the bias stays (a replacement, not an increment)
    assert torch.allclose(moe.router_bias, -(beta - beta.mean()), atol=1e-6)
    moe.router_bias.zero_()
    loads = []
    for _ in range(5):
        _, stats = moe(x)
        loads.append(stats["max_load"].item())
        moe.apply_qb()
    assert loads[0] > 1.5 and loads[-1] < 1.35, loads  # QB brings the busiest expert near its fair share


def test_router_bias_is_a_buffer_without_gradient():
    torch.manual_seed(0)
    model = MoEDecoder(tiny())
    names = dict(model.named_parameters())
    assert not any(n.endswith("router_bias") for n in names)
    buffers = dict(model.named_buffers())
    assert "stacked_blocks.0.mlp.router_bias" in buffers
    buffers["stacked_blocks.0.mlp.router_bias"].copy_(torch.randn(16))
    idx = torch.randint(0, 64, (2, 16))
    loss, _ = model(idx, idx)
    loss.backward()
    assert buffers["stacked_blocks.0.mlp.router_bias"].grad is None
    assert names["stacked_blocks.0.mlp.router"].grad.abs().sum() > 0
    opt = Optimizers(model, 0.01, 0.001, 0.95, 1e-15)
    optimised = {id(p) for o in opt.all for g in o.param_groups for p in g["params"]}
    assert id(buffers["stacked_blocks.0.mlp.router_bias"]) not in optimised


def test_optimizer_groups_follow_the_hero():
    assert group_of("lm_head") == "adamh"
    assert group_of("stacked_blocks.3.attn.w_q") == "muonh"
    assert group_of("stacked_blocks.3.mlp.w_down") == "muonh"
    assert group_of("stacked_blocks.3.mlp.shared_w_up") == "muonh"
    assert group_of("stacked_blocks.3.mlp.router") == "adam"
    assert group_of("token_embed") == "adam"
    assert group_of("stacked_blocks.0.attn_norm.weight") == "adam"


def test_newton_schulz_orthogonalises():
    G = torch.randn(3, 32, 48)
    X = newton_schulz(G).float()
    s = torch.linalg.svdvals(X)
    assert s.min() > 0.5 and s.max() < 1.3  # the quintic lands singular values near 1, not exactly


def test_muonh_and_adamh_keep_each_matrix_norm():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 16, 24))  # 4 stacked expert matrices
    h = torch.nn.Parameter(torch.randn(64, 16))
    radius_w = w.detach().norm(dim=(-2, -1)).clone()
    radius_h = h.detach().norm().clone()
    muon, adamh = MuonH([w], lr=0.05), AdamH([h], lr=0.05)
    for _ in range(25):
        w.grad, h.grad = torch.randn_like(w), torch.randn_like(h)
        muon.step()
        adamh.step()
    assert torch.allclose(w.detach().norm(dim=(-2, -1)), radius_w, rtol=1e-5)
    assert h.detach().norm().item() == pytest.approx(radius_h.item(), rel=1e-5)
    assert not torch.allclose(w.detach().norm(dim=(-2, -1)), torch.zeros(4))


def test_lr_schedule_matches_the_formula():
    total, warm = 1000, 10  # 1 % warm-up
    for step in (0, 3, 9):
        assert lr_multiplier(step, total) == pytest.approx(step / warm)
    for step in (10, 500, 999):
        assert lr_multiplier(step, total) == pytest.approx(1 - 0.95 * (step - warm) / (total - warm))
    assert lr_multiplier(total, total) == pytest.approx(0.05)


@pytest.mark.parametrize("name", ["rung1", "rung2", "rung3", "rung4", "hero"])
def test_heuristic_reproduces_the_ladder_table(name):
    from marinctl.rungs import rung

    r = rung(name)
    h = heuristic(r["steps"] * r["tokens_per_step"], r["hidden"], r["tokens_per_step"])
    assert h["adam_lr"] == pytest.approx(r["adam_lr"], rel=0.02)
    assert h["muonh_lr"] == pytest.approx(r["muonh_lr"], rel=0.02)
    assert h["beta2"] == pytest.approx(r["beta2"], rel=1e-3)
    assert h["eps"] == pytest.approx(r["eps"], rel=0.02)


def test_capacity_accounting_counts_drops():
    torch.manual_seed(0)
    cfg = tiny(n_experts=8, top_k=2, capacity_factor=1.0)
    moe = MoE(cfg).train()
    with torch.no_grad():
        moe.router.zero_()
        moe.router[:, 0] = 1.0  # every token prefers expert 0
        moe.router[:, 1] = 0.5
    x = torch.ones(64, 32)
    _, stats = moe(x)
    N, C = 64 * 2, math.ceil(64 * 2 / 8)
    # experts 0 and 1 each get all 64 tokens, keep C = 16: 2 · (64 − 16) dropped
    assert stats["dropped"].item() == 2 * (64 - C)
    assert stats["assignments"].item() == N


def test_sliding_window_and_global_layers():
    cfg = tiny(n_layers=8, global_every=4)
    assert [cfg.is_global(i) for i in range(8)] == [False, False, False, True, False, False, False, True]
    cfg = tiny(n_layers=6, global_every=4)
    assert [i for i in range(6) if cfg.is_global(i)] == [3, 5]  # every 4th and the last
    model = MoEDecoder(tiny())
    m = model.local_mask
    assert m[10, 3] and not m[10, 2] and not m[3, 4]  # window 8, causal

