"""The run's record: an offline W&B run written by the wandb SDK, flushed every second so a reader
can tail it while it trains, finished with an exit code the way W&B writes one.

Exit codes in the exit record: 0 when every step ran; 255 when the run was interrupted (Ctrl-C,
SIGTERM, SIGHUP) — the code wandb's own exit hook writes for a Ctrl-C — and 1 when it failed. A
reader maps 0 → finished, 255 → killed, anything else → failed; a file with no exit record is a
run still going, or one that crashed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

EXIT_FINISHED, EXIT_FAILED, EXIT_KILLED = 0, 1, 255
PROJECT = "marinctl-repro"
TEARDOWN_LIMIT_S = 30.0  # how long wandb's service gets to stop once the run's record is complete


def default_run_id(label: str, seed: int) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"repro-{label}-{stamp}-s{seed}"


def open_run(out_dir: Path, run_id: str, config: dict[str, Any], *, group: str, tags: list[str]):
    """An offline run under `out_dir/wandb/`; returns (run, run folder)."""
    import wandb

    run = wandb.init(mode="offline", dir=str(out_dir), project=PROJECT, id=run_id, name=run_id, group=group,
                     job_type="repro", tags=tags, config=config,
                     settings=wandb.Settings(x_disable_stats=True, x_transaction_log_flush_interval=1.0,
                                             console="off", silent=True))
    return run, Path(run.dir).parent  # …/wandb/offline-run-<time>-<id>/files → the run folder


def finish_run(run, summary: dict[str, Any], exit_code: int) -> None:
    for key, value in summary.items():
        if isinstance(value, (int, float, str)) and value is not None:
            run.summary[key] = value
    run.finish(exit_code=exit_code)
    teardown()


def teardown(limit_s: float = TEARDOWN_LIMIT_S) -> bool:
    """`wandb.teardown()` that cannot wait for ever; True when the service had to be killed.

    wandb (0.31) tells its `wandb-core` service to stop and then waits for it with no limit. When the
    service's last write races the client closing the socket, the service never reads that message
    (its log says "broken pipe" and no "handleInformTeardown") and stays up, and so did the process
    waiting on it: once in a full test suite here. Everything is on disk by the time a run has
    finished, so after `limit_s` this process's own `wandb-core` children are killed, and wandb's
    `sys.exit` with the service's exit code is swallowed.
    """
    import wandb

    killed: list[int] = []
    timer = threading.Timer(limit_s, lambda: killed.extend(_kill(_service_pids())))
    timer.daemon = True
    timer.start()
    try:
        wandb.teardown()
    except SystemExit:
        if not killed:
            raise
    finally:
        timer.cancel()
    if killed:
        print(f"wandb's service did not stop within {limit_s:g} s of teardown; stopped it "
              f"(pid {', '.join(map(str, killed))}); the run's record was already complete", file=sys.stderr)
    return bool(killed)


def _service_pids() -> list[int]:
    """This process's `wandb-core` children, read from /proc (none found elsewhere: no bound there)."""
    me, found = os.getpid(), []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            stat = Path("/proc", name, "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
        if comm.startswith("wandb-core") and int(rest[1]) == me:
            found.append(int(name))
    return found


def _kill(pids: list[int]) -> list[int]:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids
