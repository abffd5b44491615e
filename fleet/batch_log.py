"""The fenced batch log (``hardened``): the pure decisions of one stream's writer, no I/O.

Each stream's stored messages form a log in the messages table: key (``pk``, ``sk`` = the batch number
``b``, dense per stream and region segment: 1, 2, 3 ... with one region).  Every item (``LogItem``)
carries ``kind`` (``batch`` or ``mark``), ``epoch``, ``worker``, ``gen`` (the writer's incarnation), ``take``
(its take-up, ``Writer``), ``seq_from``, ``seq_to`` and ``written_ms`` (the writer's wall clock as it builds
the request).  A batch holds the
consecutive sequences ``seq_from .. seq_to`` in ``msgs``, one string: JSON text of an array of
``[seq, ts_ms, data]`` arrays (``ts_ms`` the upstream's emission time), UTF-8 as it is, so the SDK
serialises one value per batch instead of a map per message; a mark holds none (``seq_from`` = ``seq_to``
+ 1, ``seq_to`` the last sequence already stored).

The fence, with single conditional puts only (every backend):

- a writer puts item ``b`` with ``attribute_not_exists(sk)``, and only once ``b - 1`` exists: one write in
  flight per stream, so an incarnation's items are dense and in order;
- a new owner (every take-up: acquire, transfer, adoption, drain) reads the log's tail consistently and puts
  a **mark** at the next number before it stores anything, then resumes after the tail's ``seq_to``;
- a put refused by its condition is judged by reading the item at its number (``LogWriter.on_found``): our
  own item (a retry whose first answer was lost) means it landed; an earlier holder's item that landed
  before our mark makes the mark re-read the tail and try the next number; anything else (a later take-up's
  item) means we were superseded.  Take-ups are ordered by ``(epoch, take)`` (``Writer``), and a mark only
  ever follows an item of an earlier (or its own) take-up, so along the log take-ups never go back.

**Segments: one region's numbers never collide with another's.**  With a standby region the tables are Global
Tables, where a key written in two regions keeps the last writer's item only: a region activated before the
old region's last batches reached it would mark at the number of one of them, and replication would then drop
one of the two.  So a writer of a region (``region_tag``, ``segment_tag`` of the region's name; 0: one region,
numbers as above) numbers within its region's *segment*: ``sk = ((g << TAG_BITS | tag) << NUMBER_BITS) | n``
(``log_key``), where ``n`` = 1, 2, 3 ... is dense within the segment and ``g`` orders segments.  A take-up whose
tail is in its own region's segment marks at the next number there (the fence within a region is unchanged:
a zombie of the region writes in the number space the new owner marks in); a tail in another region's segment
(or an empty log) opens the region's segment ``g + 1`` (0 on an empty log) at ``n`` = 1, resuming after that
tail.  Every key then holds one region's items only; the other region's late items stay in their older
segment, ordered before the new one, and at worst a sequence is stored twice, once per region (what the log
checker reports as a cross-region duplicate, not a loss).  The regions' order across segments is the order the
take-ups saw (the gate lets one region consume at a time); a region activated before the other's newer
segment reached it continues its own older segment (see ``LogWriter.on_tail``).

Whatever an earlier holder had in flight either landed before the mark (it is part of the log, and the new
owner resumes after it) or collides with a number already taken and is refused: once a mark is in the log,
no earlier holder's item follows it.  ``tests/fleet/test_batch_log.py`` proves it over interleavings.

``Batcher`` says when the messages queued since the last put are cut into a batch: by count, size (well under
DynamoDB's 400 KB item limit) and age (``flush_ms``).
"""

from __future__ import annotations

import enum
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

BATCH = "batch"
MARK = "mark"
# Cut limits of one batch item: messages, and bytes of their stored text (``Message.size``).
MAX_MESSAGES = 1000
MAX_BYTES = 64_000
# A message's stored text beside its data, for estimates: ``[seq,ts_ms,"",`` with a 13-digit ts_ms.
MESSAGE_OVERHEAD_BYTES = 40
# The log's key: a segment's number ``g``, its region's tag, and the number within the segment (bits of each).
NUMBER_BITS = 32
TAG_BITS = 16


