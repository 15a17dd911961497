"""A run's schedule from one place (analysis/schedule.py): its own config first, under Levanter's
nested names; Marin's published rungs only for logged hero/ladder runs; never for a reproduction.

Configs here are SYNTHETIC, shaped like the W&B config of a Marin run (nested dicts) and like
a repro run's (the same Levanter names plus `marinctl.repro_of`).
"""

from __future__ import annotations

import json

import pytest

from marinctl.analysis.schedule import CONFIG, UNKNOWN, schedule_of
from marinctl.domain import RunInfo
from marinctl.store.runs import upsert_run

MARIN_HERO_CONFIG = {   # SYNTHETIC, in the shape Levanter logs (trainer / model / optimizer sections)
    "trainer": {"num_train_steps": 390_251, "train_batch_size": 11_264, "id": "hero-synthetic"},
    "model": {"seq_len": 4096, "hidden_dim": 6144},
    "optimizer": {"warmup": 0.01, "min_lr_ratio": 0.05, "lr_schedule": "linear", "decay": None},
}


def repro_config(steps: int = 200, stages=((0, {"web": 0.7, "code": 0.3}), (40, {"web": 0.5, "code": 0.5}),
                                            (150, {"web": 0.2, "code": 0.8}))) -> dict:
    """A SYNTHETIC reproduction's config: Levanter's names, its own (short) length and staged mixture."""
    return {
        "trainer": {"num_train_steps": steps, "train_batch_size": 8},
        "model": {"seq_len": 128},
        "optimizer": {"warmup": 0.05, "decay": None, "min_lr_ratio": 0.05, "lr_schedule": "linear"},
        "data": {"train_weights": [[s, w] for s, w in stages]},
        "marinctl": {"repro_of": "rung1"},
    }


def test_a_marin_hero_config_is_read_under_levanter_names():
    s = schedule_of({"run_id": "hero-synthetic", "run_group": "moe-hero-ep", "source": "wandb", "config": MARIN_HERO_CONFIG})
    assert s.total_steps == 390_251 and s.source("total_steps") == CONFIG
    assert s.tokens_per_step == 11_264 * 4096 and s.source("tokens_per_step") == CONFIG
    assert s.warmup_end_step == 3902 and s.decay_start_step == 3902        # Levanter truncates 0.01 × 390,251
    assert (s.min_lr_ratio, s.lr_schedule) == (0.05, "linear")
    # no staged mixture in the config: the hero's published phase switches
    assert [(p.name, p.start_step) for p in s.phases] == [("initial", 0), ("main", 108_000), ("cooldown", 312_192)]
    assert s.source("phases") == "published rung hero" and s.flops_budget == 2.7e24 and s.is_hero


def test_a_logged_rung_without_config_falls_back_to_the_published_rung():
    s = schedule_of({"run_id": "ladder-d768-synthetic", "run_group": "moe-hero-ep-scaling-ladder", "source": "wandb"})
    assert (s.total_steps, s.tokens_per_step, s.warmup_end_step) == (11_420, 4_194_304, 114)
    assert [p.start_step for p in s.phases] == [0, 3160, 9136] and s.phases[-1].end_step == 11_419
    assert {s.source(f) for f in ("total_steps", "phases", "warmup", "flops_budget")} == {"published rung d768"}
    assert not s.is_hero


def test_a_repro_run_describes_itself():
    s = schedule_of({"run_id": "repro-rung1-d768-cpu-synthetic", "source": "repro", "config": repro_config()})
    assert s.total_steps == 200 and s.tokens_per_step == 8 * 128
    assert s.warmup_end_step == 10 and s.decay_start_step == 10
    assert [(p.name, p.start_step, p.end_step) for p in s.phases] == [("initial", 0, 39), ("main", 40, 149),
                                                                     ("cooldown", 150, 199)]
    assert s.phases[1].weights == {"web": 0.5, "code": 0.5}
    assert s.flops_budget is None and s.repro_of == "rung1"
    assert all(s.source(f) in (CONFIG, UNKNOWN) for f in ("total_steps", "phases", "warmup", "flops_budget"))


