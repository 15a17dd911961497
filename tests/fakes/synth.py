"""SYNTHETIC Marin-shaped W&B runs for tests and benchmarks (never real data).

Every run built here has `synthetic=True`, a display name ending in "(synthetic)" and the
tag "synthetic". Key names follow Marin's trackers (Levanter's `log_step_info`, `WatchConfig`
and tree stats under Marin's `lib/levanter/src/levanter/`, grug's `_summarize_router_metrics`): dense
per-step keys (`train/loss`, `optim/learning_rate`, `train/router/*`, `throughput/*`, ...),
watch keys every `norm_every` steps (`params/norm/<leaf>`, `grad/norm/<leaf>`, totals),
and `eval/paloma/*` every `eval_every` steps.

Invariants tests rely on:
- `params/norm/total` is exactly sqrt(sum of squares) of the `params/norm/<leaf>` values
  at the same step (float64 rounding), and so is `grad/norm/total` at watch steps.
- `train/router/routing_entropy_mean` is the mean of the `layer_{i}/routing_entropy` keys.
- Generation is deterministic: each key's noise comes from its own RNG seeded by
  (seed, crc32(key)), so adding keys never changes the others.
- A fork child's own series hold only steps > fork_step; a W&B server serves the parent's
  rows <= fork_step as part of the child's history (that is how W&B forks read).

Memory: dense keys of one run share one int64 steps array (so do the watch keys); each key
costs 8 bytes per logged step. Hero scale (`marin_run(..., steps=400_000, layers=27,
extra_scalar_keys=120)`: 164 dense keys, 598 watch keys every 10 steps, 89.6M values) holds
about 0.7 GB of arrays, peaks near 1 GB RSS and takes ~4 s to generate on 2 cores.

Mutating helpers (`set_values`, `truncate`, `extend`, `rewrite_from`) bump `version`; a fake
server picks the change up on its next request. Mutate between requests (or through
`WandbServer.truncate/regrow`), not while a client is mid-scan.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

Series = tuple[np.ndarray, np.ndarray]  # (int64 steps ascending, float64 values)

ENTITY = "marin-community"
PROJECT = "marin_moe"
HERO_GROUP = "moe-hero-ep"
LADDER_GROUP = "moe-hero-ep-scaling-ladder"
EPOCH = datetime(2026, 9, 1, 8, 0, 0, tzinfo=timezone.utc)

# Per-layer leaves of the watch tree and their base Frobenius norm per layer (hero table / sqrt(48)).
LAYER_LEAVES: dict[str, float] = {
    "attn.w_q": 38.7, "attn.w_k": 19.3, "attn.w_v": 19.3, "attn.w_o": 38.7,
    "mlp.experts.w_gate": 378.7, "mlp.experts.w_up": 378.7, "mlp.experts.w_down": 378.7,
    "mlp.shared.w_up": 27.3, "mlp.router.weight": 12.0, "mlp.router_bias": 0.05,
    "attn_norm.weight": 5.6,
}
GLOBAL_LEAVES: dict[str, float] = {"token_embed": 177.0, "lm_head": 177.0}
# Adam-group leaves move; MuonH/AdamH leaves keep a (near) constant norm on the hyperball.
ADAM_LEAVES = ("mlp.router.weight", "mlp.router_bias", "token_embed")


@dataclass
class RunSpec:
    """The knobs a run was generated from; kept so a run can be extended or rewritten."""

    layers: int = 4
    experts: int = 8
    top_k: int = 2
    hidden_dim: int = 768
    extra_scalar_keys: int = 0
    norm_every: int = 10
    eval_every: int = 100
    num_train_steps: int = 2000
    seed: int = 0
    seconds_per_step: float = 19.8
    tokens_per_step: int = 4_194_304
    learning_rate: float = 0.0158
    adam_lr: float = 0.00365
    warmup: float = 0.01
    min_lr_ratio: float = 0.05
    loss_floor: float = 1.1


@dataclass
class SynthRun:
    """One SYNTHETIC W&B run: metadata plus every logged (step, value) per key."""

    entity: str
    project: str
    run_id: str
    display_name: str
    group: str | None
    job_type: str | None
    tags: list[str]
    state: str
    created_at: datetime
    heartbeat_at: datetime
    config: dict[str, Any]
    summary: dict[str, Any]
    fork_parent: str | None
    fork_step: int | None
    series: dict[str, Series]
    spec: RunSpec = field(default_factory=RunSpec)
    summary_extra: dict[str, Any] = field(default_factory=dict)  # summary-only values
    synthetic: bool = True
    version: int = 0  # bumped on every mutation, so servers can drop caches

    # --- reading ----------------------------------------------------------------------
    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}/{self.run_id}"

    def steps(self) -> np.ndarray:
        """Every step this run itself logged (not inherited fork rows), ascending (cached per version)."""
        cached = self.__dict__.get("_steps_cache")
        if cached is not None and cached[0] == self.version:
            return cached[1]
        out = union_steps([s for s, _ in self.series.values()])
        self.__dict__["_steps_cache"] = (self.version, out)
        return out

    @property
    def last_step(self) -> int | None:
        ends = [int(s[-1]) for s, _ in self.series.values() if len(s)]
        return max(ends) if ends else None

    @property
    def metric_keys(self) -> list[str]:
        return sorted(k for k in self.series if not k.startswith("_"))

    def rows(self, lo: int | None = None, hi: int | None = None) -> list[dict[str, Any]]:
        """W&B history rows for own steps in [lo, hi): `_step` plus every key logged there."""
        out: dict[int, dict[str, Any]] = {}
        for key, (steps, values) in self.series.items():
            i = 0 if lo is None else int(np.searchsorted(steps, lo, "left"))
            j = len(steps) if hi is None else int(np.searchsorted(steps, hi, "left"))
            if i >= j:
                continue
            for s, v in zip(steps[i:j].tolist(), values[i:j].tolist()):
                row = out.get(s)
                if row is None:
                    row = out[s] = {"_step": s}
                row[key] = v
        return [out[s] for s in sorted(out)]

    def window(self, lo: int, hi: int) -> dict[str, Series]:
        """Each key's (steps, values) restricted to [lo, hi) (views, no copies)."""
        res = {}
        shared: dict[int, tuple[int, int, np.ndarray]] = {}  # keys sharing a steps array share its view
        for key, (steps, values) in self.series.items():
            hit = shared.get(id(steps))
            if hit is None:
                i, j = np.searchsorted(steps, [lo, hi], "left")
                hit = shared[id(steps)] = (int(i), int(j), steps[i:j])
            i, j, view = hit
            if i < j:
                res[key] = (view, values[i:j])
        return res

    def long_rows(self) -> list[tuple[int, str, float]]:
        """Ground truth for exports: sorted (step, key, value), `_timestamp`/`_runtime` included."""
        out = []
        for key, (steps, values) in self.series.items():
            out.extend(zip(steps.tolist(), [key] * len(steps), values.tolist()))
        out.sort()
        return out

    # --- mutating (scenario injection) --------------------------------------------------
    def set_values(self, key: str, steps, values) -> None:
        """Log `values` for `key` at `steps` (overwriting steps already logged for that key)."""
        steps = np.asarray(steps, dtype=np.int64)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), steps.shape)
        old_s, old_v = self.series.get(key, (np.empty(0, np.int64), np.empty(0, np.float64)))
        keep = ~np.isin(old_s, steps)
        s = np.concatenate([old_s[keep], steps])
        v = np.concatenate([old_v[keep], values])
        order = np.argsort(s, kind="stable")
        self.series[key] = (s[order], v[order])
        if not key.startswith("_"):
            self._fill_time(steps)
        self._touch()

    def drop_key(self, key: str) -> None:
        self.series.pop(key, None)
        self._touch()

    def truncate(self, at_step: int) -> None:
        """Forget every own step >= at_step (what a W&B rewind does to the history)."""
        for key, (s, v) in list(self.series.items()):
            j = int(np.searchsorted(s, at_step, "left"))
            self.series[key] = (s[:j], v[:j])
        self._touch()

    def extend(self, to_step: int, *, seed: int | None = None) -> None:
        """Log more steps (last_step+1 .. to_step) following the same curves."""
        lo = (self.last_step if self.last_step is not None else (self.fork_step or -1)) + 1
        if to_step < lo:
            return
        spec = self.spec if seed is None else replace(self.spec, seed=seed)
        t0 = float(self.series["_timestamp"][1][-1]) if len(self.series.get("_timestamp", ((), ()))[0]) else self.created_at.timestamp()
        new = generate_series(spec, lo, to_step + 1, t_start=t0, created=self.created_at.timestamp())
        for key, (s, v) in new.items():
            old = self.series.get(key)
            self.series[key] = (s, v) if old is None else (np.concatenate([old[0], s]), np.concatenate([old[1], v]))
        self._touch()

    def rewrite_from(self, at_step: int, *, seed: int) -> None:
        """Rewind: drop steps >= at_step and log them again with different noise."""
        last = self.last_step
        self.truncate(at_step)
        if last is not None and last >= at_step:
            self.extend(last, seed=seed)

    def _fill_time(self, steps: np.ndarray) -> None:
        for tkey in ("_timestamp", "_runtime"):
            ts, tv = self.series.get(tkey, (np.empty(0, np.int64), np.empty(0, np.float64)))
            missing = np.setdiff1d(steps, ts)
            if not len(missing):
                continue
            if len(ts) >= 2:
                fill = np.interp(missing, ts, tv, left=None, right=None)
                slope = (tv[-1] - tv[0]) / max(ts[-1] - ts[0], 1)
                fill = np.where(missing > ts[-1], tv[-1] + (missing - ts[-1]) * slope, fill)
                fill = np.where(missing < ts[0], tv[0] - (ts[0] - missing) * slope, fill)
            else:
                base = self.created_at.timestamp() if tkey == "_timestamp" else 0.0
                fill = base + missing.astype(np.float64) * self.spec.seconds_per_step
            s = np.concatenate([ts, missing])
            v = np.concatenate([tv, fill])
            o = np.argsort(s, kind="stable")
            self.series[tkey] = (s[o], v[o])

    def _touch(self) -> None:
        self.version += 1
        self.summary = summary_of(self.series, self.summary_extra)
        last_t = self.series.get("_timestamp")
        if last_t is not None and len(last_t[0]):
            self.heartbeat_at = datetime.fromtimestamp(float(last_t[1][-1]), timezone.utc).replace(microsecond=0)


