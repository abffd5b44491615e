"""Tests of harness.region.schedules: the generator is a function of its seed, covers every region fault in
five consecutive seeds with worker faults and skew among them, refuses a bad count; the summary totals each
variant's findings."""

from __future__ import annotations

import pytest

from harness.region.schedules import (
    ACTIVATION_WAIT_S,
    ANSWER_MOVERS,
    BOTH_UNHEALTHY_WITH,
    FLAP_MIN_S,
    FORCED_FAILBACK_S,
    LEASE_S,
    PAST_WAIT,
    PAUSED_WITH,
    REGION_FAULTS,
    REPLICATION_WAIT_S,
    STANDBY_STORE_FAULTS,
    WITHIN_WAIT,
    generate,
    summary,
)


def test_the_same_seed_gives_the_same_schedules_and_another_seed_others() -> None:
    assert generate(7, 5) == generate(7, 5)
    assert generate(7, 5) != generate(8, 5)


def test_every_region_fault_comes_within_five_seeds_with_worker_faults_and_skew_among_them() -> None:
    schedules = generate(100, 20)
    kinds = [step.kind for schedule in schedules for step in schedule.steps]
    assert set(REGION_FAULTS) <= set(kinds) and "worker_pause" in kinds and "start" in kinds
    assert any(schedule.clock_offsets_ms for schedule in schedules)
    assert all([step.at_s for step in s.steps] == sorted(step.at_s for step in s.steps) for s in schedules)
    flapping = [step for s in schedules for step in s.steps if step.kind == "flapping"]
    assert flapping and all(step.flaps >= 2 and step.period_s >= FLAP_MIN_S for step in flapping)


def test_a_start_is_aimed_at_every_failover_and_the_standby_fails_too_inside_half_the_primarys_faults() -> None:
    """What drawn times never reached: every fault that can move the answer (not a replication pause nor a
    DynamoDB outage: the health check reads no table) has one START aimed at its
    failover window (armed at the fault's start, sent at the latest a check's turn after its end); about half
    of the faults that keep the primary unhealthy throughout have the standby unreachable for Route 53 from
    inside the fault, for longer than its check takes to turn, so both checks fail at once."""
    schedules = generate(1, 100)
    both = faulted = 0
    for schedule in schedules:
        fault, *rest = [s for s in schedule.steps if s.kind in REGION_FAULTS and s.target != "west" and not s.when]
        assert rest == []
        aimed = [s for s in schedule.steps if s.when and s.kind == "start"]
        if fault.kind not in ANSWER_MOVERS:
            assert aimed == [] and fault.kind in ("replication_pause", "dynamodb_outage")
            continue
        end_s = max(fault.duration_s, 2 * fault.flaps * fault.period_s)
        assert [(s.kind, s.when, s.at_s, s.duration_s) for s in aimed] == [
            ("start", "failover", fault.at_s, end_s + FLAP_MIN_S)]
        faulted += fault.kind in BOTH_UNHEALTHY_WITH
        standby = [s for s in schedule.steps if s.target == "west" and s.kind == "gray_failure"]
        if standby:
            assert fault.kind in BOTH_UNHEALTHY_WITH
            assert [s.kind for s in standby] == ["gray_failure"]
            assert fault.at_s <= standby[0].at_s <= fault.at_s + fault.duration_s / 2
            assert standby[0].duration_s > FLAP_MIN_S
            both += 1
    assert 0.3 * faulted <= both <= 0.7 * faulted


def test_aiming_leaves_the_rest_of_a_seeds_schedule_as_it_was() -> None:
    """The aimed steps are drawn last: without them, seed 1's schedule is the one the batches ran before."""
    (schedule,) = generate(1, 1)
    assert [(s.kind, s.target, round(s.at_s, 2), round(s.duration_s, 2)) for s in schedule.steps if not (
        s.when or (s.target == "west" and s.kind in REGION_FAULTS))] == [
        ("region_cut", "east", 2.69, 56.95), ("worker_pause", "east-worker-2", 28.16, 31.63),
        ("start", "router", 46.18, 0.0)]


