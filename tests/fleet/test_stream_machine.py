"""The held stream's pure decisions (``fleet.stream_machine``): values in, values out, no loop, no clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import stream_machine as machine
from fleet.lease import STARTED, STOPPED, ConnectionRecord
from fleet.stream_machine import Lapse, Refused, Release, Start, StopRead, TakeUp

STOPPED_AT_40 = {"desired_state": STOPPED, "stopped_at_ms": 40}


def take_up(item: dict[str, object], **changes: object) -> TakeUp:
    decided: dict[str, object] = {"closing": False, "drains": True, "drain_until_ms": None, "consumes": False,
                                  "stops_seen_ms": (), **changes}
    return machine.take_up(item, **decided)  # type: ignore[arg-type]


def test_a_granted_lease_is_consumed_drained_or_handed_off_at_shutdown() -> None:
    assert take_up({"desired_state": STARTED}, consumes=True) == TakeUp(Start.CONSUME)
    assert take_up(STOPPED_AT_40, drain_until_ms=100) == TakeUp(Start.CONSUME)  # a drain consumes up to its end
    assert take_up({"desired_state": STARTED}, consumes=True, closing=True) == TakeUp(Start.HAND_OFF, "shutdown")


def test_a_lease_granted_on_a_stream_not_started_ends_for_its_stop_or_is_handed_off() -> None:
    reason = "desired state is not STARTED"
    assert take_up(STOPPED_AT_40, stops_seen_ms=[70]) == TakeUp(Start.END_FOR_STOP, reason, 40)
    # STARTED when granted, a STOP seen since: the latest one seen
    assert take_up({"desired_state": STARTED}, stops_seen_ms=[70, 55]) == TakeUp(Start.END_FOR_STOP, reason, 70)
    assert take_up({"desired_state": STARTED}) == TakeUp(Start.END_FOR_STOP, reason, None)  # to be read
    assert take_up(STOPPED_AT_40, drains=False) == TakeUp(Start.HAND_OFF, reason)  # blog: no STOP to release for


def let_go(**changes: object) -> Lapse | Release:
    decided: dict[str, object] = {"release": True, "reason": "STOP", "fence_open": True, "task_ended": True,
                                  "draining": False, "drained": False, "drain_stop_ms": None, "stop_ms": 40,
                                  "unread": False, **changes}
    return machine.let_go(**decided)  # type: ignore[arg-type]


def test_a_stream_let_go_is_released_for_its_stop_and_left_to_drain_when_unread() -> None:
    assert let_go() == Release(for_stop_ms=40, behind=False)
    assert let_go(unread=True) == Release(for_stop_ms=40, behind=True)
    assert let_go(stop_ms=None, unread=True) == Release(for_stop_ms=None, behind=False)  # a handoff
    # a finished drain: for the STOP it drained to, never behind
    assert let_go(draining=True, drained=True, drain_stop_ms=30, stop_ms=None, unread=True) == Release(30, False)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"release": False}, "STOP"),
    ({"fence_open": False}, "fenced before release"),
    ({"task_ended": False}, "STOP: its writes did not end"),
    ({"draining": True}, "STOP: drain unfinished"),
    ({"task_ended": False, "draining": True}, "STOP: its writes did not end: drain unfinished"),
])
def test_a_stream_is_left_to_lapse_when_a_release_could_lose_or_let_in_a_write(changes: dict[str, object],
                                                                              reason: str) -> None:
    assert let_go(**changes) == Lapse(reason)


@given(release=st.booleans(), fence_open=st.booleans(), task_ended=st.booleans(), draining=st.booleans(),
       drained=st.booleans(), unread=st.booleans(), stop_ms=st.none() | st.integers(0, 10**13))
def test_no_release_is_sent_while_a_write_of_the_task_may_still_land_or_the_fence_is_closed(
        release: bool, fence_open: bool, task_ended: bool, draining: bool, drained: bool, unread: bool,
        stop_ms: int | None) -> None:
    drained = drained and draining  # only a drain is drained
    decided = let_go(release=release, fence_open=fence_open, task_ended=task_ended, draining=draining,
                     drained=drained, unread=unread, stop_ms=stop_ms)
    if isinstance(decided, Release):
        assert release and fence_open and task_ended and (not draining or drained)
        assert decided.behind == (unread and not drained and decided.for_stop_ms is not None)


def test_a_refused_release_for_a_stop_is_retaken_and_a_refused_handoff_repeated_for_the_stop() -> None:
    assert machine.after_refusal(Release(40, False)) is Refused.RETAKE
    assert machine.after_refusal(Release(None, False)) is Refused.REPEAT_FOR_STOP


def test_a_read_after_a_stop_of_unknown_time_goes_on_releases_for_the_stop_found_or_lets_go() -> None:
    started = ConnectionRecord("CONN#c", STARTED, "ws://u", "w1", epoch=3)
    stopped = ConnectionRecord("CONN#c", STOPPED, "ws://u", "w1", epoch=3, stopped_at_ms=40)
    assert machine.on_stop_read(started, ours=True) == StopRead(go_on=True)
    assert machine.on_stop_read(stopped, ours=True) == StopRead(stop_ms=40)
    gone = StopRead(release=False, reason_suffix=": lease no longer ours")
    assert machine.on_stop_read(stopped, ours=False) == gone
    assert machine.on_stop_read(None, ours=False) == gone