def union_steps(arrays: list[np.ndarray]) -> np.ndarray:
    """Sorted union of step arrays; keys generated together share one array, so dedupe by identity first."""
    distinct = list({id(a): a for a in arrays if len(a)}.values())
    if not distinct:
        return np.empty(0, np.int64)
    if len(distinct) == 1:
        return distinct[0]
    return np.unique(np.concatenate(distinct))


# --- generation --------------------------------------------------------------------------

def _rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def lr_schedule(steps: np.ndarray, peak: float, total: int, warmup: float, min_ratio: float) -> np.ndarray:
    """Marin's linear schedule: linear warm-up over `warmup`·total, linear decay to min_ratio·peak."""
    w = max(int(round(warmup * total)), 1)
    s = steps.astype(np.float64)
    up = peak * (s + 1) / w
    frac = np.clip((s - w) / max(total - w, 1), 0.0, 1.0)
    down = peak * (1.0 - (1.0 - min_ratio) * frac)
    return np.where(s < w, up, down)


def loss_level(spec: RunSpec, steps: np.ndarray) -> np.ndarray:
    """The noiseless training-loss curve every run follows (incidents reshape loss relative to it)."""
    return spec.loss_floor + 70.0 * (np.asarray(steps, dtype=np.float64) + 50.0) ** -0.5


