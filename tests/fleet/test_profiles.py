"""The profiles' decisions, pure: skew policy, STOP settling, take-up, notifications, pacing of looks."""

from __future__ import annotations

import random

from hypothesis import find, given
from hypothesis import strategies as st

from fleet.lease import STARTED, STOPPED, ConnectionRecord, Holder, WorkerRecord
from fleet.profiles import (
    SKEW_FENCE_SHARE,
    BlogProfile,
    HardenedProfile,
    NoteAction,
    SeenAction,
    profile_for,
)
from tests.fleet.lease_model import model_config

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


def test_skew_is_reported_when_it_first_appears_moves_or_crosses_the_fence() -> None:
    assert HARDENED.skew_worth_reporting(None, (1.0, 5.0))
    assert not HARDENED.skew_worth_reporting((1.0, 5.0), (2.0, 6.0))
    assert HARDENED.skew_worth_reporting((1.0, 5.0), (1.0, 5.0 + 0.2 * TOLERANCE))
    assert not HARDENED.skew_worth_reporting((1.0, 5.0), None)


def test_a_stop_mailbox_drops_what_is_held_keeps_what_is_being_acquired_and_clears_the_rest() -> None:
    plan = HARDENED.settle_stops(frozenset({"a", "b", "c"}), held=["a"], acquiring=["b"])
    assert (plan.drop, plan.pending, plan.handled) == ({"a"}, {"b"}, {"c"})


def test_take_up_consumes_only_a_started_stream_with_no_stop_seen_since() -> None:
    assert HARDENED.consumes({"desired_state": STARTED}, stop_pending=False)
    assert not HARDENED.consumes({"desired_state": STARTED}, stop_pending=True)
    assert not HARDENED.consumes({"desired_state": STOPPED}, stop_pending=False)


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
    assert not BLOG.adoptable(ours, ME) and not BLOG.settles_unknown_acquire()


def test_a_stopped_stream_whose_owner_died_is_drained_from_a_notification_or_an_adoption() -> None:
    """A read (the STOP's own notification) of a STOPPED stream whose owner is gone is a drain (at 9eab16e
    it was IGNORE, and nobody persisted its backlog); the drain's lease, ours, is adopted after an unknown
    answer, until drained."""
    orphan = ConnectionRecord("p", STOPPED, "ws://u", lease_owner="w2", owner_gen="gen-b", epoch=3,
                              lease_expires_at_ms=9, stopped_at_ms=5)
    assert HARDENED.on_seen(orphan, False, False, ME, 0, {}) is SeenAction.DRAIN
    alive = {"w2": WorkerRecord("w2", "gen-b", expires_at_ms=1_000)}
    assert HARDENED.on_seen(orphan, False, False, ME, 0, alive) is SeenAction.IGNORE
    assert BLOG.on_seen(orphan, False, False, ME, 0, {}) is SeenAction.IGNORE and not BLOG.drains
    draining = ConnectionRecord("p", STOPPED, "ws://u", lease_owner="w1", owner_gen="gen-a", epoch=4, stopped_at_ms=5)
    assert HARDENED.drains and HARDENED.owned(draining, ME)
    assert HARDENED.drain_until_ms(draining.__dict__) == 5 + TOLERANCE
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


# -- hole 6 over every interleaving: a STOP is never lost -------------------------------------------------
EVENTS = ("acquire-lands", "answer", "stop", "mailbox", "mailbox", "mailbox")


def consumed_after_stop(order: list[str], profile: HardenedProfile) -> bool:
    """One stream, one worker whose acquire is in flight: the events in ``order`` (the answer always after
    the acquire lands), then one last heartbeat.  Whether the worker still consumes a STOPPED stream."""
    desired, owner, granted = STARTED, "", None
    mailbox: set[str] = set()
    acquiring, held, pending = {"p"}, set(), set()
    for event in [*order, "mailbox"]:
        if event == "acquire-lands" and desired == STARTED:
            owner, granted = "w1", {"desired_state": desired}
        elif event == "answer":
            acquiring.clear()
            if granted is not None and profile.consumes(granted, "p" in pending):
                held.add("p")
            pending.clear()
        elif event == "stop":
            desired = STOPPED
            if owner == "w1":
                mailbox.add("p")  # the router posts to the owner it read
        elif event == "mailbox":
            plan = profile.settle_stops(frozenset(mailbox), held, acquiring)
            held -= plan.drop
            pending |= plan.pending
            mailbox -= plan.handled | plan.drop
    return bool(held) and desired == STOPPED


def _valid(order: tuple[str, ...]) -> bool:
    return order.index("acquire-lands") < order.index("answer")


@given(st.permutations(EVENTS).filter(_valid))
def test_hole_6_a_stop_is_honoured_in_every_order_of_acquire_answer_and_mailbox(order: list[str]) -> None:
    assert not consumed_after_stop(list(order), HARDENED)


def test_hole_6_the_9eab16e_mailbox_rule_loses_a_stop() -> None:
    """At 9eab16e every mailbox entry was deleted with the next renewal, held or not: a STOP read while
    the acquire was in flight was gone by the take-up.  The same interleavings find that on its own."""

    class MailboxAt9eab16e(HardenedProfile):
        def settle_stops(self, mailbox, held, acquiring):  # type: ignore[no-untyped-def]
            plan = super().settle_stops(mailbox, held, acquiring)
            return type(plan)(drop=plan.drop, pending=frozenset(), handled=mailbox - plan.drop)

    old = MailboxAt9eab16e(model_config("hardened"))
    lost = find(st.permutations(EVENTS).filter(_valid), lambda order: consumed_after_stop(list(order), old))
    assert list(lost).index("stop") < list(lost).index("answer")
