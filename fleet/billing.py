"""What one DynamoDB request is billed, in read and write units, from AWS's published rules (pure, no I/O).

The rules (on-demand request units; provisioned capacity units count the same way):

- an item's size is the sum of its attribute names' and values' lengths (``item_size``): strings by their
  UTF-8 bytes, numbers by about one byte per two significant digits plus one, binaries by their bytes,
  booleans and nulls one byte, lists and maps three bytes plus one a member plus their members;
- a standard write (PutItem, UpdateItem, DeleteItem) costs one write unit per
  1 KB of the item, rounded up, the larger of the item before and after the write; a conditional write whose
  condition fails still costs it (the existing item's size, at least one unit);
- a transactional write costs two write units per 1 KB of each item in it, a ConditionCheck included;
- every secondary index entry a write adds, changes or removes costs standard write units for the entry's
  projected size (an index key change removes one entry and adds another: two);
- a read costs one unit per 4 KB, rounded up, strongly consistent, half that eventually consistent, and two
  per 4 KB transactional; GetItem and TransactGetItems round each item up, Query and Scan round
  the sum of the items they read, and a read that finds nothing still costs the minimum.

Sources: "DynamoDB read and write operations" (Amazon DynamoDB Developer Guide,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html), "Item sizes and
formats" (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html),
"Provisioned throughput considerations for global secondary indexes"
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.ThroughputConsiderations) and
the on-demand price list (https://aws.amazon.com/dynamodb/pricing/on-demand/): $0.625 per million write
request units and $0.125 per million read request units in us-east-1 (``LIST_PRICE_USD``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
# On-demand list price, us-east-1, dollars per million request units.
LIST_PRICE_USD = {"write": 0.625, "read": 0.125}

STANDARD_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
SUMMED_READS = frozenset({"Query", "Scan"})  # the items' total rounded up
# The data operations the fleet sends (no batch operations).
OPERATIONS = STANDARD_WRITES | SUMMED_READS | {"GetItem", "TransactWriteItems", "TransactGetItems"}


@dataclass(frozen=True)
class Request:
    """One DynamoDB request as billing sees it.

    ``item_bytes``: the size of each item it writes (the larger of before and after; for a failed condition,
    the existing item's, 0 when there was none) or reads; ``consistent``: a strongly consistent read;
    ``failed``: a write refused by its condition (nothing written, no index touched); ``index_bytes``: the
    projected size of each secondary index entry the write adds, changes or removes.
    """

    operation: str
    item_bytes: tuple[int, ...] = ()
    consistent: bool = False
    failed: bool = False
    index_bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Units:
    """Read and write units one request is billed."""

    read: float = 0.0
    write: float = 0.0


def _blocks(size: int, unit: int) -> int:
    """Units of ``unit`` bytes for ``size`` bytes, rounded up, at least one."""
    return max(1, math.ceil(size / unit))


def units(request: Request) -> Units:
    """The read and write units AWS bills for ``request``.  Raises ``ValueError`` for an operation it does
    not know or a negative size."""
    op = request.operation
    if op not in OPERATIONS:
        raise ValueError(f"no billing rule for DynamoDB operation {op!r}")
    if any(size < 0 for size in (*request.item_bytes, *request.index_bytes)):
        raise ValueError(f"{op}: negative item size")
    sizes = request.item_bytes or (0,)
    if op in STANDARD_WRITES or op == "TransactWriteItems":
        factor = 2 if op == "TransactWriteItems" else 1
        write = factor * sum(_blocks(size, WRITE_UNIT_BYTES) for size in sizes)
        if not request.failed:
            write += sum(_blocks(size, WRITE_UNIT_BYTES) for size in request.index_bytes)
        return Units(write=float(write))
    if op == "TransactGetItems":
        return Units(read=2.0 * sum(_blocks(size, READ_UNIT_BYTES) for size in sizes))
    blocks = _blocks(sum(sizes), READ_UNIT_BYTES)  # GetItem: one item; Query, Scan: their sum
    return Units(read=float(blocks) if request.consistent else blocks / 2.0)


def _number_size(text: str) -> int:
    """A number's stored size: one byte per two significant digits, plus one (plus one for a negative)."""
    if text.isascii() and text.isdigit():  # a non-negative integer (most are): its zeros either end are not significant
        significant = len(text.strip("0"))
        return 1 + math.ceil(significant / 2) if significant else 1
    digits = str(Decimal(text).normalize()).lstrip("-").replace(".", "").lstrip("0")
    if "E" in digits:
        digits = digits.split("E")[0]
    if not digits:
        return 1  # zero
    return 1 + math.ceil(len(digits) / 2) + (1 if text.strip().startswith("-") else 0)


def value_size(value: Mapping[str, Any]) -> int:
    """The size of one attribute value in the wire format (``{"S": "..."}``, ``{"N": "..."}``, ...)."""
    (kind, inner), = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return _number_size(str(inner))
    if kind == "B":
        return len(inner if isinstance(inner, bytes | bytearray) else str(inner).encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(value_size({"S": v}) for v in inner)
    if kind == "NS":
        return sum(value_size({"N": v}) for v in inner)
    if kind == "BS":
        return sum(value_size({"B": v}) for v in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size in bytes: its attribute names' UTF-8 lengths plus its values' sizes."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def dollars_per_million(write_units: float, read_units: float, messages: int) -> float | None:
    """List-price dollars per million messages for the units ``messages`` messages were billed (None for
    none)."""
    if messages <= 0:
        return None
    return (write_units * LIST_PRICE_USD["write"] + read_units * LIST_PRICE_USD["read"]) / messages


def request_sizes(items: Sequence[Mapping[str, Mapping[str, Any]]]) -> tuple[int, ...]:
    """The sizes of wire-format items, for ``Request.item_bytes``."""
    return tuple(item_size(item) for item in items)


_CONDITION_REFUSED = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})


def _update_size(key: Mapping[str, Any], params: Mapping[str, Any]) -> int:
    """A lower bound of an updated item's size when its new image is unknown: its key and the values the
    update names."""
    values = params.get("ExpressionAttributeValues") or {}
    return item_size(key) + sum(value_size(v) for v in values.values())


def _index_bytes(table: str, item: Mapping[str, Any] | None, params: Mapping[str, Any],
                 indexes: Mapping[str, Sequence[str]]) -> tuple[int, ...]:
    """The index entries a successful write to ``table`` touched, as far as the request shows: none unless
    the item as written carries every key attribute of the table's (all-projecting) index; two (one
    removed, one added) when the write names one of those attributes, else one (the entry's copy)."""
    keys = indexes.get(table)
    if not keys or item is None or not all(k in item for k in keys):
        return ()
    named = set((params.get("ExpressionAttributeNames") or {}).values())
    size = item_size(item)
    return (size, size) if named & set(keys) else (size,)


def billed_request(operation: str, params: Mapping[str, Any], answer: Mapping[str, Any],
                   indexes: Mapping[str, Sequence[str]] | None = None) -> Request | None:
    """The ``Request`` one DynamoDB call amounts to, from its parameters and its answer (both in the wire
    format, as the SDK's event hooks see them; an error answer carries ``Error``).  ``indexes``: table ->
    the key attributes of its all-projecting secondary index (a put counts one entry: whether it replaced an
    indexed item is not shown).

    Item sizes come from what the call shows: a put's item, a read's returned items, an update's new image
    (``ReturnValues=ALL_NEW``) or else its key and values, a delete's or a ConditionCheck's key; so a read
    with a projection, and an update or delete of a bigger item than the request shows, are counted low
    (never above what AWS bills).  None for an error answer other than a refused condition (a malformed
    request, a throttle, an operation the backend lacks): nothing was read or written."""
    indexes = indexes or {}
    error = answer.get("Error")
    failed = str((error or {}).get("Code", "")) in _CONDITION_REFUSED
    if error and not failed:
        return None
    consistent = bool(params.get("ConsistentRead", False))
    table = str(params.get("TableName", ""))
    if operation == "PutItem":
        item = params.get("Item") or {}
        index = () if failed else _index_bytes(table, item, params, indexes)
        return Request(operation, (item_size(item),), failed=failed, index_bytes=index)
    if operation in ("UpdateItem", "DeleteItem"):
        new = answer.get("Attributes")
        key = params.get("Key") or {}
        size = max(item_size(new) if new else 0, _update_size(key, params))
        index = () if failed or operation == "DeleteItem" else _index_bytes(table, new, params, indexes)
        return Request(operation, (size,), failed=failed, index_bytes=index)
    if operation == "TransactWriteItems":
        sizes = []
        for entry in params.get("TransactItems") or []:
            (kind, body), = entry.items()
            sizes.append(item_size(body["Item"]) if kind == "Put" else _update_size(body.get("Key") or {}, body))
        return Request(operation, tuple(sizes), failed=failed)
    if operation == "GetItem":
        item = answer.get("Item")
        return Request(operation, (item_size(item),) if item else (), consistent=consistent)
    if operation in ("Query", "Scan"):
        return Request(operation, request_sizes(answer.get("Items") or []), consistent=consistent)
    if operation == "TransactGetItems":
        found = [item_size(r["Item"]) if r.get("Item") else 0 for r in answer.get("Responses") or []]
        return Request(operation, tuple(found) or (0,) * len(params.get("TransactItems") or []))
    raise ValueError(f"no billing rule for DynamoDB operation {operation!r}")


def purpose_of(operation: str, params: Mapping[str, Any], messages_table: str) -> str:
    """``messages`` for a request to the messages table (message persistence: hardened's log puts, marks and
    tail reads included), else ``coordination``: the purposes ``AwsClients.requests`` counts by."""
    if operation == "TransactWriteItems":
        tables = {next(iter(e.values())).get("TableName") for e in params.get("TransactItems") or []}
        return "messages" if messages_table in tables else "coordination"
    if params.get("TableName") == messages_table:
        return "messages"
    return "coordination"


def index_keys(*tables: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Table -> the key attributes of its all-projecting global secondary index, from CreateTable arguments
    (``fleet.schema``); the ``indexes`` of ``billed_request``."""
    found: dict[str, tuple[str, ...]] = {}
    for table in tables:
        for index in table.get("GlobalSecondaryIndexes") or []:
            if index.get("Projection", {}).get("ProjectionType") == "ALL":
                found[str(table["TableName"])] = tuple(str(k["AttributeName"]) for k in index["KeySchema"])
    return found
