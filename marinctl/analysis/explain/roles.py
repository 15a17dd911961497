"""What kind of parameter a `params/norm/<leaf>` key measures, from its name and the run config.

Why it matters: parameters move by different rules, so the same norm jump means different
things. In Marin's hero recipe (marin#8435; Marin's `experiments/grug/moe_hero_ep/heuristic.py`)
attention, expert, shared-expert, latent and GatedNorm matrices are trained by **MuonH**,
lm_head by **AdamH** — both end each step with a Frobenius-hyperball projection, so their norm
stays constant and any drift is abnormal. The router, router bias group, attention gate, token
embedding, 1-D norm gains and SConv kernels use **Adam**, whose norms drift freely. The
**router bias** is not trained by gradients at all (`_next_qb_betas` in Marin's
`experiments/grug/moe/train.py`): Quantile Balancing *replaces* it every step from a quantile
of the previous step's router logits, so its norm can jump in one step; a DeepSeek-style
sign rule instead moves each bias by exactly ±γ per step, so ‖b‖ changes by at most γ·√E per
step (DeepSeek-V3, arXiv 2412.19437 §2.1.2) and a bigger jump points to a different rule or a
bug. Buffers (EMA copies, pending QB betas, RoPE tables) are not parameters.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

ADAM, MUONH, ADAMH, HEURISTIC, BUFFER = "adam", "muonh", "adamh", "heuristic", "buffer"
HYPERBALL = (MUONH, ADAMH)

MODULES = ("router_bias", "router", "attention", "routed_experts", "shared_experts", "mlp_other",
           "embeddings", "lm_head", "norm_gains", "other")
MODULE_LABELS = {
    "router_bias": "router bias", "router": "router", "attention": "attention",
    "routed_experts": "routed experts", "shared_experts": "shared experts", "mlp_other": "MLP (latent/dense)",
    "embeddings": "embeddings", "lm_head": "lm_head", "norm_gains": "norm gains", "other": "other",
}

_BUFFER = re.compile(r"(^|[._/])(ema|running_(mean|var)|pending_qb_betas|qb_beta|inv_freq|rope|buffer)s?([._/]|$)", re.I)
_ROUTER_BIAS = re.compile(r"router_bias|moe_bias|expert_bias|e_score_correction_bias|qb_bias", re.I)
_ROUTER = re.compile(r"router", re.I)
_EMBED = re.compile(r"embed", re.I)
_LM_HEAD = re.compile(r"lm_head|unembed|(^|\.)output\.weight$", re.I)
_NORM = re.compile(r"norm|(^|\.)ln_?\w*\.|(^|\.)rms(_\w+)?\.|layernorm|rmsnorm", re.I)  # rms_attn: a gain
_NORM_MATRIX = re.compile(r"norm\w*\.(w_|proj|down|up|gate_proj)", re.I)  # GatedNorm low-rank matrices
_ROUTED = re.compile(r"experts?\b|experts\.|\.expert_", re.I)
_SHARED = re.compile(r"shared", re.I)
_ATTN_GATE = re.compile(r"(attn|attention)_gate(?!d)", re.I)   # not attn_gated_norm (GatedNorm: MuonH)
_ATTN = re.compile(r"attn|attention|self_attn|(^|\.)(w_q|w_k|w_v|w_o|q_proj|k_proj|v_proj|o_proj|wq|wk|wv|wo)(\.|$)", re.I)
_MLP = re.compile(r"mlp|latent|ffn|feed_forward|w_gate|w_up|w_down|gate_proj|up_proj|down_proj", re.I)
_SCONV = re.compile(r"sconv|conv", re.I)
_LAYER = re.compile(r"(?:^|\.)(?:stacked_blocks|blocks|layers|layer|h|block)\.(\d+)(?:\.|$)")
_ANY_INDEX = re.compile(r"\.(\d+)\.")


@dataclass(frozen=True)
class LeafRole:
    """One parameter leaf: its module, layer (None: global or whole stack) and update rule."""

    path: str
    module: str
    layer: int | None
    role: str

    @property
    def hyperball(self) -> bool:
        return self.role in HYPERBALL


def leaf_path(key: str) -> str:
    """`params/norm/stacked_blocks.3.mlp.router_bias` -> `stacked_blocks.3.mlp.router_bias`."""
    for prefix in ("params/norm/", "grad/norm/", "updates/norm/"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


@lru_cache(maxsize=65536)
def module_of(path: str) -> str:
    if _ROUTER_BIAS.search(path):
        return "router_bias"
    if _ROUTER.search(path):
        return "router"
    if _LM_HEAD.search(path):
        return "lm_head"
    if _NORM.search(path):              # before embeddings: embed_gated_norm's matrices are MuonH's
        return "norm_gains"
    if _EMBED.search(path):
        return "embeddings"
    if _SHARED.search(path):
        return "shared_experts"
    if _ROUTED.search(path):
        return "routed_experts"
    if _ATTN.search(path) or _ATTN_GATE.search(path):
        return "attention"
    if _MLP.search(path):
        return "mlp_other"
    return "other"


def layer_of(path: str) -> int | None:
    m = _LAYER.search(path) or _ANY_INDEX.search(path)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class RecipeRoles:
    """Which optimizer family a run used and how its router bias is set (from its config)."""

    optimizer: str            # 'muonh' | 'adamh' | 'adam'
    bias_rule: str            # 'qb' | 'sign' | 'none'
    bias_rate: float | None   # γ of a sign rule, or the QB damping when set
    num_experts: int | None
    source: str               # how we know: 'config' or 'default for Marin MoE runs'

    def role(self, path: str) -> LeafRole:
        return _role(self, path)

    def _role(self, path: str) -> LeafRole:
        module = module_of(path)
        layer = layer_of(path)
        if _BUFFER.search(path):
            role = BUFFER
        elif module == "router_bias":
            role = HEURISTIC if self.bias_rule != "none" else ADAM
        elif self.optimizer == ADAM:
            role = ADAM
        elif module in ("router", "embeddings") or _ATTN_GATE.search(path) or _SCONV.search(path):
            role = ADAM
        elif module == "norm_gains":
            role = self.optimizer if _NORM_MATRIX.search(path) else ADAM
        elif module == "lm_head":
            role = ADAMH
        else:
            role = self.optimizer
        return LeafRole(path, module, layer, role)

    def sign_rule_bound(self, steps: int) -> float | None:
        """Largest ‖b‖ change a sign rule allows over `steps` steps: γ·√E per step."""
        if self.bias_rule != "sign" or not self.bias_rate or not self.num_experts:
            return None
        return self.bias_rate * math.sqrt(self.num_experts) * max(steps, 1)


@lru_cache(maxsize=65536)
def _role(recipe: RecipeRoles, path: str) -> LeafRole:
    """RecipeRoles.role, cached: a hero run has ~600 leaves and every pass asks about each."""
    return recipe._role(path)


def _flat(config: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(config, dict):
        for k, v in config.items():
            out.update(_flat(v, f"{prefix}{k}."))
    else:
        out[prefix.rstrip(".")] = config
    return out


def _find(flat: dict[str, Any], *names: str) -> Any:
    for key, value in flat.items():
        last = key.rsplit(".", 1)[-1].lower()
        if last in names:
            return value
    return None


def recipe_roles(run: dict[str, Any] | None) -> RecipeRoles:
    """Read the optimizer family and router-bias rule from a stored run (config JSON, group).

    Marin's MoE recipes from v16 on use QB (Marin's `experiments/grug/moe/README.md`); the hero
    and ladder use MuonH (marin#8435).
    Without config evidence, runs in Marin's MoE groups get those defaults (labelled so).
    """
    run = run or {}
    config = run.get("config") or {}
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            config = {}
    flat = _flat(config)
    text = json.dumps(config, default=str).lower()
    group = (run.get("run_group") or "") + " " + (run.get("run_id") or "")
    marin_moe = bool(re.search(r"moe|hero|ladder", group, re.I))
    source = "config"
    if "muonh" in text or _find(flat, "adam_lr") is not None:
        optimizer = MUONH
    elif "adamh" in text:
        optimizer = ADAMH
    elif marin_moe:
        optimizer, source = MUONH, "default for Marin MoE runs"
    else:
        optimizer = ADAM
    experts = _find(flat, "num_experts", "n_routed_experts", "num_routed_experts", "experts")
    experts = int(experts) if isinstance(experts, (int, float)) else None
    sign_rate = _find(flat, "router_bias_update_speed", "bias_update_speed", "bias_update_rate")
    damping = _find(flat, "qb_bias_damping")
    if "qb" in text and ("qb_" in text or "quantile" in text):
        rule, rate = "qb", damping
    elif isinstance(sign_rate, (int, float)) and sign_rate > 0:
        rule, rate = "sign", float(sign_rate)
    elif marin_moe or experts:
        rule, rate = "qb", damping
        source = source if source != "config" or "qb" in text else "default for Marin MoE runs"
    else:
        rule, rate = "none", None
    return RecipeRoles(optimizer, rule, rate if isinstance(rate, (int, float)) else None, experts, source)
