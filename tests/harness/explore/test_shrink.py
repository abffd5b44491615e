"""The shrinker against stand-in failure predicates: it drops what the failure does not need, shortens
durations and lowers toxicities while the failure holds, and stops when its budget is spent."""

from __future__ import annotations

from harness.explore.explore import failing_invariants
from harness.explore.shrink import Budget, shrink
from harness.scenarios.scenario_file import ScenarioSpec


def spec() -> ScenarioSpec:
    return ScenarioSpec(name="s", faults=[
        {"at_s": 0.5, "kind": "kill", "target": "worker-1"},
        {"at_s": 1.0, "kind": "pause", "target": "worker-2", "duration_s": 4.0},
        {"at_s": 2.0, "kind": "restart", "target": "worker-1"},
        {"at_s": 3.0, "kind": "toxic", "target": "worker-3", "duration_s": 2.0,
         "params": {"type": "latency", "toxicity": 0.8, "attributes": {"latency": 500}}},
    ], workload=[{"at_s": 1.5, "op": "stop", "target": "random"}, {"at_s": 1.7, "op": "start", "target": "previous"}])


def kinds(s: ScenarioSpec) -> list[str]:
    return [f["kind"] for f in s.faults]


def test_drops_every_step_the_failure_does_not_need_with_the_restart_of_a_dropped_kill() -> None:
    needs_pause = lambda s: "pause" in kinds(s)  # noqa: E731
    shrunk = shrink(spec(), needs_pause, Budget(100))
    assert kinds(shrunk) == ["pause"] and shrunk.workload == []


def test_shortens_durations_while_it_still_fails() -> None:
    long_pause = lambda s: any(f["kind"] == "pause" and f["duration_s"] >= 0.9 for f in s.faults)  # noqa: E731
    shrunk = shrink(spec(), long_pause, Budget(100))
    assert shrunk.faults == [{"at_s": 1.0, "kind": "pause", "target": "worker-2", "duration_s": 1.0}]


def test_lowers_toxicity_while_it_still_fails() -> None:
    toxic = lambda s: any(f.get("params", {}).get("toxicity", 0) >= 0.2 for f in s.faults)  # noqa: E731
    shrunk = shrink(spec(), toxic, Budget(100))
    assert kinds(shrunk) == ["toxic"] and shrunk.faults[0]["params"]["toxicity"] == 0.2
    assert spec().faults[3]["params"]["toxicity"] == 0.8  # the original is left alone


def test_keeps_the_original_when_nothing_smaller_fails_and_respects_the_budget() -> None:
    original = spec()
    assert shrink(original, lambda s: s.to_json() == original.to_json(), Budget(100)).to_json() == original.to_json()
    runs = []
    shrink(original, lambda s: runs.append(s) is None, Budget(3))
    assert len(runs) == 3


def test_the_invariant_a_run_fails_is_named_in_a_fixed_order() -> None:
    verdict = {"checkers": {"bounds": {"valid": False}, "sequences": {"valid": False}, "stop": {"valid": True},
                            "duplicate_claims": {"valid": "unknown"}, "new_checker": {"valid": False}}}
    assert failing_invariants(verdict) == ["sequences", "bounds", "new_checker"]
