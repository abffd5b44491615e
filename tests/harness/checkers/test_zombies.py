"""I6 zombie writes: judged from the stored items and the history, each rule shown able to fail."""

from __future__ import annotations

import pytest

from harness.checkers.result import UNKNOWN
from harness.checkers.zombies import check_zombie_writes, late_landings

PK = "CONN#a"


def takeover(build, **start_fields):
    """worker-1 (gen g1) holds epoch 1 from 0; worker-2 (gen g2) acquires epoch 2 at 3000."""
    build.run_start(profile="hardened", **start_fields)
    build.acquire(0, PK, "worker-1", 2000, epoch=1, gen="g1").acquire(3000, PK, "worker-2", 5000, epoch=2, gen="g2")
    return build


def test_a_clean_handover_stores_no_zombie(build) -> None:
    takeover(build).persist(1000, PK, "worker-1", 1, 3, epoch=1, gen="g1", sent=990)
    build.persist(3500, PK, "worker-2", 4, 6, epoch=2, gen="g2", sent=3490)
    build.stored(9000, PK, *[(s, "worker-1", "g1", 1, 990) for s in (1, 2, 3)],
                 *[(s, "worker-2", "g2", 2, 3490) for s in (4, 5, 6)])

    result = check_zombie_writes(build.frame())

    assert result.valid is True
    assert (result.details["zombie_writes"], result.details["judged_items"]) == (0, 6)


def test_an_old_epoch_item_stored_over_a_newer_owners_write_is_a_zombie(build) -> None:
    # worker-1's write of seq 5, built at 2900 (before the takeover), landed after worker-2's ok write of seq 5
    takeover(build).persist(3500, PK, "worker-2", 4, 6, epoch=2, gen="g2", sent=3490)
    build.persist(6000, PK, "worker-1", 5, 5, epoch=1, gen="g1", sent=2900)
    build.stored(9000, PK, (4, "worker-2", "g2", 2, 3490), (5, "worker-1", "g1", 1, 2900),
                 (6, "worker-2", "g2", 2, 3490))

    result = check_zombie_writes(build.frame())

    assert result.valid is False
    assert result.details["zombie_writes"] == 1 and result.details["by_rule"]["overwrite"] == 1
    [row] = result.tables["zombie_writes"]
    assert (row["seq_from"], row["writer"], row["epoch"], row["rule"], row["superseded_t"]) == (
        5, "worker-1@g1", 1, "overwrite", 3490)
    [landing] = late_landings(build.frame()).to_dict("records")
    assert (landing["seq"], landing["consumer"], landing["landed_after"]) == (5, "worker-1@g1", 3490)


def test_an_item_built_after_the_supersession_is_a_zombie(build) -> None:
    takeover(build).stored(9000, PK, (7, "worker-1", "g1", 1, 3000 + 150))  # tolerance 100 ms

    result = check_zombie_writes(build.frame())

    assert result.valid is False and result.details["by_rule"]["late_send"] == 1
    assert result.tables["zombie_writes"][0]["superseded_t"] == 3000


def test_an_item_built_within_the_clock_tolerance_is_not_a_zombie(build) -> None:
    takeover(build).stored(9000, PK, (7, "worker-1", "g1", 1, 3000 + 50))

    assert check_zombie_writes(build.frame()).valid is True


def test_an_acknowledged_write_sent_after_the_supersession_is_a_zombie_even_if_overwritten(build) -> None:
    takeover(build).persist(4000, PK, "worker-1", 9, 9, epoch=1, gen="g1", sent=3200)
    build.stored(9000, PK, (9, "worker-2", "g2", 2, 3600))

    result = check_zombie_writes(build.frame())

    assert result.valid is False and result.tables["zombie_writes"][0]["kind"] == "message"


def test_a_write_with_unknown_outcome_sent_after_the_supersession_is_possible(build) -> None:
    takeover(build).persist(4000, PK, "worker-1", 9, 9, epoch=1, gen="g1", sent=3200, outcome="info")

    result = check_zombie_writes(build.frame())

    assert result.valid == UNKNOWN and result.details["possible"] == 1


def test_an_item_under_an_epoch_granted_to_another_incarnation_is_a_zombie(build) -> None:
    # worker-2's old incarnation g0 writes under epoch 2, which went to incarnation g2
    takeover(build).stored(9000, PK, (4, "worker-2", "g0", 2, 3500))

    result = check_zombie_writes(build.frame())

    assert result.valid is False and result.details["by_rule"]["foreign_epoch"] == 1


