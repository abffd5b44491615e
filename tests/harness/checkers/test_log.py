"""The log checkers (I6 and I2/I3 on the fenced batch log), from literal stored logs: each rule shown able to
fail, supersession dated at every handover, and the verdict judging a log only where the store is one."""

from __future__ import annotations

import pytest

from fleet.batch_log import log_key, segment_tag
from harness.checkers import analyse
from harness.checkers.log import check_log, parse_ranges
from harness.checkers.zombies import check_zombie_writes

PK = "CONN#a"
# (batch, kind, worker, gen, epoch, seq_from, seq_to, written_ms)
W1_MARK = (1, "mark", "worker-1", "g1", 1, 1, 0, 10)
W1_BATCH = (2, "batch", "worker-1", "g1", 1, 1, 3, 3150)  # landed after worker-2's acquire, before its mark
W2_MARK = (3, "mark", "worker-2", "g2", 2, 4, 3, 3200)
W2_BATCH = (4, "batch", "worker-2", "g2", 2, 4, 6, 3300)


def takeover(build):
    """worker-1 (g1) acquires epoch 1 at 0; worker-2 (g2) acquires epoch 2 at 3000; seqs 1..6 emitted."""
    build.run_start(profile="hardened").at(0, "conn.started", "harness", pk=PK)
    build.acquire(0, PK, "worker-1", 2000, epoch=1, gen="g1").acquire(3000, PK, "worker-2", 5000, epoch=2, gen="g2")
    for seq in range(1, 7):
        build.emit(PK, seq, seq * 400)
    return build


def rules(result) -> dict[str, int]:
    return {rule: n for rule, n in result.details["by_rule"].items() if n}


def test_a_takeover_marked_in_the_log_is_clean_even_where_the_old_holder_landed_late(build) -> None:
    takeover(build).log(9000, PK, W1_MARK, W1_BATCH, W2_MARK, W2_BATCH)

    result = check_log(build.frame())

    assert result.valid is True
    assert (result.details["logs"], result.details["entries"], result.details["zombie_entries"]) == (1, 4, 0)


def test_an_earlier_holders_batch_after_a_later_holders_mark_is_a_zombie(build) -> None:
    late = (4, "batch", "worker-1", "g1", 1, 4, 4, 3400)
    takeover(build).log(9000, PK, W1_MARK, W1_BATCH, W2_MARK, late, (5, "batch", "worker-2", "g2", 2, 5, 6, 3500))

    result = check_log(build.frame())

    assert result.valid is False
    assert rules(result) == {"after_mark": 1, "epoch_decrease": 1}
    after = next(row for row in result.tables["log"] if row["rule"] == "after_mark")
    assert (after["batch"], after["holder"], after["epoch"], after["superseded_t"]) == (4, "worker-1@g1", 1, 3000)
    assert "after worker-2@g2's takeover mark at batch 3" in after["evidence"]


def test_a_same_epoch_incarnation_after_a_mark_is_another_holder(build) -> None:
    # a re-adoption at the same epoch by another incarnation: worker-1's old incarnation writes after its mark
    readopted = (3, "mark", "worker-1", "g9", 1, 4, 3, 3200)
    old = (4, "batch", "worker-1", "g1", 1, 4, 4, 3300)
    takeover(build).log(9000, PK, W1_MARK, W1_BATCH, readopted, old)

    result = check_log(build.frame())

    assert rules(result) == {"after_mark": 1}


def test_a_readoption_at_the_same_epoch_fences_the_earlier_take(build) -> None:
    # one incarnation takes the stream up twice at epoch 1 (a release whose answer was lost, then adopted):
    # its first take's late batch after the second take's mark is an earlier holder's
    first = (2, "batch", "worker-1", "g1", 1, 1, 3, 900, 1)
    second = (3, "mark", "worker-1", "g1", 1, 4, 3, 1000, 2)
    late = (4, "batch", "worker-1", "g1", 1, 4, 4, 1100, 1)
    takeover(build).log(9000, PK, (1, "mark", "worker-1", "g1", 1, 1, 0, 10, 1), first, second, late)

    result = check_log(build.frame())

    assert rules(result) == {"after_mark": 1}
    assert "worker-1@g1's takeover mark at batch 3" in result.tables["log"][0]["evidence"]


def test_a_later_takes_mark_at_the_same_epoch_dates_the_supersession(build) -> None:
    # the re-adoption moves no epoch, so no handover dates it: the second take's mark (its log.mark ok) does
    first = (2, "batch", "worker-1", "g1", 1, 1, 3, 900, 1)
    second = (3, "mark", "worker-1", "g1", 1, 4, 3, 1000, 2)
    late = (4, "batch", "worker-1", "g1", 1, 4, 4, 1100, 1)
    takeover(build).log(9000, PK, (1, "mark", "worker-1", "g1", 1, 1, 0, 10, 1), first, second, late)
    for t, take, outcome in ((20, 1, "ok"), (990, 2, "info"), (1010, 2, "ok")):
        build.at(t, "log.mark", "worker-1", pk=PK, worker="worker-1", gen="g1", epoch=1, take=take, b=1,
                 seq=3, outcome=outcome)

    [after] = check_log(build.frame()).tables["log"]

    assert (after["batch"], after["superseded_t"]) == (4, 1010)  # not worker-2's acquire at 3000


