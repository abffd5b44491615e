"""I4 bounded recovery over the recovery phases."""

from __future__ import annotations

from harness.checkers.bounds import check_bounds

PK = "CONN#a"


def crash(build, bound_ms, claim_t: float = 3000):
    """worker-1 killed at 1000; worker-2 claims at ``claim_t``, connects 100 ms later and persists seq 1
    (the only seq emitted) 100 ms after that: recovery = claim_t + 200 - 1000."""
    build.run_start(bound_ms=bound_ms).emit(PK, 1, 500).session(PK, "worker-1", 100, 1005)
    build.fault(1000, "kill", "worker-1").acquire(claim_t, PK, "worker-2", claim_t + 2000, epoch=2)
    build.session(PK, "worker-2", claim_t + 100).persist(claim_t + 200, PK, "worker-2", 1)
    return build.at(20000, "run.stop", "harness")


def test_recovery_within_the_bound_is_valid(build) -> None:
    result = check_bounds(crash(build, bound_ms=2500).frame())

    assert result.valid is True
    assert (result.details["applies"], result.details["judged"], result.details["max_recovery_ms"]) == (
        True, 1, 2200)


def test_recovery_past_the_bound_is_invalid(build) -> None:
    result = check_bounds(crash(build, bound_ms=2000).frame())

    assert result.valid is False
    assert result.details["exceeded"] == 1
    assert result.details["exceeded_examples"][0]["recovery_ms"] == 2200


def test_a_connection_that_never_recovers_exceeds_the_bound(build) -> None:
    build.run_start(bound_ms=60000).emit(PK, 1, 500).session(PK, "worker-1", 100, 1005)
    build.fault(1000, "kill", "worker-1").at(20000, "run.stop", "harness")

    result = check_bounds(build.frame())

    assert result.valid is False and result.details["unrecovered"] == 1


def test_bounds_per_fault_kind(build) -> None:
    assert check_bounds(crash(build, bound_ms={"kill": 2000, "pause": 99999}).frame()).valid is False


def test_a_run_without_a_bound_fails(build) -> None:
    result = check_bounds(crash(build, bound_ms=None, claim_t=90000).frame())

    assert result.valid is False
    assert (result.details["applies"], result.details["judged"]) == (False, 0)
    assert result.details["message"] == "no bound set for this scenario"


def test_a_run_without_faults_still_needs_a_bound(build) -> None:
    build.run_start(bound_ms=None).at(20000, "run.stop", "harness")

    assert check_bounds(build.frame()).valid is False


def test_a_fault_kind_missing_from_the_bounds_fails(build) -> None:
    result = check_bounds(crash(build, bound_ms={"pause": 99999}).frame())

    assert result.valid is False and result.details["message"] == "no bound set for fault kind kill"
