"""`watch` in a real terminal, side by side with W&B's own viewer (LEET) and the previous release.

The runs the watch issue measured: SYNTHETIC offline runs written by the real wandb SDK, 3,000 steps
with 19 and with 649 keys (cached under /tmp). Every contender starts as a person starts it, in a
fresh tmux pane of 160×50, and the screen is read every 10 ms (`Screens`):
- first chart: launch → the `grad/norm/total` chart is on screen (braille dots; both draw while
  they read a long file, so this chart may show a part of the run);
- every step: launch → the screen says the run's last step is on it (LEET's summary `_step 2999`,
  marinctl's header `step 2,999 /`);
- RSS settled: the resident memory of the pane's processes 3 s after that.
Contenders, stepped in turn each round (a shared machine's load hits all alike), medians printed:
- `wandb leet RUN_DIR` (the LEET shipped inside the installed wandb package);
- `marinctl watch WANDB_DIR` with this tree and with the previous release's `marinctl/`
  (`git archive BASE`, BASE = the merge base with main), each with the run synced before (the
  data home kept between rounds) and never synced (a fresh data home each time: watch reads the
  `.wandb` file first).
Both trees are byte-compiled first, as `pip install` leaves a package: where PYTHONDONTWRITEBYTECODE
is set (this machine's shell sets it) Python would otherwise compile ~60 modules from source at
every launch, ~80–100 ms that no installed marinctl pays.

    nice -n 10 python bench/bench_watch_terminal.py [--rounds 3] [--keys 19 649] [--base REV]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, previous_tree, tree_rss_mib  # noqa: E402

BRAILLE = re.compile("[\u2801-\u28ff]")

WRITER = """
import math, random, sys, wandb
keys, out = int(sys.argv[1]), sys.argv[2]
random.seed(0)
run = wandb.init(project="synthetic-watch-bench", name=f"synthetic-{keys}keys", dir=out, mode="offline",
                 config={"synthetic": True, "num_train_steps": 3000}, settings=wandb.Settings(x_disable_stats=True))
names = ["train/loss", "grad/norm/total", "optim/learning_rate"] + [f"synthetic/k{i}" for i in range(keys - 3)]
for s in range(3000):
    row = {k: math.sin(s / 100 + i) + random.random() * 0.01 for i, k in enumerate(names)}
    row["train/loss"] = 2 + 8 / (1 + s / 300)
    row["optim/learning_rate"] = 3e-3 * min(1, s / 30)
    wandb.log(row, step=s)
