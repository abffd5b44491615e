"""DynamoDB's typed wire form: items, keys and rendered ``fleet.expr.Write`` requests to and from it (used by
``fleet.store`` and the router, which sends the rules' START / STOP writes itself)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def to_wire(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in value.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, set):
        return {_plain(v) for v in value}
    return value


def on_wire(request: dict[str, Any]) -> dict[str, Any]:
    """A rendered ``Write`` request with its item, key and values in DynamoDB's typed form."""
    for part in ("Item", "Key", "ExpressionAttributeValues"):
        if part in request:
            request[part] = to_wire(request[part])
    return request


def from_wire(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deserializer.deserialize(v)) for k, v in item.items()}
