"""DynamoDB's typed attribute values (``{"N": "3"}``): plain items and keys to and from them (``to_typed``,
``from_typed``), and a rendered ``fleet.expr.Write`` request with its parts typed (``typed_request``); used by
``fleet.store`` and the router, which sends the rules' START / STOP writes itself."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()
_INT_LIMIT = 10**38  # DynamoDB's 38 significant digits: a larger integer goes through the serializer's checks


def to_typed(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _typed(v) for k, v in value.items()}


def _typed(value: Any) -> dict[str, Any]:
    """One value in the typed form, as ``TypeSerializer`` makes it: strings and integers (most of every item)
    built here directly, a fifth of its cost; anything else (and its errors) left to it."""
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is int and -_INT_LIMIT < value < _INT_LIMIT:
        return {"N": str(value)}
    typed: dict[str, Any] = _serializer.serialize(value)
    return typed


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, set):
        return {_plain(v) for v in value}
    return value


def typed_request(request: dict[str, Any]) -> dict[str, Any]:
    """A rendered ``Write`` request with its item, key and values in DynamoDB's typed form."""
    for part in ("Item", "Key", "ExpressionAttributeValues"):
        if part in request:
            request[part] = to_typed(request[part])
    return request


def from_typed(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deserializer.deserialize(v)) for k, v in item.items()}