def segment_tag(region: str) -> int:
    """A region's tag in the log's keys: 1 .. 2**TAG_BITS - 1, a function of its name alone, so every worker of a
    region agrees on it (AWS's region names map to distinct tags: ``tests/fleet/test_batch_log.py``)."""
    return zlib.crc32(region.encode()) % ((1 << TAG_BITS) - 1) + 1


def log_key(g: int, tag: int, n: int) -> int:
    """The ``sk`` of item ``n`` of region ``tag``'s segment ``g`` (tag 0, g 0: ``n`` itself)."""
    return (((g << TAG_BITS) | tag) << NUMBER_BITS) | n


def key_parts(sk: int) -> tuple[int, int, int]:
    """``log_key``'s inverse: (g, tag, n)."""
    segment, n = divmod(sk, 1 << NUMBER_BITS)
    g, tag = divmod(segment, 1 << TAG_BITS)
    return g, tag, n


@dataclass(frozen=True)
class Message:
    """One message of a batch: its sequence, its emission time at the upstream, its data; and, computed once
    when it is made, ``text``, the message as its batch stores it (``[seq,ts_ms,"data"]``, JSON text as
    ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` writes it), and ``size``, the bytes that
    text takes in a batch's ``msgs``, the comma after it included."""

    seq: int
    ts_ms: int
    data: str
    text: str = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        text = f"[{self.seq},{self.ts_ms},{encode_basestring(self.data)}]"
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "size", (len(text) if text.isascii() else len(text.encode())) + 1)


def stored_messages(messages: Sequence[Message]) -> str:
    """A batch's ``msgs`` as stored: JSON text of the messages' ``[seq, ts_ms, data]`` arrays, in order."""
    return "[" + ",".join(m.text for m in messages) + "]"


def read_messages(text: Any) -> tuple[Message, ...]:
    """A batch's stored ``msgs`` read back.  Raises ``ValueError`` unless it is JSON text of
    ``[seq, ts_ms, data]`` arrays (whole numbers and a string)."""
    if not isinstance(text, str):
        raise ValueError(f"msgs is not JSON text but {type(text).__name__}")
    rows = json.loads(text)
    if not isinstance(rows, list) or not all(
            isinstance(row, list) and len(row) == 3 and type(row[0]) is int and type(row[1]) is int
            and isinstance(row[2], str) for row in rows):
        raise ValueError("msgs is not JSON text of [seq, ts_ms, data] arrays")
    return tuple(Message(seq, ts_ms, data) for seq, ts_ms, data in rows)


@dataclass(frozen=True)
class Writer:
    """Who writes: the incarnation (``worker``, ``gen``) holding the stream at ``epoch``, in its take-up
    number ``take`` (increasing within the incarnation).  Every acquire raises the epoch, so two incarnations
    never share one; one incarnation may take one stream up twice at one epoch (an adoption after a release
    whose answer was lost), and then the later take must fence the earlier: ``(epoch, take)`` orders takes."""

    worker: str
    gen: str
    epoch: int
    take: int

    def later_than(self, other: Writer) -> bool:
        """Whether this writer's take-up came after ``other``'s."""
        return (self.epoch, self.take) > (other.epoch, other.take)


@dataclass(frozen=True)
class LogItem:
    """One item of a stream's log (see the module docstring)."""

    pk: str
    b: int
    kind: str
    writer: Writer
    seq_from: int
    seq_to: int
    written_ms: int
    msgs: tuple[Message, ...] = ()

    def same_put(self, other: LogItem) -> bool:
        """Whether ``other`` is this very put (a retry's twin): same number, kind, writer (take included)
        and range."""
        return (self.pk, self.b, self.kind, self.writer, self.seq_from, self.seq_to) == (
            other.pk, other.b, other.kind, other.writer, other.seq_from, other.seq_to)

    def to_item(self) -> dict[str, Any]:
        """The stored item (``fleet.store`` converts it to the wire)."""
        item: dict[str, Any] = {
            "pk": self.pk, "sk": self.b, "kind": self.kind, "epoch": self.writer.epoch, "worker": self.writer.worker,
            "gen": self.writer.gen, "take": self.writer.take, "seq_from": self.seq_from, "seq_to": self.seq_to,
            "written_ms": self.written_ms,
        }
        if self.kind == BATCH:
            item["msgs"] = stored_messages(self.msgs)
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> LogItem:
        """A stored item read back.  Raises ``ValueError`` for an item that is not a log item."""
        try:
            kind = str(item["kind"])
            if kind not in (BATCH, MARK):
                raise ValueError(f"unknown kind {kind!r}")
            msgs = read_messages(item["msgs"]) if kind == BATCH else ()
            return cls(pk=str(item["pk"]), b=int(item["sk"]), kind=kind,
                       writer=Writer(str(item["worker"]), str(item["gen"]), int(item["epoch"]), int(item["take"])),
                       seq_from=int(item["seq_from"]), seq_to=int(item["seq_to"]),
                       written_ms=int(item["written_ms"]), msgs=msgs)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a log item: {exc}") from exc


