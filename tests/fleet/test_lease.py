"""The lease rules as pure functions: decisions over records and a clock (the one-consumer property over
schedules is ``test_machines_property``'s, on the machines that use these rules)."""

from __future__ import annotations

import pytest

from fleet.config import FleetConfig
from fleet.expr import Write
from fleet.lease import (
    STARTED,
    STOPPED,
    ConnectionRecord,
    HardenedRules,
    Holder,
    Lease,
    Rules,
    StopRequest,
    UnsafeRules,
    WorkerRecord,
    rules_for,
)
from fleet.profiles import HardenedProfile

ME = Holder("w1", "gen-a")
OTHER = Holder("w2", "gen-b")
OTHER_GEN = Holder("w1", "gen-z")  # a later incarnation of ME
PK = "CONN#c1"


def model_config(profile: str) -> FleetConfig:
    """A configuration of ``profile`` at time scale 1."""
    return FleetConfig(profile=profile, worker_id="model")  # type: ignore[arg-type]


def record(**fields: object) -> ConnectionRecord:
    base: dict[str, object] = {"pk": PK, "desired_state": STARTED, "ws_url": "ws://u/s/c1", "epoch": 0}
    base.update(fields)
    return ConnectionRecord.from_item(base)


def item_of(rec: ConnectionRecord) -> dict[str, object]:
    item: dict[str, object] = {k: v for k, v in rec.__dict__.items() if v is not None}
    return item


# -- blog: the published rules, flaws included --------------------------------------------------------
def test_blog_acquires_only_an_expired_or_missing_lease() -> None:
    rules = Rules(model_config("blog"))
    write = rules.acquire(PK, ME, now_ms=1_000)
    assert write.allowed({"pk": PK})
    assert write.allowed({"pk": PK, "lease_expires_at_ms": 999})
    assert not write.allowed({"pk": PK, "lease_expires_at_ms": 1_000})
    after = write.apply({"pk": PK, "lease_expires_at_ms": 0})
    assert after["lease_owner"] == "w1" and after["lease_expires_at_ms"] == 1_000 + 20_000


def test_blog_renew_and_release_require_ownership_and_never_advance_last_seq() -> None:
    rules = Rules(model_config("blog"))
    lease = Lease(PK, "ws://u", 0, 0)
    mine = {"pk": PK, "lease_owner": "w1", "lease_expires_at_ms": 5, "last_seq": 0}
    assert rules.renew(lease, ME, 10).allowed(mine)
    assert not rules.renew(lease, OTHER, 10).allowed(mine)
    released = rules.release(lease, ME, 10, last_seq=42).apply(mine)
    assert released["lease_owner"] == "" and released["lease_expires_at_ms"] == 0
    assert released["last_seq"] == 0
    assert rules.checkpoint(lease, ME, 10, 42) is None


def test_blog_keys_messages_by_wall_clock_so_one_millisecond_collides() -> None:
    rules = Rules(model_config("blog"))
    lease = Lease(PK, "ws://u", 0, 0)
    a = rules.message(lease, ME, seq=1, data="c1:1", now_ms=7)
    b = rules.message(lease, ME, seq=2, data="c1:2", now_ms=7)
    assert a.key == b.key and a.condition is None


# -- hardened --------------------------------------------------------------------------------------------
def test_hardened_claims_only_free_or_dead_owners_past_tolerance() -> None:
    rules = HardenedRules(model_config("hardened"))
    tolerance = rules.tolerance_ms
    alive = {"w2": WorkerRecord("w2", "gen-b", expires_at_ms=10_000)}
    owned = record(lease_owner="w2", owner_gen="gen-b", epoch=3)
    assert rules.claimable(record(lease_owner=""), ME, 0, alive)
    assert not rules.claimable(owned, ME, 10_000 + int(tolerance), alive)
    assert rules.claimable(owned, ME, 10_000 + int(tolerance) + 1, alive)
    assert rules.claimable(owned, ME, 0, {"w2": WorkerRecord("w2", "gen-new", 99_999)})
    assert rules.claimable(owned, ME, 0, {})
    assert not rules.claimable(record(desired_state=STOPPED), ME, 0, {})
    assert not rules.claimable(record(lease_owner="w1", owner_gen="gen-a"), ME, 0, {})


