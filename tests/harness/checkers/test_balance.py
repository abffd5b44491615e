"""Balanced scale-out from hand-made histories: the held counts the workers report at each heartbeat are
judged at the end of each ``join`` fault; out of the band is flagged, a worker that stopped reporting is not
counted, and a run without a join is not judged."""

from __future__ import annotations

import ast
from pathlib import Path

import harness.checkers
from harness.checkers.balance import check_balance

HEARTBEAT_MS = 500.0


def scale_out(build, counts_at_end: dict[str, int], settings: dict | None = None, stale: dict | None = None):
    build.run_start(config={"heartbeat_ms": HEARTBEAT_MS}, settings=settings or {})
    build.fault(1_000.0, "join", "worker-3", stop_t=13_000.0)
    for worker in counts_at_end:
        build.at(900.0, "requests", worker, worker=worker, held=15 if worker != "worker-3" else 0)
    for worker, held in counts_at_end.items():
        build.at(12_800.0, "requests", worker, worker=worker, held=held)
    for worker, held in (stale or {}).items():  # last heard of long before the join's end
        build.at(5_000.0, "requests", worker, worker=worker, held=held)
    return build.frame()


def test_a_balanced_fleet_at_the_end_of_the_join_is_valid(build) -> None:
    result = check_balance(scale_out(build, {"worker-1": 10, "worker-2": 10, "worker-3": 10}))
    assert result.valid is True
    assert result.details["joins"][0]["counts"] == {"worker-1": 10, "worker-2": 10, "worker-3": 10}


def test_out_of_the_band_is_flagged(build) -> None:
    result = check_balance(scale_out(build, {"worker-1": 15, "worker-2": 15, "worker-3": 0}))
    assert result.valid is False and "worker-3" in result.details["message"]


def test_the_band_is_the_runs_setting(build) -> None:
    counts = {"worker-1": 12, "worker-2": 10, "worker-3": 8}   # 1.5: out of 1.2, within 2
    assert check_balance(scale_out(build, counts)).valid is False
    assert check_balance(scale_out(type(build)(), counts, settings={"balance_band": 2.0})).valid is True


def test_one_stream_apart_is_as_balanced_as_whole_streams_allow(build) -> None:
    assert check_balance(scale_out(build, {"worker-1": 2, "worker-2": 1, "worker-3": 1})).valid is True


def test_a_worker_that_stopped_reporting_is_not_counted(build) -> None:
    history = scale_out(build, {"worker-1": 10, "worker-2": 10, "worker-3": 10}, stale={"worker-9": 0})
    assert check_balance(history).valid is True


def test_without_a_join_nothing_is_judged(build) -> None:
    build.run_start()
    build.at(500.0, "requests", "worker-1", worker="worker-1", held=30)
    result = check_balance(build.frame())
    assert result.valid is True and result.details["applies"] is False


def test_out_of_the_requirement_is_flagged_whatever_the_fleet_would_say(build) -> None:
    """13 / 10 is out of the 1.2 the scale-out requirement states; the band is the checker's, not the fleet's."""
    result = check_balance(scale_out(build, {"worker-1": 13, "worker-2": 10, "worker-3": 10}))
    assert result.valid is False and result.details["band"] == 1.2


def test_without_the_heartbeat_in_the_history_nothing_can_be_judged(build) -> None:
    build.run_start(config={})
    build.fault(1_000.0, "join", "worker-3", stop_t=13_000.0)
    for worker in ("worker-1", "worker-2", "worker-3"):
        build.at(12_800.0, "requests", worker, worker=worker, held=10)
    result = check_balance(build.frame())
    assert result.valid == "unknown" and "heartbeat" in result.details["message"]


def test_a_join_whose_window_another_fault_disturbed_is_not_judged(build) -> None:
    """A worker paused while the fleet balances has its streams taken over: the fleet moves streams to a
    joiner, it does not rebalance a takeover (explore seed 391), so the join's window says nothing."""
    build.fault(6_000.0, "pause", "worker-1", stop_t=9_000.0)
    result = check_balance(scale_out(build, {"worker-1": 0, "worker-2": 20, "worker-3": 10}))
    [join] = result.details["joins"]
    assert result.valid is True and join["judged"] is False and join["disturbed_by"] == ["pause on worker-1"]


def test_a_join_with_a_stop_or_start_in_its_window_is_not_judged(build) -> None:
    build.at(5_000.0, "event", "router", kind="STOP", pk="CONN#c001", status=200)
    result = check_balance(scale_out(build, {"worker-1": 15, "worker-2": 15, "worker-3": 0}))
    assert result.valid is True and result.details["joins"][0]["disturbed_by"] == ["STOP CONN#c001"]


def test_a_join_into_a_fleet_where_a_worker_held_less_than_its_share_is_not_judged(build) -> None:
    """25 / 5, then a third worker: 10 each would need the second to be given streams, and the fleet gives to
    joiners only (explore seed 391's 6 / 2 / 2 before its join)."""
    build.at(950.0, "requests", "worker-1", worker="worker-1", held=25)
    build.at(950.0, "requests", "worker-2", worker="worker-2", held=5)
    result = check_balance(scale_out(build, {"worker-1": 15, "worker-2": 5, "worker-3": 10}))
    assert result.valid is True
    [reason] = result.details["joins"][0]["disturbed_by"]
    assert reason == "held less than an even share (10) before the join: {'worker-2': 5}"


def test_a_join_into_an_uneven_fleet_that_can_fill_the_joiner_is_judged(build) -> None:
    """18 / 12 is out of the band, but each can give the joiner its share: the join is judged."""
    build.at(950.0, "requests", "worker-1", worker="worker-1", held=18)
    build.at(950.0, "requests", "worker-2", worker="worker-2", held=12)
    result = check_balance(scale_out(build, {"worker-1": 18, "worker-2": 12, "worker-3": 0}))
    assert result.valid is False and result.details["joins"][0]["judged"] is True


def test_a_fault_outside_the_joins_window_leaves_it_judged(build) -> None:
    build.fault(200.0, "pause", "worker-1", stop_t=800.0)
    build.fault(14_000.0, "kill", "worker-2")
    result = check_balance(scale_out(build, {"worker-1": 15, "worker-2": 15, "worker-3": 0}))
    assert result.valid is False and result.details["joins"][0]["judged"] is True


def test_no_checker_imports_the_fleets_code() -> None:
    """A checker that judges the fleet with the fleet's own predicate cannot catch a bug in it."""
    imported = {
        (path.name, name)
        for path in Path(harness.checkers.__file__).parent.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
    }
    assert not {(module, name) for module, name in imported if name.split(".")[0] == "fleet"}
