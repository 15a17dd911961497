"""CPU training throughput of repro's proxy MoE, side by side with an independent implementation.

Baseline: Hugging Face transformers' Qwen2-MoE (routed top-K experts + a shared expert, GQA) built
from a config object at the proxy's dimensions with random init — nothing is downloaded. It is an
optional bench dependency (`pip install transformers`); without it only repro's figures print.
Both run forward + backward + an optimizer step on the same token batches, in the same process and
thread count. Also printed: this machine's measured fp32 and bf16 matmul peaks and the fraction of
them the proxy reaches (analytic FLOPs: 6·N_active + attention).

    python bench/bench_repro.py [--steps 6] [--threads 2] [--batch 16] [--rung rung1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from repro.model import MoEDecoder, flops_per_token  # noqa: E402
from repro.optim import Optimizers  # noqa: E402
from repro.machine import measure_matmul_peak  # noqa: E402
from repro.rungs import cpu_proxy  # noqa: E402


def median_step_seconds(steppers: dict, batches, rounds: int) -> dict[str, float]:
    """Interleave the contenders step by step (a shared machine's load hits all alike); median s/step."""
    import statistics

    times: dict[str, list[float]] = {k: [] for k in steppers}
    for r in range(rounds + 2):
        x, y = batches[r % len(batches)]
        for name, step in steppers.items():
            t0 = time.perf_counter()
            step(x, y)
            if r >= 2:  # two warm-up rounds
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def repro_step(cfg, autocast: bool, optimizer: str):
    """optimizer "hero": MuonH/AdamH/Adam as repro trains; "adamw": the baseline's optimizer."""
    model = MoEDecoder(cfg.model).train()
    if optimizer == "hero":
        opt = Optimizers(model, cfg.muonh_lr, cfg.adam_lr, cfg.beta2, cfg.eps)
        opt.set_lr(1.0)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        model.apply_qb()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, _ = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def hf_step(cfg, autocast: bool):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    m = cfg.model
    hf_cfg = Qwen2MoeConfig(
        vocab_size=m.vocab_size, hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
        num_key_value_heads=m.local_kv_heads, head_dim=m.head_dim, max_position_embeddings=m.seq_len,
        num_experts=m.n_experts, num_experts_per_tok=m.top_k, moe_intermediate_size=m.expert_dim,
        shared_expert_intermediate_size=m.n_shared * m.shared_dim, intermediate_size=m.n_shared * m.shared_dim,
        decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, output_router_logits=False,
        tie_word_embeddings=False, use_sliding_window=False, attn_implementation="sdpa")
    model = Qwen2MoeForCausalLM(hf_cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=x, labels=y)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rung", default="rung1")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = cpu_proxy(args.rung, batch_size=args.batch)
    S, V = cfg.model.seq_len, cfg.model.vocab_size
    batches = [(torch.randint(0, V, (args.batch, S)), torch.randint(0, V, (args.batch, S))) for _ in range(args.steps + 2)]
    tokens = args.batch * S
    fpt = flops_per_token(cfg.model)

    peak32 = measure_matmul_peak("float32", n=2048, seconds=1.0)
    peak16 = measure_matmul_peak("bfloat16", n=2048, seconds=1.0)
    print(f"machine: {args.threads} threads, matmul peak fp32 {peak32 / 1e9:.0f} GFLOP/s, bf16 {peak16 / 1e9:.0f} GFLOP/s")
    print(f"proxy {cfg.label}: d{cfg.model.d_model} L{cfg.model.n_layers} E{cfg.model.n_experts}/K{cfg.model.top_k} "
          f"vocab {V}, {tokens} tokens/step, {fpt / 1e6:.1f} MFLOP/token (synthetic token ids: speed only)")

    steppers = {}
    for name, autocast in (("fp32", False), ("bf16", True)):
        steppers[f"repro {name} MuonH"] = repro_step(cfg, autocast, "hero")
        steppers[f"repro {name} AdamW"] = repro_step(cfg, autocast, "adamw")
    try:
        import transformers  # noqa: F401
        have_hf = True
    except ImportError:
        have_hf = False
        print("  transformers not installed: no baseline (pip install transformers)")
    if have_hf:
        for name, autocast in (("fp32", False), ("bf16", True)):
            steppers[f"HF Qwen2-MoE {name} AdamW"], n_params = hf_step(cfg, autocast)
        print(f"  HF Qwen2-MoE built from a config at the same dims: {n_params / 1e6:.1f}M params")
    secs = median_step_seconds(steppers, batches, args.steps)
    for label, s in secs.items():
        line = f"  {label:<24} {tokens / s:8,.0f} tok/s  ({s:.2f} s/step, median of {args.steps})"
        if label.startswith("repro"):
            peak = peak16 if "bf16" in label else peak32
            line += f"  {100 * fpt * tokens / s / peak:5.1f}% of its dtype's matmul peak, {100 * fpt * tokens / s / peak16:4.1f}% of bf16 peak"
        print(line)
    if have_hf:
        for name in ("fp32", "bf16"):
            same = secs[f"HF Qwen2-MoE {name} AdamW"] / secs[f"repro {name} AdamW"]
            full = secs[f"HF Qwen2-MoE {name} AdamW"] / secs[f"repro {name} MuonH"]
            print(f"  ratio repro / HF, {name}: {same:.2f}x with the same optimizer (AdamW), "
                  f"{full:.2f}x with repro's MuonH step (target >= 1.5x)")

if __name__ == "__main__":
    main()