def norm_leaves(layers: int) -> list[tuple[str, float]]:
    out = [(f"stacked_blocks.{i}.{leaf}", base) for i in range(layers) for leaf, base in LAYER_LEAVES.items()]
    return out + list(GLOBAL_LEAVES.items())


def generate_series(spec: RunSpec, lo: int, hi: int, *, t_start: float, created: float) -> dict[str, Series]:
    """Every key for steps [lo, hi), vectorised. `t_start` is the wall time just before step lo."""
    steps = np.arange(lo, hi, dtype=np.int64)
    n = len(steps)
    s = steps.astype(np.float64)
    series: dict[str, Series] = {}

    def put(key: str, values: np.ndarray, at: np.ndarray = steps) -> None:
        series[key] = (at, np.asarray(values, dtype=np.float64))

    def noise(key: str, size: int = n) -> np.ndarray:
        return _rng(spec.seed, key).standard_normal(size)

    # timing
    duration = spec.seconds_per_step * (1.0 + 0.02 * noise("throughput/duration"))
    step_time = duration + 0.4
    ts = t_start + np.cumsum(step_time)
    put("_timestamp", ts)
    put("_runtime", ts - created)
    put("throughput/duration", duration)
    put("throughput/tokens_per_second", spec.tokens_per_step / duration)
    put("throughput/mfu", 22.8 * spec.seconds_per_step / duration)
    put("throughput/total_tokens", (s + 1.0) * spec.tokens_per_step)

    # loss: decaying power law plus noise, floor shrinking with width
    base = loss_level(spec, s)
    loss = base * (1.0 + 0.01 * noise("train/loss"))
    z = 1e-4 * (1.0 + 0.1 * np.abs(noise("train/router/router_z_loss")))
    put("train/loss", loss)
    put("train/cross_entropy_loss", loss - z)
    put("train/router/router_z_loss", z * 10.0)
    put("train/router/load_balancing_loss", 1.0 + 0.02 * np.abs(noise("train/router/load_balancing_loss")))
    put("moe/drop_fraction", np.abs(2e-4 * (1.0 + 0.3 * noise("moe/drop_fraction"))))

    ent_max = math.log(spec.experts)
    layers_ent = []
    for i in range(spec.layers):
        key = f"train/router/layer_{i}/routing_entropy"
        e = ent_max * (0.97 - 0.02 * np.exp(-s / 500.0)) + 0.005 * noise(key)
        layers_ent.append(e)
        put(key, e)
    put("train/router/routing_entropy_mean", np.mean(layers_ent, axis=0) if layers_ent else np.zeros(n))

    put("optim/learning_rate", lr_schedule(steps, spec.learning_rate, spec.num_train_steps, spec.warmup, spec.min_lr_ratio))
    put("optim/adam_lr", lr_schedule(steps, spec.adam_lr, spec.num_train_steps, spec.warmup, spec.min_lr_ratio))
    gnorm = (0.25 + 2.0 * (s + 10.0) ** -0.4) * np.exp(0.05 * noise("grad/norm/total"))
    put("global_step", s)
    put("run_progress", s / spec.num_train_steps)

    for j in range(spec.extra_scalar_keys):
        key = f"train/aux/synthetic_{j:03d}"
        put(key, 1.0 + 0.1 * j + 0.01 * noise(key))

    # watch keys every norm_every steps; totals are exact sums of squares of the leaves
    wmask = steps % spec.norm_every == 0 if spec.norm_every > 0 else np.zeros(n, bool)
    wsteps = steps[wmask]
    if len(wsteps):
        ws = wsteps.astype(np.float64)
        leaves = norm_leaves(spec.layers)
        pvals = np.empty((len(leaves), len(wsteps)))
        gw = np.empty_like(pvals)
        for li, (path, b) in enumerate(leaves):
            r = _rng(spec.seed, "params/norm/" + path)
            tail = path.rsplit(".", 2)
            leaf = path if path in GLOBAL_LEAVES else ".".join(tail[-2:])
            if leaf.endswith("router_bias"):
                pvals[li] = b * (1.0 + 0.5 * np.sin(ws / 137.0 + li)) + 0.01 * np.abs(r.standard_normal(len(ws)))
            elif leaf in ADAM_LEAVES or path in ADAM_LEAVES:
                pvals[li] = b * (1.0 + 0.3 * ws / max(spec.num_train_steps, 1)) * (1.0 + 1e-3 * r.standard_normal(len(ws)))
            else:
                pvals[li] = b * (1.0 + 1e-6 * r.standard_normal(len(ws)))
            gw[li] = b * np.exp(0.3 * _rng(spec.seed, "grad/norm/" + path).standard_normal(len(ws)))
        gtot = gnorm[wmask]
        gvals = gw * (gtot / np.sqrt(np.sum(gw * gw, axis=0)))
        for li, (path, _) in enumerate(leaves):
            put("params/norm/" + path, pvals[li], wsteps)
            put("grad/norm/" + path, gvals[li], wsteps)
        put("params/norm/total", np.sqrt(np.sum(pvals * pvals, axis=0)), wsteps)
        gnorm = gnorm.copy()
        gnorm[wmask] = np.sqrt(np.sum(gvals * gvals, axis=0))
    put("grad/norm/total", gnorm)

    if spec.eval_every > 0:
        esteps = steps[steps % spec.eval_every == 0]
        if len(esteps):
            es = esteps.astype(np.float64)
            ev = spec.loss_floor + 0.15 + 70.0 * (es + 50.0) ** -0.5
            put("eval/paloma/macro_loss", ev * (1.0 + 0.002 * noise("eval/paloma/macro_loss", len(es))), esteps)
            put("eval/paloma/c4_en/bpb", 0.3 * ev * (1.0 + 0.002 * noise("eval/paloma/c4_en/bpb", len(es))), esteps)
    return series


