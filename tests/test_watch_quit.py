"""`q` at any moment of a follow ends `marinctl watch` with exit 0.

A thread still inside DuckDB or Arrow when Python finalises aborts the process (exit -6); watch's
workers (the loader's reads, the follower, the alert pass, delivery) are told to stop on quit and
joined before the interpreter exits, within a bound (marinctl/threads.py). Here the real CLI runs
in a pty (tests/test_watch_start.py's `Terminal`) on a `.wandb` run that grows while it is
followed: its recorded bytes (a SYNTHETIC run written by the real SDK) are appended to the
followed file a chunk at a time, as a live run's are, so the follower reads windows and the alert
pass scores them while `q` arrives. QUITS quits, in LANES stores side by side (the lanes are the
load), each at a random moment after the first chart is drawn. Refusing pandas in the CLI
process (duckdb imports it at the first parameterised execute) made 6 of 24 quits abort here
before watch joined its threads.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.blackbox import sdk_write
from tests.test_watch_start import Terminal, _gone

# the suite's share; MARINCTL_TEST_QUITS=50 for the full check (each quit is a new process: ~1.5 s of CPU)
QUITS = int(os.environ.get("MARINCTL_TEST_QUITS", "12"))
LANES = 2
STEPS = 2000
LATEST_S = 1.5        # a quit comes at most this long after the first chart

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="watch's helper process needs fork")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A finished SYNTHETIC offline run of 2,000 steps; its `.wandb` bytes are what the feed appends."""
    out = tmp_path_factory.mktemp("quit-run")
    sdk_write(out, f'''
        run = wandb.init(mode="offline", dir=out, id="quit-synthetic", settings=S(),
                         config={{"synthetic": True, "num_train_steps": 20000}})
        for s in range({STEPS}):
            row = {{"train/loss": 8.0 / (1 + s / 300) + (3.0 if s % 500 == 499 else 0.0),
                   "grad/norm/total": 1.0 + (s % 97) / 97, "optim/learning_rate": 3e-3 * min(1, s / 30)}}
            row.update({{f"synthetic/k{{i}}": math.sin(s / 50 + i) for i in range(12)}})
            run.log(row, step=s)
        run.finish()
    ''')
    return out / "wandb"


class Feed:
    """Appends a recorded `.wandb` file to the followed copy, a chunk every tick, until stopped."""

    def __init__(self, recorded: Path, live: Path, *, seconds: float) -> None:
        shutil.copytree(recorded, live, ignore=shutil.ignore_patterns("*.wandb"))
        (self.source,) = recorded.rglob("*.wandb")
        self.target = live / self.source.relative_to(recorded)
        self.data = self.source.read_bytes()
        self.chunk = max(4096, len(self.data) // int(seconds / 0.05))
        self.target.write_bytes(self.data[:self.chunk])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="feed", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        at = self.chunk
        with self.target.open("ab") as fh:
            while at < len(self.data) and not self.stop.wait(0.05):
                fh.write(self.data[at:at + self.chunk])
                fh.flush()
                at += self.chunk


def test_q_at_random_moments_of_a_follow_always_exits_0(recorded, tmp_path):
    live = tmp_path / "live" / "wandb"
    feed = Feed(recorded, live, seconds=40)
    rng = random.Random(35)
    moments = [rng.uniform(0, LATEST_S) for _ in range(QUITS)]
    failures: list[str] = []

    def lane(index: int) -> None:
        home = tmp_path / f"home{index}"
        for n in range(index, QUITS, LANES):
            term = Terminal(["watch", str(live)], home)
            try:
                drawn = term.read_until(b"train/loss")
                time.sleep(moments[n])                      # the moment of the follow `q` lands in
                term.press(b"q")
                code = term.drain_until_exit()
                seen = term.seen.decode(errors="replace")
                left = _gone(term.proc.pid)
            finally:
                term.close()
            if not drawn or code != 0 or "terminate called" in seen or "Traceback" in seen or left:
                failures.append(f"quit {n} after {moments[n]:.2f} s: drawn {drawn}, exit {code}, left {left}\n"
                                f"{seen[-1500:]}")

    try:
        with ThreadPoolExecutor(LANES) as pool:
            list(pool.map(lane, range(LANES)))
    finally:
        feed.stop.set()
        feed.thread.join(5)
    assert failures == [], f"{len(failures)} of {QUITS} quits failed:\n" + "\n".join(failures[:3])
