"""repro's model, piece by piece, against brute force and Marin's published formulas (CPU, seconds)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from repro import accounting, ladder, recipe  # noqa: E402
from repro.model import (Attention, CausalDepthwiseConv, CrossEntropyZLoss, GatedNorm, ModelConfig,  # noqa: E402
                         MoEDecoder, RMSNormFunction, ShortConv, apply_rotary, rotary_tables)
from repro.moe import MoE, qb_beta_hist, qb_beta_topk, top_k_rows  # noqa: E402

torch.set_num_threads(1)


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=2, head_dim=16, local_kv_heads=1,
                global_kv_heads=1, num_experts=16, num_experts_per_token=2, intermediate_dim=16, latent_dim=16,
                shared_expert_intermediate_dim=16, seq_len=16, sliding_window=8, gated_norm_rank=8, qb_hist_bins=2000)
    base.update(kw)
    return ModelConfig(**base)


# --- parameter counts: pinned to the published table -----------------------------------------------

@pytest.mark.parametrize("name", ["rung1", "rung2", "rung3", "rung4", "hero"])
def test_counts_match_the_published_ladder_within_3_percent(name):
    row = ladder.rung(name)
    counts = accounting.param_counts(recipe.true_config(name).model)
    assert counts["total"] == pytest.approx(row["total_params"], rel=0.03)
    assert counts["active"] == pytest.approx(row["active_params"], rel=0.03)
    # Marin's active count leaves out embeddings and lm_head
    assert counts["active"] < counts["active_all"] < counts["total"] - counts["embedding"] - counts["lm_head"]


def test_hero_total_is_marins_exact_count_and_d768_active_rebuilds():
    assert accounting.param_counts(recipe.true_config("hero").model)["total"] == 535_477_106_688  # marin#9277
    # d768's published 61M active (1.6B-A61M: the docstring of Marin's
    # `experiments/grug/moe_hero_ep/launch_scaling_ladder.py`), rebuilt:
    # attention + 8·(3·384²) routed + latent + 2 shared + router, over 8 layers ≈ 60.6M
    d = 768
    per_layer = (2 * d * d + 2 * d * 128) + 8 * 3 * 384**2 + 2 * d * 384 + 2 * 3 * d * 384 + d * 384
    assert accounting.param_counts(recipe.true_config("rung1").model)["active"] == 8 * per_layer == 60_555_264


def test_flops_per_token_reproduce_the_published_run_flops():
    for name in ("rung1", "hero"):
        cfg, row = recipe.true_config(name), ladder.rung(name)
        assert accounting.flops_per_token(cfg.model) * cfg.total_tokens == pytest.approx(row["flops"], rel=0.06)


# --- QB ------------------------------------------------------------------------------------------------

def test_qb_hist_matches_the_exact_quantile_and_topk_is_exact():
    g = torch.Generator().manual_seed(1)
    T, E, K = 4000, 16, 2
    margins = torch.randn(T, E, generator=g) - 1.0
    count = T * K // E
    exact = margins.sort(dim=0, descending=True).values[count - 1]   # the count-th largest per expert
    beta, lo, hi = qb_beta_hist(margins, K, bins=10_000)
    width = (hi - lo) / 10_000
    assert torch.allclose(beta, exact, atol=float(width) * 2)
    assert float(lo) == pytest.approx(float(margins.min())) and float(hi) == pytest.approx(float(margins.max()))
    assert torch.allclose(qb_beta_topk(margins, K), exact, atol=1e-6)
    # with bias −β, each expert wins (about) T·K/E tokens: the margin above β counts the target
    assert ((margins > beta).sum(0) - count).abs().max() <= 2


def _qb_hist_by_the_formula(margins, top_k, bins):
    """Marin's HIST estimator (`_next_qb_betas`, `experiments/grug/moe_hero_ep/train.py`) by the
    formula: a float histogram per expert, counts from the top by flip-cumsum-flip, the last bin
    whose count from the top reaches T·K/E, interpolation inside it."""
    T, E = margins.shape
    lo, hi = margins.min(), margins.max()
    target = torch.tensor(float(T)) * top_k / E
    width = (torch.maximum(hi, lo + 1e-6) - lo) / bins
    idx = ((margins - lo) / width).long().clamp_(0, bins - 1)
    flat = (idx + torch.arange(E) * bins).reshape(-1)
    counts = torch.zeros(E * bins).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.float)).view(E, bins)
    from_top = counts.flip(-1).cumsum(-1).flip(-1)
    b = ((from_top >= target).sum(-1) - 1).clamp(0, bins - 1)
    above, inside = from_top.gather(1, b[:, None]).squeeze(1), counts.gather(1, b[:, None]).squeeze(1)
    return lo + b * width + width * (above - target) / inside.clamp(min=1.0)


@pytest.mark.parametrize("case", ["normal", "ties", "few_tokens", "coarse"])
def test_qb_hist_gives_exactly_the_beta_of_the_written_out_histogram(case):
    g = torch.Generator().manual_seed(3)
    T, E, K, bins = {"normal": (4096, 24, 3, 10_000), "ties": (2048, 16, 2, 10_000), "few_tokens": (9, 8, 2, 10_000),
                     "coarse": (3000, 12, 2, 7)}[case]
    margins = torch.randn(T, E, generator=g) * 3 - 1
    if case == "ties":  # many margins on the same few values: crossings land on bin edges
        margins = margins.round()
    beta, _, _ = qb_beta_hist(margins, K, bins)
    assert torch.equal(beta, _qb_hist_by_the_formula(margins, K, bins))


def test_qb_bias_is_replaced_mean_centred_and_balances_the_next_step():
    torch.manual_seed(0)
    moe = MoE(tiny(qb_estimator="hist")).train()
    x = torch.randn(512, 32) + 0.8 * torch.randn(1, 32)  # a shared direction skews raw routing
    _, stats0 = moe(x)
    beta = moe.pending_beta.clone()
    moe.apply_qb()
    assert torch.allclose(moe.router_bias, -(beta - beta.mean()), atol=1e-6)
    assert abs(float(moe.router_bias.mean())) < 1e-6 and moe.pending_beta is None
    moe.apply_qb()  # nothing pending: a replacement, not an increment
    assert torch.allclose(moe.router_bias, -(beta - beta.mean()), atol=1e-6)
    max_load = 5  # column of STAT_NAMES: busiest expert / fair share
    loads = [float(stats0[max_load])]
    for _ in range(4):
        _, stats = moe(x)
        moe.apply_qb()
        loads.append(float(stats[max_load]))
    assert loads[0] > 3 and loads[-1] < 1.15 and loads == sorted(loads, reverse=True), loads


def test_router_bias_is_a_buffer_without_gradient_and_only_chooses():
    torch.manual_seed(0)
    model = MoEDecoder(tiny())
    assert not any(n.endswith("router_bias") for n, _ in model.named_parameters())
    bias = dict(model.named_buffers())["stacked_blocks.0.mlp.router_bias"]
    bias.copy_(torch.randn(16))
    idx = torch.randint(0, 64, (2, 16))
    loss, _ = model(idx, idx)
    loss.backward()
    assert bias.grad is None and model.stacked_blocks[0].mlp.router.grad.abs().sum() > 0


@pytest.mark.parametrize("k", [1, 3, 4, 6])
def test_route_selection_picks_what_topk_picks(k):
    x = torch.randn(500, 24, generator=torch.Generator().manual_seed(k))
    values, ids = top_k_rows(x, k)
    want = x.topk(k, dim=-1)
    assert torch.equal(values, want.values) and torch.equal(ids, want.indices)


def test_capacity_drops_the_overflow_and_counts_it():
    torch.manual_seed(0)
    moe = MoE(tiny(num_experts=8, capacity_factor=1.0)).train()
    with torch.no_grad():
        moe.router.zero_()
        moe.router[:, 0] = 1.0  # every token prefers experts 0 and 1
        moe.router[:, 1] = 0.5
    _, stats = moe(torch.ones(64, 32))
    C = math.ceil(64 * 2 / 8)
    assert float(stats[0]) == 2 * (64 - C) and float(stats[1]) == 128  # dropped, assignments


def test_combine_weights_are_renormalised_sigmoids_summing_to_2_5():
    torch.manual_seed(0)
    cfg = tiny(num_experts=4, capacity_factor=4.0, latent_dim=None, intermediate_dim=8)
    moe = MoE(cfg).eval()
    x = torch.randn(5, 32)
    out, _ = moe(x)
    logits = x @ moe.router
    ids = logits.topk(2, -1).indices
    w = torch.sigmoid(logits.gather(1, ids))
    w = w / w.sum(-1, keepdim=True) * 2.5
    e = moe.expert_mlp
    expected = torch.zeros_like(out)
    for t in range(5):
        for k in range(2):
            i = ids[t, k]
            h = torch.nn.functional.silu(x[t] @ e.w_gate[i]) * (x[t] @ e.w_up[i])
            expected[t] += w[t, k] * (h @ e.w_down[i])
    assert torch.allclose(out, expected, atol=1e-5)


# --- attention, norms, convs ------------------------------------------------------------------------------

def test_layers_alternate_local_and_global_and_global_layers_have_no_rope():
    cfg = tiny(num_layers=6, global_every=4, local_kv_heads=2, global_kv_heads=1, num_heads=4)
    layers = [Attention(cfg, i) for i in range(6)]
    assert [a.is_global for a in layers] == [False, False, False, True, False, True]
    assert [a.n_kv for a in layers] == [2, 2, 2, 1, 2, 1] and not layers[3].rotate and layers[0].rotate
    assert layers[0].w_k.shape == (32, 2 * 16)  # kv heads stored once, the max of local/global


def test_half_rope_rotates_only_the_first_half_of_each_head():
    cfg = tiny(head_dim=16)
    cos, sin = rotary_tables(cfg)
    x = torch.randn(1, 16, 2, 16)
    y = apply_rotary(x, cos, sin)
    assert torch.equal(y[..., 8:], x[..., 8:]) and not torch.allclose(y[..., :8], x[..., :8])
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation


def test_attention_gate_starts_at_one_and_xsa_removes_the_own_value_direction():
    torch.manual_seed(0)
    cfg = tiny(num_layers=1, sconv_kernel=0, num_heads=2, local_kv_heads=2, global_kv_heads=2)
    attn = Attention(cfg, 0)
    assert torch.count_nonzero(attn.attn_gate) == 0  # 2·σ(0) = 1
    with torch.no_grad():
        attn.w_o.copy_(torch.eye(32))  # read the per-head outputs straight through w_o
    x = torch.randn(2, 16, 32)
    window = torch.ones(16, 16, dtype=torch.bool).tril()
    y = attn(x, rotary_tables(cfg), window).view(2, 16, 2, 16)
    v = (x @ attn.w_v).view(2, 16, 2, 16)
    cos = (y * v).sum(-1) / (y.norm(dim=-1) * v.norm(dim=-1))
    assert cos[:, 1:].abs().max() < 1e-4  # every head's output is orthogonal to its own value (XSA) …
    assert y[:, 0].norm() < 1e-3 * v[:, 0].norm()  # … so the first token, which sees only itself, outputs ~0
    with torch.no_grad():
        attn.attn_gate.copy_(torch.randn(32, 2))  # the headwise gate scales each head by 2·σ(x·attn_gate)
    gate = 2 * torch.sigmoid(x @ attn.attn_gate)
    assert torch.allclose(attn(x, rotary_tables(cfg), window).view(2, 16, 2, 16), y * gate[..., None], atol=1e-5)


def _attention_by_the_formula(attn, x, cfg, layer_is_global):
    """Attention written the plain way: repeat kv heads, explicit masked softmax, XSA, gate, w_o."""
    B, S, _ = x.shape
    H, M, Hd = cfg.num_heads, cfg.stored_kv_heads, cfg.head_dim
    G = cfg.global_kv_heads if layer_is_global else cfg.local_kv_heads
    q = (x @ attn.w_q).view(B, S, H, Hd)
    k = attn.sconv_k(x @ attn.w_k).view(B, S, M, Hd)[:, :, :G]
    v = (x @ attn.w_v).view(B, S, M, Hd)[:, :, :G]
    q, k = [torch.nn.functional.rms_norm(t, (Hd,), eps=1e-6) for t in (q, k)]
    if not layer_is_global:
        cos, sin = rotary_tables(cfg)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    q, k, v = q.transpose(1, 2) * cfg.qk_mult, k.transpose(1, 2), v.transpose(1, 2)
    k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
    i = torch.arange(S)
    allowed = (i[None, :] <= i[:, None]) & (layer_is_global | (i[:, None] - i[None, :] < cfg.sliding_window))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(Hd)).masked_fill(~allowed, float("-inf"))
    y = scores.softmax(-1) @ v
    y = y - (y * v).sum(-1, keepdim=True) / (v.pow(2).sum(-1, keepdim=True) + 1e-6) * v
    y = y * 2 * torch.sigmoid(x @ attn.attn_gate).transpose(1, 2).unsqueeze(-1)
    return y.transpose(1, 2).reshape(B, S, H * Hd) @ attn.w_o


@pytest.mark.parametrize("layer", [0, 3])  # a local (windowed, rotated) layer and a global one
def test_attention_matches_the_plain_formula_forward_and_backward(layer):
    torch.manual_seed(0)
    cfg = tiny(num_layers=4, num_heads=4, local_kv_heads=2, global_kv_heads=1, seq_len=40, sliding_window=12)
    attn = Attention(cfg, layer).double()
    with torch.no_grad():
        attn.attn_gate.normal_()
        attn.sconv_k.weight.normal_()
    x = torch.randn(3, 40, 32, dtype=torch.float64, requires_grad=True)
    window = MoEDecoder(cfg).window_mask
    rope = tuple(t.double() for t in rotary_tables(cfg))
    y = attn(x, rope, window)
    ref = _attention_by_the_formula(attn, x, cfg, attn.is_global)
    assert torch.allclose(y, ref, atol=1e-10)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, [x, *attn.parameters()], g)
    want = torch.autograd.grad(ref, [x, *attn.parameters()], g)
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-9)


def test_short_conv_is_causal_and_identity_at_init():
    conv = ShortConv(3, 4)
    x = torch.randn(2, 10, 3)
    assert torch.equal(conv(x), x)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(4, 3))
    y = conv(x)
    x2 = x.clone()
    x2[:, 6:] += 1.0  # change the future: positions before 6 must not move
    assert torch.allclose(conv(x2)[:, :6], y[:, :6])
    t = 7
    expected = sum(conv.weight[lag] * x[:, t - lag] for lag in range(4))
    assert torch.allclose(y[:, t], expected, atol=1e-6)


def test_short_conv_hand_written_backward_matches_autograd_of_the_formula():
    torch.manual_seed(0)
    for S in (10, 2):  # a sequence longer and one shorter than the kernel
        x = torch.randn(2, S, 6, dtype=torch.float64)[..., :5].requires_grad_()  # a strided view, as k's slice is
        w = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x_, w_: CausalDepthwiseConv.apply(x_, w_), (x, w))
        brute = sum(w[lag] * torch.nn.functional.pad(x[:, :S - lag], (0, 0, lag, 0)) for lag in range(min(4, S)))
        assert torch.allclose(CausalDepthwiseConv.apply(x, w), brute)


@pytest.mark.parametrize("gain", [True, False])
def test_rms_norm_hand_written_backward_matches_autograd_of_the_formula(gain):
    torch.manual_seed(0)
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True) if gain else None
    inputs = (x, w) if gain else (x,)
    assert torch.autograd.gradcheck(lambda *a: RMSNormFunction.apply(a[0], a[1] if gain else None, 1e-5), inputs)
    want = torch.nn.functional.rms_norm(x, (8,), w, 1e-5)
    assert torch.allclose(RMSNormFunction.apply(x, w, 1e-5), want, atol=1e-12)
    x32 = x.detach().float().to(torch.bfloat16)  # low-precision input: fp32 statistics, output in the input's dtype
    out = RMSNormFunction.apply(x32, None, 1e-5)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), torch.nn.functional.rms_norm(x32.float(), (8,), None, 1e-5), atol=1e-2)


def test_gated_norm_is_x_times_sigmoid_of_its_low_rank_gate():
    g = GatedNorm(8, 4, std=0.5)
    x = torch.randn(3, 8)
    gate = torch.sigmoid(torch.nn.functional.silu(x @ g.w_down) @ g.w_up)
    assert torch.allclose(g(x), x * gate)


def test_fused_cross_entropy_with_z_loss_matches_autograd():
    torch.manual_seed(0)
    logits = torch.randn(40, 30, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 30, (40,))
    loss, ce, z = CrossEntropyZLoss.apply(logits, targets, 1e-2)
    ref_ce = torch.nn.functional.cross_entropy(logits, targets)
    ref = ref_ce + 1e-2 * torch.logsumexp(logits, -1).pow(2).mean()
    assert loss.item() == pytest.approx(ref.item()) and ce.item() == pytest.approx(ref_ce.item())
    assert torch.autograd.gradcheck(lambda lg: CrossEntropyZLoss.apply(lg, targets, 1e-2)[0], (logits,))


def test_parameter_paths_follow_marins_tree():
    names = {n for n, _ in MoEDecoder(tiny(num_layers=1)).named_parameters()}
    for path in ("token_embed", "embed_norm.weight", "embed_gated_norm.w_down", "stacked_blocks.0.rms_attn.weight",
                 "stacked_blocks.0.attn_gated_norm.w_up", "stacked_blocks.0.attn.w_q", "stacked_blocks.0.attn.attn_gate",
                 "stacked_blocks.0.attn.sconv_k.weight", "stacked_blocks.0.sconv_attn.weight",
                 "stacked_blocks.0.mlp.router", "stacked_blocks.0.mlp.w_latent_down", "stacked_blocks.0.mlp.latent_norm.weight",
                 "stacked_blocks.0.mlp.expert_mlp.w_gate", "stacked_blocks.0.shared.w_down", "stacked_blocks.0.sconv_mlp.weight",
                 "final_norm.weight", "final_gated_norm.w_up", "lm_head"):
        assert path in names, path
