"""The final scan: every stored message with its writer, every connection item, across pages (moto); and a
stream's stored head, which the settle phase waits on."""

from __future__ import annotations

from typing import Any

from fleet.batch_log import BATCH, MARK, LogItem, Message, Writer
from fleet.typed import to_typed
from harness.ground_truth import record_final
from tests.harness.message_items import log_item

TABLES = {"messages": "msgs", "connections": "conns"}


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        self.events.append({"type": type, **fields})
        return self.events[-1]

    def of(self, type: str) -> dict[str, dict[str, Any]]:
        return {e["pk"]: e for e in self.events if e["type"] == type}


def put_message(client: Any, pk: str, sk: int, seq: int, **writer: Any) -> None:
    item: dict[str, Any] = {"pk": {"S": pk}, "sk": {"N": str(sk)}, "message_data": {"S": f"{pk[5:]}:{seq}"}}
    for name, value in writer.items():
        item[name] = {"N": str(value)} if isinstance(value, int) else {"S": value}
    client.put_item(TableName=TABLES["messages"], Item=item)


def test_items_keep_their_writer_and_missing_attributes_are_null(dynamodb: Any) -> None:
    put_message(dynamodb, "CONN#a", 2, 2, worker_id="worker-1", gen="ab", epoch=3, sent_ms=1700000000123)
    put_message(dynamodb, "CONN#a", 1, 1, worker_id="worker-2", gen="cd", epoch=4, sent_ms=1700000000456)
    put_message(dynamodb, "CONN#b", 1700000000999, 7)  # a blog-style item: keyed by time, no writer
    dynamodb.put_item(TableName=TABLES["connections"], Item={
        "pk": {"S": "CONN#a"}, "desired_state": {"S": "STARTED"}, "lease_owner": {"S": "worker-2"},
        "owner_gen": {"S": "cd"}, "epoch": {"N": "4"}, "last_seq": {"N": "1"}, "ckpt_worker": {"S": "worker-2"},
        "ckpt_gen": {"S": "cd"}, "ckpt_epoch": {"N": "4"}})
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {"a": {"id": "a", "head_seq": 9}}, ["a", "b", "c"])

    assert recorder.of("final.emitted") == {"CONN#a": {"type": "final.emitted", "pk": "CONN#a", "head_seq": 9}}
    persisted = recorder.of("final.persisted")
    assert persisted["CONN#a"]["seqs"] == [1, 2]
    assert persisted["CONN#a"]["items"] == [
        {"seq": 1, "worker": "worker-2", "gen": "cd", "epoch": 4, "sent_ms": 1700000000456, "batch": None},
        {"seq": 2, "worker": "worker-1", "gen": "ab", "epoch": 3, "sent_ms": 1700000000123, "batch": None},
    ]
    assert persisted["CONN#b"]["items"] == [{"seq": 7, "worker": None, "gen": None, "epoch": None,
                                             "sent_ms": None, "batch": None}]
    assert recorder.of("final.log") == {}
    assert persisted["CONN#c"]["seqs"] == [] and persisted["CONN#c"]["items"] == []
    connections = recorder.of("final.connection")
    assert {k: v for k, v in connections["CONN#a"].items() if k != "type"} == {
        "pk": "CONN#a", "desired_state": "STARTED", "lease_owner": "worker-2", "owner_gen": "cd", "epoch": 4,
        "last_seq": 1, "ckpt_worker": "worker-2", "ckpt_gen": "cd", "ckpt_epoch": 4}
    assert set(connections) == {"CONN#a", "CONN#b", "CONN#c"}
    assert all(v is None for k, v in connections["CONN#b"].items() if k not in ("type", "pk"))


def test_every_page_is_read(dynamodb: Any) -> None:
    filler = "x" * 4000  # ~4 KB per item: 400 items are more than one 1 MB scan page
    for seq in range(1, 401):
        dynamodb.put_item(TableName=TABLES["messages"], Item={
            "pk": {"S": "CONN#big"}, "sk": {"N": str(seq)}, "message_data": {"S": f"big:{seq}"},
            "pad": {"S": filler}})
    first_page = dynamodb.scan(TableName=TABLES["messages"])
    assert "LastEvaluatedKey" in first_page  # the scan really is paginated
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {}, ["big"])

    assert recorder.of("final.persisted")["CONN#big"]["seqs"] == list(range(1, 401))


def test_a_batch_log_is_recorded_message_by_message_and_entry_by_entry(dynamodb: Any) -> None:
    for item in (log_item("CONN#a", 1, "batch", 3, "worker-1", "g1", 1, 2, written_ms=100),
                 log_item("CONN#a", 2, "mark", 4, "worker-2", "g2", 3, 2, written_ms=200),
                 log_item("CONN#a", 3, "batch", 4, "worker-2", "g2", 3, 3, written_ms=300)):
        dynamodb.put_item(TableName=TABLES["messages"], Item=item)
    dynamodb.put_item(TableName=TABLES["messages"], Item={  # neither layout: recorded, not skipped
        "pk": {"S": "CONN#a"}, "sk": {"N": "4"}, "kind": {"S": "batch"}, "epoch": {"N": "4"}})
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {}, ["a"])

    persisted = recorder.of("final.persisted")["CONN#a"]
    assert persisted["seqs"] == [1, 2, 3]
    assert [(i["seq"], i["worker"], i["epoch"], i["sent_ms"], i["batch"]) for i in persisted["items"]] == [
        (1, "worker-1", 3, 100, 1), (2, "worker-1", 3, 100, 1), (3, "worker-2", 4, 300, 3)]
    assert persisted["unreadable"] == [{"sk": 4, "problem": "a batch without a whole-number seq_from, seq_to, "
                                                            "worker"}]
    log = recorder.of("final.log")["CONN#a"]["entries"]
    assert [(e["batch"], e["kind"], e["worker"], e["gen"], e["epoch"], e["seq_from"], e["seq_to"])
            for e in log] == [(1, "batch", "worker-1", "g1", 3, 1, 2), (2, "mark", "worker-2", "g2", 4, 3, 2),
                              (3, "batch", "worker-2", "g2", 4, 3, 3)]


def test_the_fleets_own_log_items_are_read_message_by_message_and_entry_by_entry(dynamodb: Any) -> None:
    """The contract between the fleet's writer (``fleet.batch_log``) and the harness's reader: items the fleet
    writes are decoded by the reader, which imports nothing of the fleet; a takeover mark stores no message."""
    writer = Writer("worker-1", "ab", 3, 1)
    items = [LogItem("CONN#a", 1, MARK, writer, 1, 0, 5),
             LogItem("CONN#a", 2, BATCH, writer, 1, 2, 6, (Message(1, 0, "a:1"), Message(2, 0, "a:2")))]
    for item in items:
        dynamodb.put_item(TableName=TABLES["messages"], Item=to_typed(item.to_item()))
    recorder = Recorder()

    record_final(recorder, dynamodb, TABLES, {}, ["a"])

    persisted = recorder.of("final.persisted")["CONN#a"]
    assert persisted["seqs"] == [1, 2] and persisted["unreadable"] is None
    assert persisted["items"][0] == {"seq": 1, "worker": "worker-1", "gen": "ab", "epoch": 3, "sent_ms": 6,
                                     "batch": 2}
    assert [(e["kind"], e["take"]) for e in recorder.of("final.log")["CONN#a"]["entries"]] == [("mark", 1),
                                                                                               ("batch", 1)]
