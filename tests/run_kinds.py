"""One store holding each kind of run a person follows, built the way a person builds it.

- a synced ladder rung: the four SYNTHETIC rungs `ladder-d768`… from the loopback W&B fake
  (`marinctl sync ENTITY/PROJECT`), 200 steps each, config `num_train_steps` 200;
- a local run: a `.wandb` file written by the real SDK (`marinctl sync DIR`), planned for 400
  steps and stopped after 141, two data phases of its own (switch at 150: the hero's fractions
  of 400 would switch at 111);
- a repro-shaped run: a `.wandb` file with the config repro logs (Levanter's names:
  `trainer.num_train_steps`, `trainer.train_batch_size`, `model.seq_len`, `optimizer.warmup`,
  `optimizer.min_lr_ratio`, `data.train_weights`, `marinctl.repro_of="rung1"`) and repro's keys,
  planned for 120 steps with phase switches at 40 and 100 and stopped after 98 (an interrupted
  demo) — deliberately unlike the published rung1 (11,420 steps, warm-up 1%, switches at the
  hero's fractions: 33 and 96 of 120), so a fact taken from the published rung instead of the
  run shows;
- a tiny local run of 12 steps (too short to zoom into).

`SCHEDULES` is what each run itself says: the numbers every view must agree with. Built once per
test session (`kinds_home`); tests must not write to it (copy it first).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.blackbox import marinctl_run, sdk_env, sdk_write, sync_served

REPRO_ID = "repro-rung1-d768-cpu-20260901-080000-s0"
LOCAL_ID = "local-synthetic"
TINY_ID = "tiny-synthetic"
RUNG_ID = "ladder-d768"

# run -> total steps, warm-up end step, data phase start steps, tokens per step, last logged step,
# and a step to probe where the run's own phases and the hero's fractions disagree
SCHEDULES = {
    RUNG_ID: dict(total=200, warmup_end=2, phases=[0, 55, 160], tokens_per_step=4_194_304, last=199, probe=100),
    LOCAL_ID: dict(total=400, warmup_end=40, phases=[0, 150], tokens_per_step=4 * 64, last=140, probe=130),
    REPRO_ID: dict(total=120, warmup_end=6, phases=[0, 40, 100], tokens_per_step=8 * 128, last=97, probe=70),
}
KINDS = {"synced-rung": RUNG_ID, "local": LOCAL_ID, "repro": REPRO_ID}

WRITER = '''
import math
def phase_of(step, starts):
    return max(i for i, s in enumerate(starts) if step >= s)

def write(run_id, config, steps, tokens_per_step, total, warmup_end, starts, weights, **init):
    run = wandb.init(mode="offline", dir=out, id=run_id, settings=S(), config=config, **init)
    tokens, phase = 0, -1
    for s in range(steps):
        row = {}
        p = phase_of(s, starts)
        if p != phase:                               # repro logs the mixture when the stage changes
            phase = p
            row["mixture/stage"] = p
            for name, w in weights[p].items():
                row[f"mixture/weight/{name}"] = w
        tokens += tokens_per_step
        lr = 0.01 * (s + 1) / warmup_end if s < warmup_end else 0.01 * (1 - 0.95 * (s - warmup_end) / (total - warmup_end))
        row.update({"train/loss": 6.0 / (1 + 0.02 * s) + 0.01 * math.sin(s), "optim/learning_rate": lr,
                    "grad/norm/total": 1.0 + 0.1 * math.cos(s), "throughput/total_tokens": tokens,
                    "throughput/tokens_per_second": 2000.0 + s, "throughput/duration": tokens_per_step / (2000.0 + s),
                    "global_step": s, "run_progress": s / total})
        if s % 10 == 0:
            row["params/norm/stacked_blocks.0.mlp.router_bias"] = 0.5 + 1e-3 * s
            row["params/norm/stacked_blocks.0.attn.w_q"] = 10.0
            row["params/norm/total"] = math.sqrt((0.5 + 1e-3 * s) ** 2 + 100.0)
        if s % 6 == 0 or s == steps - 1:
            row["eval/loss"] = 6.2 / (1 + 0.02 * s)
        run.log(row, step=s)
    run.finish()

weights3 = [{"prose": 0.7, "code": 0.3}, {"prose": 0.5, "code": 0.5}, {"prose": 0.2, "code": 0.8}]
write("repro-rung1-d768-cpu-20260901-080000-s0", {
        "rung": "rung1", "kind": "cpu-proxy", "seed": 0,
        "trainer": {"num_train_steps": 120, "train_batch_size": 8},
        "model": {"seq_len": 128, "hidden_dim": 192},
        "optimizer": {"learning_rate": 0.01, "warmup": 0.05, "min_lr_ratio": 0.05},
        "data": {"train_weights": [[0, weights3[0]], [40, weights3[1]], [100, weights3[2]]]},
        "marinctl": {"repro_of": "rung1", "kind": "cpu-proxy"}},
      98, 8 * 128, 120, 6, [0, 40, 100], weights3,
      project="marinctl-repro", name="repro-rung1-d768-cpu-20260901-080000-s0 (synthetic)",
      group="repro-rung1", job_type="repro", tags=["repro", "rung1", "cpu-proxy", "synthetic"])
weights2 = [{"web": 1.0}, {"web": 0.4, "books": 0.6}]
write("local-synthetic", {
        "trainer": {"num_train_steps": 400, "train_batch_size": 4},
        "model": {"seq_len": 64},
        "optimizer": {"learning_rate": 0.01, "warmup": 0.1, "min_lr_ratio": 0.1},
        "data": {"train_weights": [[0, weights2[0]], [150, weights2[1]]]}},
      141, 4 * 64, 400, 40, [0, 150], weights2,
      project="local-synthetic", name="local-synthetic", tags=["synthetic"])
write("tiny-synthetic", {"trainer": {"num_train_steps": 12}}, 12, 16, 12, 1, [0], [{"web": 1.0}],
      project="local-synthetic", name="tiny-synthetic", tags=["synthetic"])
'''

_BUILT: dict[str, Path] = {}


def kinds_home(tmp_path_factory) -> Path:
    """The home (data folder) holding every kind above; built once per session, read-only."""
    if "home" in _BUILT:
        return _BUILT["home"]
    from tests.fakes.synth import ladder_runs

    base = tmp_path_factory.mktemp("run-kinds")
    sdk_write(base / "local", WRITER)
    home = base / "home"
    env = {**sdk_env(), "MARINCTL_HOME": str(home)}
    done = sync_served(ladder_runs(200, layers=1, experts=2, norm_every=50), "marin-community/marin_moe", env=env)
    assert done.returncode == 0, done.stderr
    done = marinctl_run(["sync", str(base / "local" / "wandb")], env=env)
    assert done.returncode == 0, done.stderr
    _BUILT["home"] = home
    _BUILT["wandb_dir"] = base / "local" / "wandb"
    return home


def local_wandb_dir(tmp_path_factory) -> Path:
    kinds_home(tmp_path_factory)
    return _BUILT["wandb_dir"]


def copy_home(tmp_path_factory, dest: Path) -> Path:
    """A writable copy of the kinds home (for tests that sync or write)."""
    src = kinds_home(tmp_path_factory)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.lock", "*.locks"))
    return dest
