"""A `marinctl sync … --follow` process as a test meets it: started in its own process group, its
stderr read line by line as it comes, waited on by what it says or what the fakes saw, and
stopped with Ctrl-C (SIGKILL only when it lingers). Nothing here imports marinctl.

Every wait is on an event (a line printed, a request a fake answered) and bounded by WAIT_S,
which only a broken follower reaches: no wait is a window of wall-clock time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable

from tests.blackbox import MARINCTL, ROOT, interrupt, strict_json

WAIT_S = 60.0      # the most any wait lasts (a loaded CI machine); a healthy follower takes seconds


class Follower:
    """`marinctl ARGS` (a follow) in its own process group; its stderr read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(MARINCTL + args, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self.lines: list[str] = []
        self.seen_at: list[float] = []     # time.monotonic() when each line arrived
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.seen_at.append(time.monotonic())
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def err(self) -> str:
        return "\n".join(self.lines)

    def until(self, cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        """Wait for `cond()`; fail naming `what` (with the follower's stderr) if it never holds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                if cond():
                    return
                raise AssertionError(f"{what} never happened:\n{self.err[-3000:]}")
            time.sleep(0.05)

    def said(self, text: str, count: int = 1, timeout: float = WAIT_S) -> list[str]:
        """Wait until `count` stderr lines contain `text`; returns them."""
        self.until(lambda: sum(text in line for line in list(self.lines)) >= count, f"{count}× {text!r} on stderr",
                   timeout)
        return [line for line in list(self.lines) if text in line]

    def synced(self, step: int, run: str = "", timeout: float = WAIT_S) -> None:
        """Wait until a pass has synced `step` (of `run`, when given): its alert pass ran in the same
        round, before this line."""
        needle = f"last step {step:,}"
        self.until(lambda: any(needle in line and line.startswith(run) for line in list(self.lines)),
                   f"{run or 'a run'} synced to step {step:,}", timeout)

    def passes(self, server, n: int = 1, timeout: float = WAIT_S) -> None:
        """Wait until `n` passes that began after this call are over (their alert passes included):
        each pass starts by asking the W&B fake for the run, so the (n+1)th request after now says so."""
        start = server.stats["Run"] + server.stats["Runs"]
        self.until(lambda: server.stats["Run"] + server.stats["Runs"] >= start + n + 1, f"{n} follow passes", timeout)

    def stop(self) -> int:
        """Ctrl-C to the group, as a terminal sends it; SIGKILL if it does not end."""
        if not interrupt(self.proc):
            raise AssertionError(f"the follower did not stop on Ctrl-C:\n{self.err[-2000:]}")
        self._reader.join(timeout=5)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL to the group: a follower that dies between two instructions."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self._reader.join(timeout=5)

    def __enter__(self) -> "Follower":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.kill()


def follow(target: str, env: dict[str, str], *notify: str, interval: str = "0.5",
           extra: tuple[str, ...] = ()) -> Follower:
    """`marinctl sync TARGET --follow --interval I [--notify SINK]… EXTRA…`."""
    args = ["sync", target, "--follow", "--interval", interval, *extra]
    for n in notify:
        args += ["--notify", n]
    return Follower(args, env)


def marinctl(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(MARINCTL + list(args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def listed(env: dict[str, str], *args: str) -> list[dict]:
    """`marinctl alerts --json ARGS`, parsed strictly."""
    done = marinctl(env, "alerts", "--json", *args)
    assert done.returncode == 0, done.stderr
    return strict_json(done.stdout)
