"""Every command of the README's quick start runs as written, in the order written.

The runner reads the ```bash block under "## Quick start" in README.md and runs each command
(`a && b` is two) through marinctl's entry point, twice:

- as an offline reader: on a store made the way `demo` makes it, with the network unreachable,
  every command that needs no network, in order (this is where `explain step 500` right after
  `demo` must work);
- as a reader with network: every command in order, the network ones against the loopback W&B
  and GitHub fakes (`WANDB_BASE_URL`, `GITHUB_API_URL`) serving a SYNTHETIC hero lineage, ladder
  and GitHub history.

`demo` itself is a TUI around a background `repro rung1 --cpu`, which takes minutes on 2 cores,
so it is substituted by what it leaves behind: a repro-shaped SYNTHETIC run written with the
wandb SDK into `<home>/repro/wandb` (the proxy's steps, batch, sequence length and phase
switches as `repro rung1 --cpu --dry-run --json` reports them; the config under the names repro
logs) and mirrored with `marinctl sync`, then the watch screen opened on it through Pilot. Every
`watch` is run through Pilot (tests/watch_pilot.py); `sync … --follow` runs as a real process
stopped with Ctrl-C (SIGINT) once it has synced.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path


from tests.blackbox import ROOT, env_with, marinctl_proc, marinctl_run, sdk_env, sdk_write
from tests.watch_pilot import open_watch, run_test, settle


def quickstart() -> list[list[str]]:
    """The quick start's commands, in order, each as argv (comments dropped, `&&` split)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Quick start\s*\n+```(?:bash|sh|console)?\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no ```bash block under '## Quick start'"
    commands = []
    for line in m.group(1).splitlines():
        tokens = shlex.split(line, comments=True)
        cur: list[str] = []
        for tok in tokens + ["&&"]:
            if tok == "&&":
                if cur:
                    commands.append(cur)
                cur = []
            else:
                cur.append(tok)
    assert commands and all(c[0] == "marinctl" for c in commands), commands
    return commands


def needs_network(cmd: list[str]) -> bool:
    """`sync` of anything that is not a local path (no target: `marin`)."""
    if cmd[1] != "sync":
        return False
    targets = [a for a in cmd[2:] if not a.startswith("--")]
    return not targets or any(not a.startswith((".", "/", "~")) for a in targets)


def write_demo_run(home: Path, proxy: dict, cwd: Path) -> Path:
    """What `demo` leaves behind: a repro-shaped SYNTHETIC offline run under <home>/repro/wandb
    (and, in the same SDK process, the reader's own ./wandb folder for `sync ./wandb --follow`)."""
    steps, batch, seq = proxy["steps"], proxy["batch"], proxy["shape"]["seq_len"]
    starts = list(proxy["phase_steps"])
    warm = proxy["warmup_steps"] / steps
    body = f'''
import math
steps, batch, seq, starts, warm = {steps}, {batch}, {seq}, {starts!r}, {warm!r}
run_id = "repro-rung1-d768-cpu-20260901-080000-s0"
weights = [{{"prose": 0.7 - 0.2 * i, "code": 0.3 + 0.2 * i}} for i in range(len(starts))]
run = wandb.init(mode="offline", dir=out, project="marinctl-repro", id=run_id, name=run_id + " (synthetic)",
                 group="repro-rung1", job_type="repro", tags=["repro", "rung1", "cpu-proxy", "synthetic"], settings=S(),
                 config={{"rung": "rung1", "kind": "cpu-proxy", "seed": 0,
                         "trainer": {{"num_train_steps": steps, "train_batch_size": batch}},
                         "model": {{"seq_len": seq}},
                         "optimizer": {{"learning_rate": 0.0158, "warmup": warm, "min_lr_ratio": 0.05}},
                         "data": {{"train_weights": [[s, w] for s, w in zip(starts, weights)]}},
                         "marinctl": {{"repro_of": "rung1", "kind": "cpu-proxy"}}}})
phase = -1
for s in range(steps):
    row = {{}}
    p = max(i for i, st in enumerate(starts) if s >= st)
    if p != phase:
        phase = p
        row["mixture/stage"] = p
        row.update({{f"mixture/weight/{{k}}": v for k, v in weights[p].items()}})
    row.update({{"train/loss": 8.0 / (1 + 0.03 * s) + 0.02 * math.sin(s), "grad/norm/total": 1 + 0.1 * math.cos(s),
                "optim/learning_rate": 0.0158 * min(1.0, (s + 1) / max(1, warm * steps)),
                "throughput/total_tokens": (s + 1) * batch * seq, "throughput/tokens_per_second": 5000.0 + s}})
    if s % 10 == 0 or s == steps - 1:
        row["params/norm/stacked_blocks.0.mlp.router_bias"] = 0.5 + 1e-3 * s
        row["params/norm/total"] = 20.0 + 1e-3 * s
    if s % 8 == 0 or s == steps - 1:
        row["eval/loss"] = 8.2 / (1 + 0.03 * s)
    run.log(row, step=s)
run.finish()
''' + MINE.replace("OUT", repr(str(cwd)))
    root = home / "repro"
    sdk_write(root, body)
    return root / "wandb"


# A user's own ./wandb folder (for `sync ./wandb --follow`), SYNTHETIC.
MINE = '''
run = wandb.init(mode="offline", dir=OUT, project="mine-synthetic", id="mine-synthetic", settings=S())
for s in range(30):
    run.log({"loss": 3.0 - 0.01 * s}, step=s)
run.finish()
'''


def write_local_wandb(cwd: Path) -> None:
    sdk_write(cwd, MINE.replace("OUT", "out"))