def test_a_log_may_start_after_a_checkpoint(build) -> None:
    takeover(build).log(9000, PK, (1, "mark", "worker-2", "g2", 2, 6, 5, 10),
                        (2, "batch", "worker-2", "g2", 2, 6, 7, 20))

    assert check_log(build.frame()).valid is True


def test_supersession_is_dated_at_a_transfer(build) -> None:
    late = (4, "batch", "worker-1", "g1", 1, 4, 4, 3400)
    takeover(build).at(2500, "lease.release", "worker-1", pk=PK, worker="worker-1", gen="g1", epoch=1,
                       outcome="ok", to="worker-2")
    build.log(9000, PK, W1_MARK, W1_BATCH, W2_MARK, late)

    [after] = [row for row in check_log(build.frame()).tables["log"] if row["rule"] == "after_mark"]

    assert after["superseded_t"] == 2500  # the transfer, before worker-2's acquire at 3000


def test_a_burial_dates_the_supersession(build) -> None:
    late = (4, "batch", "worker-1", "g1", 1, 4, 4, 3400)
    takeover(build).at(1500, "death.notice", "worker-2", buried=["worker-1@g1"])
    build.log(9000, PK, W1_MARK, W1_BATCH, W2_MARK, late)

    [after] = [row for row in check_log(build.frame()).tables["log"] if row["rule"] == "after_mark"]

    assert after["superseded_t"] == 1500


def test_a_new_holder_storing_before_its_mark_is_unmarked(build) -> None:
    takeover(build).log(9000, PK, W1_MARK, W1_BATCH, (3, "batch", "worker-2", "g2", 2, 4, 6, 3300))

    result = check_log(build.frame())

    assert rules(result) == {"unmarked": 1}


def test_a_lower_epoch_anywhere_in_the_log_fails(build) -> None:
    takeover(build).log(9000, PK, (1, "batch", "worker-2", "g2", 2, 1, 3, 100),
                        (2, "mark", "worker-3", "g3", 1, 4, 3, 200))

    result = check_log(build.frame())

    assert rules(result) == {"epoch_decrease": 1}


def test_a_mark_not_at_the_tail_and_a_seq_stored_twice_are_named(build) -> None:
    misplaced = (3, "mark", "worker-2", "g2", 2, 3, 2, 3200)
    takeover(build).log(9000, PK, W1_MARK, W1_BATCH, misplaced, (4, "batch", "worker-2", "g2", 2, 3, 6, 3300))

    result = check_log(build.frame())

    assert rules(result) == {"misplaced_mark": 1, "duplicate": 1}
    [duplicate] = [row for row in result.tables["log"] if row["rule"] == "duplicate"]
    assert (duplicate["seq_from"], duplicate["seq_to"]) == (3, 3)
    assert duplicate["evidence"] == "seqs 3..3 are stored by batches 2, 4"


EAST, WEST = segment_tag("us-east-1"), segment_tag("us-west-2")
# East's log (segment 0) up to its late batch, which had not reached west when west took the stream up.
EAST_LOG = ((log_key(0, EAST, 1), "mark", "east-1", "g1", 2, 1, 0, 10),
            (log_key(0, EAST, 2), "batch", "east-1", "g1", 2, 1, 3, 900),
            (log_key(0, EAST, 3), "batch", "east-1", "g1", 2, 4, 5, 2900))


def test_a_region_activated_unreplicated_opens_a_segment_and_its_copies_are_no_finding(build) -> None:
    """West (its lease replica behind: epoch 1) read east's tail at seq 3, marked in its own segment and
    stored 4..6 again: epochs are compared within a segment, the mark may be below the log's tail, and a seq
    stored once per segment is counted apart, not a duplicate."""
    west = ((log_key(1, WEST, 1), "mark", "west-1", "g1", 1, 4, 3, 3200),
            (log_key(1, WEST, 2), "batch", "west-1", "g1", 1, 4, 6, 3300))
    takeover(build).log(9000, PK, *EAST_LOG, *west)

    result = check_log(build.frame())

    assert result.valid is True, result.details["examples"]
    assert result.details["across_segments"] == 2


