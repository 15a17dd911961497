"""Messages worker threads post back to the UI thread (never touch widgets from a worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from textual.message import Message


@dataclass
class ViewLoaded(Message):
    """A fresh read of the store for the current target and view settings."""

    view: Any                          # views.watch_view.View (plain data)
    frames: dict[str, Any] = field(default_factory=dict)   # key -> charts.Frame built off-thread
    generation: int = 0                # which reload asked for it (older ones are dropped)
    version: Any = None                # the store's data version the read saw
    values: dict[str, Any] = field(default_factory=dict)   # key -> chart_data.Logged at the cursor
    error: str | None = None           # the read failed (the last good frame stays up)


@dataclass
class SyncStarted(Message):
    """A background sync pass started (the header says so until it ends)."""


@dataclass
class SyncFinished(Message):
    """A background sync pass ended well: the rows it added, and the newest run it synced (if any)."""

    rows: int = 0
    run: str | None = None


@dataclass
class SyncFailed(Message):
    """A background sync pass failed (shown as a notification).

    `reason`: "offline" (the source could not be reached: the header says so and the cache stays
    up), "busy" (another marinctl syncs the target: what it writes is shown) or "failed" (any other
    failure)."""

    error: str
    reason: Literal["offline", "busy", "failed"] = "failed"
    asked: bool = False                # `r` started it (a failure is said again, even the same one)


@dataclass
class KeysLoaded(Message):
    """Every metric key of the target, for paging and the `/` filter (loaded after the first frame)."""

    ref: str | None
    keys: list[str]


@dataclass
class ExplainReady(Message):
    step: int
    text: str


@dataclass
class Planned(Message):
    """What to show and what to sync, decided from TARGET against the store."""

    view_ref: str | None
    sync_targets: list[str]
    error: str | None = None
    local_paths: list[str] = field(default_factory=list)   # targets followed live (tail the .wandb files)


@dataclass
class FramesReady(Message):
    """Chart frames built off-thread for new drawing options (cursor, log-y, y range)."""

    frames: dict[str, Any]
    values: dict[str, Any] = field(default_factory=dict)
    view: Any = None                   # the view the frames were drawn from (stale ones are dropped)


@dataclass
class StoreChanged(Message):
    """The follower wrote new records of a local run (or the store's data version moved)."""

    runs: list[dict] = field(default_factory=list)   # the sync dicts of runs that changed


@dataclass
class FollowStatus(Message):
    """The live follower's state for the header: reading a file, waiting for one, or a problem."""

    text: str
    problem: bool = False


@dataclass
class DigestTold(Message):
    """`--digest`'s lines, one per followed run that moved, as the follow sent them to the sinks."""

    lines: list[str]


@dataclass
class PaneLoaded(Message):
    """The run pane's overview, config and summary (views.run_panes.RunPane)."""

    pane: Any


@dataclass
class AlertsRaised(Message):
    """An alert pass after a sync fired new alerts (store/alerts.py dicts, oldest first)."""

    alerts: list[dict]
