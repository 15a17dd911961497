"""`python -m repro.train` as a person runs it: the W&B run it logs, data-parallel under torchrun, Ctrl-C.

Real components: Python's stdlib docstrings as text, a BPE trained with `tokenizers`, the wandb SDK in
offline mode (its `.wandb` file read back with wandb's own protobuf classes), torchrun with gloo. The
model is a tiny proxy read from a SYNTHETIC Levanter-shaped config, so every run takes seconds.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from repro.data import corpus_from_domains, stdlib_docstrings  # noqa: E402
from repro.logged_config import from_logged  # noqa: E402
from repro.loop import train  # noqa: E402
from repro.recipe import cpu_proxy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY = {"trainer": {"num_train_steps": 3, "train_batch_size": 8, "seed": 5},
        "model": {"hidden_dim": 64, "num_layers": 2, "num_heads": 2, "head_dim": 32, "num_kv_heads": 1, "num_experts": 8,
                  "num_experts_per_tok": 2, "intermediate_dim": 32, "latent_dim": 32, "num_shared_experts": 2,
                  "shared_expert_intermediate_dim": 32, "seq_len": 64, "sliding_window": 32, "gated_norm_rank": 16,
                  "qb_hist_bins": 1000, "vocab_size": 512},
        "optimizer": {"type": "muonh", "learning_rate": 0.02, "adam_lr": 0.005}}


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """A SYNTHETIC tiny config, real text, and a home shared by the module (tokenizer and peak cached)."""
    base = tmp_path_factory.mktemp("repro-tiny")
    (base / "config.json").write_text(json.dumps(TINY))
    (base / "text.txt").write_text(stdlib_docstrings(120_000))
    return base


def trainer(tiny_files: Path, out: Path, *extra: str, nproc: int = 1, cpu: bool = True) -> list[str]:
    args = ["-m", "repro.train", "--from-config", str(tiny_files / "config.json"), "--source-run", "synthetic-tiny",
            *(["--cpu"] if cpu else []),
            "--data", str(tiny_files / "text.txt"), "--home", str(tiny_files / "home"), "--out", str(out), "--json",
            "--threads", "1", *extra]
    if nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]
    return [sys.executable, *args]


def run(cmd: list[str], timeout: float = 240) -> tuple[int, dict, str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    doc = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, doc, done.stderr


# --- reading a .wandb file back (LevelDB-log framing + wandb's protobuf Record) ----------------------

def _payloads(path: Path):
    buf = path.read_bytes()
    assert buf[:4] == b":W&B"
    pos, parts, block = 7, [], 32768
    while pos + 7 <= len(buf):
        left = block - (pos % block)
        if left < 7:
            pos += left
            continue
        crc, ln, typ = struct.unpack_from("<IHB", buf, pos)
        if typ == 0 and ln == 0:
            pos += left
            continue
        data = buf[pos + 7:pos + 7 + ln]
        assert zlib.crc32(data, zlib.crc32(bytes([typ]))) & 0xFFFFFFFF == crc
        pos += 7 + ln
        if typ == 1:
            yield data
        elif typ == 2:
            parts = [data]
        elif typ == 3:
            parts.append(data)
        elif typ == 4:
            yield b"".join(parts + [data])


def records(run_dir: Path) -> tuple[list[dict], dict, int | None]:
    """(history rows, config, exit code) of the run's .wandb file."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows, config, exit_code = [], {}, None
    for payload in _payloads(next(Path(run_dir).glob("*.wandb"))):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            rows.append({(it.key or "/".join(it.nested_key)): json.loads(it.value_json) for it in rec.history.item})
        elif kind in ("run", "config"):
            updates = rec.run.config.update if kind == "run" else rec.config.update
            config.update({u.key: json.loads(u.value_json) for u in updates})
        elif kind == "exit":
            exit_code = rec.exit.exit_code
    return rows, config, exit_code


def ctrl_c_when(child: subprocess.Popen, ready) -> str:
    """Wait for `ready()`, send SIGINT as a terminal's Ctrl-C would, and reap the child; its stderr."""
    try:
        ready()
        child.send_signal(signal.SIGINT)
        return child.communicate(timeout=120)[1]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --- the loop in-process -------------------------------------------------------------------------------

def test_same_seed_gives_bit_identical_steps(tiny_files, tmp_path):
    cfg, _ = from_logged(TINY, "synthetic-tiny")
    cfg = cpu_proxy(cfg, steps=6)
    text = (tiny_files / "text.txt").read_text()
    corpus = corpus_from_domains({"prose": text[:60_000], "code": text[60_000:]}, 512, 64, "test", tmp_path)
    runs = []
    for seed in (7, 7, 8):
        rows: list[dict] = []
        out = train(cfg, corpus, seed=seed, log=lambda m, s, rows=rows: rows.append(m))
        runs.append(([r["train/loss"] for r in rows], [r["grad/norm/total"] for r in rows],
                     out["model"].stacked_blocks[1].mlp.router_bias.clone()))
    (loss_a, grad_a, bias_a), (loss_b, grad_b, bias_b), (loss_c, _, _) = runs
    assert len(loss_a) == 6 and loss_a == loss_b and grad_a == grad_b  # exact float equality, every step
    assert torch.equal(bias_a, bias_b) and bias_a.abs().sum() > 0     # QB moved the bias, identically
    assert loss_c != loss_a