class Phase(enum.Enum):
    READ_TAIL = "read-tail"  # the take-up's tail read is to be sent (again)
    MARK = "mark"  # the take-up's mark is in flight
    READY = "ready"  # the mark is in the log; nothing in flight
    PUT = "put"  # a batch is in flight
    SUPERSEDED = "superseded"  # another holder's item took our number: never write again


@dataclass(frozen=True)
class ReadTail:
    """Read the log's last item (consistent Query, newest first, Limit 1); answer ``on_tail``."""


@dataclass(frozen=True)
class Put:
    """Put ``item`` with ``attribute_not_exists(sk)``; answer ``on_stored``, ``on_refused`` or ``on_unknown``."""

    item: LogItem


@dataclass(frozen=True)
class ReadAt:
    """Read item ``b`` consistently; answer ``on_found``."""

    b: int


Action = ReadTail | Put | ReadAt


class Superseded(Exception):
    """Another holder's item took this writer's number: it must never write to this log again."""


class LogWriter:
    """One take-up of one stream: puts its mark, then its batches, one at a time (``fleet.connection`` runs
    it; tests drive it over an in-memory log).

    Every answer method returns the next request to send, or None when there is none (``READY``: the writer
    waits for ``batch``).  An answer of unknown outcome (a timeout) is answered by sending the same request
    again: a put is conditional on its number being free, so its twin collides and is judged by ``on_found``."""

    def __init__(self, pk: str, writer: Writer, checkpoint: int = 0, region_tag: int = 0) -> None:
        self.pk = pk
        self.writer = writer
        self.region_tag = region_tag  # its region's segments (``segment_tag``; 0: one region)
        self.phase = Phase.READ_TAIL
        self.last_seq = checkpoint  # the last sequence in the log (after the tail read)
        self.next_b = 0  # the number of the next item to put (after the tail read)
        self.pending: Put | None = None  # the put in flight, until its outcome is known

    def start(self) -> ReadTail:
        return ReadTail()

    def on_tail(self, tail: LogItem | None, now_ms: int) -> Put:
        """The log's last item (None: empty): put our mark right after it, in our region's segment (the
        module docstring): the tail's next number when the tail is in it, else number 1 of the segment after
        the tail's (0 on an empty log).  Raises ``Superseded`` when a later take-up of our region wrote the
        tail.  Take-ups of two regions are not ordered by epoch (each region's lease items are its own
        replica's); the gate orders them.  A tail in an older segment of our own region, while another
        region's newer one has not reached our table yet, is continued (an activation before the other
        region's writes replicated): the order between those segments is then not the order written."""
        if self.phase not in (Phase.READ_TAIL, Phase.MARK):
            raise ValueError(f"a tail read answered in phase {self.phase.value}")
        if tail is None:
            self.next_b = log_key(0, self.region_tag, 1)
        else:
            g, tag, _ = key_parts(tail.b)
            if tag == self.region_tag and tail.writer.later_than(self.writer):
                self.phase, self.pending = Phase.SUPERSEDED, None
                raise Superseded(f"{self.pk}: the log ends with {tail.kind} {tail.b} of a later take-up {tail.writer}")
            self.next_b = tail.b + 1 if tag == self.region_tag else log_key(g + 1, self.region_tag, 1)
            self.last_seq = tail.seq_to
        self.phase = Phase.MARK
        self.pending = Put(LogItem(self.pk, self.next_b, MARK, self.writer, self.last_seq + 1, self.last_seq, now_ms))
        return self.pending

    @property
    def ready(self) -> bool:
        """Whether a batch may be put now (the mark is in the log and nothing is in flight)."""
        return self.phase is Phase.READY

    def batch(self, messages: Sequence[Message], now_ms: int) -> Put:
        """Put ``messages`` (consecutive, after the last sequence in the log: right after it, unless the
        upstream lost what lies between, a gap left to the checkers) as the next item."""
        if not self.ready:
            raise ValueError(f"a batch asked for in phase {self.phase.value}")
        seqs = [m.seq for m in messages]
        if not seqs or seqs[0] <= self.last_seq or seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise ValueError(f"a batch must be consecutive and follow the log's {self.last_seq}: {seqs[:3]}...")
        self.phase = Phase.PUT
        self.pending = Put(LogItem(self.pk, self.next_b, BATCH, self.writer, seqs[0], seqs[-1], now_ms,
                                   tuple(messages)))
        return self.pending

    def on_stored(self) -> None:
        """The pending put was accepted."""
        put = self._pending()
        self.pending = None
        self.phase = Phase.READY
        self.next_b = put.item.b + 1
        self.last_seq = put.item.seq_to

    def on_refused(self) -> ReadAt:
        """The pending put was refused: its number is taken.  Read what took it."""
        return ReadAt(self._pending().item.b)

    def on_unknown(self) -> Action:
        """The pending request's outcome is unknown: send it again (a tail read, or the very same put)."""
        if self.phase is Phase.READ_TAIL:
            return ReadTail()
        return self._pending()

    def on_found(self, found: LogItem | None, now_ms: int) -> Action | None:
        """The item at the refused put's number.  Ours: it landed.  An earlier take-up's item before our mark:
        re-read the tail (``on_tail``) to mark after it.  Anything else (a later take-up's item): superseded,
        raises ``Superseded``."""
        put = self._pending()
        if found is not None and put.item.same_put(found):
            self.on_stored()
            return None
        if found is None:
            return put  # refused, then gone: nothing deletes log items, so only a stale read says this
        if put.item.kind == MARK and not found.writer.later_than(self.writer):
            self.phase, self.pending = Phase.READ_TAIL, None
            return ReadTail()
        self.phase, self.pending = Phase.SUPERSEDED, None
        raise Superseded(f"{self.pk} item {put.item.b} was taken by {found.kind} of {found.writer}")

    def _pending(self) -> Put:
        if self.pending is None:
            raise ValueError(f"no put in flight in phase {self.phase.value}")
        return self.pending


