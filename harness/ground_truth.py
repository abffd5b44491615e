"""The store's ground truth at the end of a run, written into the history for the checkers (DESIGN §11).

``record_final`` reads, after the experiment:

- the simulator's head per stream -> ``final.emitted`` {pk, head_seq};
- every stored message (messages table, every page) -> ``final.persisted`` {pk, seqs, items}: ``seqs`` lists
  the seq of every stored item (one entry per item: a seq stored twice, as ``blog``'s time-keyed items can
  be, appears twice), ``items`` the same items with their writer: {seq, worker, gen, epoch, sent_ms}
  (``null`` where the item lacks the attribute: ``blog`` writes no epoch, an old fleet no writer).  The seq
  comes from ``message_data`` (``<connection id>:<seq>``), which both profiles write, since ``blog`` keys
  its items by time;
- every connection item (connections table, every page) -> ``final.connection`` {pk, desired_state,
  lease_owner, owner_gen, epoch, last_seq, ckpt_worker, ckpt_gen, ckpt_epoch} (absent attributes are
  None, which ``HistoryWriter`` leaves out of the event; a started pk with no item gets the pk alone).

Each pk of ``ids`` gets one ``final.persisted`` (empty when nothing was stored) and one ``final.connection``;
pks found in the tables beyond ``ids`` are recorded too, unless they lack the run's connection-id prefix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

MESSAGE_ATTRIBUTES = ("pk", "message_data", "worker_id", "gen", "epoch", "sent_ms", "kind", "worker", "msgs",
                      "written_ms")
CONNECTION_ATTRIBUTES = ("pk", "desired_state", "lease_owner", "owner_gen", "epoch", "last_seq", "ckpt_worker",
                         "ckpt_gen", "ckpt_epoch")
ITEM_FIELDS = {"worker_id": "worker", "gen": "gen", "epoch": "epoch", "sent_ms": "sent_ms"}


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
    for raw in _scan(dynamodb, tables["messages"], MESSAGE_ATTRIBUTES):
        pk = _value(raw.get("pk"))
        if isinstance(pk, str) and pk.startswith(_pk(prefix)):
            items.setdefault(pk, []).extend(_messages(raw))
    for pk, found in items.items():
        found.sort(key=lambda item: item["seq"])
        history.emit("final.persisted", pk=pk, seqs=[item["seq"] for item in found], items=found)
    connections: dict[str, dict[str, Any]] = {_pk(i): {} for i in ids}
    for raw in _scan(dynamodb, tables["connections"], CONNECTION_ATTRIBUTES):
        pk = _value(raw.get("pk"))
        if isinstance(pk, str) and pk.startswith(_pk(prefix)):
            connections[pk] = {name: _value(raw.get(name)) for name in CONNECTION_ATTRIBUTES[1:]}
    for pk, fields in connections.items():
        history.emit("final.connection", pk=pk, **{name: fields.get(name) for name in CONNECTION_ATTRIBUTES[1:]})


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


def _value(attribute: Mapping[str, Any] | None) -> Any:
    """A low-level DynamoDB attribute value as Python: S as str, N as int (or float), BOOL, NULL as None;
    None when absent."""
    if not attribute:
        return None
    if "S" in attribute:
        return attribute["S"]
    if "N" in attribute:
        try:
            return int(attribute["N"])
        except ValueError:
            return float(attribute["N"])
    if "BOOL" in attribute:
        return bool(attribute["BOOL"])
    return None


def _messages(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stored messages of one item: a message item's one (keyed by its ``message_data``), or each message
    of a hardened log batch (``fleet.batch_log``; its writer's clock ``written_ms`` as ``sent_ms``; a mark
    holds none)."""
    kind = _value(raw.get("kind"))
    if kind is None:
        seq = _seq(_value(raw.get("message_data")))
        return [] if seq is None else [
            {"seq": seq, **{field: _value(raw.get(name)) for name, field in ITEM_FIELDS.items()}}]
    writer = {"worker": _value(raw.get("worker")), "gen": _value(raw.get("gen")), "epoch": _value(raw.get("epoch")),
              "sent_ms": _value(raw.get("written_ms"))}
    return [{"seq": int(m["M"]["seq"]["N"]), **writer} for m in (raw.get("msgs") or {}).get("L", [])]


def _seq(message_data: Any) -> int | None:
    if not isinstance(message_data, str):
        return None
    _, _, seq = message_data.rpartition(":")
    return int(seq) if seq.isascii() and seq.isdigit() else None
