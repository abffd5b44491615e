"""argparse types shared by the ``wsfleet`` subcommands (each turns bad text into a one-line usage error), and
the run folder a subcommand writes to."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli_errors import CliError
from harness.run_folders import RunFolderError, absolute
from harness.run_folders import run_folder as choose_run_folder


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def timescale_arg(text: str) -> float:
    """A time scale in (0, 10]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 10:
        raise argparse.ArgumentTypeError(f"{value} must be above 0 and at most 10")
    return value


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
