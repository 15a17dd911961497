"""Plain records passed between layers, and the callback types progress and warnings travel by.

Sources return these, analysis returns these, the store writes them; none of them does I/O.
`Progress` and `Warn` are how the quiet layers (sources, store, analysis, sync) tell their
caller what is happening: only `cli/`, `render/` and `tui/` print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

Progress = Callable[[str, int, int], None]   # (what, done, total)
Warn = Callable[[str], None]                 # one line; the caller decides where it goes


@dataclass
class RunInfo:
    """One training run's metadata as a source reports it."""

    source: str                      # 'wandb' | 'local' | 'repro'
    run_id: str                      # W&B run id (node.name)
    entity: str | None = None
    project: str | None = None
    name: str | None = None          # display name
    group: str | None = None
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)
    state: str | None = None
    created_at: datetime | None = None
    heartbeat_at: datetime | None = None
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    fork_parent: str | None = None
    fork_step: int | None = None
    remote_last_step: int | None = None
    history_line_count: int | None = None
    path: str | None = None
    url: str | None = None
    environment: dict[str, Any] | None = None   # os, python, host, hardware …; None: this read said nothing of it
    updated_at: datetime | None = None           # W&B's updatedAt: the run's metadata last changed
    listing_digest: str | None = None            # fingerprint of W&B's listing of the run: unchanged = not moved

    @property
    def uid(self) -> str:
        if self.source == "wandb":
            return f"{self.entity}/{self.project}/{self.run_id}"
        return f"{self.source}:{self.run_id}"


@dataclass
class Event:
    """One timeline entry: a GitHub issue/comment/commit, a logbook entry, a console line.

    `event_id` is stable ('github:owner/repo#N', 'output:<run uid>:<n>', ...), so writing an
    event again is an update, never a duplicate. Text fields are raw (untrusted) text.
    """

    event_id: str
    source: str                      # 'github' | 'logbook' | 'local'
    kind: str                        # issue | pull | comment | commit | logbook | console
    time: datetime | None = None
    title: str | None = None
    author: str | None = None
    url: str | None = None
    body: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    run_uid: str | None = None
    step: int | None = None


@dataclass
class Anomaly:
    """One detection at a step of a run (the contract's `anomalies` row, before it is stored)."""

    run_pk: int
    step: int
    metric: str
    kind: str
    score: float
    cause_class: str
    details: dict[str, Any] = field(default_factory=dict)
