"""The report's words for numbers and verdicts: a verdict as a word and a badge, durations in ms for tables
and in seconds for sentences, seeds as written, natural sort order, and a bound as a sentence with its time
scale (and the scale-1 figure, only where the run recorded it)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np


def verdict_word(valid: Any) -> str:
    if valid is True:
        return "valid"
    if valid is False:
        return "INVALID"
    return "unknown"


def status_of(valid: Any) -> str:
    """A CSS class / badge name for a verdict: pass, fail or unknown."""
    return "pass" if valid is True else ("fail" if valid is False else "unknown")


def number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | np.integer | np.floating) and value == value:
        return float(value)
    return None


def ms_text(value: Any) -> str:
    """A duration in ms for tables: one decimal, empty when absent."""
    found = number(value)
    return "" if found is None else f"{found:.1f}"


def seconds_text(ms: Any) -> str:
    """A duration in ms as seconds for sentences: ``2.40 s`` (``–`` when absent)."""
    found = number(ms)
    if found is None:
        return "–"
    return f"{found / 1000:.2f} s" if abs(found) < 100_000 else f"{found / 1000:.0f} s"


def seed_text(seed: Any) -> str:
    """A seed as written in run.start (a whole float read back from the history shows as an int)."""
    if seed is None:
        return "?"
    if isinstance(seed, float) and seed.is_integer():
        return str(int(seed))
    return str(seed)


def natural(text: str) -> list[Any]:
    """Sort key: seed 2 before seed 10, worker-2 before worker-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def short(value: float) -> str:
    """A number of seconds without trailing zeros: 2.2, 22, 0.05."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def bound_text(ms: float, timescale: float | None, scale_one_ms: float | None = None) -> str:
    """``2.7 s at time scale 0.1 (22.5 s at scale 1)``; the scale-1 figure only when it was computed
    (``scale_one_ms``), and none at scale 1 or without a scale."""
    text = f"{short(ms / 1000)} s"
    if timescale is None or timescale <= 0:
        return text
    text += f" at time scale {short(timescale)}"
    if timescale != 1 and scale_one_ms is not None:
        text += f" ({short(scale_one_ms / 1000)} s at scale 1)"
    return text
