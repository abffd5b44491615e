"""Reads the messages table as stored (README, "Stored message layout"), from either layout, without the
fleet's code: the ground truth, the log checkers and ``wsfleet messages`` all read through it.

- **One item per message** (``blog``, and ``hardened`` before the batch log): sk = the writer's clock
  (``blog``) or the sequence; ``message_data`` = the upstream's ``data`` (``<connection id>:<seq>``, where the
  seq is read), ``timestamp_ms``, ``worker_id``, ``gen``, ``epoch`` (hardened), ``sent_ms``.
- **The batch log** (``hardened``): sk = the batch number b = 1, 2, 3 ... per stream (with a standby region,
  per region segment: sk = ``(segment << 32) | n``, segment = ``(g << 16) | region tag``, n = 1, 2, 3 ... within
  it; ``log_position``); ``kind`` ``batch`` or
  ``mark``, ``epoch``, ``worker``, ``gen``, ``take`` (the incarnation's take-up number; optional),
  ``seq_from``, ``seq_to``, ``written_ms``; a batch's ``msgs`` is one string, JSON text of an array of
  [seq, ts_ms, data] arrays; a takeover mark stores no message (seq_from = seq_to + 1, seq_to the last seq
  already in the log).

``decode`` turns one stored item into an ``Entry``; an item neither layout explains is an entry of kind
``unreadable`` naming what is wrong (never skipped).  ``entries`` reads one stream (Query, every page),
``newest`` its item of the highest sk (a log's tail), ``every_entry`` the whole table (Scan, every page), all
with consistent reads, through a boto3 client.  ``messages`` flattens entries into ``Message`` rows in the
store's order (marks included, without a seq).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

LOG_KINDS = ("batch", "mark")
NUMBER_BITS = 32  # a log key's low bits: the number within its segment (above them: the segment)
MESSAGE = "message"  # the kind of an item of the one-item-per-message layout
UNREADABLE = "unreadable"

_DESERIALIZER = TypeDeserializer()


@dataclass(frozen=True)
class Message:
    """One stored message (``kind`` ``message`` or ``batch``), or a takeover mark (``kind`` ``mark``: no
    seq, ts or data).  ``batch``: the log's batch number (None in the one-item-per-message layout)."""

    pk: str
    seq: int | None
    ts: int | None
    data: str | None
    batch: int | None
    epoch: int | None
    worker: str | None
    gen: str | None
    take: int | None
    kind: str
    written_ms: int | None


@dataclass(frozen=True)
class Entry:
    """One stored item: a log entry (``kind`` ``batch`` / ``mark``), one message (``message``), or an item
    neither layout explains (``unreadable``, with ``problem``)."""

    pk: str
    sk: int | None
    kind: str
    epoch: int | None = None
    worker: str | None = None
    gen: str | None = None
    take: int | None = None
    seq_from: int | None = None
    seq_to: int | None = None
    written_ms: int | None = None
    msgs: tuple[tuple[int, int | None, str | None], ...] = field(default=())  # (seq, ts_ms, data)
    problem: str | None = None

    @property
    def batch(self) -> int | None:
        return self.sk if self.kind in LOG_KINDS else None

    def messages(self) -> Iterator[Message]:
        """This entry's messages (a mark: itself, without a seq; unreadable: nothing)."""
        if self.kind == UNREADABLE:
            return
        if self.kind == "mark":
            yield Message(self.pk, None, None, None, self.batch, self.epoch, self.worker, self.gen, self.take,
                          "mark", self.written_ms)
            return
        for seq, ts, data in self.msgs:
            yield Message(self.pk, seq, ts, data, self.batch, self.epoch, self.worker, self.gen, self.take,
                          self.kind, self.written_ms)

    def summary(self) -> dict[str, Any]:
        """The entry without its messages, as the history's ``final.log`` lists it."""
        return {"batch": self.sk, "kind": self.kind, "epoch": self.epoch, "worker": self.worker, "gen": self.gen,
                "take": self.take, "seq_from": self.seq_from, "seq_to": self.seq_to, "written_ms": self.written_ms}


def plain(value: Any) -> Any:
    """A deserialized DynamoDB value with numbers as int (whole) or float, recursively."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value


def from_low_level(item: Mapping[str, Any]) -> dict[str, Any]:
    """A low-level item (``{"pk": {"S": ...}, ...}``) as plain Python values."""
    return {name: plain(_DESERIALIZER.deserialize(value)) for name, value in item.items()}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def log_position(sk: int) -> tuple[int, int]:
    """A log key as (segment, number within it): keys order segments, then numbers (one region: segment 0)."""
    return divmod(sk, 1 << NUMBER_BITS)


def seq_of(data: Any) -> int | None:
    """The seq of the upstream's ``data`` (``<connection id>:<seq>``), None when it names none."""
    if not isinstance(data, str):
        return None
    _, _, seq = data.rpartition(":")
    return int(seq) if seq.isascii() and seq.isdigit() else None


