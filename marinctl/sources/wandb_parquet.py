"""W&B's parquet history exports: where a run's export is, and its parts downloaded.

Exports cover finished history and cost far less than JSON windows. The parts are kept as
they are, as the stored form of that history (store/parts.py), so this module only asks for
the export and downloads each part to the file the caller names (`.part`, then renamed:
WandbClient.download), two at a time. Part URLs come in no stable order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from marinctl.domain import RunInfo
from marinctl.sources.wandb import WandbClient

DOWNLOADS_AT_ONCE = 2
T = TypeVar("T")


@dataclass
class Export:
    """A run's export as W&B describes it: part URLs and the first step it serves live (None: none)."""

    urls: list[str]
    live_start: int | None


def describe(client: WandbClient, run: RunInfo) -> Export:
    ph = client.parquet_history(run.entity, run.project, run.run_id)
    live = [int(r["_step"]) for r in ph.live_rows if r.get("_step") is not None]
    return Export(sorted(ph.urls), min(live) if live else None)


def download_all(client: WandbClient, urls: list[str], dest: Callable[[], Path],
                 then: Callable[[Path], T]) -> list[T]:
    """Download every part to a fresh `dest()` and pass each file to `then` (in the download
    thread, so reading one part's footer overlaps the next download); results in URL order."""
    def one(url: str) -> T:
        path = dest()
        client.download(url, path)
        return then(path)

    if len(urls) <= 1:
        return [one(u) for u in urls]
    with ThreadPoolExecutor(max_workers=DOWNLOADS_AT_ONCE) as pool:
        return list(pool.map(one, urls))
