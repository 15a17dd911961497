"""`sync` without a network is never silent.

Run as a person runs it — a real `marinctl sync` process — against a W&B or GitHub address
that cannot answer: a host name that does not resolve (`.invalid` is reserved and never
resolves; without any DNS the lookup fails the same way) and a closed loopback port. Each
stderr line is read as it arrives: the process says what it is syncing first, then that it is
connecting, then each retry while it is waiting (not all at the end), and gives up with exit 1
naming the host. A name that does not resolve is tried twice, not MARINCTL_HTTP_ATTEMPTS times.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time

import pytest

from tests.blackbox import marinctl_proc, sdk_env

UNRESOLVABLE = "http://marinctl-synthetic-no-such-host.invalid"


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_stderr(args: list[str], env: dict[str, str], timeout: float = 90.0) -> tuple[int, list[tuple[float, str]], float]:
    """(exit code, [(seconds since start, line)], seconds until exit) of `marinctl ARGS`."""
    t0 = time.monotonic()
    proc = marinctl_proc(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))
            if time.monotonic() - t0 > timeout:
                break
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return code, lines, time.monotonic() - t0


def env_for(tmp_path, **extra: str) -> dict[str, str]:
    return {**sdk_env(), "MARINCTL_HOME": str(tmp_path / "home"), **extra}


def retries(lines: list[tuple[float, str]]) -> list[tuple[float, str]]:
    return [(t, line) for t, line in lines if re.search(r"; try \d+ of \d+ in [\d.]+ s$", line)]


def test_an_unresolvable_wandb_host_is_said_and_tried_twice(tmp_path):
    code, lines, _ = timed_stderr(["sync", "synthetic-lab/offline-synthetic/run-synthetic"],
                                  env_for(tmp_path, WANDB_BASE_URL=UNRESOLVABLE))
    text = [line for _, line in lines]
    assert code == 1, text
    assert text[0].startswith("syncing synthetic-lab/offline-synthetic/run-synthetic from W&B"), text
    assert f"connecting to W&B at {UNRESOLVABLE} …" in text, text
    tried = retries(lines)
    assert [line.rsplit("; ", 1)[1].split(" in ")[0] for _, line in tried] == ["try 2 of 2"], text
    assert "cannot resolve marinctl-synthetic-no-such-host.invalid" in tried[0][1]
    errors = [line for line in text if line.startswith("marinctl: error:")]
    assert len(errors) == 1 and "cannot resolve" in errors[0] and "Traceback" not in "\n".join(text), text


def test_a_closed_port_shows_each_retry_as_it_happens(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    code, lines, ended = timed_stderr(["sync", "synthetic-lab/offline-synthetic/run-synthetic"],
                                      env_for(tmp_path, WANDB_BASE_URL=url, MARINCTL_HTTP_ATTEMPTS="4"))
    text = [line for _, line in lines]
    assert code == 1, text
    connecting = [t for t, line in lines if line == f"connecting to W&B at {url} …"]
    tried = retries(lines)
    assert connecting and [line.split("; ")[-1].split(" in ")[0] for _, line in tried] == \
        ["try 2 of 4", "try 3 of 4", "try 4 of 4"], text
    assert all("connection refused by 127.0.0.1" in line for _, line in tried), text
    # each wait honoured: line k+1 comes after the first k announced waits, and the end after all of
    # them, counted from before the process started (a late read only adds to these, so load cannot
    # make them fail); streamed: the lines arrive apart, not in one block at the end
    waits = [float(re.search(r"in ([\d.]+) s$", line).group(1)) for _, line in tried]
    for k, (t, _) in enumerate(tried[1:], 1):
        assert t >= sum(waits[:k]) * 0.9, (lines, waits)
    assert ended >= sum(waits) * 0.9, (lines, ended)
    assert all(t2 > t1 for (t1, _), (t2, _) in zip(tried, tried[1:])), lines
    assert tried[-1][0] - tried[0][0] >= min(waits), (lines, waits)     # not one buffered block
    assert text[-2].startswith("marinctl: error: W&B at " + url) and "connection refused" in text[-2], text


def test_json_keeps_quiet_about_connecting_but_not_about_retries(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    code, lines, _ = timed_stderr(["sync", "synthetic-lab/offline-synthetic/run-synthetic", "--json"],
                                  env_for(tmp_path, WANDB_BASE_URL=url, MARINCTL_HTTP_ATTEMPTS="2"))
    text = [line for _, line in lines]
    assert code == 1 and not any(line.startswith(("syncing", "connecting")) for line in text), text
    assert len(retries(lines)) == 1, text


@pytest.mark.parametrize("where", ["unresolvable", "closed"])
def test_github_without_a_network_says_so_too(tmp_path, where):
    url = UNRESOLVABLE if where == "unresolvable" else f"http://127.0.0.1:{closed_port()}"
    code, lines, _ = timed_stderr(["sync", "github:synthetic-lab/hero#1"], env_for(tmp_path, GITHUB_API_URL=url))
    text = [line for _, line in lines]
    assert code == 1 and f"connecting to GitHub at {url} …" in text, text
    tried = retries(lines)
    assert len(tried) == (1 if where == "unresolvable" else 4), text
    assert ("cannot resolve" if where == "unresolvable" else "connection refused") in text[-2], text
