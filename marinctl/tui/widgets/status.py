"""The header strip: run, state, progress, tokens, FLOPs vs budget, ETA, rate, MFU, data phase, sync age."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import Static

from marinctl import numbers as N
from marinctl.analysis.run_header import HeaderStats
from marinctl.text import inert

_STATE_STYLE = {"live": "bold green", "stale": "yellow", "crashed": "bold red", "finished": "cyan"}


class StatusHeader(Static):
    """Two lines: the run's progress, then the view settings and sync state."""

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.stats: HeaderStats | None = None
        self.view_line = ""
        self.synced_at: float | None = None        # monotonic-free wall clock of the last good sync
        self.offline_since: str | None = None      # cache time shown when the last sync failed
        self.syncing = False

    def update_stats(self, stats: HeaderStats | None, view_line: str) -> None:
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
            cells = header_cells(self.stats)
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


def header_cells(stats: HeaderStats) -> list[tuple[str, str]]:
    """(label, text) pairs in display order: progress first, then rates and the data phase."""
    step = N.count(stats.step)
    if stats.total_steps:
        step += f" / {N.count(stats.total_steps)} ({N.percent((stats.step or 0) / stats.total_steps)})"
    flops = N.DASH
    if stats.flops is not None:
        flops = ("≈" if stats.flops_estimated else "") + N.sci(stats.flops)
        if stats.flops_budget:
            flops += f" of {N.sci(stats.flops_budget)} ({N.percent(stats.flops / stats.flops_budget)})"
    state = stats.liveness + (f" ({stats.state})" if stats.state and stats.state != stats.liveness else "")
    phase = stats.phase_name or N.DASH
    if stats.phase_number is not None:
        phase = f"{stats.phase_number}:{phase}"
    return [
        ("run", stats.run), ("state", state), ("step", step), ("tokens", N.si(stats.tokens)), ("FLOPs", flops),
        ("ETA", N.duration(stats.eta_s)), ("tok/s", N.si(stats.tokens_per_s)),
        ("MFU", N.DASH if stats.mfu is None else f"{N.fixed(stats.mfu, 1)}%"), ("data", phase),
    ]