def github_world(gh) -> None:
    """The GitHub history `sync marin` reads (issues, logbook, mixture file, commits), SYNTHETIC stand-ins."""
    repo = "marin-community/marin"
    gh.add_issue(repo, 8435, "Hero run tracking (synthetic)", "synthetic stand-in", created_at="2026-08-30T00:00:00Z")
    gh.add_comment(repo, 8435, "relaunched at step 600 (synthetic)", created_at="2026-09-02T00:00:00Z")
    gh.add_issue(repo, 8506, "Hero status log (synthetic)", "synthetic stand-in", created_at="2026-08-30T00:00:00Z")
    gh.add_comment(repo, 8506, "all quiet (synthetic)", created_at="2026-09-01T12:00:00Z")
    gh.set_file(repo, ".agents/logbooks/7279-moe-hero-ep.md",
                "# Logbook (synthetic)\n\n## Entry Log\n\n### 2026-09-01 10:00 UTC - Launched (synthetic)\n\n- ok\n")
    gh.set_file(repo, "experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json",
                json.dumps({"phase0_weights": {"web": 0.6, "code": 0.4}, "phase1_weights": {"web": 0.5, "code": 0.5}}))
    gh.add_commit(repo, "a" * 40, "hero: synthetic change", date="2026-09-01T00:00:00Z",
                  paths=("experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json",
                         ".agents/logbooks/7279-moe-hero-ep.md"))


class Reader:
    """Runs quick-start commands for one reader; collects what failed instead of stopping."""

    def __init__(self, cli, monkeypatch, home: Path, cwd: Path, env: dict[str, str]):
        self.cli, self.home, self.cwd, self.env = cli, home, cwd, env
        self.failures: list[str] = []
        monkeypatch.chdir(cwd)
        monkeypatch.setenv("MARINCTL_HOME", str(home))
        for k, v in env.items():
            monkeypatch.setenv(k, v)

    def run(self, cmd: list[str]) -> None:
        args = cmd[1:]
        if args[:1] == ["demo"]:
            return self.demo()
        if args[:1] == ["watch"]:
            return self.watch(args[1] if len(args) > 1 else None)
        if "--follow" in args:
            return self.follow(args)
        code, out, err = self.cli(*args)
        if code != 0:
            self.failures.append(f"`{shlex.join(cmd)}` -> exit {code}: {err.strip()[:300]}")

    def demo(self) -> None:
        done = marinctl_run(["repro", "rung1", "--cpu", "--dry-run", "--json"], env={**sdk_env(), **self.env,
                                                                                  "MARINCTL_HOME": str(self.home)})
        assert done.returncode == 0, done.stderr
        wandb_dir = write_demo_run(self.home, json.loads(done.stdout)["proxy"], self.cwd)
        code, _, err = self.cli("sync", str(wandb_dir))
        assert code == 0, err
        self.watch(str(next(wandb_dir.glob("offline-run-*"))))

    def watch(self, target: str | None) -> None:
        async def look() -> str:
            app = open_watch(self.home / "marinctl.duckdb", target, interval=3600, autosync=False)
            async with run_test(app) as pilot:
                return await settle(pilot)
        text = asyncio.run(look())
        head = "\n".join(text.splitlines()[:3])
        if "no run to show" in head or "holds no runs" in text or "rror" in head:
            self.failures.append(f"`marinctl watch {target or ''}` shows no run:\n{head}")

    def follow(self, args: list[str]) -> None:
        if not (self.cwd / "wandb").exists():
            write_local_wandb(self.cwd)
        env = env_with(MARINCTL_HOME=str(self.home), **self.env)
        proc = marinctl_proc(args, env=env, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            code, out, _ = self.cli("runs", "--json")
            if code == 0 and "mine-synthetic" in out:
                break
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)               # Ctrl-C
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=10)
            self.failures.append(f"`marinctl {shlex.join(args)}` did not stop on Ctrl-C")
            return
        if proc.returncode not in (0, 130):
            self.failures.append(f"`marinctl {shlex.join(args)}` -> exit {proc.returncode}: {err.decode()[-300:]}")


def points_csv(cwd: Path) -> None:
    (cwd / "my.csv").write_text("compute,loss,name\n1e19,3.10,a (synthetic)\n1e20,2.85,b (synthetic)\n"
                                "1e21,2.62,c (synthetic)\n1e22,2.45,d (synthetic)\n")


def test_quickstart_parses_into_marinctl_commands():
    cmds = quickstart()
    assert any(c[1] == "demo" for c in cmds) and any(needs_network(c) for c in cmds)


def test_offline_reader_runs_every_offline_command(cli, monkeypatch, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    points_csv(cwd)
    dead = "http://127.0.0.1:9"
    reader = Reader(cli, monkeypatch, tmp_path / "offline-home", cwd,
                    {"WANDB_BASE_URL": dead, "GITHUB_API_URL": dead, "MARINCTL_HTTP_ATTEMPTS": "1"})
    for cmd in quickstart():
        if not needs_network(cmd):
            reader.run(cmd)
    assert not reader.failures, "\n".join(reader.failures)


def test_reader_with_network_runs_every_command(cli, monkeypatch, tmp_path, wandb_server, github_server):
    from tests.fakes.synth import hero_lineage, ladder_runs

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    points_csv(cwd)
    server = wandb_server(hero_lineage(150, layers=1, experts=2, norm_every=50) + ladder_runs(200, layers=1, experts=2))
    gh = github_server()
    github_world(gh)
    reader = Reader(cli, monkeypatch, tmp_path / "online-home", cwd, {"WANDB_BASE_URL": server.url, "GITHUB_API_URL": gh.url})
    for cmd in quickstart():
        reader.run(cmd)
    assert not reader.failures, "\n".join(reader.failures)
