"""One error type for expected failures, and the exit codes every command uses."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1  # rule errors (or warnings with --strict), a failed check, a process that died
    INVALID = 2  # the input could not be read or does not match the schema; doctor could not run
    INTERNAL = 3  # a bug: the traceback goes to a log file
    INTERRUPTED = 130


class RecipectlError(Exception):
    """An expected failure: printed as one message (and a fix), never as a traceback. `reports`:
    where the failure is a recipe's findings (diagnostics.FileReport), those reports, which a
    command's `--format json` prints as validate does."""

    def __init__(
        self,
        message: str,
        *,
        fix: str | None = None,
        exit_code: ExitCode = ExitCode.INVALID,
        reports: Sequence[Any] = (),
    ):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.exit_code = exit_code
        self.reports = tuple(reports)
