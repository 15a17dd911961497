"""What `watch` was asked for, in one record: the CLI (and `demo`, and tests) fill `WatchOptions`,
the app hands it to the watch screen, which hands its parts to the workers that use them.

`SyncFn` is the one shape of a sync pass watch runs (the sync pipeline's `sync_targets`, or a
test's stand-in): the store and the targets in, the sync report (the contract's dict) out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from marinctl.analysis.alerts.rules import Rules
    from marinctl.store import Store
    from marinctl.tui.first_read import FirstRead

SyncFn = Callable[["Store", list[str]], dict]
Plan = tuple[str | None, list[str]]     # `plan_watch`'s answer: (the run to show, the targets to sync)
MIN_INTERVAL_S = 1.0


def default_sync(store: Store, targets: list[str]) -> dict:
    """A sync pass as `sync --follow` runs one."""
    from marinctl.sync import sync_targets

    return sync_targets(store, targets, following=True)


@dataclass(frozen=True)
class WatchOptions:
    """`target`: what to follow (None: the hero lineage); `interval`: seconds between W&B syncs (at
    least MIN_INTERVAL_S); `sync_fn`: the sync pass; `autosync`: follow and sync at all (False: the
    store as is); `view_ref`: the run to show first when it is not TARGET's; `starting`: what is
    being started (`marinctl demo`'s "starting the rung1 proxy…"), shown until the target has a run
    to show; `plan`: `plan_watch`'s answer when the caller already has it (the CLI checks TARGET
    before the screen opens) and `first_read`, that read already started (tui/first_read.py);
    `rules`, `sinks`: what alerts the follow raises besides the built-in ones (`<home>/alerts.toml`,
    `--preset`) and where they go (`--notify`); `digest_s`: `--digest`'s interval in seconds."""

    target: str | None = None
    interval: float = 30.0
    sync_fn: SyncFn = default_sync
    autosync: bool = True
    view_ref: str | None = None
    starting: str | None = None
    plan: Plan | None = None
    first_read: FirstRead | None = None
    rules: Rules | None = None
    sinks: tuple = field(default=())
    digest_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval", max(MIN_INTERVAL_S, float(self.interval)))
        object.__setattr__(self, "sinks", tuple(self.sinks))

    @property
    def early(self) -> FirstRead | None:
        """The first read to take the first view from: only for a TARGET already planned (not while
        `demo` starts its trainer)."""
        return self.first_read if self.plan is not None and not self.starting else None
