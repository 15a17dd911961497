"""repro's optimizer groups, Newton–Schulz, hyperball steps, schedule and LR heuristic (CPU, seconds)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from repro import ladder  # noqa: E402
from repro.model import ModelConfig, MoEDecoder  # noqa: E402
from repro.optim import AdamH, MuonH, Optimizers, group_of, heuristic, lr_multiplier, newton_schulz  # noqa: E402

torch.set_num_threads(1)


def tiny_model() -> MoEDecoder:
    torch.manual_seed(0)
    return MoEDecoder(ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=2, head_dim=16, num_experts=8,
                                  num_experts_per_token=2, intermediate_dim=16, latent_dim=16,
                                  shared_expert_intermediate_dim=16, seq_len=16, sliding_window=8, gated_norm_rank=8,
                                  qb_hist_bins=500))


def test_every_parameter_lands_in_the_heros_group():
    groups = {name: group_of(name, p.ndim) for name, p in tiny_model().named_parameters()}
    muonh = {n for n, g in groups.items() if g == "muonh"}
    adam = {n for n, g in groups.items() if g == "adam"}
    assert {n for n, g in groups.items() if g == "adamh"} == {"lm_head"}
    for needle in ("attn.w_q", "attn.w_k", "attn.w_v", "attn.w_o", "expert_mlp.w_gate", "expert_mlp.w_down",
                   "shared.w_up", "mlp.w_latent_down", "mlp.w_latent_up", "attn_gated_norm.w_down", "final_gated_norm.w_up"):
        assert any(n.endswith(needle) for n in muonh), needle
    for needle in ("mlp.router", "attn.attn_gate", "token_embed", "rms_attn.weight", "latent_norm.weight",
                   "sconv_k.weight", "sconv_mlp.weight", "final_norm.weight"):
        assert any(n.endswith(needle) for n in adam), needle
    assert not any("router_bias" in n for n in groups)  # a buffer: QB sets it, no optimizer sees it


def test_newton_schulz_orthogonalises_every_matrix_of_a_batch_alike():
    G = torch.randn(3, 24, 40)
    X = newton_schulz(G, dtype=torch.float32)
    s = torch.linalg.svdvals(X)
    assert s.min() > 0.5 and s.max() < 1.3  # the quintic lands singular values near 1
    one = newton_schulz(G[1], dtype=torch.float32)
    assert torch.allclose(X[1], one, atol=1e-5)
    assert torch.allclose(newton_schulz(G.mT, dtype=torch.float32), X.mT, atol=1e-5)  # transposition commutes


@pytest.mark.parametrize("shape", [(5, 12, 12), (3, 10, 18), (2, 18, 10)])
def test_newton_schulz_is_the_written_out_quintic(shape):
    G = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.mT if shape[1] > shape[2] else G
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(5):
        A = X @ X.mT
        X = a * X + b * A @ X + c * A @ A @ X
    want = X.mT if shape[1] > shape[2] else X
    assert torch.allclose(newton_schulz(G, dtype=torch.float64), want, atol=1e-10)


def test_muonh_and_adamh_keep_each_matrix_norm():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 16, 24))  # 4 stacked expert matrices
    q = torch.nn.Parameter(torch.randn(24, 16))     # same matrix shape transposed: one Newton–Schulz batch
    h = torch.nn.Parameter(torch.randn(64, 16))
    radius_w, radius_q, radius_h = w.detach().norm(dim=(-2, -1)), q.detach().norm(), h.detach().norm()
    start = w.detach().clone()
    muon, adamh = MuonH([w, q], lr=0.05, ns_dtype=torch.float32), AdamH([h], lr=0.05)
    for _ in range(25):
        w.grad, q.grad, h.grad = torch.randn_like(w), torch.randn_like(q), torch.randn_like(h)
        muon.step()
        adamh.step()
    assert torch.allclose(w.detach().norm(dim=(-2, -1)), radius_w, rtol=1e-5)
    assert float(q.detach().norm()) == pytest.approx(float(radius_q), rel=1e-5)
    assert float(h.detach().norm()) == pytest.approx(float(radius_h), rel=1e-5)
    assert not torch.allclose(w.detach(), start, atol=1e-2)  # it moved, on the sphere


def test_optimizers_step_the_groups_at_their_own_lrs():
    model = tiny_model()
    opt = Optimizers(model, "muonh", lr=0.02, adam_lr=0.004, beta1=0.9, beta2=0.95, eps=1e-15, ns_dtype=torch.float32)
    lrs = opt.set_lr(0.5)
    assert lrs == {"learning_rate": 0.01, "adam_lr": 0.002}
    by_type = {type(o).__name__: o.param_groups[0]["lr"] for _, o in opt.all}
    assert by_type == {"MuonH": 0.01, "AdamH": 0.01, "Adam": 0.002}
    adamw = Optimizers(model, "adamw", lr=0.01, adam_lr=0.01, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                       max_grad_norm=1.0)
    (only,) = [o for _, o in adamw.all]
    assert type(only).__name__ == "AdamW" and [g["weight_decay"] for g in only.param_groups] == [0.1, 0.0]


def test_lr_schedule_is_levanters_linear_with_warmup_and_min_ratio():
    total, warm = 1000, 10  # 1 % warm-up
    for step in (0, 3, 9):
        assert lr_multiplier(step, total) == pytest.approx(step / warm)
    for step in (10, 500, 999):
        assert lr_multiplier(step, total) == pytest.approx(1 - 0.95 * (step - warm) / (total - warm))
    assert lr_multiplier(total, total) == pytest.approx(0.05)
    # isoflop-moe-v2's AdamW: warm-up 10 %, flat, then decay over the last 20 % to 0
    assert lr_multiplier(500, 1000, warmup=0.1, min_lr_ratio=0.0, decay=0.2) == 1.0
    assert lr_multiplier(900, 1000, warmup=0.1, min_lr_ratio=0.0, decay=0.2) == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["rung1", "rung2", "rung3", "rung4", "hero"])
def test_heuristic_reproduces_the_ladder_table(name):
    r = ladder.rung(name)
    h = heuristic(r["steps"] * r["tokens_per_step"], r["hidden"], r["tokens_per_step"])
    assert h["adam_lr"] == pytest.approx(r["adam_lr"], rel=0.02)
    assert h["muonh_lr"] == pytest.approx(r["muonh_lr"], rel=0.02)
    assert h["beta2"] == pytest.approx(r["beta2"], rel=1e-3)
    assert h["eps"] == pytest.approx(r["eps"], rel=0.02)
