"""Percentile summaries and JSON-safe values."""

from __future__ import annotations

import json

import numpy as np

from harness.checkers.result import CheckResult, json_safe, summarise


def test_summarise_skips_missing_values() -> None:
    assert summarise([None, float("nan"), 10.0, 20.0, 30.0]) == {"p50": 20.0, "p95": 29.0, "max": 30.0}
    assert summarise([]) == {"p50": None, "p95": None, "max": None}


def test_json_safe_turns_numpy_and_nan_into_plain_json() -> None:
    value = {"a": np.int64(3), "b": np.float64("nan"), "c": (np.bool_(True), np.array([1.5])), 4: {"x"}}

    safe = json_safe(value)

    assert safe == {"a": 3, "b": None, "c": [True, [1.5]], "4": ["x"]}
    json.dumps(safe, allow_nan=False)


def test_a_result_serialises_its_validity_first_then_its_details() -> None:
    result = CheckResult("x", "unknown", {"count": np.int64(2), "ms": float("inf")})

    assert result.to_json() == {"valid": "unknown", "count": 2, "ms": None}
