"""The billing rules (``fleet.billing``): units per request from AWS's published examples, item sizes, the
request a call amounts to, and the purpose it is counted under; and, through the adapter
(``fleet.aws.AwsClients``) on each embedded engine, the computed units against what the backend reports."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from fleet.aws import AwsClients
from fleet.batch_log import BATCH, LogItem, Message, Writer
from fleet.billing import (
    Request,
    Units,
    billed_request,
    dollars_per_million,
    index_keys,
    item_size,
    purpose_of,
    units,
)
from fleet.config import FleetConfig
from fleet.schema import connections_table
from fleet.store import AwsAdapter

KB = 1024


@pytest.mark.parametrize(("request_", "expected"), [
    # standard writes: one unit per started KB, at least one
    (Request("PutItem", (100,)), Units(write=1.0)),
    (Request("PutItem", (KB,)), Units(write=1.0)),
    (Request("PutItem", (KB + 1,)), Units(write=2.0)),
    (Request("PutItem", (3 * KB,)), Units(write=3.0)),  # the price list's example: a 3 KB item, 3 units
    (Request("UpdateItem", (0,)), Units(write=1.0)),
    (Request("DeleteItem", (2500,)), Units(write=3.0)),
    # a refused condition still costs the write, but touches no index
    (Request("PutItem", (500,), failed=True, index_bytes=(500,)), Units(write=1.0)),
    (Request("UpdateItem", (500,), index_bytes=(500, 500)), Units(write=3.0)),
    (Request("UpdateItem", (2 * KB,), index_bytes=(2 * KB,)), Units(write=4.0)),
    # transactional writes: two per KB per item, the ConditionCheck included; 3 KB transactional: 6
    (Request("TransactWriteItems", (3 * KB,)), Units(write=6.0)),
    (Request("TransactWriteItems", (200, 150)), Units(write=4.0)),
    (Request("TransactWriteItems", (200, 150, 150, 1500)), Units(write=10.0)),
    (Request("TransactWriteItems", (200,), failed=True), Units(write=2.0)),
    # reads: 4 KB blocks; strongly consistent 1, eventually consistent half, transactional 2
    (Request("GetItem", (3500,), consistent=True), Units(read=1.0)),
    (Request("GetItem", (8 * KB,), consistent=True), Units(read=2.0)),
    (Request("GetItem", (8 * KB,)), Units(read=1.0)),
    (Request("GetItem", (10 * KB,), consistent=True), Units(read=3.0)),  # rounded up to 12 KB
    (Request("GetItem", ()), Units(read=0.5)),  # nothing found: the minimum
    (Request("TransactGetItems", (8 * KB,)), Units(read=4.0)),
    (Request("TransactGetItems", (100, 100)), Units(read=4.0)),  # each item rounded up on its own
    # Query and Scan: the items' total, rounded up once
    (Request("Query", (1500, 1500, 1500), consistent=True), Units(read=2.0)),
    (Request("Query", (100,) * 40), Units(read=0.5)),
    (Request("Scan", ()), Units(read=0.5)),
    (Request("Scan", (5 * KB,), consistent=True), Units(read=2.0)),
])
def test_units_follow_the_published_rules(request_: Request, expected: Units) -> None:
    assert units(request_) == expected


@pytest.mark.parametrize("bad", [Request("BatchWriteItem", (10,)), Request("PutItem", (-1,)),
                                 Request("Query", (10,), index_bytes=(-5,))])
def test_an_unknown_operation_or_a_negative_size_is_refused(bad: Request) -> None:
    with pytest.raises(ValueError):
        units(bad)


@pytest.mark.parametrize(("item", "size"), [
    ({"pk": {"S": "CONN#a"}}, 2 + 6),
    ({"name": {"S": "é"}}, 4 + 2),  # UTF-8 bytes
    ({"n": {"N": "0"}}, 1 + 1),
    ({"n": {"N": "7"}}, 1 + 2),
    ({"n": {"N": "1234"}}, 1 + 3),
    ({"n": {"N": "12345"}}, 1 + 4),
    ({"n": {"N": "1000"}}, 1 + 2),  # trailing zeroes are not significant
    ({"n": {"N": "0012000"}}, 1 + 2),  # nor leading ones
    ({"n": {"N": "1700000000123"}}, 1 + 8),
    ({"n": {"N": "1.0500"}}, 1 + 3),
    ({"n": {"N": "-0.05"}}, 1 + 3),
    ({"b": {"B": b"\x00\x01\x02"}}, 1 + 3),
    ({"t": {"BOOL": True}, "z": {"NULL": True}}, 2 + 2),
    ({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}, 1 + 3 + (1 + 2) + (1 + 2)),
    ({"m": {"M": {"k": {"S": "v"}}}}, 1 + 3 + 1 + 1 + 1),
    ({"ss": {"SS": ["a", "bc"]}}, 2 + 3),
])
def test_item_sizes_count_names_and_values(item: dict[str, Any], size: int) -> None:
    assert item_size(item) == size


def test_an_unknown_attribute_type_is_refused() -> None:
    with pytest.raises(ValueError):
        item_size({"x": {"Q": "1"}})


MESSAGE = {"pk": {"S": "CONN#a"}, "sk": {"N": "7"}, "epoch": {"N": "1"}, "data": {"S": "x" * 1100}}
INDEXES = index_keys(connections_table("conns"))
INDEXED = {"pk": {"S": "CONN#a"}, "desired_state": {"S": "STARTED"}, "lease_expires_at_ms": {"N": "1700000000000"}}


def test_the_index_keys_come_from_the_table_definition() -> None:
    assert INDEXES == {"conns": ("desired_state", "lease_expires_at_ms")}


@pytest.mark.parametrize(("operation", "params", "answer", "expected"), [
    ("PutItem", {"TableName": "msgs", "Item": MESSAGE}, {}, Units(write=2.0)),
    ("PutItem", {"TableName": "msgs", "Item": MESSAGE},
     {"Error": {"Code": "ConditionalCheckFailedException"}}, Units(write=2.0)),
    # a renewal moves the index key: the entry is removed and added again
    ("UpdateItem", {"TableName": "conns", "Key": {"pk": {"S": "CONN#a"}},
                    "ExpressionAttributeNames": {"#n0": "lease_expires_at_ms"},
                    "ExpressionAttributeValues": {":v0": {"N": "1700000000000"}}},
     {"Attributes": INDEXED}, Units(write=3.0)),
    # an update of another attribute rewrites the (all-projecting) entry once
    ("UpdateItem", {"TableName": "conns", "Key": {"pk": {"S": "CONN#a"}},
                    "ExpressionAttributeNames": {"#n0": "ws_url"}, "ExpressionAttributeValues": {":v0": {"S": "u"}}},
     {"Attributes": INDEXED}, Units(write=2.0)),
    # refused: no index entry changes
    ("UpdateItem", {"TableName": "conns", "Key": {"pk": {"S": "CONN#a"}},
                    "ExpressionAttributeNames": {"#n0": "lease_expires_at_ms"}},
     {"Error": {"Code": "ConditionalCheckFailedException"}}, Units(write=1.0)),
    # a ConditionCheck and two puts, transactional: 2 x (1 + 2 + 1)
    ("TransactWriteItems", {"TransactItems": [
        {"ConditionCheck": {"TableName": "conns", "Key": {"pk": {"S": "CONN#a"}}}},
        {"Put": {"TableName": "msgs", "Item": MESSAGE}},
        {"Put": {"TableName": "msgs", "Item": {"pk": {"S": "CONN#a"}, "sk": {"N": "8"}}}}]}, {}, Units(write=8.0)),
    ("GetItem", {"TableName": "conns", "Key": {}, "ConsistentRead": True}, {"Item": INDEXED}, Units(read=1.0)),
    ("GetItem", {"TableName": "conns", "Key": {}}, {}, Units(read=0.5)),
    ("Query", {"TableName": "msgs", "ConsistentRead": True}, {"Items": [{"d": {"S": "x" * 3000}}] * 3},
     Units(read=3.0)),
    ("TransactGetItems", {"TransactItems": [{"Get": {}}]}, {"Responses": [{}]}, Units(read=2.0)),
])
def test_a_call_is_billed_from_its_parameters_and_answer(operation: str, params: dict[str, Any],
                                                        answer: dict[str, Any], expected: Units) -> None:
    request = billed_request(operation, params, answer, INDEXES)
    assert request is not None
    assert units(request) == expected


def test_an_error_answer_other_than_a_refused_condition_bills_nothing() -> None:
    for code in ("UnknownOperationException", "ThrottlingException", "ValidationException"):
        assert billed_request("TransactGetItems", {"TransactItems": [{"Get": {}}]}, {"Error": {"Code": code}}) is None


def test_only_writes_of_the_messages_table_are_message_persistence() -> None:
    assert purpose_of("PutItem", {"TableName": "msgs"}, "msgs") == "messages"
    assert purpose_of("PutItem", {"TableName": "conns"}, "msgs") == "coordination"
    assert purpose_of("Query", {"TableName": "msgs"}, "msgs") == "messages"
    fenced = {"TransactItems": [{"ConditionCheck": {"TableName": "conns"}}, {"Put": {"TableName": "msgs"}}]}
    assert purpose_of("TransactWriteItems", fenced, "msgs") == "messages"
    assert purpose_of("TransactWriteItems", {"TransactItems": [{"Put": {"TableName": "conns"}}]}, "msgs") == \
        "coordination"


def test_dollars_per_million_messages_at_list_price() -> None:
    # one write unit a message: $0.625 per million; four: $2.50; a read unit each adds $0.125
    assert dollars_per_million(1_000, 0, 1_000) == pytest.approx(0.625)
    assert dollars_per_million(4_000, 0, 1_000) == pytest.approx(2.5)
    assert dollars_per_million(1_000, 1_000, 1_000) == pytest.approx(0.75)
    assert dollars_per_million(5, 5, 0) is None


async def test_the_adapter_records_units_that_match_what_the_backend_reports(store: AwsAdapter,
                                                                            engine_backend: Any) -> None:
    """Every request asks for ``ReturnConsumedCapacity``; the computed figure must equal the reported one.
    moto reports a fixed 1 per PutItem and 0.5 per GetItem whatever the size or consistency, so sizes are
    checked on dynalite, which computes them (moto: a message under 1 KB only)."""
    dynalite = engine_backend.dynamodb_engine == "dynalite"
    sizes = [100, 3000] if dynalite else [100]
    pk = f"CONN#billed-{uuid.uuid4().hex[:8]}"
    for b, size in enumerate(sizes, 1):
        await store.put_log_item(LogItem(pk, b, BATCH, Writer("w1", "g", 1, 1), b, b, 0, (Message(b, 0, "x" * size),)))
    aws = store.aws
    assert aws.operations["PutItem messages"] == len(sizes)
    assert aws.units["write messages"] == aws.units["reported write messages"] == (5.0 if dynalite else 1.0)
    if dynalite:  # a consistent read of a missing item: one unit
        assert await store.get_connection("CONN#absent") is None
        assert aws.units["read coordination"] == aws.units["reported read coordination"] == 1.0


def test_the_adapter_asks_data_requests_for_their_consumed_capacity_and_bills_their_answers() -> None:
    """The client hooks on their own (no network): a data request is asked for ``ReturnConsumedCapacity``
    and its answer billed, computed and reported; another operation is left alone; an answer the rules
    cannot size is counted as unbillable rather than failing the request."""
    aws = AwsClients(FleetConfig(timescale=0.1))
    params: dict[str, Any] = {"TableName": aws.config.messages_table, "Item": MESSAGE}
    context: dict[str, Any] = {}
    aws._note_params(params=params, model=SimpleNamespace(name="PutItem"), context=context)
    assert params["ReturnConsumedCapacity"] == "TOTAL"
    aws._note_answer(parsed={"ConsumedCapacity": {"CapacityUnits": 2.0}}, model=SimpleNamespace(name="PutItem"),
              context=context)
    assert aws.operations == {"PutItem messages": 1}
    assert dict(aws.units) == {"write messages": 2.0, "reported write messages": 2.0}

    other: dict[str, Any] = {"TableName": "t"}
    aws._note_params(params=other, model=SimpleNamespace(name="DescribeTable"), context={})
    assert "ReturnConsumedCapacity" not in other

    query: dict[str, Any] = {"TableName": aws.config.connections_table}
    context = {}
    aws._note_params(params=query, model=SimpleNamespace(name="Query"), context=context)
    aws._note_answer(parsed={"Items": [{"x": {"Q": "?"}}]}, model=SimpleNamespace(name="Query"), context=context)
    assert aws.operations["Query coordination"] == 1 and aws.units["unbillable coordination"] == 1