def test_hardened_acquire_increments_epoch_only_if_unchanged_since_read() -> None:
    rules = HardenedRules(model_config("hardened"))
    seen = record(lease_owner="w2", owner_gen="gen-b", epoch=3)
    write = rules.acquire(PK, ME, 50_000, seen)
    assert write.allowed(item_of(seen))
    assert write.apply(item_of(seen))["epoch"] == 4
    assert not write.allowed({**item_of(seen), "epoch": 4})
    assert not write.allowed({**item_of(seen), "lease_owner": "w3"})
    assert not write.allowed({**item_of(seen), "desired_state": STOPPED})


def test_hardened_checkpoint_release_and_messages_are_fenced_and_idempotent() -> None:
    rules = HardenedRules(model_config("hardened"))
    lease = Lease(PK, "ws://u", epoch=4, resume_seq=10)
    current = {"pk": PK, "lease_owner": "w1", "owner_gen": "gen-a", "epoch": 4, "last_seq": 10,
               "desired_state": STARTED}
    checkpoint = rules.checkpoint(lease, ME, 1, last_seq=15)
    assert isinstance(checkpoint, Write) and checkpoint.allowed(current)
    assert checkpoint.apply(current)["last_seq"] == 15
    assert not checkpoint.allowed({**current, "epoch": 5})
    assert not rules.release(lease, ME, 1, 15).allowed({**current, "epoch": 5})
    # a message item is sent as it is, behind the lease (``held``: the ConditionCheck of its transaction) or
    # refused over a newer epoch (the store's condition, tested on both engines in test_store): keyed by
    # sequence, so a repeat is the same item, and naming the epoch and incarnation that wrote it
    message = rules.message(lease, ME, seq=11, data="c1:11", now_ms=1)
    assert message.key == rules.message(lease, ME, seq=11, data="c1:11", now_ms=2).key == {"pk": PK, "sk": 11}
    stored = message.apply(None)
    assert (stored["epoch"], stored["worker_id"], stored["gen"], stored["message_data"]) == (4, "w1", "gen-a", "c1:11")
    held = rules.held(lease, ME)
    assert held is not None and held.evaluate(current)
    assert not held.evaluate({**current, "epoch": 5}) and not held.evaluate({**current, "owner_gen": "gen-z"})


def test_hardened_worker_renewal_must_leave_a_request_timeout_before_expiry() -> None:
    rules = HardenedRules(model_config("hardened"))
    alive = {"pk": "w1", "gen": "gen-a", "expires_at_ms": 10_000}
    timeout = int(rules.timeout_ms)
    assert rules.renew_worker(ME, 10_000 - timeout - 1, frozenset()).allowed(alive)
    assert not rules.renew_worker(ME, 10_000 - timeout, frozenset()).allowed(alive)
    assert not rules.renew_worker(Holder("w1", "gen-z"), 0, frozenset()).allowed(alive)
    renewed = rules.renew_worker(ME, 0, frozenset({PK})).apply({**alive, "stop_requests": {PK, "CONN#x"}})
    assert renewed["stop_requests"] == {"CONN#x"}


def test_hardened_fence_closes_before_anyone_can_take_over() -> None:
    profile = HardenedProfile(model_config("hardened"))
    rules = profile.rules
    # renewal sent at t=0 (wall clock 0) -> expires at lease; earliest takeover read: lease + tolerance
    assert profile.fence_deadline(0.0) * 1000 + rules.timeout_ms < rules.lease_ms + rules.tolerance_ms


def test_rules_for_picks_the_profile() -> None:
    assert type(rules_for(model_config("unsafe"))) is UnsafeRules
    assert type(rules_for(model_config("hardened"))) is HardenedRules
    assert type(rules_for(model_config("blog"))) is Rules