def test_a_repro_run_never_takes_the_published_rung():
    """Its id names d768, but without its own schedule every fact is unknown (the rung is only its overlay)."""
    for run in ({"run_id": "repro-rung1-d768-cpu-synthetic", "source": "repro", "config": {}},
                {"run_id": "d768-synthetic", "source": "local", "config": {"marinctl": {"repro_of": "rung1"}}}):
        s = schedule_of(run)
        assert (s.total_steps, s.tokens_per_step, s.warmup_end_step, s.flops_budget, s.phases) == (None, None, None, None, ())
        assert s.source("total_steps") == UNKNOWN


def test_decay_steps_and_flattened_names():
    cfg = {"trainer.num_train_steps": 1000, "optimizer": {"warmup": 100, "decay": 0.2}, "tokens_per_step": 4096,
           "data": {"train_weights": {"web": 1.0}}}       # not staged: no phases from it
    s = schedule_of({"run_id": "synthetic-wsd", "source": "local", "config": json.dumps(cfg)})
    assert (s.total_steps, s.warmup_end_step, s.decay_start_step, s.tokens_per_step) == (1000, 100, 800, 4096)
    assert s.phases == () and s.source("phases") == UNKNOWN


@pytest.fixture
def repro_store(store):
    """The store after two SYNTHETIC repros of rung1 logged their first 50 steps: one whose config gives
    its schedule under Levanter's names, one whose config does not."""
    with store.transaction() as con:
        con.execute("INSERT INTO metric_keys (key) VALUES ('train/loss')")
        for run_id, config in (("repro-rung1-d768-cpu-synthetic", repro_config()),
                               ("repro-rung1-d768-cpu-synthetic-bare", {"rung": "rung1"})):
            pk = upsert_run(con, RunInfo(source="repro", run_id=run_id, state="running", name=f"{run_id} (synthetic)",
                                         config=config))
            con.execute("INSERT INTO metrics SELECT ?, (SELECT key_id FROM metric_keys WHERE key = 'train/loss'), s,"
                        " 5.0 - s / 50 FROM range(50) t(s)", [pk])
            con.execute("UPDATE runs SET last_step = 49 WHERE run_pk = ?", [pk])
    return store


def test_mix_of_a_repro_run_uses_its_own_phases(repro_store, cli):
    code, out, err = cli("--db", str(repro_store.path), "mix", "--run", "repro-rung1-d768-cpu-synthetic", "--at", "60", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "config" and doc["active"] == "main" and doc["total_steps"] == 200
    assert [(p["start_step"], p["end_step"]) for p in doc["phases"]] == [(0, 39), (40, 149), (150, 199)]
    assert doc["phases"][1]["weights"] == {"web": 0.5, "code": 0.5}


def test_explain_context_of_a_repro_run_uses_its_own_schedule(repro_store, cli):
    code, out, err = cli("--db", str(repro_store.path), "explain", "step", "30", "--run", "repro-rung1-d768-cpu-synthetic")
    assert code == 0, err
    assert "warm-up ends at step 10 of 200, config" in out and "11,420" not in out
    assert "phase 1 (initial) since step 0; next switch at step 40" in out


async def _header_text(store, run: str) -> str:
    from tests.watch_pilot import open_watch, run_test, settle, wait_for_text

    async with run_test(open_watch(store.path, run)) as pilot:
        await wait_for_text(pilot, "step ", "tokens ")
        return "\n".join((await settle(pilot)).splitlines()[:3])


@pytest.mark.asyncio
async def test_watch_header_of_a_repro_run_counts_its_own_steps(repro_store):
    from marinctl import numbers as N

    text = await _header_text(repro_store, "repro-rung1-d768-cpu-synthetic")
    done, per_step = 50, 8 * 128          # repro_store logged steps 0..49; its config: batch 8 × seq 128
    assert f"step 49 / 200 ({N.percent(done / 200)})" in text and f"tokens {N.si(done * per_step)}" in text
    assert "data 2:main" in text
    assert "11,420" not in text and "5.5e19" not in text           # nothing of the published rung's schedule
    text = await _header_text(repro_store, "repro-rung1-d768-cpu-synthetic-bare")
    assert "step 49 " in text and "/" not in text.split("step 49", 1)[1].split("tokens")[0]
    assert "11,420" not in text and "5.5e19" not in text and "data —" in text
