"""What becomes of one held stream, decided on values alone: the pure core ``fleet.stream_driver`` interprets.

No asyncio, no I/O, no clock read here.  ``HeldStream`` is the machine of one stream of one incarnation, from
its acquire to its release (states ``Phase``; stepped with ``fleet.machine_io`` inputs, answering with its
outputs): acquire, settle an acquire of unknown outcome, adopt, take up, stop, release or transfer, retake
after a refused release for a STOP, repeat a refused handoff for the STOP it missed.  The pure decisions it is
made of are functions the worker also calls directly: a take-up (consume, hand off, end for a STOP), a letting
go (send a release, or let the lease lapse), what follows a refused release, what a read after a STOP of
unknown time shows.  The profile's capabilities arrive as data (``fleet.profiles.Strategy``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleet.balance import transfer
from fleet.lease import STARTED, STOPPED, ConnectionRecord, Holder, Lease, StopRequest, WorkerRecord, optional_int
from fleet.machine_io import (
    Answer,
    ClockName,
    CloseSession,
    Emit,
    Input,
    ItemRead,
    LetGo,
    Lost,
    OpenSession,
    Outcome,
    Output,
    ReadClock,
    Reading,
    ReadItem,
    Send,
    StopAt,
    StopPending,
    Stored,
    TaskEnded,
)
from fleet.profiles import Profile


class Start(enum.Enum):
    """What a granted lease becomes at take-up."""

    CONSUME = "consume"  # consume it (or drain it, when the item is to be drained)
    HAND_OFF = "hand off"  # release it at once, as a handoff (``TakeUp.reason``)
    END_FOR_STOP = "end for stop"  # it was STOPPED: release it for that STOP (``TakeUp.stopped_at_ms``)


@dataclass(frozen=True)
class TakeUp:
    start: Start
    reason: str = ""
    stopped_at_ms: int | None = None  # END_FOR_STOP: the STOP (None: not known, to be read)


def stopped_at(item: Mapping[str, Any]) -> int | None:
    """The time of the STOP an item records, if it is STOPPED."""
    return optional_int(item.get("stopped_at_ms")) if item.get("desired_state") == STOPPED else None


def take_up(item: Mapping[str, Any], *, closing: bool, drains: bool, drain_until_ms: int | None, consumes: bool,
            stops_seen_ms: Iterable[int]) -> TakeUp:
    """A lease granted by ``item`` (read again, if a STOP seen during the acquire made the worker ask):
    handed off during a shutdown; consumed (or drained) when the profile says so; else not STARTED, so
    handed off where the profile does not drain, or ended for the STOP the item records, else for the latest
    one seen during the acquire (``stops_seen_ms``)."""
    if closing:
        return TakeUp(Start.HAND_OFF, "shutdown")
    if drain_until_ms is not None or consumes:
        return TakeUp(Start.CONSUME)
    reason = "desired state is not STARTED"
    if not drains:
        return TakeUp(Start.HAND_OFF, reason)
    found = stopped_at(item)
    return TakeUp(Start.END_FOR_STOP, reason, found if found is not None else max(stops_seen_ms, default=None))


@dataclass(frozen=True)
class Lapse:
    """Send nothing: the lease lapses with this incarnation (``lease.lost`` with ``reason``)."""

    reason: str


@dataclass(frozen=True)
class Release:
    """Send a release: for the STOP at ``for_stop_ms`` (None: a handoff, or its transfer); ``behind``: left for
    a drain, what the stream emitted before that STOP not all stored."""

    for_stop_ms: int | None
    behind: bool


def let_go(*, release: bool, reason: str, fence_open: bool, task_ended: bool, draining: bool, drained: bool,
           drain_stop_ms: int | None, stop_ms: int | None, unread: bool) -> Lapse | Release:
    """A stream no longer consumed (its task ended, or would not): whether its lease is given back.

    Asked not to (``release`` False), fenced, with a consume task that would not end (its writes may still
    land), or with a drain unfinished (released, it would never be drained): it lapses.  Else a release, for
    the STOP a finished drain drained to, or the one the caller names (``stop_ms``); left for a drain when
    the holder did not read or store up to that STOP (``unread``) and did not drain it."""
    if not task_ended:
        release, reason = False, f"{reason}: its writes did not end"
    if draining and not drained:
        release, reason = False, f"{reason}: drain unfinished"
    if not release:
        return Lapse(reason)
    if not fence_open:
        return Lapse("fenced before release")
    for_stop = drain_stop_ms if drained else stop_ms
    return Release(for_stop, behind=unread and not drained and for_stop is not None)


class Refused(enum.Enum):
    """What follows a refused release."""

    RETAKE = "retake"  # a release for a STOP: STARTED again since (maybe STOPPED again): acquire it again
    REPEAT_FOR_STOP = "repeat for stop"  # a handoff: a STOP landed unseen; release again for that STOP


def after_refusal(release: Release) -> Refused:
    return Refused.RETAKE if release.for_stop_ms is not None else Refused.REPEAT_FOR_STOP


@dataclass(frozen=True)
class StopRead:
    """What a read after a STOP of unknown time shows: go on consuming (``go_on``: STARTED again, still
    ours), or let go, releasing for the STOP found (``stop_ms``) unless the lease is no longer ours."""

    go_on: bool = False
    release: bool = True
    reason_suffix: str = ""
    stop_ms: int | None = None


def on_stop_read(seen: ConnectionRecord | None, ours: bool) -> StopRead:
    """``seen``: the item read for a held stream (None: gone); ``ours``: the lease read is still the one
    held."""
    if seen is None or not ours:
        return StopRead(release=False, reason_suffix=": lease no longer ours")
    if seen.desired_state == STARTED:
        return StopRead(go_on=True)
    return StopRead(stop_ms=seen.stopped_at_ms)


class Phase(enum.Enum):
    ACQUIRING = "acquiring"  # an acquire on its way (or a read settling one of unknown outcome)
    CONSUMING = "consuming"
    DRAINING = "draining"  # consuming what was emitted before a STOP, up to its reach
    STOPPING = "stopping"  # its session closed: waiting for the consume task to end
    RELEASING = "releasing"
    TRANSFERRING = "transferring"
    RELEASED = "released"  # given back (or transferred): accepted
    LOST = "lost"  # never ours, refused, lapsing, or a release of unknown outcome: nothing more sent


ENDED = frozenset({Phase.RELEASED, Phase.LOST})


class HeldStream:
    """One stream of one incarnation from its acquire to its release: acquire, settle, adopt, take up, stop,
    release or transfer, retake, and the repeat of a refused handoff, as a machine stepped by values (its
    interpreter: ``fleet.stream_driver``).  One request in flight at a time.

    A stream is taken up only through an acquire this machine sent and saw accepted (or a read showing the
    epoch that acquire wrote): never at an epoch read, since a release or transfer of ours whose answer was
    lost may still land and free that epoch while we consume it (issue 25 hole 3)."""

    def __init__(self, profile: Profile, pk: str, me: Holder, via: str) -> None:
        self.profile, self.pk, self.me, self.via = profile, pk, me, via
        self.phase = Phase.ACQUIRING
        self.seen: ConnectionRecord | None = None
        self.lease: Lease | None = None
        self.last_seq = 0
        self.drain_until_ms: int | None = None
        self.drain_stop_ms: int | None = None
        self.reason = ""
        self.stop_ms: int | None = None
        self.release_wanted = True
        self.to: WorkerRecord | None = None
        self.letting: Release | None = None
        self.attempts = 0
        self.handed_off = False  # released at take-up as a handoff (announced as one)
        self._retakes = 0
        self._closing = False  # a shutdown began while acquiring: the lease granted is handed off
        self._stops: list[StopRequest] = []  # STOPs read while acquiring
        self._granted: Mapping[str, Any] = {}
        self._sent_to: WorkerRecord | None = None
        self._drained = False
        self._waiting: str | None = None
        self._acquired_epoch: int | None = None

    # -- starting ------------------------------------------------------------------------------------
    @classmethod
    def claim(cls, profile: Profile, seen: ConnectionRecord | None, me: Holder, via: str,
              stored_seq: int = 0, pk: str | None = None) -> tuple[HeldStream, list[Output]]:
        """Acquire a listed stream (claimable, drainable, or retaken) as ``seen`` shows it (None: not read,
        ``pk``'s acquire conditions on no item read)."""
        key = seen.pk if seen is not None else pk
        assert key is not None
        stream = cls(profile, key, me, via)
        stream.last_seq = stored_seq
        return stream, stream._acquire(seen)

    @classmethod
    def adopt(cls, profile: Profile, pk: str, me: Holder, via: str = "adopted") -> tuple[HeldStream, list[Output]]:
        """A stream listed as ours though we hold nothing (or a gift): read it, then acquire it at the next
        epoch if it is still ours."""
        stream = cls(profile, pk, me, via)
        stream._waiting = "adopt"
        return stream, [ReadItem(pk)]

    def _acquire(self, seen: ConnectionRecord | None) -> list[Output]:
        self.seen, self.phase, self._waiting = seen, Phase.ACQUIRING, "acquire clock"
        return [ReadClock(ClockName.LEASE)]

    @property
    def consuming(self) -> bool:
        return self.phase in (Phase.CONSUMING, Phase.DRAINING)

    @property
    def ended(self) -> bool:
        return self.phase in ENDED

    @property
    def stops_seen(self) -> tuple[StopRequest, ...]:
        """The STOPs read while acquiring, honoured at take-up."""
        return tuple(self._stops)

    @property
    def retaking(self) -> bool:
        """A refused release for a STOP: about to read the stream, to acquire it again."""
        return self._waiting == "retake"

    # -- the step ------------------------------------------------------------------------------------
    def step(self, event: Input) -> list[Output]:
        if self.ended:
            return []
        if isinstance(event, Stored):
            self.last_seq = max(self.last_seq, event.seq)
            return []
        if isinstance(event, Lost):
            if event.silent:
                return self._end(Phase.LOST)
            return self._lost(event.reason, close=self.consuming)
        if self.phase is Phase.ACQUIRING and isinstance(event, StopPending | LetGo):
            if isinstance(event, StopPending):
                self._stops.append(event.request)
            else:
                self._closing = True
            return []
        if isinstance(event, StopAt | LetGo):
            return self._let_go(event)
        if isinstance(event, TaskEnded) and self.phase is Phase.STOPPING:
            return self._task_ended(event)
        handler = {"acquire clock": self._acquire_sent, "acquire": self._acquire_answered,
                   "settle": self._settled, "adopt": self._adopt_read, "release clock": self._release_sent,
                   "release": self._release_answered, "retake": self._retake_read,
                   "refused handoff": self._refused_handoff_read, "stop read": self._stop_read,
                   "take-up read": self._take_up_read}
        if self._waiting is None:
            return []
        return handler[self._waiting](event)

    def _acquire_sent(self, event: Input) -> list[Output]:
        if not isinstance(event, Reading) or event.clock is not ClockName.LEASE:
            return []
        write = self.profile.rules.acquire(self.pk, self.me, int(event.value), self.seen)
        self._acquired_epoch = (self.seen.epoch or 0) + 1 if self.seen is not None else None
        self._waiting = "acquire"
        return [Send("acquire", self.profile.rules.connections_table, write, self.pk)]

    def _acquire_answered(self, event: Input) -> list[Output]:
        if not isinstance(event, Answer):
            return []
        if event.outcome is Outcome.OK and event.item is not None:
            return self._take_up(event.item)
        fields: dict[str, Any] = {"pk": self.pk, "outcome": event.outcome.value, "via": self.via}
        if event.outcome is Outcome.UNKNOWN:
            fields["note"] = event.note
        if event.outcome is Outcome.UNKNOWN and self.profile.strategy.settles_unknown_acquire:
            self._waiting = "settle"
            return [Emit("lease.acquire", fields), ReadItem(self.pk)]
        return [Emit("lease.acquire", fields), *self._not_acquired()]

    def _settled(self, event: Input) -> list[Output]:
        """After an acquire of unknown outcome: ours only at the epoch that acquire wrote (any, when it
        conditioned on no item read)."""
        if not isinstance(event, ItemRead):
            return []
        seen = event.seen
        epoch_ok = seen is not None and (self._acquired_epoch is None or seen.epoch == self._acquired_epoch)
        if seen is not None and self.profile.owned(seen, self.me) and epoch_ok:
            self.via = "resolved"
            return self._take_up(dict(seen.__dict__))
        return self._not_acquired()

    def _not_acquired(self) -> list[Output]:
        """An acquire refused, or of unknown outcome unsettled: a retake reads and tries again, up to
        ``RETRIES`` acquires in all; anything else is over."""
        if 0 < self._retakes < RETRIES:
            self._waiting = "retake"
            return [ReadItem(self.pk)]
        return self._end(Phase.LOST)

    def _adopt_read(self, event: Input) -> list[Output]:
        if not isinstance(event, ItemRead):
            return []
        if event.seen is None or not self.profile.owned(event.seen, self.me):
            return self._end(Phase.LOST)
        return self._acquire(event.seen)  # at the next epoch, never at the one read: hole 3

    def _take_up(self, item: Mapping[str, Any]) -> list[Output]:
        lease = Lease.granted(item)
        if self.last_seq > lease.resume_seq:
            lease = replace(lease, resume_seq=self.last_seq)
        self.lease, self.last_seq = lease, lease.resume_seq
        self._retakes = 0
        out: list[Output] = [Emit("lease.acquire", {"pk": self.pk, "epoch": lease.epoch, "outcome": "ok",
                                                    "via": self.via, "expires_ms": item.get("lease_expires_at_ms")})]
        if self.profile.strategy.drains and self.profile.stop_seen(lease, self._stops):
            # STOPPED during the acquire: what the previous owner left unpersisted is drained, if the item,
            # read again, is still ours to drain
            self._granted, self._waiting = item, "take-up read"
            return [*out, ReadItem(self.pk)]
        return [*out, *self._start(item)]

    def _take_up_read(self, event: Input) -> list[Output]:
        if not isinstance(event, ItemRead) or self.lease is None:
            return []
        seen = event.seen
        ours = seen is not None and self.profile.owned(seen, self.me) and seen.epoch == self.lease.epoch
        return self._start(dict(seen.__dict__) if seen is not None and ours else self._granted)

    def _start(self, item: Mapping[str, Any]) -> list[Output]:
        assert self.lease is not None
        epoch, stops = self.lease.epoch, self._stops
        self._stops = []
        self.drain_until_ms = self.profile.drain_until_ms(item)
        start = take_up(item, closing=self._closing, drains=self.profile.strategy.drains,
                        drain_until_ms=self.drain_until_ms, consumes=self.profile.consumes(item, stops),
                        stops_seen_ms=[r.stopped_at_ms for r in stops
                                       if r.pk == self.pk and r.stops(epoch) and r.stopped_at_ms is not None])
        self.drain_stop_ms = stopped_at(item) if self.drain_until_ms is not None else None
        if start.start is Start.CONSUME:
            self.phase, self._waiting = (Phase.DRAINING if self.drain_until_ms is not None else Phase.CONSUMING), None
            return [OpenSession(self.lease, self.drain_until_ms)]
        self.phase, self._waiting = Phase.STOPPING, None  # nothing consumed: closed at once, never read
        self.reason, self.stop_ms = start.reason, start.stopped_at_ms
        self.handed_off = start.start is Start.HAND_OFF
        if start.start is Start.END_FOR_STOP and start.stopped_at_ms is None:
            self._waiting = "stop read"
            return [ReadItem(self.pk)]
        return [CloseSession(self.reason)]

    # -- letting go ----------------------------------------------------------------------------------
    def _let_go(self, event: StopAt | LetGo) -> list[Output]:
        if not self.consuming or (isinstance(event, StopAt) and self.phase is Phase.DRAINING):
            return []  # not consuming (a drain ends by itself at its STOP)
        self.release_wanted = True
        if isinstance(event, StopAt):
            self.reason = event.reason
            if not self.profile.strategy.drains:
                self.stop_ms = None
            elif event.at_ms is None:
                self._waiting = "stop read"
                return [ReadItem(self.pk)]
            else:
                self.stop_ms = event.at_ms
        else:
            self.reason, self.to, self.stop_ms = event.reason, event.to, None
            self.release_wanted = event.release
        self.phase, self._waiting = Phase.STOPPING, None
        return [CloseSession(self.reason)]

    def _stop_read(self, event: Input) -> list[Output]:
        if not isinstance(event, ItemRead) or self.lease is None:
            return []
        # a read that failed: released for no STOP (refused unless still ours)
        read = (StopRead() if event.failed
                else on_stop_read(event.seen, ours=self.profile.holds(event.seen, self.me, self.lease.epoch)))
        self._waiting = None
        if read.go_on:
            if self.phase is Phase.STOPPING:  # taken up on a STOP that a START has since undone
                self.phase = Phase.CONSUMING
                return [OpenSession(self.lease, None)]
            return []
        self.reason += read.reason_suffix
        self.release_wanted, self.stop_ms = read.release, read.stop_ms
        self.phase = Phase.STOPPING
        return [CloseSession(self.reason)]

    def _task_ended(self, event: TaskEnded) -> list[Output]:
        letting = let_go(release=self.release_wanted, reason=self.reason, fence_open=event.fence_open,
                         task_ended=event.ended, draining=self.drain_until_ms is not None,
                         drained=event.drained, drain_stop_ms=self.drain_stop_ms, stop_ms=self.stop_ms,
                         unread=event.unread)
        if isinstance(letting, Lapse):
            return self._lost(letting.reason, close=False)
        self.letting, self._drained = letting, event.drained
        self._waiting = "release clock"
        return [ReadClock(ClockName.LEASE)]

    def _release_sent(self, event: Input) -> list[Output]:
        if not isinstance(event, Reading) or event.clock is not ClockName.LEASE:
            return []
        assert self.lease is not None and self.letting is not None
        rules, now = self.profile.rules, int(event.value)
        write = rules.release(self.lease, self.me, now, self.last_seq, drained=self._drained,
                              stopped_at_ms=self.letting.for_stop_ms, behind=self.letting.behind)
        to = self._sent_to = self.to if self.letting.for_stop_ms is None else None
        if to is not None:
            write = transfer(write, self.lease, to, now, rules.lease_ms)
        self.phase, self._waiting = (Phase.TRANSFERRING if to is not None else Phase.RELEASING), "release"
        return [Send("transfer" if to is not None else "release", rules.connections_table, write, self.pk)]

    def _release_answered(self, event: Input) -> list[Output]:
        if not isinstance(event, Answer) or self.lease is None or self.letting is None:
            return []
        fields = {"pk": self.pk, "epoch": self.lease.epoch, "outcome": event.outcome.value, "seq": self.last_seq,
                  "reason": self.reason, "behind": self.letting.behind}
        emitted = Emit("lease.release", fields if self._sent_to is None else {**fields, "to": self._sent_to.worker_id})
        if event.outcome is Outcome.OK:
            return [emitted, *self._end(Phase.RELEASED)]
        if event.outcome is Outcome.UNKNOWN or self.attempts >= RETRIES:
            # it may still land: the lease is not consumed again but through an acquire at the next epoch
            return [emitted, *self._end(Phase.LOST)]
        self.attempts += 1
        refused = after_refusal(self.letting)
        self._waiting = "retake" if refused is Refused.RETAKE else "refused handoff"
        return [emitted, ReadItem(self.pk)]

    def _retake_read(self, event: Input) -> list[Output]:
        """A release for a STOP refused: STARTED again since (maybe STOPPED again): acquire it again."""
        if not isinstance(event, ItemRead) or self.lease is None:
            return []
        if not self.profile.holds(event.seen, self.me, self.lease.epoch):
            return self._end(Phase.LOST)
        self.via = "restarted" if event.seen.desired_state == STARTED else "drain"
        self._retakes += 1
        return self._acquire(event.seen)

    def _refused_handoff_read(self, event: Input) -> list[Output]:
        """A handoff refused: STOPPED since, unseen: released again for that STOP, with the drain mark."""
        if not isinstance(event, ItemRead) or self.lease is None:
            return []
        if not self.profile.holds(event.seen, self.me, self.lease.epoch):
            return self._end(Phase.LOST)
        stop = event.seen.stopped_at_ms if event.seen.desired_state == STOPPED else None
        self.letting, self._waiting = Release(stop, behind=stop is not None), "release clock"
        return [ReadClock(ClockName.LEASE)]

    def _lost(self, reason: str, close: bool) -> list[Output]:
        epoch = None if self.lease is None else self.lease.epoch
        closing: list[Output] = [CloseSession(reason)] if close else []
        return [*closing, Emit("lease.lost", {"pk": self.pk, "epoch": epoch, "reason": reason}),
                *self._end(Phase.LOST)]

    def _end(self, phase: Phase) -> list[Output]:
        self.phase, self._waiting = phase, None
        return []


RETRIES = 3  # refused releases settled by reading again (each refused by a newer START or STOP)
