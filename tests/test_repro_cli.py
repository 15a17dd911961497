"""`marinctl repro` / `demo` at the command line: the contract's JSON, exit codes, hints."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_dry_run_json_has_the_contract_fields(cli):
    code, out, err = cli("repro", "rung1", "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) >= {"rung", "proxy", "true", "run"} and doc["rung"] == "rung1" and doc["run"] is None
    true, proxy = doc["true"], doc["proxy"]
    assert true["shape"]["d_model"] == 768 and true["shape"]["experts"] == 384 and true["shape"]["top_k"] == 8
    assert proxy["shape"]["top_k"] / proxy["shape"]["experts"] == pytest.approx(8 / 384)
    assert proxy["shape"]["heads"] == true["shape"]["heads"] == 6
    assert true["steps"] == 11420 and true["warmup_steps"] == 115
    assert true["phase_steps"] == [0, 3160, 9136]
    assert proxy["phase_steps"][1] / proxy["steps"] == pytest.approx(0.27674, abs=0.01)
    assert true["flops"] == pytest.approx(6 * true["active_params"] * true["tokens"])
    assert true["published"]["total_params"] == 1.6e9
    assert true["time_s_at_measured_peak"] > proxy["time_s_at_measured_peak"] > 0
    assert true["muonh_lr"] == proxy["muonh_lr"] == 0.0158  # the rung's own LRs


def test_dry_run_human_and_width_alias(cli):
    code, out, _ = cli("repro", "d2048", "--dry-run")
    assert code == 0 and "rung4" in out and "true rung" in out and "cpu proxy" in out


def test_true_size_without_cuda_says_what_is_needed(cli):
    from repro.machine import cuda_memory_bytes

    if cuda_memory_bytes() is not None:
        pytest.skip("this machine has CUDA")
    code, out, err = cli("repro", "rung1")
    assert code == 2 and out == ""
    assert "CUDA GPU" in err and "GiB" in err and "--cpu" in err


def test_bad_input_exits_2(cli, tmp_path):
    code, _, err = cli("repro", "rung9", "--cpu")
    assert code == 2 and "unknown" in err and "try:" in err
    code, _, err = cli("repro", "rung1", "--cpu", "--steps", "0")
    assert code == 2 and "--steps" in err
    code, _, err = cli("repro", "rung1", "--cpu", "--data", str(tmp_path / "missing.txt"))
    assert code == 2 and "--data" in err
    small = tmp_path / "small.jsonl"
    small.write_text('{"text": "hello"}\n')
    code, _, err = cli("repro", "rung1", "--cpu", "--steps", "2", "--data", str(small))
    assert code == 2 and "20,000" in err


@pytest.mark.slow
def test_cpu_run_on_user_jsonl_logs_and_mirrors(cli, tmp_path):
    """End to end through the CLI on the user's own text (real prose: the stdlib's docstrings)."""
    from repro.data import stdlib_docstrings

    text = stdlib_docstrings(200_000)
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(json.dumps({"text": text[i:i + 2000]}) for i in range(0, len(text), 2000)))
    code, out, err = cli("repro", "rung1", "--cpu", "--steps", "3", "--data", str(data), "--json")
    assert code == 0, err
    run = json.loads(out)["run"]
    assert run["steps_done"] == 3 and run["final_loss"] > 0 and run["wandb_file"].endswith(".wandb")
    assert "d768" in run["id"]
    if run["note"] is None:  # mirrored: the store lists it as a reproduction of rung1
        code, out, _ = cli("runs", "--json")
        assert code == 0 and run["id"] in out


def test_repro_of_a_stored_run_uses_the_rung_its_config_describes(cli, monkeypatch, tmp_path):
    """A synthetic stored run (labelled so) whose config gives a d1024 model maps to rung2."""
    from marinctl import paths
    from marinctl.domain import RunInfo
    from marinctl.store import open_store
    from marinctl.store.runs import upsert_run

    store = open_store(paths.db_path())
    with store.transaction() as con:
        upsert_run(con, RunInfo(source="wandb", run_id="synthetic-moe-d1024", entity="e", project="p",
                                config={"model": {"hidden_dim": 1024, "num_layers": 12}}))
        upsert_run(con, RunInfo(source="wandb", run_id="synthetic-dense-d999", entity="e", project="p",
                                config={"model": {"hidden_dim": 999}}))
    code, out, err = cli("repro", "synthetic-moe-d1024", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["rung"] == "rung2"
    code, _, err = cli("repro", "synthetic-dense-d999", "--dry-run")
    assert code == 2 and "does not describe a ladder rung" in err
