"""The reader of the stored message layout: both layouts, in the store's order, and every item it cannot
explain named, never skipped."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.batch_log import TAG_BITS, log_key, segment_tag
from harness.message_log import decode, entries, from_low_level, log_position, messages, newest
from tests.harness.message_items import log_item


def plain_log_item(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return from_low_level(log_item(*args, **kwargs))


def test_a_stream_reads_in_log_order_with_its_marks(dynamodb: Any, tables: dict[str, str]) -> None:
    for item in (log_item("CONN#a", 3, "batch", 4, "worker-2", "g2", 3, 4, written_ms=30),
                 log_item("CONN#a", 1, "batch", 3, "worker-1", "g1", 1, 2, written_ms=10),
                 log_item("CONN#a", 2, "mark", 4, "worker-2", "g2", 3, 2, written_ms=20),
                 log_item("CONN#b", 1, "batch", 1, "worker-1", "g1", 1, 1)):
        dynamodb.put_item(TableName=tables["messages"], Item=item)

    found = list(messages(entries(dynamodb, tables["messages"], "CONN#a")))

    assert [(m.seq, m.ts, m.data, m.batch, m.epoch, m.worker, m.kind, m.written_ms) for m in found] == [
        (1, 1001, "a:1", 1, 3, "worker-1", "batch", 10), (2, 1002, "a:2", 1, 3, "worker-1", "batch", 10),
        (None, None, None, 2, 4, "worker-2", "mark", 20),
        (3, 1003, "a:3", 3, 4, "worker-2", "batch", 30), (4, 1004, "a:4", 3, 4, "worker-2", "batch", 30)]
    assert [(m.seq, m.kind) for m in messages(entries(dynamodb, tables["messages"], "CONN#a"), from_seq=3)] == [
        (None, "mark"), (3, "batch"), (4, "batch")]
    assert [m.seq for m in messages(entries(dynamodb, tables["messages"], "CONN#a"), from_seq=4)] == [4]


def test_segments_read_in_order_and_a_key_is_its_segment_and_number(dynamodb: Any, tables: dict[str, str]) -> None:
    """A standby region's segments (``fleet.batch_log.log_key``): the Query reads the older segment's late
    batch before the newer segment's mark, and ``log_position`` splits a key as the writer made it."""
    east, west = segment_tag("us-east-1"), segment_tag("us-west-2")
    for item in (log_item("CONN#a", log_key(1, west, 1), "mark", 1, "west-1", "g1", 2, 1, written_ms=30),
                 log_item("CONN#a", log_key(0, east, 1), "batch", 4, "east-1", "g1", 1, 2, written_ms=10),
                 log_item("CONN#a", log_key(0, east, 2), "batch", 4, "east-1", "g1", 3, 3, written_ms=20)):
        dynamodb.put_item(TableName=tables["messages"], Item=item)

    found = list(messages(entries(dynamodb, tables["messages"], "CONN#a")))

    assert [(m.seq, m.worker) for m in found] == [(1, "east-1"), (2, "east-1"), (3, "east-1"), (None, "west-1")]
    assert [log_position(m.batch) for m in found if m.batch is not None] == [
        (east, 1), (east, 1), (east, 2), ((1 << TAG_BITS) | west, 1)]


def test_one_item_per_message_reads_its_seq_from_the_data() -> None:
    blog = decode({"pk": "CONN#a", "sk": 1700000000999, "message_data": "a:7", "timestamp_ms": 1700000000998,
                   "worker_id": "worker-1", "gen": "g1"})

    [message] = blog.messages()

    assert (message.seq, message.ts, message.data, message.batch, message.epoch, message.worker, message.kind) == (
        7, 1700000000998, "a:7", None, None, "worker-1", "message")


@pytest.mark.parametrize(("item", "problem"), [
    ({"pk": "CONN#a", "sk": 5, "message_data": "no seq here"}, "no kind, and message_data names no seq"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 2), "kind": "note"}, "kind 'note' is neither"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 2), "epoch": "1"}, "without a whole-number epoch"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 3), "seq_to": 4}, "not the seqs 1 to 4 in order"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 2), "msgs": "x"}, "msgs is not JSON text"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 1), "msgs": '[[1,1001,"a:1"],[2,5]]'},
     "msgs is not JSON text"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 1), "msgs": '[[true,1001,"a:1"]]'},
     "msgs is not JSON text"),
    ({**plain_log_item("CONN#a", 1, "batch", 1, "w", "g", 1, 1),
      "msgs": [{"seq": 1, "ts_ms": 1001, "data": "a:1"}]}, "msgs is not JSON text"),  # no second layout kept
    (plain_log_item("CONN#a", 2, "mark", 1, "w", "g", 2, 2), "range 2..2 is not empty"),
])
def test_an_item_neither_layout_explains_is_named(item: dict[str, Any], problem: str) -> None:
    entry = decode(item)

    assert entry.kind == "unreadable" and problem in str(entry.problem)
    assert list(entry.messages()) == []


def test_the_newest_item_is_the_logs_tail(dynamodb: Any, tables: dict[str, str]) -> None:
    assert newest(dynamodb, tables["messages"], "CONN#a") is None
    for item in (log_item("CONN#a", 1, "batch", 3, "worker-1", "g1", 1, 2),
                 log_item("CONN#a", 2, "mark", 4, "worker-2", "g2", 3, 2)):
        dynamodb.put_item(TableName=tables["messages"], Item=item)

    tail = newest(dynamodb, tables["messages"], "CONN#a")

    assert tail is not None and (tail.batch, tail.kind, tail.seq_to) == (2, "mark", 2)
