"""repro's two failures, mapped to exit codes the way marinctl's contract maps its own.

`UsageError` (exit 2): bad input — an unknown rung, a bad flag value, an unreadable --data or
--from-config file. `RunFailure` (exit 1): the world failing — no GPU memory, a disk error.
Each carries one line saying what was wrong and, optionally, one line saying what to try.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class ReproError(Exception):
    exit_code = EXIT_FAILURE

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(ReproError):
    exit_code = EXIT_USAGE


class RunFailure(ReproError):
    exit_code = EXIT_FAILURE