def test_unsafe_acquires_a_live_lease() -> None:
    rules = UnsafeRules(model_config("unsafe"))
    live = {"pk": PK, "lease_owner": "w2", "lease_expires_at_ms": 10**12}
    assert rules.acquire(PK, ME, 0).allowed(live)


# -- hole 2: a worker's expiry never moves backwards (the search over schedules: test_machines_property) -----
def test_hole_2_a_renewal_delivered_after_a_later_one_never_lowers_the_expiry() -> None:
    late = HardenedRules(model_config("hardened")).renew_worker(ME, 1_000, frozenset())
    assert not late.allowed({"pk": "w1", "gen": "gen-a", "expires_at_ms": 1_000 + 20_000 + 500})



# -- START / STOP from the rules (what fleet/router.py writes) --------------------------------------------
LIVE = {"pk": PK, "desired_state": STOPPED, "ws_url": "ws://old", "lease_owner": "w2", "owner_gen": "gen-b",
        "lease_expires_at_ms": 99, "last_seq": 41, "epoch": 6, "updated_at_ms": 1}


def test_hardened_start_never_clobbers_a_live_lease_and_initialises_a_new_item() -> None:
    start = HardenedRules(model_config("hardened")).start_connection(PK, "ws://new", now_ms=5)
    assert start.apply(LIVE) == {**LIVE, "desired_state": STARTED, "ws_url": "ws://new", "updated_at_ms": 5}
    assert start.apply(None) == {"pk": PK, "desired_state": STARTED, "ws_url": "ws://new", "updated_at_ms": 5,
                                 "lease_owner": "", "lease_expires_at_ms": 0, "last_seq": 0, "epoch": 0}
    assert start.condition is None and "if_not_exists(#lease_owner" in start.render()["UpdateExpression"]


def test_blog_start_overwrites_the_whole_item_as_published() -> None:
    start = Rules(model_config("blog")).start_connection(PK, "ws://new", now_ms=5)
    assert start.replace and start.apply(LIVE) == {
        "pk": PK, "desired_state": STARTED, "ws_url": "ws://new", "lease_owner": "", "lease_expires_at_ms": 0,
        "last_seq": 0, "updated_at_ms": 5}


def test_stop_needs_an_existing_item_and_keeps_its_lease_and_the_mailbox_post_needs_the_owner() -> None:
    for rules in (Rules(model_config("blog")), HardenedRules(model_config("hardened"))):
        stop = rules.stop_connection(PK, now_ms=9)
        assert not stop.allowed(None)
        assert stop.apply({**LIVE, "desired_state": STARTED}) == {**LIVE, "updated_at_ms": 9, "stopped_at_ms": 9}
        post = rules.post_stop("w2", PK, 3, 9)
        assert not post.allowed(None)
        mailbox = {"pk": "w2", "gen": "g", "stop_requests": {"CONN#x@1:5"}}
        assert post.apply(mailbox)["stop_requests"] == {"CONN#x@1:5", f"{PK}@3:9"}


def test_a_stop_mailbox_entry_names_the_lease_it_stops_and_no_later_one() -> None:
    request = StopRequest.parse(f"{PK}@3:9")
    assert (request.pk, request.epoch, request.stopped_at_ms) == (PK, 3, 9)
    assert StopRequest.of_lease(PK, 3, 9) == request
    assert request.stops(2) and request.stops(3) and not request.stops(4)
    older = StopRequest.parse(f"{PK}@3")  # posted by a router before entries said when the stream stopped
    assert (older.pk, older.epoch, older.stopped_at_ms) == (PK, 3, None) and StopRequest.of_lease(PK, 3) == older


@pytest.mark.parametrize("entry", [PK, f"{PK}@", f"{PK}@x1", f"{PK}@-1", f"{PK}@\u0663", "@7", f"{PK}@3:",
                                   f"{PK}@3:x", f"{PK}@:9"])
