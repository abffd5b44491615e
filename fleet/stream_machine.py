"""What becomes of one held stream, decided on values alone: the pure core ``fleet.worker`` interprets.

No asyncio, no I/O, no clock read here; the worker passes in what it knows (the item an acquire or a read
returned, the STOPs seen, whether its fence is open, how the consume task ended) and executes the value it
gets back: a take-up (consume, hand off, end for a STOP), a letting go (send a release, or let the lease
lapse), what follows a refused release, what a read after a STOP of unknown time shows.  The profile's
capability flags arrive as data (``drains``: a STOPPED stream is drained, and a STOP is released for).

This is the first slice of issue 25's state machine per held stream: the decisions of ``Worker._take_up``,
``Worker.drop`` and ``Worker.end_for_stop``.  Acquiring, renewal and the notices still decide in their loops.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleet.lease import STARTED, STOPPED, ConnectionRecord, optional_int


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
