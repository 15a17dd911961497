"""`marinctl mix`: phase boundaries at the switch steps, rung scaling, and each weight source.

The published table is Marin's (marin#8435); mixture files and `mixture/*` series here
are SYNTHETIC, built by the tests.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from marinctl.analysis.mix import file_mix, published_mix
from marinctl.analysis.schedule import published_phases, published_schedule
from marinctl.domain import RunInfo
from marinctl.store import metrics as M
from marinctl.store.runs import refresh_last_step, upsert_run


@pytest.mark.parametrize("step,number,name", [
    (0, 1, "initial"), (107_999, 1, "initial"), (108_000, 2, "main"),
    (312_191, 2, "main"), (312_192, 3, "cooldown"), (390_250, 3, "cooldown"),
])
def test_mix_at_switch_steps(cli, step, number, name):
    code, out, err = cli("mix", "--at", str(step), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["active"], doc["active_number"]) == (name, number)
    assert doc["source"] == "published" and "published" in doc["label"]
    assert [(p["start_step"], p["end_step"]) for p in doc["phases"]] == [(0, 107_999), (108_000, 312_191), (312_192, 390_250)]
    assert doc["phases"][1]["weights"]["CLI agent transcripts"] == pytest.approx(0.06)
    for p in doc["phases"]:
        assert sum(p["weights"].values()) == pytest.approx(1.0)


def test_mix_beyond_the_schedule_has_no_active_phase(cli):
    code, out, _ = cli("mix", "--at", "390251", "--json")
    assert json.loads(out)["active"] is None


def test_human_mix_marks_the_active_phase(cli):
    code, out, _ = cli("mix", "--at", "108000")
    assert code == 0
    header = out.splitlines()[2]
    assert "▶ main" in header and "▶ initial" not in header
    assert "108,000–312,191" in out and "Natural science" in out


def test_rungs_switch_at_the_same_fractions():
    d768 = published_phases(11_420)
    starts = [p.start_step for p in d768]
    assert starts == [0, 3160, 9136] and d768[-1].end_step == 11_419
    mix = published_mix(published_schedule("rung1"))
    assert mix.active(3159).name == "initial" and mix.active(3160).name == "main"
    assert mix.notes  # says the steps were scaled


def test_rung_alias_via_cli(cli):
    code, out, _ = cli("mix", "--run", "rung1", "--at", "9136", "--json")
    doc = json.loads(out)
    assert doc["active"] == "cooldown" and doc["phases"][2]["start_step"] == 9136


SYNTH_FILE = json.dumps({  # SYNTHETIC two-phase mixture file in the repository file's shape
    "phase0_weights": {"c00q0": 0.25, "c00q1": 0.75},
    "phase1_weights": {"c00q0": 0.6, "c00q1": 0.4},
    "phase_budgets": [15, 3.75],
})


def test_synced_repository_file_is_the_source_when_present(cli, tmp_path):
    from marinctl.analysis.mix import HERO_MIX_PATH, HERO_MIX_REPO
    from marinctl.store import open_store

    with open_store().transaction() as con:
        con.execute("INSERT INTO repo_files (repo, path, sha, content) VALUES (?, ?, ?, ?)",
                    [HERO_MIX_REPO, HERO_MIX_PATH, "f" * 40, SYNTH_FILE])
    code, out, err = cli("mix", "--at", "312192", "--json")
    doc = json.loads(out)
    assert doc["source"] == "file" and doc["active"] == "cooldown"
    assert doc["phases"][0]["weights"] == {"c00q0": 0.25, "c00q1": 0.75}
    assert doc["phases"][2]["weights"] == {"c00q0": 0.6, "c00q1": 0.4}
    assert doc["phases"][2]["weights_from"].endswith("phase1")
    assert any("PR #9162" in n for n in doc["notes"])


def test_file_with_no_phase_weights_falls_back_to_published():
    assert file_mix('{"candidate": "x"}', None) is None


def test_a_synced_file_in_an_unknown_shape_is_named_when_mix_falls_back(cli):
    from marinctl.analysis.mix import HERO_MIX_PATH, HERO_MIX_REPO
    from marinctl.store import open_store

    with open_store().transaction() as con:
        con.execute("INSERT INTO repo_files (repo, path, sha, content) VALUES (?, ?, ?, ?)",
                    [HERO_MIX_REPO, HERO_MIX_PATH, "e" * 40, '{"candidate": "synthetic"}'])
    code, out, err = cli("mix", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["source"] == "published"
    assert any("harrier_mix_2026_08_18.json" in n and "fell back" in n for n in doc["notes"]), doc["notes"]
    code, out, _ = cli("mix")
    assert "note: could not read the synced harrier_mix_2026_08_18.json" in out


@pytest.mark.parametrize("shape", [
    {"train_weights": [[0, {"web": 0.6, "code": 0.4}], [108000, {"web": 0.5, "code": 0.5}],
                       [312192, {"web": 0.3, "code": 0.7}]]},
    {"phases": [{"start": 0, "weights": {"web": 0.6, "code": 0.4}}, {"start": 108000, "weights": {"web": 0.5, "code": 0.5}},
                {"start": 312192, "weights": {"web": 0.3, "code": 0.7}}]},
])
def test_a_file_with_its_own_stage_starts_keeps_them(shape):
    """SYNTHETIC files in Levanter's staged shape (as PR #9162's main-phase change writes a mixture)."""
    mix = file_mix(json.dumps(shape), "d" * 40)
    assert [(p.start_step, p.end_step) for p in mix.phases] == [(0, 107_999), (108_000, 312_191), (312_192, 390_250)]
    assert mix.active(200_000).weights == {"web": 0.5, "code": 0.5} and mix.source == "file"


def test_logged_mixture_keys_win(cli, store):
    """A SYNTHETIC run that logs mixture/stage and mixture/weight/* at every step."""
    steps = list(range(0, 300))
    stage = [0 if s < 100 else 1 for s in steps]
    wa = [0.7 if s < 100 else 0.2 for s in steps]
    wb = [0.3 if s < 100 else 0.8 for s in steps]
    n = len(steps)
    batch = pa.table({"step": pa.array(steps * 3, pa.int64()),
                      "key": pa.array(["mixture/stage"] * n + ["mixture/weight/web"] * n + ["mixture/weight/code"] * n),
                      "value": pa.array([float(x) for x in stage + wa + wb], pa.float64())})
    with store.transaction() as con:
        pk = upsert_run(con, RunInfo(source="wandb", run_id="mix-synth", entity="e", project="p"))
        M.replace_range(con, pk, batch, 0, 300)
        refresh_last_step(con, pk)
    code, out, err = cli("--db", str(store.path), "mix", "--run", "mix-synth", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "wandb"
    assert [(p["name"], p["start_step"], p["end_step"]) for p in doc["phases"]] == [("stage 0", 0, 99), ("stage 1", 100, 299)]
    assert doc["phases"][1]["weights"] == {"web": pytest.approx(0.2), "code": pytest.approx(0.8)}
    assert doc["active"] == "stage 1"  # the run's last step, 299


def test_bad_at_is_exit_2(cli):
    code, _, err = cli("mix", "--at", "-5")
    assert code == 2 and "--at" in err
