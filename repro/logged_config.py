"""A run's config under Levanter's names, both ways: what repro logs, and how repro reads a logged run.

Logging (`to_logged`): the W&B config holds the run's own schedule facts under the nested names
Levanter writes (`trainer.num_train_steps`, `trainer.train_batch_size`, `model.hidden_dim`,
`optimizer.learning_rate`, `optimizer.warmup`, …), the data phases as Levanter's staged mixture
`data.train_weights = [[start_step, {domain: weight}], …]`, and `marinctl.repro_of` (the rung, or
the logged run it reruns) so the store links the run to it as an overlay — never as a rung itself.

Reading (`from_logged`): any run's logged config (a W&B config, values possibly wrapped as
`{"value": …}`, keys nested or dotted; Levanter/grug names and the HF aliases they export) becomes a
`TrainConfig` of that run as it was: widths, layers, heads, experts, top-k, shared and dense layers,
sequence, batch, steps, LRs, betas, warm-up, schedule, optimizer kind. Every field says where it came
from: `read` (the logged key) or `defaulted` (the hero recipe's value, because the config lacks it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from repro.errors import UsageError
from repro.model import ModelConfig
from repro.recipe import TrainConfig, _eval_every

# field → logged names to look for, most specific first ("section.name" or a bare name anywhere)
MODEL_NAMES: dict[str, tuple[str, ...]] = {
    "hidden_dim": ("model.hidden_dim", "hidden_dim", "hidden_size", "d_model"),
    "intermediate_dim": ("model.intermediate_dim", "intermediate_dim", "moe_intermediate_size", "expert_intermediate_dim"),
    "num_layers": ("model.num_layers", "num_layers", "num_hidden_layers", "n_layers"),
    "num_heads": ("model.num_heads", "num_heads", "num_attention_heads"),
    "head_dim": ("model.head_dim", "head_dim"),
    "local_kv_heads": ("model.local_kv_heads", "local_kv_heads"),
    "global_kv_heads": ("model.global_kv_heads", "global_kv_heads"),
    "num_experts": ("model.num_experts", "num_experts", "n_routed_experts"),
    "num_experts_per_token": ("model.num_experts_per_tok", "model.num_experts_per_token", "num_experts_per_tok",
                              "num_experts_per_token", "top_k"),
    "num_shared_experts": ("model.num_shared_experts", "num_shared_experts", "n_shared_experts"),
    "shared_expert_intermediate_dim": ("model.shared_expert_intermediate_dim", "shared_expert_intermediate_dim",
                                       "shared_expert_intermediate_size"),
    "num_dense_layers": ("model.num_dense_layers", "num_dense_layers", "num_leading_dense_layers",
                         "first_k_dense_replace", "dense_layers"),
    "dense_intermediate_dim": ("model.dense_intermediate_dim", "dense_intermediate_dim"),
    "latent_dim": ("model.latent_dim", "latent_dim"),
    "vocab_size": ("model.vocab_size", "vocab_size"),
    "seq_len": ("model.seq_len", "model.max_seq_len", "seq_len", "max_seq_len", "max_position_embeddings"),
    "sliding_window": ("model.sliding_window", "sliding_window"),
    "global_every": ("model.global_every", "global_every"),
    "capacity_factor": ("model.capacity_factor", "capacity_factor"),
    "qk_mult": ("model.qk_mult", "qk_mult"),
    "sconv_kernel": ("model.sconv_kernel", "sconv_kernel"),
    "gated_norm_rank": ("model.gated_norm_rank", "gated_norm_rank"),
    "qb_estimator": ("model.qb_estimator", "qb_estimator"),
    "qb_hist_bins": ("model.qb_hist_bins", "qb_hist_bins"),
    "z_loss_weight": ("model.z_loss_weight", "z_loss_weight", "logit_z_loss_weight"),
    "initializer_std": ("model.initializer_std", "initializer_std", "initializer_range"),
}
TRAIN_NAMES: dict[str, tuple[str, ...]] = {
    "steps": ("trainer.num_train_steps", "num_train_steps"),
    "batch_size": ("trainer.train_batch_size", "train_batch_size", "global_batch_size", "batch_size"),
    "optimizer": ("optimizer.type", "optimizer._type", "optimizer.name", "optimizer_type"),
    "learning_rate": ("optimizer.learning_rate", "learning_rate", "lr"),
    "adam_lr": ("optimizer.adam_lr", "adam_lr"),
    "beta1": ("optimizer.beta1", "beta1"),
    "beta2": ("optimizer.beta2", "beta2"),
    "epsilon": ("optimizer.epsilon", "epsilon", "eps"),
    "warmup": ("optimizer.warmup", "warmup", "warmup_ratio"),
    "decay": ("optimizer.decay", "decay"),
    "min_lr_ratio": ("optimizer.min_lr_ratio", "min_lr_ratio"),
    "lr_schedule": ("optimizer.lr_schedule", "lr_schedule"),
    "weight_decay": ("optimizer.weight_decay", "weight_decay"),
    "max_grad_norm": ("optimizer.max_grad_norm", "max_grad_norm"),
}
SEED_NAMES = ("trainer.seed", "seed")


# --- logging --------------------------------------------------------------------------------------

def to_logged(cfg: TrainConfig, *, seed: int, data: dict[str, Any], compute_dtype: str, ranks: int,
              threads: int | None = None) -> dict[str, Any]:
    m = cfg.model
    phases = [[start, weights] for start, weights in zip(cfg.phase_steps(), data.get("phase_weights", []))]
    return {
        "trainer": {"num_train_steps": cfg.steps, "train_batch_size": cfg.batch_size, "seed": seed,
                    "mp": f"p=f32,c={compute_dtype}", "num_processes": ranks, "cpu_threads": threads,
                    "watch_interval": cfg.watch_interval,
                    "steps_per_eval": cfg.eval_every},
        "model": {"type": "hero", "seq_len": m.seq_len, "hidden_dim": m.hidden_dim,
                  "intermediate_dim": m.intermediate_dim, "num_layers": m.num_layers, "num_heads": m.num_heads,
                  "num_kv_heads": m.stored_kv_heads, "local_kv_heads": m.local_kv_heads,
                  "global_kv_heads": m.global_kv_heads, "head_dim": m.head_dim, "num_experts": m.num_experts,
                  "num_experts_per_tok": m.num_experts_per_token, "num_shared_experts": m.num_shared_experts,
                  "shared_expert_intermediate_dim": m.shared_expert_intermediate_dim, "latent_dim": m.latent_dim,
                  "num_dense_layers": m.num_dense_layers, "dense_intermediate_dim": m.dense_intermediate_dim,
                  "vocab_size": m.vocab_size, "sliding_window": m.sliding_window, "global_every": m.global_every,
                  "capacity_factor": m.capacity_factor, "qk_mult": m.qk_mult, "rope": m.rope,
                  "sconv": bool(m.sconv_kernel), "sconv_kernel": m.sconv_kernel, "sconv_sites": list(m.sconv_sites),
                  "gated_norm_rank": m.gated_norm_rank, "attn_gate": m.attn_gate, "xsa": m.xsa,
                  "qb_estimator": m.qb_estimator.upper(), "qb_hist_bins": m.qb_hist_bins,
                  "z_loss_weight": m.z_loss_weight, "routing_renorm_sum": m.routing_renorm_sum,
                  "initializer_std": m.init_std},
        "optimizer": {"type": cfg.optimizer, "learning_rate": cfg.learning_rate, "adam_lr": cfg.adam_lr,
                      "beta1": cfg.beta1, "beta2": cfg.beta2, "epsilon": cfg.epsilon, "warmup": cfg.warmup,
                      "decay": cfg.decay, "min_lr_ratio": cfg.min_lr_ratio, "lr_schedule": cfg.lr_schedule,
                      "weight_decay": cfg.weight_decay, "max_grad_norm": cfg.max_grad_norm,
                      "momentum": 0.95 if cfg.optimizer == "muonh" else None},
        "data": {"train_weights": phases, **{k: v for k, v in data.items() if k != "phase_weights"}},
        "marinctl": {"repro_of": cfg.rung or cfg.source_run, "rung": cfg.rung, "width": cfg.width,
                     "kind": cfg.kind, "label": cfg.label, "proxy_rule": cfg.proxy_rule,
                     "source_run": cfg.source_run, "warmup_steps": cfg.warmup_steps,
                     "phase_steps": cfg.phase_steps(), "tokens_per_step": cfg.tokens_per_step},
    }


# --- reading ----------------------------------------------------------------------------------------

def _unwrap(v: Any) -> Any:
    if isinstance(v, dict) and set(v) <= {"value", "desc"} and "value" in v:
        return _unwrap(v["value"])
    return v


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"hidden_dim": 768}} and {"model.hidden_dim": {"value": 768}} both → {"model.hidden_dim": 768}."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        value = _unwrap(value)
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _lookup(flat: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any] | None:
    for name in names:
        if name in flat and flat[name] is not None:
            return name, flat[name]
    for name in names:  # a bare name under any section (e.g. `config.model.hidden_dim`)
        if "." in name:
            continue
        for key, value in flat.items():
            if key.rsplit(".", 1)[-1] == name and value is not None:
                return key, value
    return None


def _optimizer_kind(raw: Any) -> str:
    text = str(raw).lower()
    if "muon" in text:
        return "muonh"
    if "adamh" in text:
        return "adamh"
    return "adamw"


def from_logged(config: dict[str, Any], run: str, *, hero_rung: str = "rung1") -> tuple[TrainConfig, dict[str, Any]]:
    """A logged run's own config as a TrainConfig, plus which fields were read and which defaulted."""
    from repro.ladder import rungs
    from repro.recipe import true_config

    flat = flatten(config)
    base = true_config(hero_rung)
    read: dict[str, str] = {}
    defaulted: dict[str, Any] = {}

    def get(field_name: str, names: tuple[str, ...], default: Any, cast=None) -> Any:
        found = _lookup(flat, names)
        if found is None:
            defaulted[field_name] = default
            return default
        key, value = found
        try:
            value = cast(value) if cast else value
        except (TypeError, ValueError):
            raise UsageError(f"{run}: logged {key} = {value!r} is not a valid {field_name}",
                             "pass a config with Levanter's names (see --dry-run --json of a rung)") from None
        read[field_name] = key
        return value

    if _lookup(flat, MODEL_NAMES["hidden_dim"]) is None or _lookup(flat, MODEL_NAMES["num_layers"]) is None:
        raise UsageError(f"{run}: its logged config names no model width and depth (hidden_dim, num_layers)",
                         "rerun a ladder rung instead: marinctl repro rung1 --cpu")
    bm = base.model
    hidden = get("hidden_dim", MODEL_NAMES["hidden_dim"], bm.hidden_dim, int)
    heads = get("num_heads", MODEL_NAMES["num_heads"], max(1, hidden // 128), int)
    kv = _lookup(flat, ("model.num_kv_heads", "num_kv_heads", "num_key_value_heads"))
    kv_default = int(kv[1]) if kv else max(1, heads // 4)
    model_kw: dict[str, Any] = {"hidden_dim": hidden, "num_heads": heads}
    casts = {"qb_estimator": lambda v: str(v).rsplit(".", 1)[-1].lower(), "capacity_factor": float, "qk_mult": float,
             "z_loss_weight": float, "initializer_std": float, "latent_dim": lambda v: None if v is None else int(v)}
    defaults = {
        "head_dim": hidden // heads, "local_kv_heads": kv_default, "global_kv_heads": kv_default,
        "intermediate_dim": hidden // 2, "latent_dim": hidden // 2, "shared_expert_intermediate_dim": hidden // 2,
        "num_layers": bm.num_layers, "initializer_std": 0.5 / hidden ** 0.5,
    }
    for name, names in MODEL_NAMES.items():
        if name in ("hidden_dim", "num_heads"):
            continue
        default = defaults.get(name, getattr(bm, name))
        model_kw[name] = get(name, names, default, casts.get(name, int))
    if kv and "local_kv_heads" not in read:
        read["local_kv_heads"] = read["global_kv_heads"] = kv[0]
        defaulted.pop("local_kv_heads", None)
        defaulted.pop("global_kv_heads", None)
    sconv = _lookup(flat, ("model.sconv", "sconv"))
    if sconv is not None and not sconv[1]:
        model_kw["sconv_kernel"] = 0
        read["sconv_kernel"] = sconv[0]
        defaulted.pop("sconv_kernel", None)
    if model_kw["num_dense_layers"] and not model_kw["dense_intermediate_dim"]:
        # a dense layer as wide as a MoE layer's active MLP (routed top-k + shared)
        width = (model_kw["intermediate_dim"] * model_kw["num_experts_per_token"]
                 + model_kw["shared_expert_intermediate_dim"] * model_kw["num_shared_experts"])
        model_kw["dense_intermediate_dim"] = width
        defaulted["dense_intermediate_dim"] = width
    try:
        model = replace(bm, **model_kw)
    except TypeError as exc:  # pragma: no cover - a field name typo here is a bug, not bad input
        raise UsageError(f"{run}: {exc}") from None
    _check(model, run)

    steps = get("steps", TRAIN_NAMES["steps"], base.steps, int)
    kind = _optimizer_kind(get("optimizer", TRAIN_NAMES["optimizer"], "muonh"))
    lr = get("learning_rate", TRAIN_NAMES["learning_rate"], base.learning_rate, float)
    train = replace(
        base, label=f"{run} (logged config)", kind="true", model=model, steps=steps,
        batch_size=get("batch_size", TRAIN_NAMES["batch_size"], base.batch_size, int), optimizer=kind,
        learning_rate=lr, adam_lr=get("adam_lr", TRAIN_NAMES["adam_lr"], lr if kind == "adamw" else base.adam_lr, float),
        beta1=get("beta1", TRAIN_NAMES["beta1"], base.beta1, float),
        beta2=get("beta2", TRAIN_NAMES["beta2"], base.beta2, float),
        epsilon=get("epsilon", TRAIN_NAMES["epsilon"], base.epsilon, float),
        warmup=get("warmup", TRAIN_NAMES["warmup"], base.warmup, float),
        decay=get("decay", TRAIN_NAMES["decay"], None, lambda v: None if v is None else float(v)),
        min_lr_ratio=get("min_lr_ratio", TRAIN_NAMES["min_lr_ratio"], base.min_lr_ratio, float),
        lr_schedule=get("lr_schedule", TRAIN_NAMES["lr_schedule"], base.lr_schedule, str),
        weight_decay=get("weight_decay", TRAIN_NAMES["weight_decay"], 0.0, float),
        max_grad_norm=get("max_grad_norm", TRAIN_NAMES["max_grad_norm"], None, lambda v: None if v is None else float(v)),
        eval_every=_eval_every(steps), micro_batch=8, rung=None, width=f"d{hidden}", source_run=run)
    seed = _lookup(flat, SEED_NAMES)
    marker = _lookup(flat, ("marinctl.repro_of",))
    rung = marker[1] if marker else None
    if rung is None and model.num_experts == 384 and model.num_experts_per_token == 8:
        rung = next((r["rung"] for r in rungs() if r["hidden"] == hidden), None)  # a ladder-recipe run
    train = replace(train, rung=rung if rung in {r["rung"] for r in rungs()} else None)
    report = {"run": run, "read": read, "defaulted": defaulted,
              "seed": int(seed[1]) if seed else None, "defaults_from": f"the hero recipe ({hero_rung} as published)"}
    return train, report


def _check(model: ModelConfig, run: str) -> None:
    problems = []
    if model.num_heads % model.local_kv_heads or model.num_heads % model.global_kv_heads:
        problems.append(f"{model.num_heads} heads are not a multiple of the kv heads "
                        f"({model.local_kv_heads} local, {model.global_kv_heads} global)")
    if not 0 < model.num_experts_per_token < model.num_experts:
        problems.append(f"top-k {model.num_experts_per_token} of {model.num_experts} experts")
    if model.head_dim % 4:
        problems.append(f"head_dim {model.head_dim} is not a multiple of 4 (half-RoPE)")
    if model.num_dense_layers >= model.num_layers:
        problems.append(f"{model.num_dense_layers} dense layers of {model.num_layers}")
    if problems:
        raise UsageError(f"{run}: its logged model cannot be built: {'; '.join(problems)}",
                         "check the config with: marinctl show RUN --json")
