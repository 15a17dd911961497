"""The run's record: an offline W&B run written by the wandb SDK, flushed every second so a reader
can tail it while it trains, finished with an exit code the way W&B writes one.

Exit codes in the exit record: 0 when every step ran; 255 when the run was interrupted (Ctrl-C,
SIGTERM, SIGHUP) — the code wandb's own exit hook writes for a Ctrl-C — and 1 when it failed. A
reader maps 0 → finished, 255 → killed, anything else → failed; a file with no exit record is a
run still going, or one that crashed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

EXIT_FINISHED, EXIT_FAILED, EXIT_KILLED = 0, 1, 255
PROJECT = "marinctl-repro"


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
    import wandb

    for key, value in summary.items():
        if isinstance(value, (int, float, str)) and value is not None:
            run.summary[key] = value
    run.finish(exit_code=exit_code)
    wandb.teardown()