def test_mfu_never_exceeds_100_percent_a_low_peak_is_raised_and_said(tiny_files, tmp_path):
    from repro.loop import Peak

    cfg, _ = from_logged(TINY, "synthetic-tiny")
    text = (tiny_files / "text.txt").read_text()
    corpus = corpus_from_domains({"prose": text}, 512, 64, "test", tmp_path)
    rows: list[dict] = []
    peak = Peak(1.0)  # a peak far below what any step does
    train(cpu_proxy(cfg, steps=3), corpus, log=lambda m, s: rows.append(m), peak=peak)
    assert len(rows) == 3 and all(0 < r["throughput/mfu"] <= 100.0 for r in rows)
    assert peak.revised_at is not None and peak.flops > 1e6  # the last step that beat the kept peak


# --- the trainer as a process ---------------------------------------------------------------------------

def test_one_run_logs_levanter_keys_and_its_own_schedule(tiny_files, tmp_path):
    code, doc, err = run(trainer(tiny_files, tmp_path / "out", "--steps", "3", "--seed", "5"))
    assert code == 0, err
    assert isinstance(doc["run"], str) and Path(doc["run_dir"]).is_dir() and doc["result"]["steps_done"] == 3
    rows, config, exit_code = records(Path(doc["run_dir"]))
    assert exit_code == 0 and [r["global_step"] for r in rows] == [0, 1, 2]
    keys = set().union(*rows)
    for key in ("train/loss", "train/cross_entropy_loss", "train/z_loss", "optim/learning_rate", "optim/adam_lr",
                "grad/norm/total", "params/norm/total", "params/norm/stacked_blocks.0.mlp.router_bias",
                "grad/norm/stacked_blocks.0.mlp.router_bias", "params/norm/lm_head", "params/norm/stacked_blocks.1.attn.w_q",
                "throughput/tokens_per_second", "throughput/total_tokens", "throughput/mfu", "moe/drop_fraction",
                "train/router/routing_entropy_mean", "train/router/layer_1/capacity_overflow_rate", "eval/loss",
                "eval/user/loss", "mixture/stage", "mixture/weight/user"):
        assert key in keys, key
    assert all(0 < r["throughput/mfu"] <= 100 for r in rows)
    assert [r["throughput/total_tokens"] for r in rows] == [512, 1024, 1536]  # the run's own tokens: 8 × 64 per step
    unwrap = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in config.items()}
    assert unwrap["trainer"]["num_train_steps"] == 3 and unwrap["trainer"]["train_batch_size"] == 8
    assert unwrap["trainer"]["seed"] == 5 and unwrap["model"]["seq_len"] == 64 and unwrap["model"]["hidden_dim"] == 64
    assert unwrap["optimizer"]["lr_schedule"] == "linear" and unwrap["optimizer"]["warmup"] == 0.01
    assert unwrap["optimizer"]["decay"] is None and unwrap["optimizer"]["type"] == "muonh"
    assert [w[0] for w in unwrap["data"]["train_weights"]] == [0, 1, 2]  # phase starts at 27.7 % and 80 % of 3 steps
    assert unwrap["marinctl"]["repro_of"] == "synthetic-tiny" and unwrap["marinctl"]["kind"] == "cpu-proxy"


@pytest.mark.slow
def test_two_ranks_under_torchrun_log_one_run_matching_one_process(tiny_files, tmp_path):
    code1, one, err1 = run(trainer(tiny_files, tmp_path / "one", "--steps", "2", "--seed", "1"))
    code2, two, err2 = run(trainer(tiny_files, tmp_path / "two", "--steps", "2", "--seed", "1", nproc=2))
    assert code1 == 0, err1
    assert code2 == 0, err2
    assert two["result"]["ranks"] == 2
    assert len(list((tmp_path / "two" / "wandb").glob("offline-run-*"))) == 1  # rank 0 alone logs
    rows1, _, _ = records(Path(one["run_dir"]))
    rows2, config2, exit2 = records(Path(two["run_dir"]))
    assert exit2 == 0 and [r["global_step"] for r in rows2] == [0, 1]
    assert rows2[0]["train/loss"] == pytest.approx(rows1[0]["train/loss"], rel=0.01)
    assert rows2[0]["throughput/total_tokens"] == rows1[0]["throughput/total_tokens"]  # the same global batch
    # sharded MuonH/AdamH still keep every matrix on its hyperball (norms reduced across ranks)
    for key in ("params/norm/stacked_blocks.0.attn.w_q", "params/norm/stacked_blocks.1.mlp.expert_mlp.w_up",
                "params/norm/lm_head"):
        assert rows2[-1][key] == pytest.approx(rows2[0][key], rel=1e-4)
        assert rows2[0][key] == pytest.approx(rows1[0][key], rel=1e-4)