def test_an_epoch_nobody_was_seen_granted_is_counted_not_failed(build) -> None:
    takeover(build).stored(9000, PK, (4, "worker-3", "g3", 7, None))

    result = check_zombie_writes(build.frame())

    assert result.valid is True and result.details["unexplained_epochs"] == 1


def test_a_checkpoint_overwriting_a_newer_owners_checkpoint_is_a_zombie(build) -> None:
    takeover(build).at(3600, "checkpoint", "worker-2", pk=PK, worker="worker-2", gen="g2", epoch=2, seq=6,
                       outcome="ok", sent=3590)
    connection = {"desired_state": "STARTED", "lease_owner": "worker-2", "owner_gen": "g2", "epoch": 2}
    build.at(9000, "final.connection", "harness", pk=PK, **connection, last_seq=3, ckpt_worker="worker-1",
             ckpt_gen="g1", ckpt_epoch=1)

    result = check_zombie_writes(build.frame())

    assert result.valid is False
    assert result.details["by_rule"]["checkpoint_overwrite"] == 1
    assert result.tables["zombie_writes"][0]["kind"] == "checkpoint"


def test_the_newest_owners_checkpoint_is_fine(build) -> None:
    takeover(build).at(3600, "checkpoint", "worker-2", pk=PK, worker="worker-2", gen="g2", epoch=2, seq=6,
                       outcome="ok", sent=3590)
    build.at(9000, "final.connection", "harness", pk=PK, desired_state="STARTED", lease_owner="worker-2",
             owner_gen="g2", epoch=2, last_seq=6, ckpt_worker="worker-2", ckpt_gen="g2", ckpt_epoch=2)

    assert check_zombie_writes(build.frame()).valid is True


@pytest.mark.parametrize("handover", ["acquire", "burial"])
def test_without_epochs_a_write_after_the_writers_ownership_ended_is_a_zombie(build, handover: str) -> None:
    # blog: no epochs; worker-1's lease was taken by worker-2 at 3000, or (hardened without epochs) worker-1 was
    # buried by a death notice then; worker-1 writes at 3500
    build.run_start().acquire(0, PK, "worker-1", 2000, epoch=None)
    if handover == "acquire":
        build.acquire(3000, PK, "worker-2", 5000, epoch=None)
    else:
        build.at(3000, "death.notice", "worker-2", worker="worker-2", task="arn:task/1", outcome="confirmed",
                 buried=["worker-1"], reason="forged")
    build.persist(3600, PK, "worker-1", 5, epoch=None, sent=3500).persist(2600, PK, "worker-1", 4, epoch=None,
                                                                           sent=2500)

    result = check_zombie_writes(build.frame())

    assert result.valid is False
    assert [row["seq_from"] for row in result.tables["zombie_writes"]] == [5]


def test_an_old_history_without_items_or_grants_has_nothing_to_judge(build) -> None:
    build.run_start().session(PK, "worker-1", 100, 1000).persist(500, PK, "worker-1", 1)
    build.at(9000, "final.persisted", "harness", pk=PK, seqs=[1])

    result = check_zombie_writes(build.frame())

    assert result.valid is True and result.details["judged_items"] == 0


def test_epochs_granted_to_several_consumers_do_not_fence(build) -> None:
    # blog logs epoch 0 for every acquire: judged by consumers, so worker-1's write after worker-2's acquire
    # is a zombie although no higher epoch was ever granted
    build.run_start().acquire(0, PK, "worker-1", 2000, epoch=0).acquire(3000, PK, "worker-2", 5000, epoch=0)
    build.persist(3600, PK, "worker-1", 5, epoch=0, sent=3500).persist(2600, PK, "worker-1", 4, epoch=0, sent=2500)

    result = check_zombie_writes(build.frame())

    assert result.valid is False
    assert [row["seq_from"] for row in result.tables["zombie_writes"]] == [5]


def test_items_without_a_writer_are_judged_by_epoch_alone(build) -> None:
    # the final scan of a fleet that stores no writer: no foreign-epoch or interleaving judgement, but an
    # epoch-1 item built after epoch 2 was granted is still a zombie
    takeover(build).stored(9000, PK, (4, None, None, 2, 3500), (5, None, None, 1, 3300))

    result = check_zombie_writes(build.frame())

    assert result.valid is False
    assert [(row["seq_from"], row["rule"]) for row in result.tables["zombie_writes"]] == [(5, "late_send")]
    assert late_landings(build.frame()).empty


