"""Restores are not incidents, through the real CLI: `sync PROJECT --follow --preset marin-hero`.

A restored segment is judged against the steps it replays, never against the last steps before the
restore (Marin's Grafana loss-jump rule mixed retry attempts, marin#8568). One follow of a SYNTHETIC
project on the loopback W&B fake (tests/fakes/hero_feed.py), every run hero-shaped:

- a W&B **rewind**: the run learns fast past its checkpoint (its loss 1.2 lower within 60 steps),
  is rewound to the checkpoint and logs those steps again at the checkpoint's level, and on past
  where the abandoned attempt stopped. Read against the abandoned attempt's last steps the replay is
  a loss jump of 1.2 (> the preset's 1.0); against the steps before the checkpoint it is nothing:
  no alert. A real jump planted after the replay still fires, at its step.
- a **resumed fork**: the parent runs 120 steps past its checkpoint, just as fast, and stops; a
  child forked at the checkpoint replays those steps (the same losses) and goes on: no alert.
- a **planted post-replay mismatch**: a second child of the same checkpoint whose loss runs 5%
  above its parent's same steps after the post-resume warm-up — explain's parent-child check
  (analysis/detect/resume.py) finds it, and it alerts.

Every wait is on an event (a line the follower prints after its pass).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.fakes.hero_feed import ENTITY, PROJECT, HeroFeed, hero_run
from tests.fakes.wandb_server import WandbServer
from tests.follower import follow, listed

LOSS = "train/loss"
RAMP = 1.2          # how much lower the loss gets past the checkpoint (a run learning fast: SYNTHETIC)


@pytest.fixture
def env(_isolated_home):
    return {**os.environ, "MARINCTL_HOME": str(_isolated_home)}


def _ramp(lo: int, hi: int, span: int):
    """Lower the loss from 0 at `lo` to RAMP at `lo + span - 1` (and RAMP after)."""
    def plant(run, first, last):
        s, v = run.series[LOSS]
        at = (s >= lo) & (s <= hi)
        run.set_values(LOSS, s[at], v[at] - RAMP * np.minimum((s[at] - lo + 1) / span, 1.0))
    return plant


def test_a_rewind_and_a_resumed_fork_raise_nothing_and_a_mismatch_after_the_replay_alerts(env):
    rewound, parent = hero_run("hero-synthetic-rewound", seed=41), hero_run("hero-synthetic-parent", seed=42)
    with WandbServer([rewound, parent], verbose=False) as server:
        env["WANDB_BASE_URL"] = server.url
        feed = {r.run_id: HeroFeed(server, r) for r in (rewound, parent)}
        with follow(f"{ENTITY}/{PROJECT}", env, extra=("--preset", "marin-hero")) as f:
            f.synced(rewound.last_step, rewound.run_id)                    # the baseline
            check = rewound.last_step                                      # both runs' checkpoint
            fast = feed[rewound.run_id].grow(60, plant=_ramp(check + 1, check + 60, 60))   # the abandoned attempt
            f.synced(fast, rewound.run_id)
            feed[parent.run_id].grow(120, plant=_ramp(check + 1, check + 120, 60))   # the parent's run-on
            with server._lock:
                parent.state = "finished"
                parent._touch()
            f.synced(parent.last_step, parent.run_id)

            feed[rewound.run_id].rewind(check + 1, fast + 20)             # restored from the checkpoint
            f.synced(fast + 20, rewound.run_id)
            overlap = {s: v for s, v in zip(*parent.series[LOSS]) if s > check}
            child = hero_run("hero-synthetic-resume-step100k", steps=180, start_step=check + 1, seed=43,
                             fork_parent=parent.run_id, fork_step=check, step_s=0.01)      # created just now
            wrong = hero_run("hero-synthetic-wrong-ckpt-step100k", steps=180, start_step=check + 1, seed=44,
                             fork_parent=parent.run_id, fork_step=check, step_s=0.01)
            for kid, off in ((child, 0.0), (wrong, 0.05)):               # replays of the parent's steps
                s = np.array(sorted(overlap))
                v = np.array([overlap[x] for x in s])
                v = np.where(s > check + 50, v * (1.0 + off), v)           # `wrong`: 5% high after the warm-up
                kid.set_values(LOSS, s, v)
                tail = kid.series[LOSS][0][kid.series[LOSS][0] > check + 120]
                kid.set_values(LOSS, tail, kid.series[LOSS][1][kid.series[LOSS][0] > check + 120] - RAMP)
                server.add_run(kid)
            f.synced(child.last_step, child.run_id)
            f.synced(wrong.last_step, wrong.run_id)
            quiet = [a for a in listed(env) if a["run"] != wrong.run_id]
            assert quiet == [], "a restore raised an alert:\n" + "\n".join(
                f"{a['run']} {a['step']} {a['kind']} {a['rule']} {a['title']}" for a in quiet)

            j = rewound.last_step + 1                                      # after the replay: a real jump
            feed[rewound.run_id].grow(20, plant=lambda r, lo, hi: r.set_values(
                LOSS, np.arange(j, j + 15), r.series[LOSS][1][np.isin(r.series[LOSS][0], np.arange(j, j + 15))] + 1.5))
            f.synced(rewound.last_step, rewound.run_id)
            assert f.stop() in (0, 130), f.err[-2000:]
    alerts = listed(env)
    print([(a["rule"], a["kind"], a["step"], a["title"]) for a in alerts if a["run"] == rewound.run_id])
    after = sorted((a["rule"], a["step"]) for a in alerts if a["run"] == rewound.run_id and a["rule"])
    assert after == [("hero loss jump", j + 14), ("hero loss spike", j + 14)], after
    mismatch = [a for a in alerts if a["run"] == wrong.run_id]
    assert [(a["kind"], a["cause_class"]) for a in mismatch] == [("resume_mismatch", "infrastructure")], mismatch
    assert mismatch[0]["priority"] == "high" and check < mismatch[0]["step"] <= check + 120, mismatch
    assert not [a for a in alerts if a["run"] in (child.run_id, parent.run_id)]
