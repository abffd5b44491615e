"""What a checker returns (``CheckResult``), how verdicts compose, and the small helpers that make results
JSON-ready: percentile summaries and NaN/numpy-free values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

Validity = bool | Literal["unknown"]
UNKNOWN: Literal["unknown"] = "unknown"
Row = dict[str, Any]


@dataclass(frozen=True)
class CheckResult:
    """One checker's answer: ``valid`` is True, False or ``"unknown"`` (could not decide); ``details`` are the
    numbers behind it (JSON-ready); ``tables`` are row tables (lists of dicts) for reports."""

    name: str
    valid: Validity
    details: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[Row]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"valid": ..., **details}`` with every value JSON-serialisable (NaN as null)."""
        return {"valid": self.valid, **json_safe(self.details)}


def compose(validities: Iterable[Validity]) -> Validity:
    """False beats unknown beats true (no checkers: true)."""
    seen = list(validities)
    if any(v is False for v in seen):
        return False
    if any(v == UNKNOWN for v in seen):
        return UNKNOWN
    return True


def summarise(values: Iterable[float | None]) -> dict[str, float | None]:
    """``{"p50", "p95", "max"}`` over the values that are not None/NaN (all None when there are none)."""
    data = np.array([v for v in values if v is not None and not _is_nan(v)], dtype="float64")
    if data.size == 0:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": float(np.percentile(data, 50)),
        "p95": float(np.percentile(data, 95)),
        "max": float(data.max()),
    }


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers, NaN/inf as None, tuples/arrays/sets as lists."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        return [json_safe(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return None if math.isnan(number) or math.isinf(number) else number
    if value is None or isinstance(value, str | int | bool):
        return value
    if value is pd.NA or _is_nan(value):
        return None
    return str(value)


def none_if_nan(value: Any) -> Any:
    """A float, or None for NaN/None (for row tables)."""
    if value is None or _is_nan(value):
        return None
    return float(value)


def _is_nan(value: Any) -> bool:
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return False