run.finish()
wandb.teardown()
"""


def runs_for(keys: int) -> Path:
    """The SDK-written `wandb/` dir of a 3,000-step run with `keys` keys (written once, cached)."""
    out = Path(tempfile.gettempdir()) / f"marinctl-bench-watch-terminal-{keys}"
    if not list(out.glob("wandb/offline-run-*/run-*.wandb")):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        env = {**os.environ, "WANDB_SILENT": "true", "WANDB_MODE": "offline"}
        subprocess.run([sys.executable, "-c", WRITER, str(keys), str(out)], check=True, env=env, timeout=900,
                       capture_output=True)
    return out / "wandb"


class Screens:
    """Fresh tmux panes, read through one control-mode client (`tmux -C`), kept for the whole bench.

    A `tmux capture-pane` process started for every read cost ~2.3 ms of CPU (a fork, an exec and
    a connection each), every ~13 ms: about a fifth of one of the two cores the contenders start
    on. The control client answers the same command over its open connection in ~0.2 ms. It is
    attached to an idle anchor session, so no pane's output streams to it; the anchor also keeps
    one tmux server up between panes (a server that exits races the next start)."""

    def __enter__(self) -> "Screens":
        self.anchor = f"bench{os.getpid()}_anchor"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.anchor, "sleep 3600"], check=True)
        self.client = subprocess.Popen(["tmux", "-C", "attach", "-t", self.anchor], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1)
        self._answer()                       # the attach command's own (empty) answer
        return self

    def __exit__(self, *exc) -> None:
        self.client.stdin.close()
        self.client.wait(timeout=10)
        subprocess.run(["tmux", "kill-session", "-t", self.anchor], capture_output=True)

    def capture(self, pane: str) -> str:
        self.client.stdin.write(f"capture-pane -p -t {pane}\n")
        self.client.stdin.flush()
        return self._answer()

    def _answer(self) -> str:
        """The text between the next `%begin` and its `%end` (empty for an `%error`); notifications
        outside a block are skipped."""
        lines: list[str] | None = None
        for line in self.client.stdout:
            if line.startswith("%begin"):
                lines = []
            elif lines is not None and line.startswith(("%end", "%error")):
                return "" if line.startswith("%error") else "".join(lines)
            elif lines is not None:
                lines.append(line)
        raise RuntimeError("the tmux control client ended")

    def measure(self, command: str, first_needle: str, full: str, settle: float = 3.0,
                timeout: float = 90.0) -> tuple[float, float, float]:
        """(s from launch to a chart showing `first_needle`, s to the screen matching `full` (every
        step read), RSS MiB `settle` s after that) of one fresh pane running `command`."""
        name = f"bench{os.getpid()}_{time.monotonic_ns()}"
        t0 = time.perf_counter()
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "50", command], check=True)
        first = whole = float("nan")
        try:
            while time.perf_counter() - t0 < timeout:
                screen = self.capture(name)
                charted = BRAILLE.search(screen) is not None
                if math.isnan(first) and charted and first_needle in screen:
                    first = time.perf_counter() - t0
                if charted and re.search(full, screen):
                    whole = time.perf_counter() - t0
                    break
                time.sleep(0.01)
            time.sleep(settle)
            pid = subprocess.run(["tmux", "list-panes", "-t", name, "-F", "#{pane_pid}"], capture_output=True,
                                 text=True).stdout.split()
            rss = tree_rss_mib(int(pid[0])) if pid else float("nan")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        return first, whole, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", type=int, nargs="+", default=[19, 649])
    ap.add_argument("--base", default="auto", help="git revision of the previous release (default: merge base with main)")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        raise SystemExit("needs tmux")
    leet = Path(sys.executable).with_name("wandb")
    with Screens() as screens:
        run_all(args, leet, sys.executable, screens)


def run_all(args, leet: Path, py: str, screens: Screens) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"now": ROOT, "previous": previous_tree(args.base, Path(tmp) / "previous")}
        for tree in trees.values():
            subprocess.run([py, "-m", "compileall", "-q", str(tree / "marinctl")], check=True, capture_output=True)
        for keys in args.keys:
            wandb_dir = runs_for(keys)
            run_dir = next(wandb_dir.glob("offline-run-*"))
            homes = {side: Path(tmp) / f"home-{side}-{keys}" for side in trees}

            def marinctl(side: str, home: Path) -> str:
                return (f"cd {tmp} && PYTHONPATH={trees[side]} MARINCTL_HOME={home} {py} -m marinctl watch {wandb_dir}")

            for side, home in homes.items():     # "synced before": one sync first, kept between rounds
                subprocess.run([py, "-m", "marinctl", "sync", str(wandb_dir)], cwd=tmp, capture_output=True, check=True,
                               env={**os.environ, "PYTHONPATH": str(trees[side]), "MARINCTL_HOME": str(home)})
            results: dict[str, list[tuple[float, float]]] = {}
            for r in range(args.rounds):
                # first chart: the grad-norm chart drawn (both show it on their first page); every step:
                # LEET's summary sidebar at _step 2999, marinctl's header at step 2,999
                contenders = {"LEET (wandb leet)": (f"{leet} leet {run_dir}", r"_step\s+2999\b")}
                for side in trees:
                    fresh = Path(tmp) / f"fresh-{side}-{keys}-{r}"
                    contenders[f"marinctl {side}, synced before"] = (marinctl(side, homes[side]), r"step 2,999 /")
                    contenders[f"marinctl {side}, never synced"] = (marinctl(side, fresh), r"step 2,999 /")
                for label, (command, full) in contenders.items():
                    results.setdefault(label, []).append(screens.measure(command, "grad/norm/total", full))
            print(f"\n3,000 steps × {keys} keys (SYNTHETIC, SDK-written), median of {args.rounds}")
            print(f"{'':36s} {'first chart':>12s} {'every step':>12s} {'RSS settled':>12s}")
            for label, rows in results.items():
                first, whole, rss = (statistics.median(row[i] for row in rows) for i in range(3))
                print(f"{label:36s} {first:10.2f} s {whole:10.2f} s {rss:9.0f} MiB")


if __name__ == "__main__":
    main()
