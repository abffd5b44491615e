"""fleet.balance without a network: who gives how many streams to whom, and when not (the band, a joiner not
yet settled, a gift too recent, a worker expired or silent); every giver computing the same matching; the
gift write's condition."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.balance import GIFTS, Balancer, balanced, fair_shares, gift_entry, give, matching, parse_gift, transfer
from fleet.lease import HardenedRules, Holder, Lease, WorkerRecord
from fleet.memstore import MemoryStore
from tests.fleet.memworker import add_stream, config, history, running, until

NOW_MS = 1_000_000
WORKERS = "wsfleet-workers"


def worker(worker_id: str, held: int | None, gen: str = "g1", expires_ms: int = NOW_MS + 2_000) -> WorkerRecord:
    return WorkerRecord(worker_id=worker_id, gen=gen, expires_at_ms=expires_ms, held=held)


def table(*records: WorkerRecord) -> dict[str, WorkerRecord]:
    return {r.worker_id: r for r in records}


def settled_balancer(workers: dict[str, WorkerRecord], me: str = "w1", mine: int = 15,
                     joiners: tuple[str, ...] = ("w3",)) -> Balancer:
    """A balancer whose first look (0 s) saw the workers but ``joiners``, which it first saw at 3 s: asked at
    10 s, every worker is settled and the joiners are within their join window."""
    balancer = Balancer(band=1.2, settle_s=2.0)
    members = {w: r for w, r in workers.items() if w not in joiners}
    assert balancer.consider(me, mine, members, NOW_MS, now_s=0.0) == []  # nobody settled yet
    assert balancer.consider(me, mine, workers, NOW_MS, now_s=3.0) == []  # the joiners not yet
    return balancer


def gifts_of(balancer: Balancer, me: str, mine: int, workers: dict[str, WorkerRecord],
             now_s: float = 10.0) -> list[tuple[str, int]]:
    return [(g.recipient.worker_id, g.count) for g in balancer.consider(me, mine, workers, NOW_MS, now_s)]


def test_a_joiner_draws_the_busiest_down_to_their_shares() -> None:
    workers = table(worker("w1", 15), worker("w2", 15), worker("w3", 0))
    assert gifts_of(settled_balancer(workers), "w1", 15, workers) == [("w3", 5)]
    assert gifts_of(settled_balancer(workers, "w2"), "w2", 15, workers) == [("w3", 5)]
    assert gifts_of(settled_balancer(workers, "w3", 0, joiners=()), "w3", 0, workers) == []


def test_only_a_worker_that_joined_draws_and_only_for_its_join_window() -> None:
    """The imbalance a takeover or a START burst leaves between the first workers moves nothing."""
    workers = table(worker("w1", 20), worker("w2", 10), worker("w3", 0))
    assert gifts_of(settled_balancer(workers, joiners=()), "w1", 20, workers) == []
    balancer = settled_balancer(workers)
    assert gifts_of(balancer, "w1", 20, workers, now_s=11.5) == []  # 8.5 s after it joined: one of the fleet
    # first seen a look late but already holding streams: it started with the fleet (crash-hardened, fresh
    # clone at 1d77582: a worker gave 7 streams to such a worker 2 s after a kill)
    busy = table(worker("w1", 20), worker("w2", 10), worker("w3", 4))
    assert gifts_of(settled_balancer(busy), "w1", 20, busy) == []


def test_the_shares_keep_the_remainder_with_the_busiest_and_the_gifts_fill_the_deficits_in_order() -> None:
    counts = {"w1": 10, "w2": 10, "w3": 10, "w4": 0}
    assert fair_shares(counts) == {"w1": 8, "w2": 8, "w3": 7, "w4": 7}
    assert matching(counts, fair_shares(counts), {"w4"}) == [("w1", "w4", 2), ("w2", "w4", 2), ("w3", "w4", 3)]
    counts = {"a": 12, "b": 0, "c": 0}
    assert matching(counts, fair_shares(counts), {"b", "c"}) == [("a", "b", 4), ("a", "c", 4)]
    assert matching(counts, fair_shares(counts), {"c"}) == [("a", "c", 4)]


def test_within_the_band_nothing_moves() -> None:
    workers = table(worker("w1", 12), worker("w2", 11), worker("w3", 10))   # 12 / 10 = 1.2
    assert gifts_of(settled_balancer(workers, mine=12), "w1", 12, workers) == []


def test_a_worker_that_has_not_been_alive_the_settle_time_draws_nothing() -> None:
    workers = table(worker("w1", 15), worker("w2", 15))
    balancer = settled_balancer(workers, joiners=())
    joined = table(*workers.values(), worker("w3", 0))
    assert gifts_of(balancer, "w1", 15, joined, now_s=11.0) == []       # first seen at 11 s
    assert gifts_of(balancer, "w1", 15, joined, now_s=12.5) == []       # 1.5 s: not yet
    assert gifts_of(balancer, "w1", 15, joined, now_s=13.0) == [("w3", 5)]


def test_a_flapping_worker_starts_its_settle_time_again_with_each_incarnation() -> None:
    workers = table(worker("w1", 15), worker("w2", 15), worker("w3", 0, gen="a"))
    balancer = settled_balancer(workers)
    again = table(worker("w1", 15), worker("w2", 15), worker("w3", 0, gen="b"))
    assert gifts_of(balancer, "w1", 15, again) == []


def test_an_expired_or_silent_worker_is_not_counted() -> None:
    workers = table(worker("w1", 15), worker("w2", 15), worker("w3", 0, expires_ms=NOW_MS - 1), worker("w4", None))
    assert gifts_of(settled_balancer(workers), "w1", 15, workers) == []


def test_one_gift_per_settle_time() -> None:
    workers = table(worker("w1", 15), worker("w2", 15), worker("w3", 0))
    balancer = settled_balancer(workers)
    assert gifts_of(balancer, "w1", 15, workers, now_s=6.0) == [("w3", 5)]
    assert gifts_of(balancer, "w1", 15, workers, now_s=7.0) == []   # the counts have not been renewed yet
    assert gifts_of(balancer, "w1", 15, workers, now_s=8.0) == [("w3", 5)]


def test_a_transfer_is_the_handoff_release_naming_the_recipient_at_the_next_epoch() -> None:
    rules = HardenedRules(config())
    me, lease = Holder("w1", "g1"), Lease(pk="CONN#a", ws_url="ws://u/a", epoch=4, resume_seq=1)
    release = rules.release(lease, me, NOW_MS, last_seq=17)
    moved = transfer(release, lease, worker("w3", 0, gen="g3"), NOW_MS, rules.lease_ms)
    assert moved.condition == release.condition     # held by me at my epoch, and STARTED
    assert {k: moved.update.set[k] for k in ("lease_owner", "owner_gen", "epoch", "last_seq")} == {
        "lease_owner": "w3", "owner_gen": "g3", "epoch": 5, "last_seq": 17}
    assert moved.update.set["lease_expires_at_ms"] == NOW_MS + rules.lease_ms


def test_a_gift_names_the_stream_and_needs_the_recipients_live_incarnation() -> None:
    assert parse_gift(gift_entry("CONN#c@x", 7)) == ("CONN#c@x", 7) and parse_gift("CONN#c@") is None
    write = give(worker("w3", 0, gen="g3"), frozenset({"CONN#a@2"}), NOW_MS)
    assert write.key == {"pk": "w3"} and write.update.add_to_set == {GIFTS: frozenset({"CONN#a@2"})}
    assert write.allowed({"pk": "w3", "gen": "g3", "expires_at_ms": NOW_MS + 1})
    assert not write.allowed({"pk": "w3", "gen": "g9", "expires_at_ms": NOW_MS + 1})
    assert not write.allowed({"pk": "w3", "gen": "g3", "expires_at_ms": NOW_MS})
    assert not write.allowed(None)


@given(st.lists(st.integers(0, 200), min_size=2, max_size=8), st.integers(1, 3))
def test_every_giver_computes_the_same_gifts_and_they_fill_the_joiners_shares(counts: list[int], joined: int) -> None:
    """Each worker decides alone from the same table; the last ``joined`` workers joined (holding nothing).
    What the givers give goes to joiners only, no giver gives below its share, no joiner is filled above its
    share, and when the fleet's surplus covers the joiners' deficits they reach their shares."""
    names = [f"w{i}" for i in range(len(counts))]
    joiners = tuple(names[-min(joined, len(names) - 1):])
    counts = [0 if n in joiners else c for n, c in zip(names, counts, strict=True)]  # a joiner arrives empty
    workers = table(*(worker(n, c) for n, c in zip(names, counts, strict=True)))
    initial = dict(zip(names, counts, strict=True))
    shares = fair_shares(initial)
    after = dict(initial)
    given: list[tuple[str, str, int]] = []
    for name in names:
        balancer = settled_balancer(workers, name, after[name], joiners=tuple(j for j in joiners if j != name))
        for recipient, n in gifts_of(balancer, name, workers[name].held or 0, workers):
            assert recipient in joiners
            given.append((name, recipient, n))
            after[name] -= n
            after[recipient] += n
    if balanced(counts, 1.2):
        assert given == []
        return
    # each giver decided alone, and together they carried out the one matching of the whole table
    assert given == matching(initial, shares, joiners)
    assert all(after[n] >= min(shares[n], initial[n]) for n in names if n not in joiners)
    assert all(after[j] <= max(shares[j], initial[j]) for j in joiners)
    surplus = sum(max(0, initial[n] - shares[n]) for n in names if n not in joiners)
    if surplus >= sum(max(0, shares[j] - initial[j]) for j in joiners):
        assert all(after[j] >= shares[j] for j in joiners)


@pytest.mark.looptime
async def test_a_worker_that_joins_is_given_half_the_streams_each_held_by_one_worker_at_a_time() -> None:
    """Two real workers on the in-memory store: the first holds twelve streams, the second joins, and the
    first transfers six to it, which it takes up from its gifts (``via`` balance) or, when its sweep finds a
    transferred lease listed as its own first, adopts (about 1 run in 20): never free on the way."""
    store = MemoryStore(config())
    pks = [f"CONN#c{i:02d}" for i in range(12)]
    for pk in pks:
        add_stream(store, pk)
    async with running(store) as first:
        loop = asyncio.get_running_loop()
        joining_after = loop.time() + first.config.lease_s  # a joiner comes more than a lease later
        await until(lambda: len(first.held) == 12 and loop.time() > joining_after)
        async with running(store, config(worker_id="w2")) as second:
            await until(lambda: len(second.held) == 6 and len(first.held) == 6)
            owners = {pk: store.connection(pk).lease_owner for pk in pks}
            assert sorted(owners.values()) == ["w1"] * 6 + ["w2"] * 6
            assert {pk for pk, owner in owners.items() if owner == "w2"} == set(second.held)
            given = [e for e in history(second).of("lease.acquire", outcome="ok") if e["via"] in ("balance", "adopted")]
            assert sorted(e["pk"] for e in given) == sorted(second.held)
            moved = history(first).of("lease.release", reason="rebalance", outcome="ok")
            assert sorted(e["pk"] for e in moved) == sorted(second.held) and {e["to"] for e in moved} == {"w2"}
            assert [e["streams"] for e in history(first).of("balance.give", to="w2")] == [6]
            await until(lambda: not (store.item(WORKERS, "w2") or {}).get(GIFTS))  # deleted with the renewal after


def test_gifts_not_yet_counted_are_the_recipients_already() -> None:
    workers = table(worker("w1", 15), worker("w2", 15), worker("w3", 0))
    balancer = settled_balancer(workers, "w2")
    given = table(worker("w1", 15), worker("w2", 15),
                  WorkerRecord("w3", "g1", NOW_MS + 2_000, held=0, gifts=frozenset(f"CONN#{i}@1" for i in range(5))))
    # 35 streams: shares 12/12/11, w3 lacks 6, w1 fills 3 and w2 3 (not 5: w3 is not at 0)
    assert gifts_of(balancer, "w2", 15, given) == [("w3", 3)]
