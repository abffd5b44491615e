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


def to_typed(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in value.items()}


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