def test_a_stop_mailbox_entry_without_a_decimal_epoch_stops_its_whole_text_at_any_epoch(entry: str) -> None:
    """A bare pk (routers before entries named their lease) or anything malformed: the whole entry is the
    pk, stopped at any epoch; an entry naming no stream held is then simply handled."""
    request = StopRequest.parse(entry)
    assert (request.entry, request.pk, request.epoch) == (entry, entry, None)
    assert request.stops(0) and request.stops(10**9)
    assert StopRequest.of_lease(PK, None).entry == PK  # an item with no epoch: the bare pk


# -- contract 2: what a write says about its writer -------------------------------------------------------
def test_items_carry_their_writer() -> None:
    hardened, blog = HardenedRules(model_config("hardened")), Rules(model_config("blog"))
    lease = Lease(PK, "ws://u", epoch=4, resume_seq=0)
    stored = hardened.message(lease, ME, seq=3, data="d", now_ms=1).apply(None)
    assert (stored["worker_id"], stored["gen"], stored["epoch"]) == ("w1", "gen-a", 4)
    published = blog.message(lease, ME, seq=3, data="d", now_ms=1).apply(None)
    assert (published["worker_id"], published["gen"]) == ("w1", "gen-a") and "epoch" not in published
    current = {"pk": PK, "lease_owner": "w1", "owner_gen": "gen-a", "epoch": 4, "desired_state": STARTED}
    for write in (hardened.checkpoint(lease, ME, 1, 9), hardened.release(lease, ME, 1, 9)):
        assert write is not None
        after = write.apply(current)
        writer = (after["ckpt_worker"], after["ckpt_gen"], after["ckpt_epoch"])
        assert after["last_seq"] == 9 and writer == ("w1", "gen-a", 4)


def test_hole_6_a_checkpoint_of_a_stopped_stream_is_refused() -> None:
    """Hole 6 (part).  At 9eab16e the checkpoint's condition was ownership and epoch only, so a worker that
    missed a STOP kept checkpointing (and consuming) a STOPPED stream; now the refusal drops it."""
    lease = Lease(PK, "ws://u", epoch=4, resume_seq=0)
    checkpoint = HardenedRules(model_config("hardened")).checkpoint(lease, ME, 1, 9)
    owned = {"pk": PK, "lease_owner": "w1", "owner_gen": "gen-a", "epoch": 4}
    assert checkpoint is not None and checkpoint.allowed({**owned, "desired_state": STARTED})
    assert not checkpoint.allowed({**owned, "desired_state": STOPPED})


def test_register_is_conditional_and_never_lowers_the_expiry() -> None:
    """Hole 2 (register).  At 9eab16e registering was a put: a retried registration of the same generation
    replaced the item with a lower expiry (and the mailbox).  Now it is an update that moves forward only."""
    rules = HardenedRules(model_config("hardened"))
    first = rules.register(ME, 1_000)
    assert first.allowed(None)
    registered = first.apply(None)
    assert not rules.register(ME, 500).allowed(registered)  # a retry sent earlier, delivered later
    assert rules.register(ME, 2_000).allowed(registered)
    assert not rules.register(OTHER_GEN, 2_000).allowed(registered)  # a live incarnation is not replaced
    dead = 1_000 + int(rules.lease_ms + rules.tolerance_ms) + 1
    assert rules.register(OTHER_GEN, dead).apply({**registered, "stop_requests": {PK}}) == {
        "pk": "w1", "gen": "gen-z", "expires_at_ms": dead + int(rules.lease_ms)}


