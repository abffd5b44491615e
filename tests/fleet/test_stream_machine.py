"""The held stream's pure decisions (``fleet.stream_machine``): values in, values out, no loop, no clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import stream_machine as machine
from fleet.incarnation import Incarnation
from fleet.lease import STARTED, STOPPED, ConnectionRecord, Holder, StopRequest, WorkerRecord
from fleet.machine_io import (
    Abandon,
    Answer,
    Arm,
    ClockName,
    CloseSession,
    Emit,
    Heartbeat,
    ItemRead,
    LetGo,
    Lost,
    OpenSession,
    Outcome,
    ReadClock,
    Reading,
    ReadItem,
    Send,
    StopAt,
    StopPending,
    TaskEnded,
)
from fleet.profiles import profile_for
from fleet.stream_machine import HeldStream, Lapse, Phase, Refused, Release, Start, StopRead, TakeUp
from tests.fleet.memworker import config

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


# -- the machines, stepped by hand -------------------------------------------------------------------------
HARDENED = profile_for(config())
ME = Holder("w1", "g1")


def test_an_incarnation_reads_its_fence_anchor_before_the_lease_clock_its_expiry_is_computed_on() -> None:
    """Hole 7, on the machine: whatever happens between the two readings (a stall of any length), the fence
    is anchored on the earlier one, so it never outlives the expiry written."""
    inc = Incarnation(HARDENED, ME, workers_table="workers")
    assert inc.step(Heartbeat()) == [ReadClock(ClockName.FENCE)]
    assert inc.step(Reading(ClockName.FENCE, 10.0)) == [ReadClock(ClockName.LEASE)]
    [send] = inc.step(Reading(ClockName.LEASE, 50_000))  # read after a stall: the expiry is computed on it
    assert isinstance(send, Send) and send.kind == "register"
    outs = inc.step(Answer(Outcome.OK, {"pk": "w1", "gen": "g1", "expires_at_ms": 51_000}, 10.05))
    assert Arm(HARDENED.fence_deadline(10.0)) in outs and inc.deadline == HARDENED.fence_deadline(10.0)
    assert inc.allows(10.5) and not inc.allows(HARDENED.fence_deadline(10.0))
    # a renewal answered after the request timeout does not move the fence
    inc.step(Heartbeat())
    inc.step(Reading(ClockName.FENCE, 10.3))
    inc.step(Reading(ClockName.LEASE, 50_300))
    late = inc.step(Answer(Outcome.OK, {"pk": "w1", "gen": "g1", "expires_at_ms": 51_300}, 10.3 + 0.2))
    assert inc.deadline == HARDENED.fence_deadline(10.0) and not inc.beat_ok
    assert Emit("lease.renew", {"pk": None, "outcome": "info", "expires_ms": 51_300, "note": "answered late"}) in late
    # the watchdog: the fence clock past the deadline abandons the incarnation, for good
    assert inc.step(Reading(ClockName.FENCE, 11.0)) == [
        Abandon("self-fenced: no renewal before the fencing deadline", retire=True)]
    assert inc.step(Heartbeat()) == [] and not inc.allows(10.5)


def test_a_stream_listed_as_ours_is_adopted_only_through_an_acquire_at_the_next_epoch() -> None:
    """Hole 3, on the machine: a sweep that finds a stream ours (a release of ours whose answer was lost may
    still land) reads it, then acquires it at epoch + 1 on condition it is still ours at the epoch read; it
    consumes only once that acquire is accepted."""
    stream, outs = HeldStream.adopt(HARDENED, "CONN#c", ME)
    assert outs == [ReadItem("CONN#c")] and not stream.consuming
    ours = ConnectionRecord("CONN#c", STARTED, "ws://u", "w1", epoch=4, owner_gen="g1", lease_expires_at_ms=9)
    assert stream.step(ItemRead(ours)) == [ReadClock(ClockName.LEASE)] and not stream.consuming
    [send] = stream.step(Reading(ClockName.LEASE, 1_000))
    assert isinstance(send, Send) and send.kind == "acquire" and send.write.update.set["epoch"] == 5
    current = {"pk": "CONN#c", "desired_state": STARTED, "lease_owner": "w1", "owner_gen": "g1", "epoch": 4}
    released = {**current, "lease_owner": "", "owner_gen": ""}
    assert send.write.allowed(current) and not send.write.allowed(released)
    outs = stream.step(Answer(Outcome.OK, send.write.apply(current), pk="CONN#c"))
    assert stream.consuming and any(isinstance(o, OpenSession) and o.lease.epoch == 5 for o in outs)


def test_a_release_whose_answer_is_lost_leaves_the_stream_lost_not_consumed() -> None:
    stream, _ = HeldStream.adopt(HARDENED, "CONN#c", ME)
    stream.step(ItemRead(ConnectionRecord("CONN#c", STARTED, "ws://u", "w1", epoch=4, owner_gen="g1")))
    [send] = stream.step(Reading(ClockName.LEASE, 1_000))
    assert isinstance(send, Send)
    stream.step(Answer(Outcome.OK, send.write.apply({"pk": "CONN#c", "desired_state": STARTED, "epoch": 4,
                                                     "lease_owner": "w1", "owner_gen": "g1"}), pk="CONN#c"))
    assert stream.step(LetGo("upstream out of reach")) == [CloseSession("upstream out of reach")]
    assert stream.step(TaskEnded()) == [ReadClock(ClockName.LEASE)]
    [release] = stream.step(Reading(ClockName.LEASE, 2_000))
    assert isinstance(release, Send) and release.kind == "release"
    stream.step(Answer(Outcome.UNKNOWN, pk="CONN#c"))
    assert stream.phase is Phase.LOST and stream.step(ItemRead(None)) == []


def granted(stream: HeldStream, item: dict[str, object]) -> list[object]:
    """Claim ``stream`` and answer its acquire with ``item`` as the acquire left it."""
    [send] = stream.step(Reading(ClockName.LEASE, 1_000))
    assert isinstance(send, Send) and send.kind == "acquire"
    return list(stream.step(Answer(Outcome.OK, item, pk=stream.pk)))


FREE = ConnectionRecord("CONN#c", STARTED, "ws://u", epoch=0)
OURS_AT_1 = {"pk": "CONN#c", "desired_state": STARTED, "ws_url": "ws://u", "lease_owner": "w1", "owner_gen": "g1",
             "epoch": 1, "lease_expires_at_ms": 2_000}


def test_a_stop_read_while_acquiring_is_honoured_at_take_up_after_reading_the_item_again() -> None:
    """A STOP of the lease being acquired (``StopPending``): granted, the item is read again; still ours, it
    is drained up to that STOP; the read failed, the stream is ended for the STOP seen instead of consumed.
    A STOP of an earlier lease stops nothing."""
    stream, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    stream.step(StopPending(StopRequest.of_lease("CONN#c", 1, 40)))
    assert stream.stops_seen and granted(stream, OURS_AT_1)[-1] == ReadItem("CONN#c")
    read = ConnectionRecord("CONN#c", STOPPED, "ws://u", "w1", epoch=1, owner_gen="g1", stopped_at_ms=40)
    [drain] = stream.step(ItemRead(read))
    assert isinstance(drain, OpenSession) and drain.drain_until_ms is not None and stream.phase is Phase.DRAINING
    unread, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    unread.step(StopPending(StopRequest.of_lease("CONN#c", 1, 40)))
    granted(unread, OURS_AT_1)
    assert unread.step(ItemRead(None, failed=True)) == [CloseSession("desired state is not STARTED")]
    assert unread.step(TaskEnded(unread=True)) == [ReadClock(ClockName.LEASE)]
    assert unread.letting == Release(40, behind=True) and not unread.stops_seen
    older, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    older.step(StopPending(StopRequest.of_lease("CONN#c", 0, 40)))
    assert isinstance(granted(older, OURS_AT_1)[-1], OpenSession) and older.consuming


def test_an_acquire_granted_after_a_shutdown_began_is_handed_off_not_consumed() -> None:
    stream, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    assert stream.step(LetGo("shutdown")) == []  # while acquiring: remembered for the take-up
    assert granted(stream, OURS_AT_1)[-1] == CloseSession("shutdown") and stream.handed_off


def test_a_failed_stop_read_releases_for_no_stop_and_a_read_showing_it_gone_lapses() -> None:
    """A STOP of unknown time is read first; a read that failed releases as a handoff (refused unless still
    ours), one showing the lease gone lets it lapse."""
    for read, after in ((ItemRead(None, failed=True), [ReadClock(ClockName.LEASE)]),
                        (ItemRead(None), [Emit("lease.lost", {"pk": "CONN#c", "epoch": 1,
                                                              "reason": "checkpoint refused: lease no longer ours"})])):
        stream, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
        granted(stream, OURS_AT_1)
        assert stream.step(StopAt(None, "checkpoint refused")) == [ReadItem("CONN#c")]
        assert stream.step(read) == [CloseSession(stream.reason)]
        assert stream.step(TaskEnded()) == after


def test_a_refused_release_for_a_stop_is_retaken_with_up_to_three_acquires_or_ends_quietly() -> None:
    stream, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    granted(stream, OURS_AT_1)
    stream.step(StopAt(40))
    stream.step(TaskEnded())
    stream.step(Reading(ClockName.LEASE, 1_500))
    outs = stream.step(Answer(Outcome.FAIL, pk="CONN#c"))
    assert outs[-1] == ReadItem("CONN#c") and stream.retaking
    restarted = ConnectionRecord("CONN#c", STARTED, "ws://u", "w1", epoch=1, owner_gen="g1")
    acquires = 0
    while stream.retaking:
        assert stream.step(ItemRead(restarted)) == [ReadClock(ClockName.LEASE)]
        stream.step(Reading(ClockName.LEASE, 1_600))
        acquires += 1
        stream.step(Answer(Outcome.FAIL, pk="CONN#c"))
    assert acquires == 3 and stream.phase is Phase.LOST
    quiet, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    granted(quiet, OURS_AT_1)
    quiet.step(StopAt(40))
    quiet.step(TaskEnded())
    quiet.step(Reading(ClockName.LEASE, 1_500))
    quiet.step(Answer(Outcome.FAIL, pk="CONN#c"))
    assert quiet.step(Lost("no retake now", silent=True)) == [] and quiet.phase is Phase.LOST


def test_a_transfer_names_its_recipient_in_its_release_event() -> None:
    stream, _ = HeldStream.claim(HARDENED, FREE, ME, "notify")
    granted(stream, OURS_AT_1)
    to = WorkerRecord("w2", "g2", 5_000)
    assert stream.step(LetGo("rebalance", to)) == [CloseSession("rebalance")]
    stream.step(TaskEnded())
    [send] = stream.step(Reading(ClockName.LEASE, 1_500))
    assert isinstance(send, Send) and send.kind == "transfer"
    [event] = stream.step(Answer(Outcome.OK, {}, pk="CONN#c"))
    assert isinstance(event, Emit) and event.fields["to"] == "w2" and stream.phase is Phase.RELEASED
