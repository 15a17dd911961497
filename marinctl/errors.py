"""The failures marinctl reports, one hierarchy for the CLI and the Python API alike.

`MarinctlError` is the root: every failure carries a one-line `message` and an optional `hint`
naming the next thing to try. Its two branches map to the contract's exit codes:
`UserError` (exit 2) is bad input — an unknown run, step, metric, target or flag — and
`RuntimeFailure` (exit 1) is the world failing: network, server, disk, a locked store.
The named subclasses below are what code raises where the cause is one a caller may want
to catch on its own (`except marinctl.UnknownRun`); the CLI's boundary only reads
`exit_code`, so a subclass changes nothing there. They live here, and only here, because
the watch's first-read helper sends an error across a pipe by class name (tui/first_read.py).
"""

from __future__ import annotations

__all__ = ["MarinctlError", "UserError", "RuntimeFailure", "UnknownRun", "AmbiguousRun", "UnknownStep",
           "UnknownMetric", "NoStore", "StoreLocked", "SyncBusy", "Unreachable",
           "StoreUnavailable"]


class MarinctlError(Exception):
    """Any failure marinctl reports: `message` (one line) and `hint` (the next command, or None)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UserError(MarinctlError):
    """Bad input: exit code 2."""

    exit_code = 2


class RuntimeFailure(MarinctlError):
    """Network, server, disk or lock failure: exit code 1."""

    exit_code = 1


class UnknownRun(UserError):
    """A RUN that names nothing stored (a run id, a URL, `hero`, `rung1`…), or no run to default to."""


class AmbiguousRun(UserError):
    """A RUN that names more than one stored run (the same id in two projects)."""


class UnknownStep(UserError):
    """A step outside what is stored for the run."""


class UnknownMetric(UserError):
    """A metric key the store does not hold."""


class NoStore(UserError):
    """A data home or `--db` path with no store in it (the Python API reads only what exists)."""


class StoreLocked(RuntimeFailure):
    """Another process held the store longer than this one would wait."""


class SyncBusy(RuntimeFailure):
    """Another marinctl process is syncing the same target (it holds the target's sync lock)."""


class Unreachable(RuntimeFailure):
    """A source (W&B, GitHub) that could not be reached, or kept failing, through every retry: the
    mirror is offline until it answers again."""


class StoreUnavailable(RuntimeFailure):
    """A team store's catalog server could not be reached, or went away during a command."""


def is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C that arrived inside a DuckDB query (DuckDB raises its own error, not KeyboardInterrupt)."""
    return type(exc).__name__ == "InterruptException" or str(exc).strip() == "Query interrupted"
