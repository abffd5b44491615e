"""The lease rules as pure functions: decisions over records and a clock, and the one-consumer property
over every interleaving hypothesis can find (model store, skewed clocks, pauses, late requests)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from fleet.expr import Eq, Exists, Gt, Update, Write, all_of
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
from fleet.profiles import HardenedProfile, profile_for
from tests.fleet.lease_model import Simulation, model_config

ME = Holder("w1", "gen-a")
OTHER = Holder("w2", "gen-b")
OTHER_GEN = Holder("w1", "gen-z")  # a later incarnation of ME
PK = "CONN#c1"


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
    message = rules.message(lease, ME, seq=11, data="c1:11", now_ms=1)
    assert message.key == {"pk": PK, "sk": 11}
    assert message.allowed(None) and not message.allowed(message.apply(None))


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


# -- the one-consumer property over interleavings --------------------------------------------------------
ACTIONS = ("advance", "heartbeat", "acquire", "write", "checkpoint", "release", "duplicate")


def steps(lease_ms: float, late_ms: float) -> st.SearchStrategy[list[tuple[str, int, int, float, float]]]:
    step = st.tuples(
        st.sampled_from(ACTIONS),
        st.integers(0, 2),                       # worker
        st.integers(0, 1),                       # stream
        st.one_of(st.floats(0, lease_ms / 8), st.floats(0, lease_ms * 1.5)),  # time first (long: a pause)
        st.floats(0, late_ms),                   # how late the request arrives
    )
    return st.lists(step, min_size=1, max_size=60)


Plan = list[tuple[str, int, int, float, float]]


def simulate(profile: str, offsets: list[int], plan: Plan) -> Simulation:
    strategy = profile_for(model_config(profile))
    sim = Simulation(strategy, offsets)
    for action, worker, stream, dt, delay in plan:
        sim.advance(dt)
        if action == "heartbeat":
            sim.heartbeat(worker, delay)
        elif action == "acquire":
            sim.acquire(worker, stream, delay)
        elif action == "write":
            sim.write_message(worker, stream, delay)
        elif action == "checkpoint":
            sim.checkpoint(worker, stream, delay)
        elif action == "release":
            sim.release(worker, stream, delay)
        elif action == "duplicate":
            sim.duplicate(worker * 7 + stream, delay)
    sim.advance(10 * strategy.rules.lease_ms)
    return sim


def run(profile: str, offsets: list[int], plan: Plan) -> list[str]:
    return simulate(profile, offsets, plan).violations()


_hardened = HardenedRules(model_config("hardened"))
# Requests may arrive as late as the fencing margin plus the request timeout (the design's assumption).
_LATE = _hardened.lease_ms - _hardened.fence_ms


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps(_hardened.lease_ms, _LATE),
    offsets=st.lists(st.integers(0, int(_hardened.tolerance_ms)), min_size=2, max_size=3),
)
def test_hardened_never_accepts_two_workers_writes_in_overlapping_intervals(
    plan: list[tuple[str, int, int, float, float]], offsets: list[int]
) -> None:
    plan = [(a, w % len(offsets), s, dt, d) for a, w, s, dt, d in plan]
    assert run("hardened", offsets, plan) == []


def test_unsafe_is_caught_by_the_same_property() -> None:
    # two workers acquire the same live stream and both write
    plan = [("acquire", 0, 0, 1.0, 0.0), ("acquire", 1, 0, 1.0, 0.0), ("write", 0, 0, 1.0, 0.0)]
    assert run("unsafe", [0, 0], plan)


def test_hypothesis_finds_an_unsafe_interleaving() -> None:
    """The same search that never breaks ``hardened`` finds a counterexample for ``unsafe`` on its own."""
    step = st.tuples(st.sampled_from(ACTIONS), st.integers(0, 1), st.just(0), st.floats(0, 100), st.just(0.0))
    counterexample = find(st.lists(step, min_size=1, max_size=12), lambda plan: bool(run("unsafe", [0, 0], plan)),
                          settings=settings(max_examples=3000, deadline=None, database=None))
    assert run("unsafe", [0, 0], counterexample)


def test_blog_pause_is_caught_by_the_same_property() -> None:
    # the published design: a worker paused past its lease writes after the takeover
    plan = [("acquire", 0, 0, 1.0, 0.0), ("advance", 0, 0, 25_000.0, 0.0),
            ("acquire", 1, 0, 0.0, 0.0), ("write", 0, 0, 1.0, 0.0)]
    assert run("blog", [0, 0], plan)


def test_the_property_detects_a_fence_that_closes_too_late() -> None:
    """The model is able to fail: a fence left open past expiry + tolerance lets a zombie write."""
    plan = [("heartbeat", 0, 0, 1.0, 0.0), ("heartbeat", 1, 0, 0.0, 0.0), ("acquire", 0, 0, 1.0, 0.0),
            ("acquire", 1, 0, 21_500.0, 0.0), ("write", 0, 0, 1.0, 0.0)]
    assert run("hardened", [0, 0], plan) == []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HardenedProfile, "fence_deadline", lambda self, s: s + (self.rules.lease_ms + 3_000) / 1000)
        assert run("hardened", [0, 0], plan)


# -- hole 2: a worker's expiry never moves backwards -----------------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=steps(_hardened.lease_ms, _hardened.lease_ms),
    offsets=st.lists(st.integers(0, int(_hardened.tolerance_ms)), min_size=2, max_size=3),
)
def test_hardened_worker_expiry_never_moves_backwards(plan: Plan, offsets: list[int]) -> None:
    """Late and duplicated renewals (up to a whole lease late) never lower a worker's stored expiry."""
    plan = [(a, w % len(offsets), s, dt, d) for a, w, s, dt, d in plan]
    assert simulate("hardened", offsets, plan).expiry_regressions() == []


