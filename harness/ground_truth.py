"""The store's ground truth at the end of a run, written into the history for the checkers (DESIGN §11).

``record_final`` reads, after the experiment:

- the simulator's head per stream -> ``final.emitted`` {pk, head_seq};
- every stored item of the messages table (every page, read through ``harness.message_log``, either layout)
  -> ``final.persisted`` {pk, seqs, items, unreadable}: ``seqs`` lists the seq of every stored message (one
  entry per copy: a seq stored twice, as ``blog``'s time-keyed items can be, appears twice), ``items`` the
  same messages with their writer: {seq, worker, gen, epoch, sent_ms, batch} (``null`` where the store lacks
  it: ``blog`` writes no epoch, an old fleet no writer, one item per message no batch; a log batch's
  ``sent_ms`` is its ``written_ms``), ``unreadable`` the items neither layout explains ({sk, problem});
- per stream whose messages form a batch log -> ``final.log`` {pk, entries}: every log entry in batch order,
  without its messages ({batch, kind, epoch, worker, gen, take, seq_from, seq_to, written_ms});
- every connection item (connections table, every page) -> ``final.connection`` {pk, desired_state,
  lease_owner, owner_gen, epoch, last_seq, ckpt_worker, ckpt_gen, ckpt_epoch} (absent attributes are
  None, which ``HistoryWriter`` leaves out of the event; a started pk with no item gets the pk alone).

Each pk of ``ids`` gets one ``final.persisted`` (empty when nothing was stored) and one ``final.connection``;
pks found in the tables beyond ``ids`` are recorded too, unless they lack the run's connection-id prefix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from harness.message_log import LOG_KINDS, UNREADABLE, Entry, every_entry, from_low_level

CONNECTION_ATTRIBUTES = ("pk", "desired_state", "lease_owner", "owner_gen", "epoch", "last_seq", "ckpt_worker",
                         "ckpt_gen", "ckpt_epoch")


class EventSink(Protocol):
    """Where the events go: ``fleet.history.HistoryWriter`` (or anything with its ``emit``)."""

    def emit(self, type: str, **fields: Any) -> Any: ...


def record_final(history: EventSink, dynamodb: Any, tables: Mapping[str, str],
                 streams: Mapping[str, Any], ids: list[str], prefix: str = "") -> None:
    """Write ``final.emitted``, ``final.persisted`` and ``final.connection`` (see the module docstring).

    ``dynamodb``: a boto3 DynamoDB client; ``tables``: role -> table name (``messages`` and
    ``connections``); ``streams``: the simulator's streams by connection id (``head_seq`` each), as its
    control API lists them; ``ids``: the connection ids the run started; ``prefix``: only streams and items of
    connection ids starting with it count (a run against a fleet others use too)."""
    for connection_id, stream in streams.items():
        if connection_id.startswith(prefix):
            history.emit("final.emitted", pk=_pk(connection_id), head_seq=stream.get("head_seq"))
    items: dict[str, list[dict[str, Any]]] = {_pk(i): [] for i in ids}
    unreadable: dict[str, list[dict[str, Any]]] = {}
    log_entries: dict[str, list[Entry]] = {}
    for entry in every_entry(dynamodb, tables["messages"]):
        if not entry.pk.startswith(_pk(prefix)):
            continue
        items.setdefault(entry.pk, [])
        if entry.kind == UNREADABLE:
            unreadable.setdefault(entry.pk, []).append({"sk": entry.sk, "problem": entry.problem})
        elif entry.kind in LOG_KINDS:
            log_entries.setdefault(entry.pk, []).append(entry)
        items[entry.pk].extend({"seq": m.seq, "worker": m.worker, "gen": m.gen, "epoch": m.epoch,
                                "sent_ms": m.written_ms, "batch": m.batch}
                               for m in entry.messages() if m.seq is not None)
    for pk, found in items.items():
        found.sort(key=lambda item: item["seq"])
        history.emit("final.persisted", pk=pk, seqs=[item["seq"] for item in found], items=found,
                     unreadable=unreadable.get(pk))
    for pk, log in log_entries.items():
        history.emit("final.log", pk=pk, entries=[entry.summary() for entry in sorted(log, key=_sk)])
    connections: dict[str, dict[str, Any]] = {_pk(i): {} for i in ids}
    for raw in _scan(dynamodb, tables["connections"], CONNECTION_ATTRIBUTES):
        item = from_low_level(raw)
        pk = item.get("pk")
        if isinstance(pk, str) and pk.startswith(_pk(prefix)):
            connections[pk] = {name: item.get(name) for name in CONNECTION_ATTRIBUTES[1:]}
    for pk, fields in connections.items():
        history.emit("final.connection", pk=pk, **{name: fields.get(name) for name in CONNECTION_ATTRIBUTES[1:]})


def _sk(entry: Entry) -> int:
    return entry.sk if entry.sk is not None else -1


def _pk(connection_id: str) -> str:
    return f"CONN#{connection_id}"


def _scan(dynamodb: Any, table: str, attributes: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """Every item of ``table`` (every page, consistent reads), with only ``attributes``."""
    names = {f"#a{i}": name for i, name in enumerate(attributes)}
    pages = dynamodb.get_paginator("scan").paginate(
        TableName=table, ConsistentRead=True, ProjectionExpression=", ".join(names),
        ExpressionAttributeNames=names)
    for page in pages:
        yield from page.get("Items", [])
