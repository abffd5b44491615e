"""The values the fleet's pure machines (``fleet.incarnation``, ``fleet.stream_machine``) are stepped with and
answer with: inputs (a clock reading, a request's answer, a STOP, a let-go ...) and outputs (read a clock, send
a write, open or close a session, emit an event, arm the watchdog ...).  A machine never reads a clock or sends
anything itself: its interpreter (``fleet.liveness``, the tests' simulations) does what the outputs say and
steps it with what came of it, so a test can put any delay or clock reading between any two of them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet.expr import Write
from fleet.lease import ConnectionRecord, Lease, StopRequest, WorkerRecord


class ClockName(enum.Enum):
    FENCE = "fence"  # seconds on the fence clock (``fleet.clock.Clock.fence_s``)
    LEASE = "lease"  # Unix ms on the lease clock (``fleet.clock.Clock.now_ms``)


class Outcome(enum.Enum):
    OK = "ok"
    FAIL = "fail"  # refused: the condition did not hold
    UNKNOWN = "info"  # no answer in time: it may land, or have landed, at any time


@dataclass(frozen=True)
class ReadClock:
    """Output: read this clock and step the machine with the ``Reading``; nothing else is decided meanwhile."""

    clock: ClockName


@dataclass(frozen=True)
class Send:
    """Output: send ``write`` to ``table``; step the machine with its ``Answer`` (``pk``: the stream it is
    for, None: the incarnation's own item)."""

    kind: str  # register, renew, acquire, release, transfer
    table: str
    write: Write
    pk: str | None = None


@dataclass(frozen=True)
class ReadItem:
    """Output: read ``pk``'s item consistently; step the machine with the ``ItemRead``."""

    pk: str


@dataclass(frozen=True)
class OpenSession:
    """Output: consume ``lease`` (a drain when ``drain_until_ms`` is set), resuming after its ``resume_seq``."""

    lease: Lease
    drain_until_ms: int | None = None


@dataclass(frozen=True)
class CloseSession:
    """Output: stop consuming; step the machine with ``TaskEnded`` once the consume task ended or would not."""

    reason: str


@dataclass(frozen=True)
class Emit:
    """Output: one history event of this incarnation."""

    type: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Arm:
    """Output: step the machine with a ``Reading`` of the fence clock once it reads ``at_s`` (the watchdog)."""

    at_s: float


@dataclass(frozen=True)
class Abandon:
    """Output: the incarnation is over (``retire``: expire its item once no write of it can land); every
    stream it holds is lost, and the worker continues as a new one."""

    reason: str
    retire: bool


@dataclass(frozen=True)
class LoseStream:
    """Output: ``pk``'s own lease was refused a renewal (the published design's per-connection leases): stop
    consuming it, releasing nothing."""

    pk: str
    reason: str


@dataclass(frozen=True)
class Mailbox:
    """Output: the worker item as a renewal returned it: STOPs to honour, and gifts to take up if ``on_time``."""

    record: WorkerRecord
    on_time: bool


Output = ReadClock | Send | ReadItem | OpenSession | CloseSession | Emit | Arm | Abandon | LoseStream | Mailbox


@dataclass(frozen=True)
class Reading:
    """Input: what the clock asked for (or armed) reads."""

    clock: ClockName
    value: float


@dataclass(frozen=True)
class Answer:
    """Input: the outcome of the write sent (``item``: as it left the item, when accepted); ``at_s``: the
    fence clock when it came (or when the client gave up on it)."""

    outcome: Outcome
    item: Mapping[str, Any] | None = None
    at_s: float = 0.0
    pk: str | None = None
    note: str = ""  # why it was refused or is unknown


@dataclass(frozen=True)
class ItemRead:
    """Input: the item ``ReadItem`` asked for (None: no such item, or the read ``failed``)."""

    seen: ConnectionRecord | None
    failed: bool = False


@dataclass(frozen=True)
class Heartbeat:
    """Input: renew now.  ``leases``: the streams held; ``open_until``: the region gate's fence-clock limit."""

    leases: tuple[Lease, ...] = ()
    handled_stops: frozenset[str] = frozenset()
    taken_gifts: frozenset[str] = frozenset()
    open_until: float = float("inf")


@dataclass(frozen=True)
class StopAt:
    """Input: the stream was STOPPED at ``at_ms`` (None: not known; read it); ``reason``: how it was learnt
    (a STOP, a refused checkpoint)."""

    at_ms: int | None
    reason: str = "STOP"


@dataclass(frozen=True)
class StopPending:
    """Input: a STOP read while the stream's acquire is in flight; honoured at take-up if it stops the lease
    granted (``StopRequest.stops``)."""

    request: StopRequest


@dataclass(frozen=True)
class LetGo:
    """Input: give the lease back (a shutdown, an upstream out of reach past its budget, a drain finished),
    or with ``to`` transfer it to that incarnation (balancing); ``release`` False: stop consuming, and let the
    lease lapse.  While the acquire is in flight: a shutdown, the granted lease is handed off at take-up."""

    reason: str
    to: WorkerRecord | None = None
    release: bool = True


@dataclass(frozen=True)
class TaskEnded:
    """Input: the consume task ended (``ended`` False: it would not); ``unread``: what the stream emitted
    before the STOP may not all be stored; ``fence_open``: the incarnation's fence now."""

    ended: bool = True
    unread: bool = False
    fence_open: bool = True
    drained: bool = False


@dataclass(frozen=True)
class Stored:
    """Input: every sequence up to ``seq`` is stored."""

    seq: int


@dataclass(frozen=True)
class Lost:
    """Input: the stream is no longer ours to consume (its incarnation fenced or abandoned, or its budget
    spent at shutdown): it lapses, nothing sent (``silent``: no ``lease.lost`` either: a retake the worker
    cannot make now; the lease stays, and is adopted or lapses)."""

    reason: str
    silent: bool = False


Input = Reading | Answer | ItemRead | Heartbeat | StopAt | StopPending | LetGo | TaskEnded | Stored | Lost