def test_epochs_that_go_down_do_not_fence(build) -> None:
    # epoch 5, then epoch 1 granted later (epochs reset): epoch 1's write after the epoch-5 grant is no zombie
    build.run_start().acquire(0, PK, "worker-1", 2000, epoch=5).acquire(3000, PK, "worker-2", 5000, epoch=1)
    build.persist(3600, PK, "worker-2", 5, epoch=1, sent=3500)

    assert check_zombie_writes(build.frame()).valid is True


def transfer(build):
    """worker-1 (g1) holds epoch 1 from 0 and hands it to worker-4 at 2000 (a balance transfer: the release
    itself names the recipient at epoch 2); worker-4 (g4) takes it up at 2600."""
    build.run_start(profile="hardened").acquire(0, PK, "worker-1", 2000, epoch=1, gen="g1")
    build.at(2000, "lease.release", "worker-1", pk=PK, worker="worker-1", gen="g1", epoch=1, outcome="ok",
             reason="rebalance", to="worker-4")
    return build.acquire(2600, PK, "worker-4", 4600, epoch=2, gen="g4", via="balance")


def test_a_write_sent_after_its_lease_was_transferred_is_a_zombie(build) -> None:
    # sent at 2300: after the transfer (2000), before the recipient's take-up (2600)
    transfer(build).persist(2400, PK, "worker-1", 9, 9, epoch=1, gen="g1", sent=2300)

    result = check_zombie_writes(build.frame())

    assert result.valid is False and result.details["by_rule"]["late_send"] == 1
    assert result.tables["zombie_writes"][0]["superseded_t"] == 2000


def test_a_write_sent_before_the_transfer_is_no_zombie(build) -> None:
    transfer(build).persist(2100, PK, "worker-1", 9, 9, epoch=1, gen="g1", sent=1900)

    assert check_zombie_writes(build.frame()).valid is True


def burial(build):
    """worker-1 (g1) holds epoch 1 from 0; a death notice buries worker-1@g1 at 1500; worker-2 (g2) acquires
    epoch 2 at 2500."""
    build.run_start(profile="hardened").acquire(0, PK, "worker-1", 2000, epoch=1, gen="g1")
    build.at(1500, "death.notice", "worker-2", worker="worker-2", gen="g2", task="arn:task/1", outcome="confirmed",
             buried=["worker-1@g1"], reason="forged")
    return build.acquire(2500, PK, "worker-2", 4500, epoch=2, gen="g2")


def test_a_write_sent_after_its_writer_was_buried_is_a_zombie(build) -> None:
    burial(build).stored(9000, PK, (7, "worker-1", "g1", 1, 1800))  # built at 1800 > 1500 + tolerance 100

    result = check_zombie_writes(build.frame())

    assert result.valid is False and result.details["by_rule"]["late_send"] == 1
    assert result.tables["zombie_writes"][0]["superseded_t"] == 1500


def test_a_burial_of_another_incarnation_supersedes_nothing(build) -> None:
    burial(build)
    build.acquire(1000, "CONN#b", "worker-3", 3000, epoch=1, gen="g3")
    build.stored(9000, "CONN#b", (7, "worker-3", "g3", 1, 1800))
    build.stored(9001, PK, (7, "worker-1", "g1", 1, 1450))

    assert check_zombie_writes(build.frame()).valid is True


def test_a_newer_write_answered_after_the_final_scan_began_is_no_evidence_of_an_overwrite(build) -> None:
    # moto-overwrite (issue 27): the scan began at run.stop (8000) and found worker-1's epoch-1 items; worker-2
    # then took over (epoch 3, during the scan) and rewrote seqs 1-3 from its checkpoint with outcome ok
    takeover(build).acquire(8500, PK, "worker-2", 10500, epoch=3, gen="g3")
    build.at(8000, "run.stop", "harness", settled_t=8000).stored(8400, PK, *[(s, "worker-1", "g1", 1, 900)
                                                                               for s in (1, 2, 3)])
    build.persist(9600, PK, "worker-2", 1, 3, epoch=3, gen="g3", sent=9500)

    result = check_zombie_writes(build.frame())

    assert result.valid is True and result.details["by_rule"]["overwrite"] == 0
    assert late_landings(build.frame()).empty


def test_a_newer_write_answered_before_the_final_scan_still_proves_an_overwrite(build) -> None:
    takeover(build).persist(3600, PK, "worker-2", 1, 3, epoch=2, gen="g2", sent=3500)
    build.at(8000, "run.stop", "harness", settled_t=8000).stored(8400, PK, *[(s, "worker-1", "g1", 1, 900)
                                                                               for s in (1, 2, 3)])

    result = check_zombie_writes(build.frame())

    assert result.valid is False and result.details["by_rule"]["overwrite"] == 3
