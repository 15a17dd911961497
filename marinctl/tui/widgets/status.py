"""The header strip: run, state, progress, tokens, FLOPs vs budget, ETA, rate, MFU, data phase, sync age."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import Static

from marinctl import numbers as N
from marinctl.views.run_header import HeaderStats
from marinctl.text import inert

_STATE_STYLE = {"live": "bold green", "stale": "yellow", "crashed": "bold red", "finished": "cyan"}


class StatusHeader(Static):
    """Three lines: the run's progress; rates, data phase and how the view stays current; the view settings.

    How it stays current: `following run-x.wandb · updated 2 s ago` for a local run tailed
    live, `W&B every 30 s · synced 12 s ago` for a remote one, `store as is` otherwise. It
    redraws only when its text changes (the age ticks once a second while it is young).
    """

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.stats: HeaderStats | None = None
        self.view_line = ""
        self.synced_at: float | None = None        # wall clock of the last good sync / live update
        self.offline_since: str | None = None      # what the view shows when the last sync failed
        self.syncing = False
        self.mode = "store"                        # 'follow' | 'poll' | 'store'
        self.interval = 30.0                       # the polite poll interval (remote runs)
        self.follow_text = ""                      # what the follower says (file, progress, waiting)
        self.starting: str | None = None           # demo: what is starting, until a run shows
        self.started_at = time.time()
        self._shown: str | None = None

    def update_stats(self, stats: HeaderStats | None, view_line: str) -> None:
        self.stats, self.view_line = stats, view_line
        self.redraw()

    def sync_line(self, now: float | None = None) -> str:
        now = now if now is not None else time.time()
        if self.offline_since is not None:
            return f"offline — {self.offline_since}"
        if self.mode == "follow":
            text = self.follow_text or "following the run's file"
            if self.synced_at is not None:
                text += f" · updated {_age(now - self.synced_at)}"
            return text
        if self.mode == "poll":
            text = f"W&B every {self.interval:g} s"
            if self.synced_at is None:
                return text + (" · syncing…" if self.syncing else " · not synced yet")
            return text + f" · synced {_age(now - self.synced_at)}" + (" · syncing…" if self.syncing else "")
        if self.synced_at is not None:
            return f"synced {_age(now - self.synced_at)}" + (" · syncing…" if self.syncing else "")
        return "syncing…" if self.syncing else "not syncing (the store as is)"

    def redraw(self) -> None:
        lines = [Text(), Text()]
        if self.stats is None:
            if self.starting:
                lines[0].append(f"{self.starting} {int(time.time() - self.started_at)} s", style="bold")
            else:
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
        for line in lines:                      # one line each, cut with … rather than wrapped
            line.no_wrap, line.overflow = True, "ellipsis"
        text = Text("\n").join(lines)
        text.no_wrap, text.overflow = True, "ellipsis"
        if text.markup != self._shown:          # an unchanged header is never re-laid out
            self._shown = text.markup
            self.update(text)


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s} s ago" if s < 120 else f"{s // 60} min ago"


def header_cells(stats: HeaderStats) -> list[tuple[str, str]]:
    """(label, text) pairs in display order: progress first, then rates and the data phase."""
    step = N.count(stats.step)
    if stats.total_steps:
        step += f" / {N.count(stats.total_steps)} ({N.percent((stats.steps_done or 0) / stats.total_steps)})"
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
