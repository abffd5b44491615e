"""Scenario files: what a valid file expands to, and a precise error (file, field, problem) for a bad one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.config import FleetConfig
from harness.scenarios.scenario_file import ScenarioFileError, dump, from_data, load

EXAMPLE = """
name: stop-during-pause
description: pause a worker, STOP one of its streams while it is frozen, START it again
profile: blog
workers: 3
connections: 10
seed: 4
vars:
  start: "uniform(0, heartbeat)"
workload:
  - {at_s: "start + lease", op: stop, target: "owned-by:worker-2"}
  - {at_s: "start + 1.1*lease", op: start, target: previous}
faults:
  - {at_s: start, kind: pause, target: worker-2, duration_s: "2*lease"}
  - kind: toxic
    at_s: 0.5
    target: random
    duration_s: 1
    params: {type: latency, stream: downstream, toxicity: 0.3, attributes: {latency: 300}}
bounds:
  pause: {hardened: "1.1*lease + 500", default: "lease + reconcile"}
  any: 5000
"""


def config(profile: str = "hardened", timescale: float = 0.1) -> FleetConfig:
    return FleetConfig(profile=profile, timescale=timescale, worker_id="t")  # type: ignore[arg-type]


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_expands_to_steps_operations_and_bounds(tmp_path: Path) -> None:
    spec = load(write(tmp_path, EXAMPLE))
    assert (spec.profile, spec.workers, spec.connections, spec.seed, spec.rate) == ("blog", 3, 10, 4, 5.0)
    plan = spec.expand("hardened", 4, config(), 3)
    pause, toxic = plan.steps
    assert pause.kind == "pause" and pause.target == "worker-2" and pause.duration_s == pytest.approx(4.0)
    assert 0 <= pause.at_s <= 0.5
    assert toxic.target.startswith("worker-") and toxic.params["attributes"] == {"latency": 300}
    assert [(o.op, o.target) for o in plan.ops] == [("stop", "owned-by:worker-2"), ("start", "previous")]
    assert plan.ops[0].at_s == pytest.approx(pause.at_s + 2.0)
    assert plan.bound_ms == {"pause": pytest.approx(2700), "toxic": 5000}
    assert spec.expand("blog", 4, config("blog"), 3).bound_ms["pause"] == pytest.approx(8000)
    assert spec.expand("hardened", 4, config(), 3) == plan  # same seed, same plan


def test_json_and_yaml_round_trip(tmp_path: Path) -> None:
    spec = load(write(tmp_path, EXAMPLE))
    for name in ("again.yaml", "again.json"):
        again = load(dump(spec, tmp_path / name))
        assert again.to_json() == spec.to_json()
    assert json.loads((tmp_path / "again.json").read_text())["name"] == "stop-during-pause"


def test_the_upstreams_limits_round_trip(tmp_path: Path) -> None:
    data = {"name": "storm", "upstream": {"handshake_quota": 50, "handshake_burst": 10},
            "faults": [{"kind": "reset_upstream", "target": "all", "params": {"fraction": 0.5}}]}
    spec = from_data(data)
    assert spec.upstream == {"handshake_quota": 50.0, "handshake_burst": 10.0}
    assert load(dump(spec, tmp_path / "storm.yaml")).upstream == spec.upstream
    assert "upstream" not in from_data({"name": "bare", "faults": []}).to_json()


def test_settings_default_when_absent() -> None:
    spec = from_data({"name": "bare", "faults": [{"kind": "kill", "target": "busiest"}]})
    assert (spec.profile, spec.workers, spec.connections, spec.timescale, spec.seed) == ("hardened", 3, 30, 0.1, 1)
    assert spec.expand("hardened", 1, config(), 3).bound_ms == {}  # no bound given: none invented


def mutated(change: dict[str, Any], path: tuple[str | int, ...] = ()) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE)
    target: Any = data
    for key in path:
        target = target[key]
    target.update(change)
    return data


@pytest.mark.parametrize(("data", "message"), [
    (mutated({"faultz": []}), "faultz: unknown field"),
    (mutated({"name": "has space"}), "name: required"),
    (mutated({"profile": "fast"}), "profile: 'fast' is not one of"),
    (mutated({"workers": 1}), "workers: must be a whole number of at least 2"),
    (mutated({"rate": -1}), "rate: must be a number above 0"),
    (mutated({"faults": "kill"}), "faults: must be a list"),
    (mutated({"kind": "explode"}, ("faults", 0)), r"faults\[0\].kind: 'explode' is not a fault kind"),
    (mutated({"target": "worker-9"}, ("faults", 0)), r"faults\[0\].target: worker-9 does not exist with 3"),
    (mutated({"target": "everyone"}, ("faults", 0)), r"faults\[0\].target: 'everyone' is not a target"),
    (mutated({"kind": "join", "target": "worker-2"}, ("faults", 0)), r"faults\[0\].target: worker-2 exists already"),
    (mutated({"duration_s": "2*leese"}, ("faults", 0)), r"faults\[0\].duration_s: .*unknown name 'leese'"),
    (mutated({"when": 1}, ("faults", 0)), r"faults\[0\].when: unknown field"),
    (mutated({"op": "restart"}, ("workload", 0)), r"workload\[0\].op: 'restart' is not an operation"),
    (mutated({"target": "owned-by:nobody"}, ("workload", 0)), r"workload\[0\].target: 'owned-by:nobody'"),
    (mutated({"explode": 1}, ("bounds",)), "bounds.explode: not a fault kind"),
    (mutated({"pause": "lease +"}, ("bounds",)), "bounds.pause: cannot parse"),
    (mutated({"start": "uniform(0, heartbeat) * x"}, ("vars",)), "vars.start: .*unknown name 'x'"),
    (mutated({"upstream": {"quota": 5}}), "upstream.quota: unknown setting .known: handshake_quota"),
    (mutated({"upstream": {"handshake_quota": 0}}), "upstream.handshake_quota: must be a number above 0"),
    ([1, 2], "the file must hold a mapping"),
])
def test_bad_files_are_refused_with_the_field_and_the_problem(data: Any, message: str) -> None:
    with pytest.raises(ScenarioFileError, match=f"^scenario.yaml: {message}" if not isinstance(data, list)
                       else message):
        from_data(data, "scenario.yaml")


def test_unreadable_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFileError, match=r"missing\.yaml: cannot read"):
        load(tmp_path / "missing.yaml")
    with pytest.raises(ScenarioFileError, match=r"bad\.yaml: not valid YAML"):
        load(write(tmp_path, "name: [unclosed", "bad.yaml"))
    with pytest.raises(ScenarioFileError, match=r"bad\.json: not valid JSON"):
        load(write(tmp_path, "{name: x}", "bad.json"))


def test_toxic_attributes_may_be_expressions_in_ms() -> None:
    spec = from_data({"name": "late", "faults": [{"kind": "toxic", "target": "busiest", "duration_s": "3*lease",
                                                 "params": {"type": "latency", "toxicity": 0.3,
                                                            "attributes": {"latency": "1.1*lease", "jitter": 5}}}]})
    (step,) = spec.expand("hardened", 1, config(), 3).steps
    assert step.params["attributes"] == {"latency": 2200, "jitter": 5}
    assert step.duration_s == pytest.approx(6.0)


def test_the_dynamodb_server_round_trips_and_new_fault_kinds_are_checked() -> None:
    spec = from_data({"name": "on-moto", "dynamodb": "moto", "faults": [
        {"at_s": 1, "kind": "clock_step", "target": "worker-1", "params": {"step_ms": -700}}]})
    assert spec.dynamodb == "moto" and from_data(spec.to_json()).to_json() == spec.to_json()
    assert "dynamodb" not in from_data({"name": "bare", "faults": []}).to_json()
    with pytest.raises(ScenarioFileError, match="dynamodb: must be one of dynalite, moto"):
        from_data({"name": "x", "dynamodb": "dynamo", "faults": []}, "x.yaml")
    with pytest.raises(ScenarioFileError, match=r"faults\[0\]\.params\.step_ms: required for clock_step"):
        from_data({"name": "x", "faults": [{"kind": "clock_step", "target": "worker-1"}]}, "x.yaml")
    with pytest.raises(ScenarioFileError, match=r"faults\[0\]\.kind: forged_death_notice needs death_notices"):
        from_data({"name": "x", "faults": [{"kind": "forged_death_notice", "target": "worker-1"}]}, "x.yaml")