@dataclass(frozen=True)
class Batcher:
    """When queued messages are cut into a batch: ``cut`` says how many go into the next one."""

    flush_ms: int
    max_messages: int = MAX_MESSAGES
    max_bytes: int = MAX_BYTES

    def cut(self, queued: Sequence[Message]) -> int:
        """How many of ``queued`` (oldest first) the next batch holds: as many as the limits allow, at least
        one."""
        size = 0
        for n, message in enumerate(queued[:self.max_messages]):
            size += message.size
            if size > self.max_bytes and n > 0:
                return n
        return min(len(queued), self.max_messages)

    def full(self, count: int, size: int) -> bool:
        """Whether ``count`` queued messages of ``size`` stored bytes in all fill the next batch: by count, or
        by size with more than one (a message alone always goes)."""
        return count >= self.max_messages or (count > 1 and size > self.max_bytes)

    def wait_ms(self, queued: Sequence[Message], oldest_queued_ms: float | None, now_ms: float,
                wall_ms: float | None = None, size: int | None = None) -> float | None:
        """How long until the next batch should go (0: now; None: nothing queued): at once when it is full,
        else once its oldest message waited ``flush_ms`` since it was queued (``now_ms``, the same clock as
        ``oldest_queued_ms``) or since it was emitted (``wall_ms`` against its ``ts_ms``: a backlog replayed
        after a take-up goes at once).  Neither changes until the batch goes, so a writer sleeps until then
        unless the queue fills.  An upstream clock off the writer's only moves when batches go, never what
        they hold.  ``size``: the queue's stored bytes if the caller keeps them (else summed)."""
        if not queued or oldest_queued_ms is None:
            return None
        if self.full(len(queued), sum(m.size for m in queued) if size is None else size):
            return 0.0
        wait = oldest_queued_ms + self.flush_ms - now_ms
        if wall_ms is not None:
            wait = min(wait, queued[0].ts_ms + self.flush_ms - wall_ms)
        return max(0.0, wait)
