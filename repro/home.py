"""Where repro keeps its files: the tokenizer cache, the measured matmul peak, the W&B runs.

The home is `--home`, else `$REPRO_HOME`, else `$MARINCTL_HOME` (so a marinctl user's cache is
shared), else `~/.cache/repro`. Runs go under `--out` (default `<home>/repro`), as
`<out>/wandb/offline-run-<time>-<run id>/`. marinctl's launcher passes both explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

from repro.errors import RunFailure


def home(explicit: str | os.PathLike | None = None) -> Path:
    for candidate in (explicit, os.environ.get("REPRO_HOME"), os.environ.get("MARINCTL_HOME")):
        if candidate:
            return Path(candidate).expanduser()
    return Path.home() / ".cache" / "repro"


def subdir(base: Path, name: str) -> Path:
    """`base/name`, created; an unusable path is a runtime failure naming it."""
    path = base / name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFailure(f"cannot use {path}: {exc.strerror or exc}",
                         "pass a writable folder with --home/--out") from None
    return path
