"""Tests of harness.region.replication: the lag, the pause, a region cut off, last-writer-wins, conflicts
counted once per pair, and every region converging on the same item whatever the order of writes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fleet.batch_log import LogItem, LogWriter, Message, Put, Writer, segment_tag
from harness.message_log import decode, messages
from harness.region.replication import LagModel, Replication

ITEM = ("connections", "CONN#c001")
A, B = "us-east-1", "us-west-2"


def test_a_write_reaches_the_other_region_after_the_lag_and_not_before() -> None:
    replication = Replication((A, B), LagModel(500))
    version = replication.written(A, ITEM, {"v": 1}, written_ms=1000)
    assert replication.due(1499) == [] and replication.backlog() == 1
    [delivery] = replication.due(1500)
    assert (delivery.region, delivery.version) == (B, version)
    assert replication.held[(B, ITEM)] == version and replication.backlog() == 0


def test_nothing_is_delivered_while_paused_and_everything_in_order_after() -> None:
    replication = Replication((A, B), LagModel(100), paused=True)
    first = replication.written(A, ITEM, {"v": 1}, 0)
    second = replication.written(A, ITEM, None, 50)
    assert replication.due(10_000) == [] and replication.backlog() == 2
    assert replication.behind_ms(10_000) == 10_000  # the oldest waiting write was made at 0
    replication.paused = False
    assert [d.version for d in replication.due(10_000)] == [first, second]
    assert replication.behind_ms(10_000) == 0
    assert replication.held[(B, ITEM)].image is None  # the deletion replicated


def test_a_region_cut_off_sends_and_receives_nothing_until_it_is_back() -> None:
    replication = Replication((A, B), LagModel(100))
    stuck = replication.written(A, ITEM, {"v": 1}, 0)
    replication.cut.add(A)
    other = ("connections", "CONN#c002")
    incoming = replication.written(B, other, {"v": 2}, 10)
    assert replication.due(10_000) == [] and replication.backlog() == 2  # A's write is the RPO
    replication.cut.discard(A)
    assert [(d.region, d.version) for d in replication.due(10_000)] == [(B, stuck), (A, incoming)]


def test_writes_made_without_seeing_each_other_conflict_once_and_the_later_wins_everywhere() -> None:
    replication = Replication((A, B), LagModel(100))
    replication.written(A, ITEM, {"owner": "a"}, 0)
    later = replication.written(B, ITEM, {"owner": "b"}, 10)
    replication.due(1000)
    assert replication.conflicts == 1
    assert replication.held[(A, ITEM)] == replication.held[(B, ITEM)] == later


def test_a_write_made_after_the_other_regions_write_arrived_is_no_conflict() -> None:
    replication = Replication((A, B), LagModel(100))
    replication.written(A, ITEM, {"owner": "a"}, 0)
    replication.due(100)  # it reached B
    replication.written(B, ITEM, {"owner": "b"}, 150)
    replication.due(1000)
    assert replication.conflicts == 0
    assert replication.held[(A, ITEM)].image == {"owner": "b"}


writes = st.lists(st.tuples(st.sampled_from([A, B]), st.sampled_from(["k1", "k2"]), st.integers(0, 1000)),
                  max_size=30)


@given(writes, st.integers(0, 300))
def test_every_region_converges_on_the_latest_write_of_each_item(
        schedule: list[tuple[str, str, int]], lag_ms: int) -> None:
    replication = Replication((A, B), LagModel(lag_ms))
    made = []
    for region, key, at in sorted(schedule, key=lambda w: w[2]):
        replication.due(at)  # what arrived before this write
        made.append(replication.written(region, ("t", key), {"at": at}, at))
    replication.due(10_000)
    for key in {key for _, key, _ in schedule}:
        held = replication.held[(A, ("t", key))]
        assert held == replication.held[(B, ("t", key))]
        assert held.written_ms == max(v.written_ms for v in made if v.item == ("t", key))


def test_at_the_same_instant_a_write_made_over_the_other_wins_in_both_regions() -> None:
    """Found by the property above: us-east-1's write, made over us-west-2's at the same instant, lost to it on
    the region-name tie-break in us-west-2 while us-east-1 kept its own: the regions diverged."""
    replication = Replication((A, B), LagModel(0))
    replication.written(B, ITEM, {"v": "west"}, 0)
    replication.due(0)
    over = replication.written(A, ITEM, {"v": "east"}, 0)
    replication.due(10_000)
    assert replication.held[(A, ITEM)] == replication.held[(B, ITEM)] == over


def test_lags_are_drawn_with_the_configured_median_and_tail() -> None:
    model = LagModel(100.0, 1000.0, seed=7)
    lags = sorted(model.draw() for _ in range(20_000))
    assert 90 <= lags[10_000] <= 110 and 800 <= lags[19_800] <= 1250
    assert LagModel(100.0).draw() == 100.0 and LagModel(100.0).describe()["distribution"] == "fixed"


def test_order_is_kept_per_item_only_writes_of_other_items_overtake() -> None:
    replication = Replication((A, B), LagModel(100.0, 2000.0, seed=3))
    made = [replication.written(A, ("t", f"k{i % 5}"), {"i": i}, written_ms=float(i)) for i in range(200)]
    delivered = replication.due(1e9)
    assert len(delivered) == 200
    numbers = [d.version.number for d in delivered]
    for key in {v.item for v in made}:
        own = [d.version.number for d in delivered if d.version.item == key]
        assert own == sorted(own)  # each item's writes in the order they were made
    assert numbers != sorted(numbers)  # but not one global order
    quantiles = replication.lag_quantiles()
    assert quantiles["p50"] < quantiles["p99"] <= quantiles["max"]


def test_last_writer_wins_on_the_origin_regions_clock() -> None:
    """A's clock runs 500 ms ahead: its earlier write carries the later stamp and wins in both regions."""
    replication = Replication((A, B), LagModel(10.0))
    ahead = replication.written(A, ITEM, {"v": "a"}, written_ms=0, clock_ms=500)
    replication.written(B, ITEM, {"v": "b"}, written_ms=100, clock_ms=100)
    replication.due(10_000)
    assert replication.held[(A, ITEM)] == replication.held[(B, ITEM)] == ahead


