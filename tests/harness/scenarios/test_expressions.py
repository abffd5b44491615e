"""The expression language of scenario files: arithmetic over named durations, seeded draws, nothing else."""

from __future__ import annotations

import random

import pytest

from harness.scenarios.expressions import ExpressionError, duration_names, evaluate

NAMES = {"lease": 2000.0, "reconcile": 6000.0, "heartbeat": 500.0}


def test_arithmetic_over_names() -> None:
    rng = random.Random(1)
    assert evaluate("1.1*lease + 500", NAMES, rng) == pytest.approx(2700)
    assert evaluate("(lease + reconcile) / 2 - -1", NAMES, rng) == pytest.approx(4001)
    assert evaluate("max(2*lease, lease + reconcile)", NAMES, rng) == 8000
    assert evaluate(250, NAMES, rng) == 250.0


def test_draws_come_from_the_seeded_generator() -> None:
    first = [evaluate("uniform(0, heartbeat)", NAMES, random.Random("s:1")) for _ in range(3)]
    assert len(set(first)) == 1 and 0 <= first[0] <= 500
    assert {evaluate("choice(-1, 1)", NAMES, random.Random(seed)) for seed in range(30)} == {-1.0, 1.0}


@pytest.mark.parametrize(("text", "message"), [
    ("leese * 2", "unknown name 'leese'"),
    ("__import__('os')", "only the functions"),
    ("lease.real", "Attribute is not allowed"),
    ("lease ** 2", "BinOp is not allowed"),
    ("lease > 1", "Compare is not allowed"),
    ("'a' + 'b'", "is not a number"),
    ("1 +", "cannot parse"),
    ("lease / 0", "division by zero"),
    ("uniform(1)", "uniform takes two arguments"),
])
def test_anything_else_is_refused_precisely(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(").replace("*", r"\*")):
        evaluate(text, NAMES, random.Random(0))


def test_duration_names_drop_the_suffix_and_convert_the_unit() -> None:
    assert duration_names({"lease_ms": 2000.0}, 1000.0) == {"lease": 2.0}