def test_a_death_notice_buries_only_the_incarnation_on_the_stopped_task() -> None:
    """Registered on a task, an incarnation names it; re-registered without one (or on another), the old
    task is gone from the item, so a late notice for it matches nothing.  Buried, the incarnation is dead
    at once and can never renew."""
    rules = HardenedRules(model_config("hardened"))
    item = rules.register(ME, 1_000, task_arn="task/a").apply(None)
    assert item["task_arn"] == "task/a"
    bury = rules.bury(WorkerRecord.from_item(item), stopped_at_ms=1_200)
    assert not bury.allowed({**item, "gen": "gen-z"}) and not bury.allowed({**item, "task_arn": "task/b"})
    renewed = rules.renew_worker(ME, 1_201, frozenset()).apply(item)  # after the stop: alive, whatever ECS says
    assert not bury.allowed(renewed)
    assert rules.bury(WorkerRecord.from_item(item), stopped_at_ms=1_000).allowed(item)  # registered at the stop
    buried = bury.apply(item)
    assert rules.dead(WorkerRecord.from_item(buried), int(rules.tolerance_ms) + 1)  # any time from now on
    assert not bury.allowed(buried)  # a second notice of the same exit, handled at once, buries nothing more
    assert not rules.renew_worker(ME, 1_500, frozenset()).allowed(buried)
    dead = 1_000 + int(rules.lease_ms + rules.tolerance_ms) + 1
    assert "task_arn" not in rules.register(OTHER_GEN, dead).apply(item)



# -- issue 10, I2 vs I5: a STOPPED stream whose owner died is drained once --------------------------------
HARDENED = HardenedRules(model_config("hardened"))
STOPPED_AT = 50_000
ORPHAN = {"pk": PK, "desired_state": STOPPED, "ws_url": "ws://u", "lease_owner": "w2", "owner_gen": "gen-b",
          "lease_expires_at_ms": 42_000, "last_seq": 7, "epoch": 3, "stopped_at_ms": STOPPED_AT}
LIVE_W2 = {"w2": WorkerRecord("w2", "gen-b", expires_at_ms=60_000)}
TOLERANCE = int(HARDENED.tolerance_ms)
# how long after its stop time a STOP may take effect: the clocks' tolerance plus the router's request timeout
STOP_SLACK = int(HARDENED.tolerance_ms + HARDENED.timeout_ms)


def test_stop_records_the_first_stop_and_start_removes_it() -> None:
    """Without ``stopped_at_ms`` a drain has no end: it would persist what was emitted after the STOP."""
    stopped = HARDENED.stop_connection(PK, now_ms=5).apply({k: v for k, v in ORPHAN.items() if k != "stopped_at_ms"})
    assert stopped["stopped_at_ms"] == 5
    assert HARDENED.stop_connection(PK, now_ms=9).apply(stopped)["stopped_at_ms"] == 5  # a repeated STOP
    started = HARDENED.start_connection(PK, "ws://u", now_ms=11).apply(stopped)
    assert "stopped_at_ms" not in started and started["desired_state"] == STARTED
    assert HARDENED.stop_connection(PK, now_ms=13).apply(started)["stopped_at_ms"] == 13


@pytest.mark.parametrize(("change", "workers", "now_ms", "drainable"), [
    ({}, {}, 60_000, True),  # the owner's worker item is gone
    ({}, {"w2": WorkerRecord("w2", "gen-c", expires_at_ms=90_000)}, 60_000, True),  # replaced by a new gen
    ({}, LIVE_W2, 60_000 + TOLERANCE + 1, True),  # dead past expiry + tolerance
    ({}, LIVE_W2, 60_000 + TOLERANCE, False),  # within the tolerance: it may still renew
    ({}, LIVE_W2, 59_000, False),  # alive: the STOP reaches it through its mailbox
    ({"lease_owner": "", "owner_gen": "", "lease_expires_at_ms": 0}, {}, 60_000, False),  # released for the STOP
    ({"lease_owner": "", "owner_gen": "", "lease_expires_at_ms": 1}, {}, 60_000, True),  # marked by its STOP
    ({"drained_epoch": 3}, {}, 60_000, False),  # drained at this epoch already
    ({"drained_epoch": 2}, {}, 60_000, True),  # drained before a later START, acquire and STOP
    ({"stopped_at_ms": None}, {}, 60_000, False),  # stopped before stop times were recorded: no end known
    ({"desired_state": STARTED}, {}, 60_000, False),  # STARTED again: claimable, not drainable
    ({"lease_owner": "w1", "owner_gen": "gen-a"}, {}, 60_000, False),  # ours
])
def test_a_stopped_stream_is_drainable_only_while_its_owner_can_never_renew_and_until_drained(
        change: dict[str, object], workers: dict[str, WorkerRecord], now_ms: int, drainable: bool) -> None:
    seen = ConnectionRecord.from_item({**ORPHAN, **change})
    assert HARDENED.drainable(seen, ME, now_ms, workers) is drainable
    assert HARDENED.claimable(seen, ME, now_ms, workers) is (change.get("desired_state") == STARTED)
    assert (HARDENED.drain_until_ms(seen) is not None) is (seen.desired_state == STOPPED and "stopped_at_ms" not in
                                                             change and change.get("drained_epoch") != 3)
    for published in (Rules(model_config("blog")), UnsafeRules(model_config("unsafe"))):
        assert not published.drainable(seen, ME, now_ms, workers) and published.drain_until_ms(seen) is None