def decode(item: Mapping[str, Any]) -> Entry:
    """One stored item (plain values: ``from_low_level``) as an ``Entry``."""
    pk, sk = str(item.get("pk", "")), _int(item.get("sk"))
    kind = item.get("kind")
    if kind is None:
        seq = seq_of(item.get("message_data"))
        if seq is None:
            return Entry(pk, sk, UNREADABLE, problem="no kind, and message_data names no seq")
        return Entry(pk, sk, MESSAGE, _int(item.get("epoch")), _str(item.get("worker_id")), _str(item.get("gen")),
                     None, seq, seq, _int(item.get("sent_ms")),
                     ((seq, _int(item.get("timestamp_ms")), _str(item.get("message_data"))),))
    if kind not in LOG_KINDS:
        return Entry(pk, sk, UNREADABLE, problem=f"kind {kind!r} is neither batch nor mark")
    fields = {name: _int(item.get(name)) for name in ("epoch", "seq_from", "seq_to", "written_ms")}
    missing = [name for name in ("epoch", "seq_from", "seq_to") if fields[name] is None]
    if sk is None or missing or _str(item.get("worker")) is None:
        what = ", ".join(missing + ([] if _str(item.get("worker")) is not None else ["worker"])
                         + ([] if sk is not None else ["sk"]))
        return Entry(pk, sk, UNREADABLE, problem=f"a {kind} without a whole-number {what}")
    entry = Entry(pk, sk, str(kind), fields["epoch"], _str(item.get("worker")), _str(item.get("gen")),
                  _int(item.get("take")), fields["seq_from"], fields["seq_to"], fields["written_ms"])
    if kind == "mark":
        if entry.seq_from != (entry.seq_to or 0) + 1:
            return Entry(pk, sk, UNREADABLE, problem=f"a mark whose range {entry.seq_from}..{entry.seq_to} is "
                                                     "not empty (seq_from = seq_to + 1)")
        return entry
    decoded = _batch_messages(item.get("msgs"))
    if decoded is None:
        return Entry(pk, sk, UNREADABLE, problem="a batch whose msgs is not JSON text of [seq, ts_ms, data] arrays "
                                                 "with a whole-number seq")
    if [seq for seq, _, _ in decoded] != list(range(fields["seq_from"] or 0, (fields["seq_to"] or 0) + 1)):
        return Entry(pk, sk, UNREADABLE, problem=f"a batch whose msgs are not the seqs {entry.seq_from} to "
                                                 f"{entry.seq_to} in order")
    return Entry(pk, sk, "batch", entry.epoch, entry.worker, entry.gen, entry.take, entry.seq_from, entry.seq_to,
                 entry.written_ms, decoded)


def _batch_messages(msgs: Any) -> tuple[tuple[int, int | None, str | None], ...] | None:
    """A batch's stored ``msgs`` as (seq, ts_ms, data) rows; None unless it is JSON text of three-element
    arrays with a whole-number seq."""
    if not isinstance(msgs, str):
        return None
    try:
        rows = json.loads(msgs)
    except ValueError:
        return None
    if not isinstance(rows, list) or not all(isinstance(row, list) and len(row) == 3 and _int(row[0]) is not None
                                             for row in rows):
        return None
    return tuple((row[0], _int(row[1]), _str(row[2])) for row in rows)


def entries(dynamodb: Any, table: str, pk: str) -> Iterator[Entry]:
    """Every stored item of one stream, in sk order (Query, every page, consistent reads)."""
    pages = dynamodb.get_paginator("query").paginate(
        TableName=table, ConsistentRead=True, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}})
    for page in pages:
        for item in page.get("Items", []):
            yield decode(from_low_level(item))


def newest(dynamodb: Any, table: str, pk: str) -> Entry | None:
    """The stream's item of the highest sk (a log's tail), None when it has none (a consistent Query)."""
    found = dynamodb.query(TableName=table, ConsistentRead=True, KeyConditionExpression="pk = :pk",
                           ScanIndexForward=False, Limit=1, ExpressionAttributeValues={":pk": {"S": pk}})
    items = found.get("Items", [])
    return decode(from_low_level(items[0])) if items else None


def every_entry(dynamodb: Any, table: str) -> Iterator[Entry]:
    """Every stored item of the table (Scan, every page, consistent reads), in no particular order."""
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            yield decode(from_low_level(item))


def messages(found: Iterable[Entry], from_seq: int | None = None) -> Iterator[Message]:
    """The messages of ``found`` in its order, marks included; with ``from_seq``, only the messages from that
    seq on and the marks placed there or later (a mark's place: its ``seq_from``)."""
    for entry in found:
        for message in entry.messages():
            place = message.seq if message.seq is not None else entry.seq_from
            if from_seq is None or (place is not None and place >= from_seq):
                yield message
