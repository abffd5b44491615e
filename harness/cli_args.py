"""argparse types shared by the ``wsfleet`` subcommands (each turns bad text into a one-line usage error), and
the run folder a subcommand writes to."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from harness.cli_errors import CliError
from harness.run_folders import RunFolderError, absolute
from harness.run_folders import run_folder as choose_run_folder
from harness.scenarios.limits import MAX_CONNECTIONS, MAX_RATE, MAX_WORKERS


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def at_most(high: int) -> Callable[[str], int]:
    """A whole number from 1 to ``high`` (workers, streams: a scenario file's bounds)."""
    def count(text: str) -> int:
        value = positive_int(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"{value} must be at most {high}")
        return value
    return count


WORKERS = at_most(MAX_WORKERS)
CONNECTIONS = at_most(MAX_CONNECTIONS)


def _float(text: str, low: float, high: float, rule: str) -> float:
    """``text`` as a number in (low, high]; NaN and the infinities are refused with ``rule``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not low < value <= high:
        raise argparse.ArgumentTypeError(f"{value} must be {rule}")
    return value


def rate_arg(text: str) -> float:
    """Messages per second per stream, in (0, MAX_RATE] as in a scenario file."""
    return _float(text, 0.0, MAX_RATE, f"above 0 and at most {MAX_RATE:g}")


def seconds_arg(text: str) -> float:
    """A finite duration in seconds above 0."""
    return _float(text, 0.0, sys.float_info.max, "a number of seconds above 0")


def timescale_arg(text: str) -> float:
    """A time scale in (0, 10]."""
    return _float(text, 0.0, 10.0, "above 0 and at most 10")


def absolute_path(text: str) -> Path:
    """A path the user gives, resolved once against the folder the command was started in: the worker and
    router processes run from the checkout, so a relative path would name another place there."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a path")
    return absolute(text)


def run_folder(given: Path | None, force: bool, default_parent: str, option: str = "--run-dir") -> Path:
    """The one folder of this run: ``given`` (absolute; empty, or emptied with ``force``), or a new
    timestamped folder under ``default_parent`` with a ``latest`` link.  CliError (exit 2) when it cannot be."""
    try:
        return choose_run_folder(given, force, default_parent, option)
    except RunFolderError as exc:
        raise CliError(str(exc), 2) from None
