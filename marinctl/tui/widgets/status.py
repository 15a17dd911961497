"""The header strip: run, state, progress, tokens, FLOPs vs budget, ETA, rate, MFU, data phase, sync age."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import Static

from marinctl.analysis import series_view as sv
from marinctl.text import inert

_STATE_STYLE = {"live": "bold green", "stale": "yellow", "crashed": "bold red", "finished": "cyan"}


class StatusHeader(Static):
    """Two lines: the run's progress, then the view settings and sync state."""

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.stats: sv.HeaderStats | None = None
        self.view_line = ""
        self.synced_at: float | None = None        # monotonic-free wall clock of the last good sync
        self.offline_since: str | None = None      # cache time shown when the last sync failed
        self.syncing = False

    def update_stats(self, stats: sv.HeaderStats | None, view_line: str) -> None:
        self.stats, self.view_line = stats, view_line
        self.redraw()

    def sync_line(self, now: float | None = None) -> str:
        now = now if now is not None else time.time()
        if self.offline_since is not None:
            return f"offline — showing cache from {self.offline_since}"
        if self.synced_at is None:
            return "syncing…" if self.syncing else "not synced yet"
        ago = max(0, int(now - self.synced_at))
        text = f"synced {ago} s ago" if ago < 120 else f"synced {ago // 60} min ago"
        return text + (" · syncing…" if self.syncing else "")

    def redraw(self) -> None:
        lines = [Text(), Text()]
        if self.stats is None:
            lines[0].append("no run to show yet", style="dim")
        else:
            cells = self.stats.cells()
            for i, (label, value) in enumerate(cells):
                line = lines[0] if i < 4 else lines[1]
                if line.plain:
                    line.append("  ")
                line.append(f"{label} ", style="dim")
                style = _STATE_STYLE.get(self.stats.liveness, "") if label == "state" else "bold"
                line.append(inert(value, single_line=True), style=style)
        lines[1].append(("  " if lines[1].plain else "") + self.sync_line(), style="italic")
        lines.append(Text(self.view_line, style="dim"))
        self.update(Text("\n").join(lines))