@pytest.mark.gpu
def test_without_cpu_the_run_trains_on_cuda_in_bf16(tiny_files, tmp_path):
    """On demand (`pytest -m gpu`, on a machine with one): fails, not skips, where there is no GPU."""
    code, doc, err = run(trainer(tiny_files, tmp_path / "gpu", "--steps", "2", cpu=False))
    assert code == 0, err
    assert doc["result"]["device"] == "cuda" and doc["result"]["compute_dtype"] == "bfloat16"
    rows, _, exit_code = records(Path(doc["run_dir"]))
    assert exit_code == 0 and len(rows) == 2 and all(0 < r["throughput/mfu"] <= 100 for r in rows)


def test_ctrl_c_finishes_the_run_as_killed(tiny_files, tmp_path):
    cmd = trainer(tiny_files, tmp_path / "out", "--steps", "500")
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    def first_step() -> None:
        for line in child.stderr:
            if line.startswith("step "):
                return

    err = ctrl_c_when(child, first_step)
    assert child.returncode == 130 and "interrupted" in err
    (run_dir,) = (tmp_path / "out" / "wandb").glob("offline-run-*")
    rows, _, exit_code = records(run_dir)
    assert exit_code == 255 and 1 <= len(rows) < 500  # W&B's own Ctrl-C code: killed, not finished


STUCK_SERVICE = """
import os, signal, sys, time
from pathlib import Path
from repro import wandb_log
run, folder = wandb_log.open_run(Path(sys.argv[1]), "synthetic-stuck-service", {}, group="synthetic", tags=[])
run.log({"train/loss": 1.0}, step=0)
run.finish(exit_code=0)
# the hang this stands for: a service that flushed the run (every 1 s) but never read its teardown
# message; stopped before its flush, it would lose the exit record, which no real hang does
from tests.test_repro_train import records
deadline = time.monotonic() + 30
while records(folder)[2] is None and time.monotonic() < deadline:
    time.sleep(0.05)
stuck = wandb_log._service_pids()
Path(sys.argv[1], "stuck").write_text(" ".join(map(str, stuck)))
for pid in stuck:
    os.kill(pid, signal.SIGSTOP)  # a service that never reads its teardown message
began = time.monotonic()
killed = wandb_log.teardown(limit_s=1.0)
print(len(stuck), killed, round(time.monotonic() - began), folder)
"""


def test_a_wandb_service_that_never_stops_does_not_hold_the_run_open(tmp_path):
    """wandb.teardown() waits on its service with no limit; a service that missed the message (once in a suite
    here) held the process for ever. Now it is killed after the limit, and the run's record is complete."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"WANDB_SILENT": "true"}
    try:
        done = subprocess.run([sys.executable, "-c", STUCK_SERVICE, str(tmp_path)], capture_output=True, text=True,
                              timeout=60, cwd=ROOT, env=env)
    finally:  # a stopped service outlives its parent: never leave one behind
        for pid in (tmp_path / "stuck").read_text().split() if (tmp_path / "stuck").exists() else ():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert done.returncode == 0, done.stderr[-2000:]
    found, killed, seconds, folder = done.stdout.split()
    assert found == "1" and killed == "True" and int(seconds) < 10
    assert "did not stop within 1 s" in done.stderr and "record was already complete" in done.stderr
    rows, _, exit_code = records(Path(folder))
    assert exit_code == 0 and [r["train/loss"] for r in rows] == [1.0]


def test_bad_input_is_exit_2_with_a_hint(tiny_files, tmp_path):
    code, _, err = run([sys.executable, "-m", "repro.train", "rung9", "--dry-run"])
    assert code == 2 and "unknown rung 'rung9'" in err and "try:" in err and len(err.strip().splitlines()) == 2
    (tmp_path / "bad.json").write_text("{not json")
    code, _, err = run([sys.executable, "-m", "repro.train", "--from-config", str(tmp_path / "bad.json"), "--dry-run"])
    assert code == 2 and "not JSON" in err
    code, _, err = run([sys.executable, "-m", "repro.train", "rung1"])  # the true size needs CUDA, hidden here
    assert code == 2 and "needs CUDA" in err and "--cpu" in err


def test_no_test_sees_a_gpu_and_the_gpu_test_runs_only_when_asked_for():
    """What keeps `repro rung1` above from starting a true-size run on a machine with CUDA: a process a
    test starts sees no GPU, nor does torch here; the `gpu` test is deselected unless `-m gpu` asks."""
    assert torch.cuda.is_available() is False and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
    assert child.stdout.strip() == "0", child.stderr[-500:]

    def collected(*extra: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "tests/test_repro_train.py", *extra], capture_output=True, text=True, cwd=ROOT, timeout=120)
        return [line for line in done.stdout.splitlines() if "::" in line]

    assert not [t for t in collected() if "on_cuda" in t]
    assert [t.split("::")[1] for t in collected("-m", "gpu")] == ["test_without_cpu_the_run_trains_on_cuda_in_bf16"]
