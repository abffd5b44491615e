"""The new-connection quota under a storm, from hand-made ``handshakes`` windows: a fleet that keeps the
pipe full is valid, one that leaves saturated windows half empty is not, and without a quota nothing is
judged."""

from __future__ import annotations

from harness.checkers.handshakes import check_handshakes

QUOTA = {"handshake_quota": 50, "handshake_burst": 50}


def storm(build, windows: list[tuple[int, int, int]], upstream: dict | None = QUOTA):
    build.run_start(upstream=upstream)
    for i, (attempted, accepted, rejected) in enumerate(windows):
        build.at(100.0 * (i + 1), "handshakes", "upstream", attempted=attempted, accepted=accepted,
                 rejected=rejected, window_start=100.0 * i, window_ms=100.0)
    return build.frame()


def test_a_fleet_that_keeps_the_pipe_full_uses_the_quota(build) -> None:
    result = check_handshakes(storm(build, [(180, 100, 80), (95, 50, 45), (52, 48, 4), (10, 10, 0)]))

    assert result.valid is True
    assert (result.details["peak_accepted_per_s"], result.details["rejected"]) == (100, 129)
    assert result.details["saturated_windows"] == 3
    assert result.details["utilisation"] == (100 + 50 + 48) / 3 / 50


def test_saturated_windows_left_half_empty_are_flagged(build) -> None:
    """Synchronised retries: everyone asks in the same instant, most are refused, and the rest of each
    window goes unused."""
    result = check_handshakes(storm(build, [(200, 40, 160), (170, 30, 140), (150, 20, 130)]))

    assert result.valid is False and result.details["peak_accepted_per_s"] == 40


def test_more_than_the_quota_and_burst_accepted_is_flagged(build) -> None:
    assert check_handshakes(storm(build, [(300, 150, 150)])).valid is False


def test_without_a_quota_or_a_storm_nothing_is_judged(build) -> None:
    assert check_handshakes(storm(build, [(10, 10, 0)], upstream=None)).details["applies"] is False
    never_bound = check_handshakes(storm(type(build)(), [(30, 30, 0), (20, 20, 0)]))
    assert never_bound.valid is True and never_bound.details["message"] == "the quota never bound"