def test_writes_pending_before_a_time_leave_out_a_region_cut_off() -> None:
    replication = Replication((A, B), LagModel(100.0))
    replication.written(A, ITEM, {"v": 1}, written_ms=0)
    replication.written(B, ("t", "other"), {"v": 2}, written_ms=50)
    assert replication.pending_before(60) == 2 and replication.pending_before(10) == 1
    replication.cut.add(A)
    assert replication.pending_before(60) == 0  # both involve A: they wait for it
    replication.cut.discard(A)
    replication.due(1000)
    assert replication.pending_before(1000) == 0


def test_what_a_region_lacks_is_each_item_whose_write_on_its_way_will_replace_what_it_holds() -> None:
    """Per item, the last write on its way that wins (with how long ago the oldest of those was made):
    not one older than what the region holds (it loses there), and not one already landed; a write a pump
    has taken and not landed yet (``taken``) is still lacked."""
    replication = Replication((A, B), LagModel(100))
    lease = ("connections", "CONN#c002")
    replication.written(A, ITEM, {"v": 1}, 0)
    second = replication.written(A, ITEM, {"v": 2}, 50)
    older = replication.written(A, lease, {"owner": "a"}, 10)
    newer = replication.written(B, lease, {"owner": "b"}, 20)  # B holds a later image of it: A's loses there
    assert [(m.item, m.held, m.coming, m.since_ms) for m in replication.missing(B)] == [(ITEM, None, second, 0)]
    assert [(m.item, m.held, m.coming) for m in replication.missing(A)] == [(lease, older, newer)]
    taken = replication.take_due(200, B)
    assert replication.missing(B) == [] and [m.coming for m in replication.missing(B, taken)] == [second]
    for delivery in taken:
        if replication.wins(delivery):
            replication.landed(delivery)
    assert replication.missing(B, taken) == [] and replication.held[(B, ITEM)] == second


