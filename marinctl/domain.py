"""Plain records shared by sources, store and analysis (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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

    @property
    def uid(self) -> str:
        if self.source == "wandb":
            return f"{self.entity}/{self.project}/{self.run_id}"
        return f"{self.source}:{self.run_id}"
