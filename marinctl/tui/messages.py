"""Messages worker threads post back to the UI thread (never touch widgets from a worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


@dataclass
class ViewLoaded(Message):
    """A fresh read of the store for the current target and view settings."""

    view: Any                          # analysis.watch_view.View (plain data)
    frames: dict[str, Any] = field(default_factory=dict)   # key -> ((width, height), Text) built off-thread


@dataclass
class SyncFinished(Message):
    """A background sync pass ended; `error` set when it failed (shown as a notification)."""

    ok: bool
    summary: str
    error: str | None = None
    offline: bool = False


@dataclass
class KeysLoaded(Message):
    """Every metric key of the target, for the `/` filter (loaded after the first frame)."""

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


@dataclass
class FramesReady(Message):
    """Chart frames built off-thread for new paint options (cursor, log-y)."""

    options: Any
    frames: dict[str, Any]
