"""Local and offline W&B runs on disk: find their `.wandb` files and read them window by window.

Targets: a `.wandb` file, a run directory, a `wandb/` directory, or a project folder that
holds `wandb/`. A file is read in windows of at most WINDOW_BYTES (bounded memory) from a
record boundary; each window is one `wandb_file.Scan`. Where reading resumes, and what a
window becomes in the store, is the sync pipeline's business (sync/local.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Iterator

from marinctl.errors import UserError
from marinctl.sources import wandb_file as wf

WINDOW_BYTES = 32 << 20
FIRST_WINDOW_BYTES = 512 << 10  # then doubling: a long first read lands its first steps in a tenth of a second


def is_local_target(target: str) -> bool:
    """True when TARGET names a local .wandb file, run dir or wandb/ dir (not a W&B path)."""
    text = target.strip()
    if not text or text.startswith(("http://", "https://", "github:")) or text == "marin":
        return False
    path = Path(text).expanduser()
    if path.exists():
        return True
    return text.endswith(".wandb") or text.startswith((".", "/", "~"))


def find_run_files(path: Path) -> list[Path]:
    """The .wandb files under a target, oldest first; `latest-run` links are not doubled."""
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    found = list(path.glob("*.wandb"))
    if not found:
        found = list(path.glob("*/*.wandb"))
    if not found:
        for sub in ("wandb", ".wandb"):
            if (path / sub).is_dir():
                found = list((path / sub).glob("*/*.wandb"))
                if found:
                    break
    seen, out = set(), []
    for f in found:
        try:
            key = f.resolve()
            mtime = f.stat().st_mtime
        except OSError:
            continue
        if key in seen:
            continue
        seen.add(key)
        out.append((mtime, f))
    return [f for _, f in sorted(out)]


def run_files(path: Path) -> list[Path]:
    """`find_run_files`, or a UserError naming what to pass instead."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"no such file or directory: {path}", "pass a .wandb file, a run dir or a wandb/ dir")
    files = find_run_files(path)
    if not files:
        raise UserError(f"no .wandb files in {path}",
                        "pass a wandb/ dir, an offline-run-*/ run dir or a run-*.wandb file")
    return files


def windows(fh: BinaryIO, pos: int, size: int, *, live: bool) -> Iterator[wf.Scan]:
    """Scans of the file from record boundary `pos` up to `size` bytes, one window each (the first
    FIRST_WINDOW_BYTES, each next one twice as wide, up to WINDOW_BYTES).

    Corruption inside a window is skipped to the next block (the scan says where); a
    window cut mid-record resumes at that record. With `live` (a run still writing), an
    incomplete last record is a write in flight, reported as a partial tail.
    """
    window = min(FIRST_WINDOW_BYTES, WINDOW_BYTES)
    while True:
        fh.seek(pos)
        buf = fh.read(max(0, min(window, size - pos)))
        at_eof = pos + len(buf) >= size
        sc = wf.scan(buf, pos, live_tail=live and at_eof)
        grown, window = window, min(2 * window, WINDOW_BYTES)
        if sc.end <= pos and sc.skip_to is None and not at_eof and grown < WINDOW_BYTES:
            continue                      # one record longer than this window: read again, wider
        yield sc
        if sc.skip_to is not None:
            if sc.skip_to < size:
                pos = sc.skip_to          # corruption in a middle window: carry on past it
                continue
            return
        if at_eof or sc.end <= pos:
            return
        pos = sc.end                      # the window cut a record: the next read resumes there
