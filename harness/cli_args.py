"""argparse types shared by the ``wsfleet`` subcommands: each turns bad text into a one-line usage error."""

from __future__ import annotations

import argparse


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
