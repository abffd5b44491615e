"""``fleet.typed``: the direct typed form agrees with boto3's ``TypeSerializer`` on every value."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer
from hypothesis import given
from hypothesis import strategies as st

from fleet.typed import from_typed, to_typed

_values = st.recursive(
    st.none() | st.booleans() | st.text(max_size=8) | st.integers(min_value=-(10**40), max_value=10**40)
    | st.binary(max_size=4) | st.decimals(allow_nan=False, allow_infinity=False, places=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


def _serialized(value: Any) -> Any:
    try:
        return TypeSerializer().serialize(value)
    except (TypeError, ArithmeticError) as exc:
        return type(exc)


def _direct(value: Any) -> Any:
    try:
        return to_typed({"v": value})["v"]
    except (TypeError, ArithmeticError) as exc:
        return type(exc)


@given(_values)
def test_every_value_is_typed_as_the_sdks_serializer_types_it_errors_included(value: Any) -> None:
    assert _direct(value) == _serialized(value)


@pytest.mark.parametrize("value", [10**38, -(10**38), 1.5, {1: "a"}, True])
def test_what_dynamodb_cannot_hold_or_the_fast_path_does_not_take_is_left_to_the_serializer(value: Any) -> None:
    assert _direct(value) == _serialized(value)


def test_a_batch_item_goes_to_the_wire_and_back_unchanged() -> None:
    item = {"pk": "CONN#c1", "sk": 3, "kind": "batch",
            "msgs": [{"seq": 7, "ts_ms": 1_700_000_000_000, "data": "hello"}], "n": Decimal("2.5")}
    assert from_typed(to_typed(item)) == {**item, "n": 2.5}
