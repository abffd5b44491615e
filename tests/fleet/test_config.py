"""Fleet settings for a launcher (``fleet.config.tuning``): from WSFLEET_* variables and KEY=VALUE
assignments, the assignments winning; wiring and unknown keys refused with the reason."""

from __future__ import annotations

import pytest

from fleet.config import TUNABLE, FleetConfig, tuning
from fleet.errors import ConfigError


def test_assignments_win_over_the_environment_which_wins_over_the_defaults() -> None:
    environ = {"WSFLEET_MAX_CONNECTIONS": "2000", "WSFLEET_LEASE_MS": "30000", "WSFLEET_WORKER_ID": "w9"}

    values = tuning(environ, ["max_connections=5000", "WSFLEET_FLUSH_MS=500", "Heartbeat_MS = 4000"])

    # the worker id is wiring the launcher sets: its variable is not taken
    assert values == {"max_connections": 5000, "lease_ms": 30000, "flush_ms": 500, "heartbeat_ms": 4000}
    config = FleetConfig(worker_id="t", **values)  # type: ignore[arg-type]
    assert (config.max_connections, config.lease_s, config.heartbeat_s) == (5000, 30.0, 4.0)


def test_every_tunable_setting_is_a_field_and_no_wiring_is_tunable() -> None:
    names = set(FleetConfig.__dataclass_fields__)
    assert set(TUNABLE) <= names
    assert not {"profile", "timescale", "worker_id", "queue_url", "history_path", "upstream_via"} & set(TUNABLE)


@pytest.mark.parametrize(("assignment", "message"), [
    ("max_connections", "expected KEY=VALUE"),
    ("=5", "expected KEY=VALUE"),
    ("queue_url=http://x", "queue_url: is set by the launcher or by its own flag"),
    ("profile=blog", "profile: is set by the launcher or by its own flag"),
    ("leese_ms=100", "leese_ms: is not a fleet setting; settings: lease_ms, heartbeat_ms"),
    ("lease_ms=20s", "--set lease_ms=20s: must be a number"),
])
def test_a_bad_assignment_says_what_is_wrong(assignment: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tuning({}, [assignment])


def test_the_reconnect_policy_is_tunable_and_left_to_the_profile_by_default() -> None:
    assert FleetConfig(worker_id="t").reconnect_policy == "profile"
    assert tuning({"WSFLEET_RECONNECT_POLICY": "equal"}) == {"reconnect_policy": "equal"}
    values = tuning({"WSFLEET_RECONNECT_POLICY": "equal"}, ["reconnect_policy=decorrelated"])
    assert FleetConfig(worker_id="t", **values).reconnect_policy == "decorrelated"  # type: ignore[arg-type]
    assert FleetConfig.from_env({"WSFLEET_RECONNECT_POLICY": "none"}).reconnect_policy == "none"


def test_an_unknown_reconnect_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match="WSFLEET_RECONNECT_POLICY must be one of profile, none, exponential, "
                                          "full, equal, decorrelated, not 'jittery'"):
        FleetConfig(worker_id="t", **tuning({}, ["reconnect_policy=jittery"]))  # type: ignore[arg-type]


@pytest.mark.parametrize(("base", "cap"), [(0, 10_000), (20_000, 10_000)])
def test_a_reconnect_base_of_zero_or_above_the_cap_is_refused(base: int, cap: int) -> None:
    with pytest.raises(ConfigError, match="WSFLEET_RECONNECT_BASE_MS must be positive and at most"):
        FleetConfig(worker_id="t", reconnect_base_ms=base, reconnect_max_ms=cap)


@pytest.mark.parametrize(("timescale", "budget_s"), [(1.0, 6.0), (0.1, 2.0), (2.0, 12.0)])
def test_the_shutdown_budget_scales_but_never_below_two_seconds(timescale: float, budget_s: float) -> None:
    assert FleetConfig(timescale=timescale).shutdown_budget_s == budget_s


def test_a_shutdown_budget_of_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match="WSFLEET_SHUTDOWN_BUDGET_MS must be positive"):
        FleetConfig(shutdown_budget_ms=0)
