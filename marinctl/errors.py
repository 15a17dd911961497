"""The two kinds of failure the CLI reports, mapped to the contract's exit codes.

`UserError` (exit 2) is bad input: an unknown run, step, metric, target or flag.
`RuntimeFailure` (exit 1) is the world failing: network, server, disk, a locked store.
Both carry a one-line message and an optional hint naming the next command to try.
"""

from __future__ import annotations


class MarinctlError(Exception):
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