def test_the_standbys_store_goes_out_in_half_the_failovers_from_its_activation_wait_past_the_primarys_fault() -> None:
    """What only unit tests reached: the standby's store out (west cut off or its DynamoDB out) during the
    failover's activation wait or after the standby became active, and still out once the primary's fault
    ended and its check passes again, so the failover gives up or the automation fails back at once.  Drawn
    after every other step: seed 8's schedule without it is the one it was, its other aimed steps included."""
    schedules = generate(1, 100)
    out = moving = 0
    for schedule in schedules:
        fault = next(s for s in schedule.steps if s.kind in REGION_FAULTS and s.target != "west")
        standby = [s for s in schedule.steps if s.target == "west" and s.kind in STANDBY_STORE_FAULTS]
        if fault.kind not in ANSWER_MOVERS:
            assert standby == []
            continue
        moving += 1
        if not standby:
            continue
        (step,) = standby
        end_s = fault.at_s + max(fault.duration_s, 2 * fault.flaps * fault.period_s)
        assert fault.at_s + FLAP_MIN_S <= step.at_s <= fault.at_s + FLAP_MIN_S + 2 * LEASE_S
        assert end_s + FORCED_FAILBACK_S < step.at_s + step.duration_s <= end_s + FORCED_FAILBACK_S + LEASE_S
        out += 1
    kinds = {s.kind for schedule in schedules for s in schedule.steps if s.target == "west"}
    assert set(STANDBY_STORE_FAULTS) <= kinds
    assert 0.3 * moving <= out <= 0.7 * moving
    (seed_8,) = generate(8, 1)
    assert [(s.kind, s.target, round(s.at_s, 2), round(s.duration_s, 2)) for s in seed_8.steps] == [
        ("gray_failure", "east", 4.53, 59.25), ("start", "router", 4.53, 89.25), ("start", "router", 12.02, 0.0),
        ("gray_failure", "west", 29.14, 36.34), ("worker_pause", "east-worker-2", 29.28, 27.47),
        ("dynamodb_outage", "west", 35.33, 87.45), ("worker_pause", "east-worker-1", 51.74, 9.79)]
    assert seed_8.clock_offsets_ms == {"west": -5.0}


def test_half_the_failovers_whose_primarys_store_answers_pause_replication_into_their_wait_within_or_past_it() -> None:
    """The replication wait and ``failover.unreplicated`` in generated runs: about half of the gray failures
    and flapping checks (the primary's DynamoDB answers) pause Global Tables from the failover's start for
    the activation wait (20 s at scale 1, as deployed) and then part of the replication wait's bound (2 x the
    lag's p99, 6 s): a tenth to a half of it (the wait ends with the pause) or 1.5 to 3 bounds (it
    activates at its bound).  Both kinds are among the 100 schedules the quiet batch runs (seed 1)."""
    assert (ACTIVATION_WAIT_S, REPLICATION_WAIT_S) == (20.0, 6.0)
    within = past = eligible = 0
    for schedule in generate(1, 100):
        fault = next(s for s in schedule.steps if s.kind in REGION_FAULTS and s.target != "west" and not s.when)
        pauses = [s for s in schedule.steps if s.kind == "replication_pause" and s.when]
        eligible += fault.kind in PAUSED_WITH
        if not pauses:
            continue
        (pause,) = pauses
        assert fault.kind in PAUSED_WITH
        assert (pause.target, pause.when, pause.at_s) == ("global-tables", "failover", fault.at_s)
        share = (pause.duration_s - ACTIVATION_WAIT_S) / REPLICATION_WAIT_S
        assert WITHIN_WAIT[0] <= share <= WITHIN_WAIT[1] or PAST_WAIT[0] <= share <= PAST_WAIT[1]
        within += share < 1
        past += share > 1
    assert (within, past) == (8, 8)
    assert 0.3 * eligible <= within + past <= 0.7 * eligible