def summary_of(series: dict[str, Series], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """W&B-style summary: the last value of each key, plus `_step`, `_runtime`, `_timestamp`."""
    out = dict(extra or {})
    last = -1
    for key, (s, v) in series.items():
        if len(s):
            out[key] = float(v[-1])
            last = max(last, int(s[-1]))
    if last >= 0:
        out["_step"] = last
    return out


def marin_run(
    run_id: str,
    *,
    steps: int = 2000,
    start_step: int = 0,
    layers: int = 4,
    experts: int = 8,
    extra_scalar_keys: int = 0,
    norm_every: int = 10,
    eval_every: int = 100,
    seed: int = 0,
    entity: str = ENTITY,
    project: str = PROJECT,
    group: str | None = HERO_GROUP,
    job_type: str | None = "train",
    state: str = "finished",
    num_train_steps: int | None = None,
    hidden_dim: int = 768,
    fork_parent: str | None = None,
    fork_step: int | None = None,
    created_at: datetime | None = None,
    tags: list[str] | None = None,
    **spec_overrides: Any,
) -> SynthRun:
    """A SYNTHETIC Marin MoE run logging steps [start_step, start_step + steps)."""
    spec = RunSpec(layers=layers, experts=experts, hidden_dim=hidden_dim, extra_scalar_keys=extra_scalar_keys,
                   norm_every=norm_every, eval_every=eval_every,
                   num_train_steps=num_train_steps or (start_step + steps), seed=seed, **spec_overrides)
    created = created_at or EPOCH + timedelta(hours=zlib.crc32(run_id.encode()) % 48)
    t0 = created.timestamp()
    series = generate_series(spec, start_step, start_step + steps, t_start=t0, created=t0) if steps > 0 else {}
    tracker: dict[str, Any] = {"project": project, "entity": entity, "group": group, "tags": ["synthetic"]}
    if fork_parent is not None:
        tracker["fork_from"] = f"{fork_parent}?_step={fork_step}"
    config = {
        "synthetic": True,
        "hidden_dim": hidden_dim, "num_layers": layers, "num_experts": experts, "top_k": spec.top_k,
        "num_train_steps": spec.num_train_steps, "warmup": spec.warmup, "min_lr_ratio": spec.min_lr_ratio,
        "learning_rate": spec.learning_rate, "adam_lr": spec.adam_lr, "seed": seed,
        "tokens_per_step": spec.tokens_per_step,
        "trainer": {"id": run_id, "num_train_steps": spec.num_train_steps, "tracker": tracker,
                    "watch": {"interval": norm_every}},
        "git_commit": "0" * 40,
    }
    base_summary = {"parameter_count": 1.6e9 * (hidden_dim / 768.0) ** 2, "num_devices": 64,
                    "throughput/device_kind": "synthetic-GB200"}
    run = SynthRun(
        entity=entity, project=project, run_id=run_id, display_name=f"{run_id} (synthetic)",
        group=group, job_type=job_type, tags=list(tags or []) + ["synthetic"], state=state,
        created_at=created, heartbeat_at=created, config=config, summary={}, fork_parent=fork_parent,
        fork_step=fork_step, series=series, spec=spec, summary_extra=base_summary,
    )
    run.summary = summary_of(series, base_summary)
    if "_timestamp" in series and len(series["_timestamp"][0]):
        run.heartbeat_at = datetime.fromtimestamp(float(series["_timestamp"][1][-1]), timezone.utc).replace(microsecond=0)
    return run


HERO_IDS = ("hero-12d8b6f0-dee637", "hero-wd-gate-router-p02-step54k", "hero-ragged_a2a-ep-step81k")


def hero_lineage(steps_per_segment: int = 300, *, overrun: float = 0.1, layers: int = 4, experts: int = 8,
                 extra_scalar_keys: int = 0, norm_every: int = 10, eval_every: int = 100, seed: int = 0,
                 leaf_state: str = "running") -> list[SynthRun]:
    """SYNTHETIC hero fork chain, root first, shaped like Marin's (forks at 2·seg and 3·seg).

    With steps_per_segment=27000 the forks land at Marin's 54k and 81k. Parents log
    `overrun`·seg steps past the fork point (the stitched view must ignore them); the leaf
    runs to 4·seg. Each child's own series start at fork_step + 1.
    """
    seg = steps_per_segment
    total = 4 * seg
    f1, f2 = 2 * seg, 3 * seg
    extra = int(overrun * seg)
    common = dict(layers=layers, experts=experts, extra_scalar_keys=extra_scalar_keys, norm_every=norm_every,
                  eval_every=eval_every, num_train_steps=total, group=HERO_GROUP, tags=["hero"],
                  learning_rate=0.003291, adam_lr=0.000759, hidden_dim=6144)
    root = marin_run(HERO_IDS[0], steps=f1 + 1 + extra, seed=seed, state="crashed",
                     created_at=EPOCH, **common)
    kids = []
    parent = root
    for rid, fork, end, k in ((HERO_IDS[1], f1, f2 + extra, 1), (HERO_IDS[2], f2, total - 1, 2)):
        ts_s, ts_v = parent.series["_timestamp"]
        t_fork = float(ts_v[np.searchsorted(ts_s, fork)])
        created = (datetime.fromtimestamp(t_fork, timezone.utc) + timedelta(hours=6)).replace(microsecond=0)
        child = marin_run(rid, steps=end - fork, start_step=fork + 1, seed=seed + k,
                          state=leaf_state if k == 2 else "finished", fork_parent=parent.run_id,
                          fork_step=fork, created_at=created, **common)
        kids.append(child)
        parent = child
    return [root, *kids]


LADDER = (("d768", 768, 8), ("d1024", 1024, 12), ("d1536", 1536, 16), ("d2048", 2048, 22))


def ladder_runs(steps: int = 400, *, layers: int | None = 2, experts: int = 8, seed: int = 100,
                norm_every: int = 10) -> list[SynthRun]:
    """SYNTHETIC ladder rungs `ladder-d768`.. with eval/paloma/macro_loss every 5% of steps.

    Wider rungs reach a lower loss floor. `layers=None` uses each rung's real depth.
    """
    out = []
    for k, (name, hidden, depth) in enumerate(LADDER):
        out.append(marin_run(
            f"ladder-{name}", steps=steps, layers=depth if layers is None else layers, experts=experts,
            hidden_dim=hidden, eval_every=max(round(steps / 20), 1), norm_every=norm_every, seed=seed + k,
            group=LADDER_GROUP, tags=["ladder"], loss_floor=1.6 - 0.12 * k,
            created_at=EPOCH + timedelta(days=1, hours=k),
        ))
    return out