@pytest.mark.parametrize(("west", "found"), [
    ([(log_key(1, WEST, 1), "batch", "west-1", "g1", 1, 6, 6, 3300)], {"unmarked": 1}),
    ([(log_key(1, WEST, 1), "mark", "west-1", "g1", 1, 7, 6, 3200)], {"misplaced_mark": 1}),
    ([(log_key(1, WEST, 2), "mark", "west-1", "g1", 1, 6, 5, 3200)], {"hole": 1}),
    ([(log_key(1, WEST, 1), "mark", "west-1", "g1", 3, 6, 5, 3200),
      (log_key(1, WEST, 2), "batch", "west-1", "g1", 1, 6, 6, 3300)], {"epoch_decrease": 1, "after_mark": 1}),
    ([(log_key(1, WEST, 1), "mark", "west-1", "g1", 1, 6, 5, 3200),
      (log_key(1, WEST, 2), "batch", "west-1", "g1", 1, 6, 7, 3300),
      (log_key(1, WEST, 3), "batch", "west-1", "g1", 1, 7, 7, 3400)], {"duplicate": 1}),
])
def test_each_segment_keeps_the_logs_rules(build, west: list[tuple[object, ...]], found: dict[str, int]) -> None:
    """A segment opened by a batch, a segment's mark above the log's tail (seqs skipped), a segment not
    starting at 1, an epoch going down within a segment, a seq stored twice within one: each a finding."""
    takeover(build).log(9000, PK, *EAST_LOG, *west)

    assert rules(check_log(build.frame())) == found


def test_a_missing_batch_number_is_a_hole(build) -> None:
    takeover(build).log(9000, PK, W1_MARK, W1_BATCH, (4, "mark", "worker-2", "g2", 2, 4, 3, 3200))

    assert rules(check_log(build.frame())) == {"hole": 1}


def test_a_lost_range_is_placed_in_the_log(build) -> None:
    takeover(build).log(9000, PK, W1_MARK, (2, "batch", "worker-1", "g1", 1, 1, 2, 900), W2_MARK)

    result = check_log(build.frame(), {PK: [(3, 3), (4, 6)]})

    gaps = [row["evidence"] for row in result.tables["log"] if row["rule"] == "gap"]
    assert gaps == ["seqs 3..3, emitted while STARTED, are not stored: after batch 2 (the log's tail)",
                    "seqs 4..6, emitted while STARTED, are not stored: after batch 2 (the log's tail)"]


def test_an_unreadable_item_fails(build) -> None:
    takeover(build).at(9000, "final.persisted", "harness", pk=PK, seqs=[], items=[],
                       unreadable=[{"sk": 7, "problem": "a batch without a whole-number epoch"}])

    result = check_log(build.frame())

    assert rules(result) == {"unreadable": 1} and result.valid is False


@pytest.mark.parametrize(("text", "ranges"), [("", []), ("3", [(3, 3)]), ("3-5,9", [(3, 5), (9, 9)])])
def test_parse_ranges(text: str, ranges: list[tuple[int, int]]) -> None:
    assert parse_ranges(text) == ranges


def stored_run(build, *entries):
    """The takeover, run to its end: the log, what it stores, and run.stop."""
    takeover(build).at(8000, "run.stop", "harness", settled_t=8000)
    seqs = [s for e in entries if e[1] == "batch" for s in range(e[5], e[6] + 1)]
    items = [(s, e[2], e[3], e[4], e[7]) for e in entries if e[1] == "batch" for s in range(e[5], e[6] + 1)]
    return build.stored(9000, PK, *items).log(9000, PK, *entries) if seqs else build.log(9000, PK, *entries)


def test_the_verdict_judges_the_log_where_the_store_is_one(build) -> None:
    clean = analyse(stored_run(build, W1_MARK, W1_BATCH, W2_MARK, W2_BATCH).frame())

    assert clean.checks["log"].valid is True
    assert clean.verdict["checkers"]["zombie_writes"]["valid"] is True  # worker-1's late batch is the log's
    assert clean.verdict["zombie_writes"] == 0


def test_the_verdict_counts_the_logs_zombies_and_gaps(build) -> None:
    late = (4, "batch", "worker-1", "g1", 1, 4, 4, 3400)
    verdict = analyse(stored_run(build, W1_MARK, W1_BATCH, W2_MARK, late).frame()).verdict

    assert verdict["valid"] is False
    assert verdict["zombie_writes"] == 1  # batch 4, found by after_mark and epoch_decrease
    by_rule = verdict["checkers"]["log"]["by_rule"]
    assert (by_rule["after_mark"], by_rule["gap"]) == (1, 1)  # 5..6 never stored


def test_a_run_without_a_log_has_no_log_checker(build) -> None:
    takeover(build).at(8000, "run.stop", "harness").stored(9000, PK, (1, "worker-1", "g1", 1, 100))

    assert "log" not in analyse(build.frame()).checks


def test_an_unreadable_item_fails_a_run_without_a_log(build) -> None:
    takeover(build).at(8000, "run.stop", "harness").at(9000, "final.persisted", "harness", pk=PK, seqs=[1],
                                                        items=[], unreadable=[{"sk": 5, "problem": "no seq"}])

    analysis = analyse(build.frame())

    assert analysis.checks["log"].valid is False and analysis.verdict["valid"] is False


def test_without_the_log_the_old_holders_late_batch_would_be_a_zombie_item(build) -> None:
    # the same stored items judged item by item (no final.log): the late landing is a late send
    stored_run(build, W1_MARK, W1_BATCH, W2_MARK, W2_BATCH)

    assert check_zombie_writes(build.frame()).details["by_rule"]["late_send"] == 3
    assert check_zombie_writes(build.frame(), logged={PK}).valid is True
