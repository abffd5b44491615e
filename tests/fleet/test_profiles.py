"""The profiles' decisions, pure: skew policy, STOP settling, take-up, notifications, pacing of looks."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from hypothesis import find, given
from hypothesis import strategies as st

from fleet.lease import STARTED, STOPPED, ConnectionRecord, Holder, StopRequest, WorkerRecord
from fleet.profiles import (
    SKEW_FENCE_SHARE,
    BlogProfile,
    HardenedProfile,
    NoteAction,
    SeenAction,
    profile_for,
)
from tests.fleet.test_lease import model_config

ME = Holder("w1", "gen-a")
HARDENED = HardenedProfile(model_config("hardened"))
BLOG = BlogProfile(model_config("blog"))
TOLERANCE = HARDENED.rules.tolerance_ms


@given(st.floats(-3 * TOLERANCE, 3 * TOLERANCE), st.floats(0, 2 * TOLERANCE))
def test_hardened_fences_exactly_when_every_possible_skew_exceeds_its_share_of_the_tolerance(
    low: float, width: float
) -> None:
    bounds = (low, low + width)
    candidates = [low + width * i / 20 for i in range(21)]
    assert HARDENED.skew_fences(bounds) == all(abs(c) > SKEW_FENCE_SHARE * TOLERANCE for c in candidates)
    assert not BLOG.skew_fences(bounds)  # the published design never looks


@given(st.floats(-3 * TOLERANCE, 3 * TOLERANCE), st.floats(0, 2 * TOLERANCE))
def test_hardened_judges_another_s_lease_only_when_every_possible_skew_is_within_its_share_of_the_tolerance(
    low: float, width: float
) -> None:
    """Hole 2: judging looked only at the least possible skew, so bounds of (0, 1.5 tolerance) (the skew
    may be anywhere up to past the model) said "may judge".  Judging needs both bounds inside the model;
    between judging and fencing (the skew may or may not be out of the model) the worker does neither."""
    bounds = (low, low + width)
    candidates = [low + width * i / 20 for i in range(21)]
    assert HARDENED.judges_expiry(bounds) == all(abs(c) <= SKEW_FENCE_SHARE * TOLERANCE for c in candidates)
    assert BLOG.judges_expiry(bounds)  # the published design never looks


def test_skew_is_reported_when_it_first_appears_moves_or_crosses_the_fence() -> None:
    assert HARDENED.skew_worth_reporting(None, (1.0, 5.0))
    assert not HARDENED.skew_worth_reporting((1.0, 5.0), (2.0, 6.0))
    assert HARDENED.skew_worth_reporting((1.0, 5.0), (1.0, 5.0 + 0.2 * TOLERANCE))
    assert not HARDENED.skew_worth_reporting((1.0, 5.0), None)


def test_another_s_lease_is_judged_only_on_a_clock_known_within_the_model() -> None:
    others = ConnectionRecord("p", STARTED, "ws://u", lease_owner="w2", owner_gen="g", epoch=3)
    nobodys = ConnectionRecord("p", STARTED, "ws://u")
    ours = ConnectionRecord("p", STARTED, "ws://u", lease_owner="w1", owner_gen="gen-a", epoch=2)
    unsettled, fenced, settled = None, (2.0 * TOLERANCE, 3.0 * TOLERANCE), (-1.0, 1.0)
    assert HARDENED.may_judge(others, ME, settled)
    assert not HARDENED.may_judge(others, ME, unsettled) and not HARDENED.may_judge(others, ME, fenced)
    assert all(HARDENED.may_judge(seen, ME, unsettled) for seen in (nobodys, ours))
    assert BLOG.may_judge(others, ME, unsettled)  # the published design never looks


def test_a_stop_mailbox_drops_the_leases_it_stops_keeps_what_is_being_acquired_and_clears_the_rest() -> None:
    mailbox = frozenset({"a@1", "b@3", "c@2", "d@1", "e", "f@4", "g@x"})
    plan = HARDENED.settle_stops(mailbox, held={"a": 1, "b": 2, "d": 2, "e": 5}, acquiring=["c"])
    assert {r.entry for r in plan.drop} == {"a@1", "b@3", "e"}  # held at that epoch or an earlier one; bare: any
    assert {r.entry for r in plan.pending} == {"c@2"}
    assert plan.handled == {"d@1", "f@4", "g@x"}  # older than the lease held (a START came after), not held


def test_take_up_consumes_only_a_started_stream_with_no_stop_of_that_lease_seen_since() -> None:
    granted = {"pk": "p", "desired_state": STARTED, "epoch": 2}
    assert HARDENED.consumes(granted, [])
    assert not HARDENED.consumes(granted, [StopRequest.of_lease("p", 2)])
    assert not HARDENED.consumes(granted, [StopRequest.parse("p")])
    assert HARDENED.consumes(granted, [StopRequest.of_lease("p", 1), StopRequest.of_lease("q", 2)])
    assert not HARDENED.consumes({**granted, "desired_state": STOPPED}, [])


def test_notifications_and_reads() -> None:
    assert BLOG.on_notification(None, held=False) is NoteAction.ACQUIRE
    assert BLOG.on_notification(3, held=True) is NoteAction.IGNORE
    assert HARDENED.on_notification(3, held=False) is NoteAction.ACQUIRE_RELEASED
    assert HARDENED.on_notification(None, held=False) is NoteAction.READ
    stopped = ConnectionRecord("p", STOPPED, "ws://u", epoch=1)
    free = ConnectionRecord("p", STARTED, "ws://u", epoch=1)
    assert HARDENED.on_seen(stopped, True, False, ME, 0, {}) is SeenAction.DROP
    assert HARDENED.on_seen(stopped, False, True, ME, 0, {}) is SeenAction.STOP_PENDING
    assert HARDENED.on_seen(stopped, False, False, ME, 0, {}) is SeenAction.IGNORE
    assert HARDENED.on_seen(free, False, False, ME, 0, {}) is SeenAction.CLAIM
    assert HARDENED.on_seen(free, False, True, ME, 0, {}) is SeenAction.IGNORE


def test_adoption_needs_the_lease_ours_and_the_stream_started() -> None:
    ours = ConnectionRecord("p", STARTED, "ws://u", lease_owner="w1", owner_gen="gen-a", epoch=2)
    assert HARDENED.adoptable(ours, ME) and HARDENED.owned(ours, ME)
    assert not HARDENED.owned(ConnectionRecord("p", STOPPED, "", lease_owner="w1", owner_gen="gen-a"), ME)
    assert not HARDENED.owned(ConnectionRecord("p", STARTED, "", lease_owner="w1", owner_gen="old"), ME)
    assert not BLOG.adoptable(ours, ME) and not BLOG.strategy.settles_unknown_acquire


def test_a_stopped_stream_whose_owner_died_is_drained_from_a_notification_or_an_adoption() -> None:
    """A read (the STOP's own notification) of a STOPPED stream whose owner is gone is a drain (at 9eab16e
    it was IGNORE, and nobody persisted its backlog); the drain's lease, ours, is adopted after an unknown
    answer, until drained."""
    orphan = ConnectionRecord("p", STOPPED, "ws://u", lease_owner="w2", owner_gen="gen-b", epoch=3,
                              lease_expires_at_ms=9, stopped_at_ms=5)
    assert HARDENED.on_seen(orphan, False, False, ME, 0, {}) is SeenAction.DRAIN
    alive = {"w2": WorkerRecord("w2", "gen-b", expires_at_ms=1_000)}
    assert HARDENED.on_seen(orphan, False, False, ME, 0, alive) is SeenAction.IGNORE
    assert BLOG.on_seen(orphan, False, False, ME, 0, {}) is SeenAction.IGNORE and not BLOG.strategy.drains
    draining = ConnectionRecord("p", STOPPED, "ws://u", lease_owner="w1", owner_gen="gen-a", epoch=4, stopped_at_ms=5)
    assert HARDENED.strategy.drains and HARDENED.owned(draining, ME)
    # the stop time plus the clocks' tolerance plus the request timeout (when the STOP took effect at the latest)
    assert HARDENED.drain_until_ms(draining.__dict__) == 5 + TOLERANCE + HARDENED.rules.timeout_ms
    drained = ConnectionRecord("p", STOPPED, "ws://u", lease_owner="w1", owner_gen="gen-a", epoch=4, stopped_at_ms=5,
                               drained_epoch=4)
    assert not HARDENED.owned(drained, ME) and HARDENED.drain_until_ms(drained.__dict__) is None


def test_blog_looks_every_reconcile_interval_at_one_page_of_expired_leases() -> None:
    pacer = BLOG.pacer(random.Random(1))
    every = BLOG.config.reconcile_s
    first = pacer.look(now_ms=0, now_s=100.0, me=ME, workers={}, requested=False)
    assert first.sweep is None and first.wait_s == every
    second = pacer.look(now_ms=5, now_s=100.0 + every, me=ME, workers={}, requested=False)
    assert second.sweep is not None and (second.sweep.expired_before_ms, second.sweep.max_pages) == (5, 1)


def test_hardened_looks_when_another_worker_could_have_died_and_sweeps_when_one_did() -> None:
    pacer = HARDENED.pacer(random.Random(1))
    other = WorkerRecord("w2", "g2", expires_at_ms=10_000)
    first = pacer.look(now_ms=0, now_s=0.0, me=ME, workers={"w2": other}, requested=False)
    assert first.sweep is not None and first.sweep.max_pages is None  # the first look sweeps every page
    earliest_death_s = (10_000 + TOLERANCE) / 1000
    assert earliest_death_s <= first.wait_s <= earliest_death_s + TOLERANCE / 4000 + 0.001
    quiet = pacer.look(now_ms=1_000, now_s=1.0, me=ME, workers={"w2": other}, requested=False)
    assert quiet.sweep is None
    died = pacer.look(now_ms=10_000 + int(TOLERANCE) + 1, now_s=11.1, me=ME, workers={"w2": other},
                      requested=False)
    assert died.sweep is not None and died.sweep.dead == ("w2",)


def test_profile_for_picks_the_strategy() -> None:
    assert [type(profile_for(model_config(p))).__name__ for p in ("blog", "hardened", "unsafe")] == [
        "BlogProfile", "HardenedProfile", "UnsafeProfile"]
    assert HARDENED.client_settings.max_attempts == 1 and HARDENED.client_settings.consistent_reads
    assert BLOG.client_settings.max_attempts is None and not BLOG.client_settings.consistent_reads


def test_each_profile_reconnects_by_its_own_policy_unless_another_is_configured() -> None:
    """The default keeps what each profile did before the setting existed: blog a fixed delay, hardened
    full jitter (unsafe is blog's); a configured policy applies to every profile."""
    assert [profile_for(model_config(p)).reconnect_policy for p in ("blog", "hardened", "unsafe")] == [
        "none", "full", "none"]
    for p in ("blog", "hardened"):
        config = model_config(p).with_changes(reconnect_policy="decorrelated")
        assert profile_for(config).reconnect_policy == "decorrelated"


# -- the STOP mailbox over every interleaving: a STOP is never lost ------------------------------------------
class MailboxModel:
    """One stream ``p``, its owner worker, the router and the store, with the hardened profile settling the
    mailbox.  A STOP posts ``post(pk, epoch found)`` to the owner; a START makes a worker holding nothing
    acquire; the acquire lands only while the stream is STARTED and free, and its answer is taken up (or
    handed back) later.  Heartbeats alternate between sending a renewal (which deletes the entries handled
    by then) and its answer (the mailbox it returns is settled); a drop planned completes (stop, release,
    entry handled) at a later ``released``."""

    def __init__(self, profile: HardenedProfile, held_at: int | None,
                 post: Callable[[str, int], str] = lambda pk, epoch: StopRequest.of_lease(pk, epoch).entry) -> None:
        self.profile, self.post = profile, post
        self.desired, self.owner, self.epoch = STARTED, "w1" if held_at else "", held_at or 0
        self.held = {"p": held_at} if held_at else {}
        self.acquiring, self.granted = held_at is None, False
        self.mailbox: set[str] = set()
        self.handled: set[str] = set()
        self.deleting: set[str] | None = None  # a renewal in flight: the entries it deletes
        self.pending: set[StopRequest] = set()
        self.dropping: set[StopRequest] = set()

    def run(self, events: Iterable[str]) -> MailboxModel:
        actions: dict[str, Callable[[], None]] = {
            "stop": self.stop, "start": self.start, "acquire-lands": self.acquire_lands, "answer": self.answer,
            "heartbeat": self.heartbeat, "released": self.released}
        for event in events:
            actions[event]()
        if self.deleting is not None:
            self.heartbeat()
        for _ in range(3):  # then the worker settles
            for action in (self.released, self.heartbeat, self.heartbeat):
                action()
        return self

    def stop(self) -> None:
        self.desired = STOPPED
        if self.owner:
            self.mailbox.add(self.post("p", self.epoch))  # the lease the STOP's own write found

    def start(self) -> None:
        self.desired = STARTED
        self.acquiring = self.acquiring or not self.held

    def acquire_lands(self) -> None:
        if self.acquiring and self.desired == STARTED and not self.owner:
            self.owner, self.epoch, self.granted = "w1", self.epoch + 1, True

    def answer(self) -> None:
        if self.granted:
            granted = {"pk": "p", "desired_state": STARTED, "epoch": self.epoch}
            if self.profile.consumes(granted, self.pending):
                self.held["p"] = self.epoch
            else:
                self.owner = ""  # handed back at take-up
        self.acquiring = self.granted = False
        self.pending.clear()

    def heartbeat(self) -> None:
        if self.deleting is None:
            self.deleting = set(self.handled)
            return
        self.mailbox -= self.deleting
        plan = self.profile.settle_stops(frozenset(self.mailbox), self.held, {"p"} if self.acquiring else set())
        self.handled = (self.handled - self.deleting) | plan.handled
        self.deleting = None
        self.pending |= plan.pending
        self.dropping |= plan.drop

    def released(self) -> None:
        for request in self.dropping:
            if "p" in self.held and request.stops(self.held["p"]):
                del self.held["p"]
                self.owner = ""
            self.handled.add(request.entry)
        self.dropping.clear()

    def consumes_stopped(self) -> bool:
        return bool(self.held) and self.desired == STOPPED


# hole 6: the acquire is in flight when the STOP comes
EVENTS = ("acquire-lands", "answer", "stop", *["heartbeat"] * 6, "released")


def _valid(order: tuple[str, ...]) -> bool:
    return order.index("acquire-lands") < order.index("answer")


@given(st.permutations(EVENTS).filter(_valid))
def test_hole_6_a_stop_is_honoured_in_every_order_of_acquire_answer_and_mailbox(order: list[str]) -> None:
    assert not MailboxModel(HARDENED, held_at=None).run(order).consumes_stopped()


def test_hole_6_the_9eab16e_mailbox_rule_loses_a_stop() -> None:
    """At 9eab16e every mailbox entry was deleted with the next renewal, held or not: a STOP read while
    the acquire was in flight was gone by the take-up.  The same interleavings find that on its own."""

    class MailboxAt9eab16e(HardenedProfile):
        def settle_stops(self, mailbox, held, acquiring):  # type: ignore[no-untyped-def]
            plan = super().settle_stops(mailbox, held, acquiring)
            return type(plan)(drop=plan.drop, pending=frozenset(), handled=mailbox - {r.entry for r in plan.drop})

    old = MailboxAt9eab16e(model_config("hardened"))
    lost = find(st.permutations(EVENTS).filter(_valid),
                lambda order: MailboxModel(old, held_at=None).run(order).consumes_stopped())
    assert list(lost).index("stop") < list(lost).index("answer")


# issue 10: STOP, START, STOP again, the stream held at epoch 1 to begin with
@st.composite
def restarts(draw: st.DrawFn, stops: int) -> list[str]:
    """STOP, START (then STOP again if ``stops`` is 2), the START's acquire landing and answered after it,
    and six heartbeats and two completions of planned drops anywhere."""
    order = ["stop", "start", "stop"][: stops + 1]
    order.insert(draw(st.integers(order.index("start") + 1, len(order))), "acquire-lands")
    order.insert(draw(st.integers(order.index("acquire-lands") + 1, len(order))), "answer")
    for event in ["heartbeat"] * 6 + ["released"] * 2:
        order.insert(draw(st.integers(0, len(order))), event)
    return order


def bare_pk(pk: str, epoch: int) -> str:
    """The mailbox entry the router posted before entries named their lease."""
    return pk


@given(restarts(stops=2))
def test_issue_10_a_second_stop_is_honoured_in_every_order(order: list[str]) -> None:
    assert not MailboxModel(HARDENED, held_at=1).run(order).consumes_stopped()


def test_issue_10_bare_pk_entries_lose_the_second_stop_to_the_deletion_of_the_first() -> None:
    """The mailbox was a set of bare pks: STOP2 re-added an entry still there (a no-op), and the renewal
    deleting it as handled from STOP1 took STOP2 with it.  The same interleavings find that on their own."""
    lost = find(restarts(stops=2), lambda order: MailboxModel(HARDENED, 1, post=bare_pk).run(order).consumes_stopped())
    second_stop = len(lost) - 1 - lost[::-1].index("stop")
    assert lost.index("acquire-lands") < second_stop  # STOP2 found the restarted lease


def restarted_lease_dropped(model: MailboxModel) -> bool:
    """The START's acquire landed (epoch 2), yet the stream is not held: refused at take-up or dropped."""
    return model.epoch == 2 and "p" not in model.held


@given(restarts(stops=1))
def test_issue_10_a_stop_never_stops_a_lease_acquired_after_it(order: list[str]) -> None:
    """Even when STOP1's entry is read again while its drop is under way (so the START's acquire is in flight
    or taken up), it neither refuses the take-up of the later lease nor drops it."""
    assert not restarted_lease_dropped(MailboxModel(HARDENED, held_at=1).run(order))


def test_issue_10_bare_pk_entries_stop_a_lease_acquired_after_them() -> None:
    dropped = find(restarts(stops=1), lambda order: restarted_lease_dropped(
        MailboxModel(HARDENED, 1, post=bare_pk).run(order)))
    assert dropped.index("start") < dropped.index("answer")


def test_of_several_stops_of_a_held_lease_the_latest_is_dropped_and_the_others_handled() -> None:
    mailbox = frozenset({"p@2:10", "p@2:30", "p@2", "q@1:5"})
    plan = HARDENED.settle_stops(mailbox, {"p": 2}, ())
    assert [r.entry for r in plan.drop] == ["p@2:30"]
    assert plan.handled == {"p@2:10", "p@2", "q@1:5"} and not plan.pending