def test_the_pause_is_drawn_from_its_own_stream_so_a_seeds_other_steps_are_as_they_were() -> None:
    """Seed 3 (a gray failure) has the pause; every other step is the one the batches ran before it."""
    (schedule,) = generate(3, 1)
    assert [(s.kind, s.target, round(s.at_s, 2), round(s.duration_s, 2), s.when) for s in schedule.steps] == [
        ("gray_failure", "east", 4.76, 50.88, ""), ("start", "router", 4.76, 80.88, "failover"),
        ("replication_pause", "global-tables", 4.76, 21.98, "failover"),
        ("worker_pause", "west-worker-2", 10.67, 24.28, ""), ("start", "router", 23.58, 0.0, ""),
        ("worker_pause", "west-worker-1", 50.57, 26.2, "")]


def test_a_bad_count_is_refused() -> None:
    with pytest.raises(ValueError, match="count"):
        generate(1, 0)


def test_the_summary_totals_each_variants_findings_counts_unjudged_runs_and_what_the_runs_reached() -> None:
    clean = {"both_on": 0, "early_failbacks": 0, "activated_unhealthy": 0, "flapping": 0, "missing_writes": 0}
    results = [
        {"variant": "gate", "split_brain": {"streams": 0}, "lost_messages": 0, "lost_control_writes": 1,
         "activation": clean, "reached": ["failover", "fault:region_cut"], "wall_s": 20.0, "cpu_s": 8.0,
         "activation_gaps": {"activations": 2, "findings": 0, "answering": {"liveness": 3},
                             "unreplicated": {"log": 1}, "other_out": {"log": 2, "liveness": 1}},
         "control_at_cut": {"taken_over": True, "starts": 1, "stops": 1, "beyond_lag": 1, "reverted_at_end": 0,
                            "bound_ms": 300.0}},
        {"variant": "gate", "error": "not within 34 s: the standby consumes every stream", "wall_s": 40.0,
         "cpu_s": 10.0},
        {"variant": "no-gate", "split_brain": {"streams": 4}, "lost_messages": 2, "lost_control_writes": 0,
         "activation": {**clean, "both_on": 1, "missing_writes": 1}, "reached": ["fault:region_cut"],
         "wall_s": 25.0, "cpu_s": 9.0,
         "activation_gaps": {"activations": 1, "findings": 1, "answering": {"log": 4}, "other_out": {}},
         "control_at_cut": {"taken_over": False, "reverted_at_end": 1, "bound_ms": 0.0}},
    ]
    assert summary(results) == {
        "gate": {"runs": 2, "split_brain_runs": 0, "split_brain_streams": 0, "lost_messages": 0,
                 "lost_control_writes": 1, "activation_findings": 0, "unjudged": 1, "control_missing_at_cut": 2,
                 "control_beyond_lag": 1, "control_reverted_at_end": 0,
                 "missing_at_activation": {"answering": {"liveness": 3}, "unreplicated": {"log": 1},
                                           "other_out": {"log": 2, "liveness": 1}},
                 "reached": {"failover": 1, "fault:region_cut": 1}, "wall_s": 30.0, "cpu_s": 9.0},
        "no-gate": {"runs": 1, "split_brain_runs": 1, "split_brain_streams": 4, "lost_messages": 2,
                    "lost_control_writes": 0, "activation_findings": 2, "unjudged": 0, "control_missing_at_cut": 0,
                    "control_beyond_lag": 0, "control_reverted_at_end": 1,
                    "missing_at_activation": {"answering": {"log": 4}, "unreplicated": {}, "other_out": {}},
                    "reached": {"fault:region_cut": 1}, "wall_s": 25.0, "cpu_s": 9.0}}