def test_a_stop_marks_a_stream_nobody_holds_for_a_drain_and_start_clears_it() -> None:
    """A STOP that ends a STARTED period of a stream nobody holds (never acquired, or released by a shutdown
    and not yet taken over) leaves what it emitted then to no one: marked, it is drained as an orphan's is;
    the mark needs the same STOP and still nobody, and a START removes the stop time and the drain."""
    free = {**ORPHAN, "lease_owner": "", "owner_gen": "", "lease_expires_at_ms": 0, "drained_epoch": 3}
    started = HARDENED.start_connection(PK, "ws://u", 60_000).apply(free)
    assert "drained_epoch" not in started and "stopped_at_ms" not in started
    stopped = HARDENED.stop_connection(PK, 61_000).apply(started)
    mark = HARDENED.mark_undrained(PK, 61_000)
    assert mark.allowed(stopped)
    assert not mark.allowed({**stopped, "lease_owner": "w2"})  # somebody acquired it first
    assert not mark.allowed({**stopped, "stopped_at_ms": 62_000})  # STARTED and STOPPED again since
    marked = ConnectionRecord.from_item(mark.apply(stopped))
    assert HARDENED.drainable(marked, ME, 61_000, {}) and HARDENED.drain_until_ms(marked) == 61_000 + STOP_SLACK
    taken = HARDENED.acquire(PK, ME, 61_500, marked).apply(mark.apply(stopped))
    assert (taken["lease_owner"], taken["epoch"]) == ("w1", 4)
    assert Rules(model_config("blog")).mark_undrained(PK, 61_000) is None


def test_the_drain_acquire_is_fenced_and_refused_once_started_or_stopped_again() -> None:
    seen = ConnectionRecord.from_item(ORPHAN)
    write = HARDENED.acquire(PK, ME, 61_000, seen)
    taken = write.apply(ORPHAN)
    assert (taken["lease_owner"], taken["owner_gen"], taken["epoch"]) == ("w1", "gen-a", 4)
    assert write.allowed(ORPHAN)
    assert not write.allowed({**ORPHAN, "epoch": 4})  # someone else drained or acquired first
    started = HARDENED.start_connection(PK, "ws://u", 60_500).apply(ORPHAN)
    assert not write.allowed(started)  # STARTED since: an ordinary claim, not a drain
    assert not write.allowed(HARDENED.stop_connection(PK, 60_700).apply(started))  # another STOP since
    assert not HARDENED.acquire(PK, ME, 61_000, ConnectionRecord.from_item({**ORPHAN, "desired_state": STARTED})
                                ).allowed(ORPHAN)  # an ordinary acquire never takes a STOPPED stream