def _renew_worker_at_9eab16e(self: HardenedRules, me: Holder, now_ms: int, handled: frozenset[str]) -> Write:
    """``renew_worker`` as commit 9eab16e wrote it: no ``expires_at_ms < :new`` guard."""
    return Write(key={"pk": me.worker_id}, update=Update(set={"expires_at_ms": now_ms + int(self.lease_ms)}),
                 condition=all_of(Exists("pk"), Eq("gen", me.gen),
                                  Gt("expires_at_ms", now_ms + int(self.timeout_ms))))


def test_hole_2_a_late_renewal_lowered_the_expiry_at_9eab16e() -> None:
    """Hole 2.  At 9eab16e a renewal delivered after a later one was applied (its condition only asked for
    the old expiry to be a request timeout away), so the expiry went down while the owner's fence, moved by
    the later renewal, stayed open; with an unmodified clock a taker could then claim its streams.  The
    search finds such a schedule on the old rule, and the same schedule is harmless now."""
    step = st.tuples(st.sampled_from(("heartbeat", "duplicate", "advance")), st.just(0), st.just(0),
                     st.floats(0, 5_000), st.floats(0, 10_000))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HardenedRules, "renew_worker", _renew_worker_at_9eab16e)
        found = find(st.lists(step, min_size=1, max_size=10),
                     lambda plan: bool(simulate("hardened", [0], plan).expiry_regressions()),
                     settings=settings(max_examples=3000, deadline=None, database=None))
    assert simulate("hardened", [0], found).expiry_regressions() == []
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
        assert stop.apply({**LIVE, "desired_state": STARTED}) == {**LIVE, "updated_at_ms": 9}
        post = rules.post_stop("w2", PK, 3)
        assert not post.allowed(None)
        mailbox = {"pk": "w2", "gen": "g", "stop_requests": {"CONN#x@1"}}
        assert post.apply(mailbox)["stop_requests"] == {"CONN#x@1", f"{PK}@3"}


def test_a_stop_mailbox_entry_names_the_lease_it_stops_and_no_later_one() -> None:
    request = StopRequest.parse(f"{PK}@3")
    assert (request.pk, request.epoch) == (PK, 3) and StopRequest.of_lease(PK, 3) == request
    assert request.stops(2) and request.stops(3) and not request.stops(4)


@pytest.mark.parametrize("entry", [PK, f"{PK}@", f"{PK}@x1", f"{PK}@-1", f"{PK}@\u0663", "@7"])
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

