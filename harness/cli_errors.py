"""The one error every ``wsfleet`` subcommand raises for a clear, one-line failure: its message goes to stderr
and its code is the exit status (2: bad input; 1: a failed check or an unreachable service)."""

from __future__ import annotations


class CliError(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