def test_a_drain_persists_what_was_emitted_before_the_stop_plus_the_tolerance_and_nothing_later() -> None:
    until = HARDENED.drain_until_ms(ConnectionRecord.from_item(ORPHAN))
    assert until == STOPPED_AT + STOP_SLACK
    assert not HARDENED.drain_ends(until, until - 0.5, now_ms=0)
    assert HARDENED.drain_ends(until, until, now_ms=0)  # the first message past the cutoff ends it, unstored
    # no message arriving: over once this worker's clock is past the cutoff by the tolerance
    assert not HARDENED.drain_ends(until, None, now_ms=until + HARDENED.tolerance_ms - 1)
    assert HARDENED.drain_ends(until, None, now_ms=until + HARDENED.tolerance_ms)


def test_a_finished_drain_releases_as_drained_so_it_is_never_drained_twice() -> None:
    """Released with ``drained_epoch``: off the listing (expiry 0), not drainable even by its epoch's
    owner item expiring; a release of an ordinary lease marks nothing."""
    taken = HARDENED.acquire(PK, ME, 61_000, ConnectionRecord.from_item(ORPHAN)).apply(ORPHAN)
    lease = Lease.granted(taken)
    released = HARDENED.release(lease, ME, 62_000, last_seq=12, drained=True).apply(taken)
    assert (released["lease_owner"], released["lease_expires_at_ms"], released["drained_epoch"]) == ("", 0, 4)
    after = ConnectionRecord.from_item({**released, "lease_owner": "w1", "owner_gen": "gen-a"})
    assert not HARDENED.drainable(after, OTHER, 99_000, {}) and HARDENED.drain_until_ms(after) is None
    assert "drained_epoch" not in HARDENED.release(lease, ME, 62_000, last_seq=12).apply(taken)
    restarted = ConnectionRecord.from_item(HARDENED.start_connection(PK, "ws://u", 63_000).apply(released))
    assert HARDENED.claimable(restarted, OTHER, 63_000, {})  # START after STOP: an ordinary stream again


def test_a_release_for_a_stop_is_refused_once_the_stream_was_started_again() -> None:
    """A release naming the STOP it honours needs the item STOPPED at that same time: after a START (the
    stop time removed) or a START and another STOP (a new stop time) it is refused, so the holder knows
    the stream has something left to consume."""
    lease = Lease(PK, "ws://u", epoch=4, resume_seq=0)
    mine = {"pk": PK, "lease_owner": "w1", "owner_gen": "gen-a", "epoch": 4}
    release = HARDENED.release(lease, ME, 70, last_seq=9, stopped_at_ms=50)
    assert release.allowed({**mine, "desired_state": STOPPED, "stopped_at_ms": 50})
    assert not release.allowed({**mine, "desired_state": STARTED})
    assert not release.allowed({**mine, "desired_state": STOPPED, "stopped_at_ms": 60})
    assert not release.allowed({**mine, "desired_state": STOPPED, "stopped_at_ms": 50, "epoch": 5})
    # a release for no STOP in particular (a shutdown, an upstream given up) needs the lease and the stream
    # STARTED: after a STOP its holder has not read yet it is refused, so it is repeated for that STOP
    handoff = HARDENED.release(lease, ME, 70, last_seq=9)
    assert handoff.allowed({**mine, "desired_state": STARTED})
    assert not handoff.allowed({**mine, "desired_state": STOPPED, "stopped_at_ms": 50})
    # released by a holder that could not read the stream: marked, so it is drained
    stopped = {**mine, "desired_state": STOPPED, "stopped_at_ms": 50, "ws_url": "ws://u"}
    behind = HARDENED.release(lease, ME, 70, last_seq=9, stopped_at_ms=50, behind=True).apply(stopped)
    assert behind["lease_expires_at_ms"] == 1 and HARDENED.drainable(ConnectionRecord.from_item(behind), ME, 70, {})
    # released by a holder that read and stored up to the STOP: recorded as drained at its epoch (what the
    # router reads to tell a repeated STOP from one whose mark was never written)
    honoured = HARDENED.release(lease, ME, 70, last_seq=9, stopped_at_ms=50).apply(stopped)
    assert (honoured["lease_expires_at_ms"], honoured["drained_epoch"]) == (0, 4)
    assert "drained_epoch" not in behind