class _Region:
    """One region's messages table (conditional puts, consistent reads), its writes recorded for replication
    with its clock ``offset_ms`` off the harness's."""

    def __init__(self, name: str, replication: Replication, offset_ms: float = 0.0) -> None:
        self.name, self.replication, self.offset_ms = name, replication, offset_ms
        self.items: dict[int, dict[str, Any]] = {}

    def tail(self) -> LogItem | None:
        return LogItem.from_item(self.items[max(self.items)]) if self.items else None

    def put(self, put: Put | None, now_ms: float) -> bool:
        """A put with ``attribute_not_exists(sk)``: whether it was stored."""
        assert put is not None
        if put.item.b in self.items:
            return False
        image = put.item.to_item()
        self.items[put.item.b] = image
        self.replication.written(self.name, ("messages", (image["pk"], image["sk"])), image, now_ms,
                                 now_ms + self.offset_ms)
        return True

    def seqs(self) -> set[int]:
        """What the checkers' reader (``harness.message_log``) reads as stored, in key order."""
        found = [decode(self.items[sk]) for sk in sorted(self.items)]
        return {m.seq for m in messages(found) if m.seq is not None}


def _take(region: _Region, writer: LogWriter, now_ms: float) -> None:
    assert region.put(writer.on_tail(region.tail(), int(now_ms)), now_ms)
    writer.on_stored()


def _store(region: _Region, writer: LogWriter, seqs: range, now_ms: float, acknowledged: set[int]) -> None:
    assert region.put(writer.batch([Message(s, s, f"s:{s}") for s in seqs], int(now_ms)), now_ms)
    writer.on_stored()
    acknowledged |= set(seqs)


def _activated_unreplicated(east_tag: int, west_tag: int) -> tuple[set[int], set[int], set[int], int]:
    """Seed 93 of ``region-batch`` (gate), literally: east stores batches 1..12, which reach west; replication
    pauses; east stores (and acknowledges) batches 13 and 14; the failover activates west unreplicated; west's
    new owner (its clock 339 ms behind) reads its own tail, marks its take-up and stores from seq 25; then
    replication resumes.  Returns what was acknowledged, what each region's log holds at the end, and the
    conflicts replication counted."""
    replication = Replication((A, B), LagModel(100))
    east, west = _Region(A, replication), _Region(B, replication, offset_ms=-339)
    acknowledged: set[int] = set()
    old = LogWriter("CONN#gate-93-c000", Writer("east-1", "g1", 3, 1), region_tag=east_tag)
    _take(east, old, 0)
    for b in range(12):
        _store(east, old, range(2 * b + 1, 2 * b + 3), 100 + b * 100, acknowledged)
    for delivery in replication.due(5_000):
        west.items[delivery.version.item[1][1]] = dict(delivery.version.image or {})
    replication.paused = True
    _store(east, old, range(25, 27), 9_900, acknowledged)
    _store(east, old, range(27, 29), 10_000, acknowledged)
    new = LogWriter("CONN#gate-93-c000", Writer("west-1", "g1", 3, 1), checkpoint=24, region_tag=west_tag)
    _take(west, new, 10_100)
    _store(west, new, range(25, 41), 10_200, acknowledged)
    replication.paused = False
    for delivery in replication.due(60_000):
        (east if delivery.region == A else west).items[delivery.version.item[1][1]] = dict(
            delivery.version.image or {})
    return acknowledged, east.seqs(), west.seqs(), replication.conflicts


def test_an_activation_before_replication_caught_up_loses_nothing_acknowledged_in_either_region() -> None:
    """Each region numbers the stream's log in its own segment (``fleet.batch_log``): west's take-up opens a
    new segment after east's, east's late batches keep theirs, no key is written in both regions, and every
    sequence either region acknowledged is in both regions' logs once replication caught up (25..28 twice,
    once per region)."""
    acknowledged, in_east, in_west, conflicts = _activated_unreplicated(segment_tag(A), segment_tag(B))
    assert acknowledged == set(range(1, 41))
    assert in_east == in_west == acknowledged
    assert conflicts == 0


def test_one_number_space_for_both_regions_loses_acknowledged_sequences_to_last_writer_wins() -> None:
    """Before segments (one number space, tag 0 in both regions): west's mark and batch take numbers 13 and 14,
    which east's unreplicated batches hold; last writer wins on the regions' clocks, east's batch 14 (stamped
    later than west's by the skew) replaces west's, and seqs 29..40, which west acknowledged, are in neither
    region's log."""
    acknowledged, in_east, in_west, conflicts = _activated_unreplicated(0, 0)
    assert acknowledged - in_east == acknowledged - in_west == set(range(29, 41))
    assert conflicts == 2
