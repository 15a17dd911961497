"""`marinctl repro` and `marinctl demo` as a person runs them: the launcher, the contract's JSON, exit codes,
a stored run rerun from its own config, the mirror into the store, and Ctrl-C reaping the trainer.

Stored runs here are SYNTHETIC: written with the real wandb SDK (offline) under Levanter's config names,
then mirrored with `marinctl sync DIR`, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.wandb_log import teardown as teardown_wandb  # wandb.teardown() that cannot wait for ever

pytest.importorskip("torch")

from tests.test_repro_train import TINY, ctrl_c_when, records  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MARINCTL = [sys.executable, "-m", "marinctl"]


def stored_run(cli, tmp_path: Path, run_id: str, config: dict) -> None:
    """A SYNTHETIC run logged with the wandb SDK, then mirrored by `marinctl sync DIR`."""
    import wandb

    run = wandb.init(mode="offline", dir=str(tmp_path), project="synthetic", id=run_id, name=run_id, config=config,
                     settings=wandb.Settings(x_disable_stats=True, console="off", silent=True))
    for step in range(3):
        run.log({"train/loss": 6.0 - step}, step=step)
    run.finish()
    teardown_wandb()
    (run_dir,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}")
    code, _, err = cli("sync", str(run_dir))
    assert code == 0, err


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    from repro.data import stdlib_docstrings

    path = tmp_path_factory.mktemp("repro-cli") / "text.txt"
    path.write_text(stdlib_docstrings(120_000))
    return path


def test_dry_run_json_is_the_contract_with_the_published_counts(cli):
    code, out, err = cli("repro", "rung1", "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["rung"] == "rung1" and doc["run"] is None and doc["run_dir"] is None
    true, proxy = doc["true"], doc["proxy"]
    assert true["total_params"] == pytest.approx(1.6e9, rel=0.03) and true["active_params"] == pytest.approx(61e6, rel=0.03)
    assert "excludes embeddings and lm_head" in true["active_counts"]
    assert true["shape"]["hidden_dim"] == 768 and true["shape"]["num_experts"] == 384 and true["shape"]["latent_dim"] == 384
    assert true["memory_gib"]["weights"] == pytest.approx(true["total_params"] * 4 / 2**30)
    assert true["flops_per_token"] > 6 * true["active_params"] and true["steps"] == 11420 and true["warmup_steps"] == 115
    assert true["phase_steps"] == [0, 3160, 9136] and true["learning_rate"] == 0.0158
    assert "holds" in true["fits"] and true["fits"]["gpus_of_80_gib_needed"] >= 1
    assert proxy["shape"]["num_experts_per_token"] / proxy["shape"]["num_experts"] == pytest.approx(8 / 384)
    assert proxy["shape"]["num_heads"] == true["shape"]["num_heads"] == 6 and proxy["fits"]["holds"]


def test_dry_run_for_people_and_width_aliases(cli):
    code, out, _ = cli("repro", "d2048", "--dry-run")
    assert code == 0 and "27.7B-A1.2B" in out and "true run" in out and "cpu proxy" in out
    assert "exclude embeddings and lm_head" in out and "published" in out


def test_bad_input_exits_2_naming_it(cli, tmp_path):
    code, _, err = cli("repro", "rung9", "--cpu")
    assert code == 2 and "neither a ladder rung nor a stored run" in err and "try:" in err
    code, _, err = cli("repro", "rung1", "--cpu", "--steps", "0")
    assert code == 2 and "--steps" in err
    code, _, err = cli("repro", "rung1", "--cpu", "--nproc", "0")
    assert code == 2 and "--nproc" in err
    code, _, err = cli("repro", "rung1", "--cpu", "--data", str(tmp_path / "missing.txt"))
    assert code == 2 and "--data" in err
    code, _, err = cli("repro", "rung1")  # the true size needs CUDA, which no test sees (tests/conftest.py)
    assert code == 2 and "needs CUDA" in err


def test_a_stored_run_reruns_from_its_own_config(cli, tmp_path):
    from tests.test_repro_logged_config import h100_rung

    stored_run(cli, tmp_path, "synthetic-h100-d512", {k: v["value"] for k, v in h100_rung(512, 6, 4, 1, 1, 6000).items()})
    code, out, err = cli("repro", "synthetic-h100-d512", "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["true"]["shape"]["hidden_dim"] == 512 and doc["true"]["shape"]["num_layers"] == 6 and doc["rung"] is None
    assert doc["true"]["steps"] == 6000 and doc["true"]["source_run"] == "synthetic-h100-d512"
    assert doc["from_config"]["read"]["hidden_dim"] == "model.hidden_dim"
    assert "gated_norm_rank" in doc["from_config"]["defaulted"]


def test_cpu_run_logs_mirrors_and_answers_with_the_run_id(cli, tmp_path, text_file):
    stored_run(cli, tmp_path, "synthetic-tiny", TINY)
    code, out, err = cli("repro", "synthetic-tiny", "--cpu", "--steps", "2", "--seed", "4", "--data", str(text_file), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert isinstance(doc["run"], str) and doc["run_dir"] and doc["mirror"] == "mirrored into the store"
    assert doc["result"]["steps_done"] == 2 and "step     2/2" in err  # the trainer's progress streamed to stderr
    code, out, _ = cli("runs", "--json")
    mirrored = {r["run"]: r for r in json.loads(out)}
    assert mirrored[doc["run"]]["source"] == "repro" and mirrored[doc["run"]]["last_step"] == 1
    code, out, _ = cli("show", doc["run"], "--json")
    config = json.loads(out)["config"]
    assert "2" in json.dumps(config) and "num_train_steps" in json.dumps(config)


@pytest.mark.slow
def test_nproc_2_launches_torchrun_and_logs_one_run(cli, tmp_path, text_file):
    stored_run(cli, tmp_path, "synthetic-tiny-dp", TINY)
    code, out, err = cli("repro", "synthetic-tiny-dp", "--cpu", "--steps", "2", "--nproc", "2", "--data", str(text_file),
                         "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["result"]["ranks"] == 2 and doc["result"]["steps_done"] == 2
    rows, _, exit_code = records(Path(doc["run_dir"]))
    assert exit_code == 0 and [r["global_step"] for r in rows] == [0, 1]


def test_demo_ctrl_c_reaps_the_trainer_and_records_the_run_as_killed(tmp_path, text_file):
    home = tmp_path / "home"
    env = {**os.environ, "MARINCTL_HOME": str(home)}
    child = subprocess.Popen([*MARINCTL, "demo", "--steps", "500", "--data", str(text_file)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    first_line = []

    def training() -> None:
        """Until the trainer logs steps: its `.wandb` file exists and then grows."""
        first_line.append(child.stderr.readline())
        deadline = time.time() + 240
        files: list[Path] = []
        while time.time() < deadline and not files:
            files = list((home / "repro" / "wandb").glob("offline-run-*demo/*.wandb"))
            time.sleep(0.1)
        size = files[0].stat().st_size if files else 0
        while files and time.time() < deadline and files[0].stat().st_size <= size:
            time.sleep(0.1)

    err = ctrl_c_when(child, training)
    assert first_line[0].startswith("starting the rung1 proxy"), first_line  # said at once, before anything loads
    assert child.returncode == 130, err
    (run_dir,) = (home / "repro" / "wandb").glob("offline-run-*demo")
    left = subprocess.run(["pgrep", "-f", run_dir.name.split("-", 3)[-1]], capture_output=True, text=True)
    assert left.stdout.strip() == ""  # no trainer left behind: not orphaned, not a zombie
    _, _, exit_code = records(run_dir)
    assert exit_code == 255  # what W&B writes for Ctrl-C: a reader shows the run as killed
