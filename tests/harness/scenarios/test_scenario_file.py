"""Scenario files: what a valid file expands to, and a precise error (file, field, problem) for a bad one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    (mutated({"workers": 1}), "workers: must be a whole number from 2 to 256"),
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


# -- absurd and hostile input: one line naming the file, the field and the rule ------------------------------
def faulted(**step: Any) -> dict[str, Any]:
    return {"name": "x", "faults": [{"kind": "kill", "target": "worker-1", **step}]}


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\n1: a\n", r"1: a field name must be text"),
    ("name: x\nfaults: [{kind: [kill], target: worker-1}]\n", r"faults\[0\].kind: \['kill'\] is not a fault kind"),
    ("name: x\nfaults: [{kind: kil, target: worker-1}]\n",
     r"faults\[0\].kind: 'kil' is not a fault kind \(did you mean kill\?\)"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, at_s: .inf}]\n", r"faults\[0\].at_s: must be finite"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, at_s: .nan}]\n", r"faults\[0\].at_s: must be finite"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, at_s: 1e300}]\n", r"faults\[0\].at_s: must be at most 86400"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, at_s: -1}]\n", r"faults\[0\].at_s: must be at least 0"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, duration_s: '-lease'}]\n",
     r"faults\[0\].duration_s: must be at least 0"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, at_s: '1e200*1e200'}]\n", r"faults\[0\].at_s: .*not finite"),
    ("name: x\nworkers: 1000000000\n", r"workers: must be a whole number from 2 to 256"),
    (f"name: x\nworkers: {'9' * 5000}\n", r"not valid YAML"),
    (f"name: x\nconnections: {'9' * 4000}\n", r"connections: must be a whole number from 1 to 100000"),
    ("name: x\nrate: .inf\n", r"rate: must be a number above 0 and at most 1000"),
    ("name: x\ntimescale: .nan\n", r"timescale: must be a number above 0 and at most 10"),
    ("name: x\nseed: 1e3\n", r"seed: must be a whole number"),
    ("name: x\nupstream: {handshake_quota: .inf}\n", r"upstream.handshake_quota: must be finite"),
    ("name: x\nupstream: {handshake_quota: 1e300}\n",
     r"upstream.handshake_quota: must be a number above 0 and at most"),
    ("name: x\nbounds: {kill: .nan}\n", r"bounds.kill: must be finite"),
    ("name: x\nfaults: [{kind: kill, target: worker-1}]\nbounds: {kill: -5}\n", r"bounds.kill: must be at least 0"),
    ("name: x\nvars: {a: " + " + ".join(["1"] * 1500) + "}\n", r"vars.a: .*longer than 400 characters"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, params: {when: 2001-01-01}}]\n",
     r"faults\[0\].params.when: a date is not allowed"),
    ("name: x\nfaults: [{kind: toxic, target: worker-1, params: {attributes: {latency: .inf}}}]\n",
     r"faults\[0\].params.attributes.latency: must be finite"),
    ("name: x\nfaults: [{kind: kill, target: worker-1, params: {offset_ms: 1e300}}]\n",
     r"faults\[0\].params.offset_ms: must be at most"),
    ("a: &a [x, x]\nb: *a\n", r"YAML aliases are not allowed"),
    ("name: x\n" + "x: " + "[" * 5000 + "]" * 5000 + "\n", r"nested too deeply|not valid YAML"),
])
def test_hostile_yaml_is_one_line_naming_the_file_the_field_and_the_rule(tmp_path: Path, text: str,
                                                                         message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioFileError) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
    assert len(str(caught.value)) < 400
    assert re.search(message, str(caught.value)), str(caught.value)


def test_the_alias_bomb_in_a_faults_params_is_refused_before_anything_expands(tmp_path: Path) -> None:
    bomb = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
                     + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
                        f"*a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)])
    params = bomb.replace("\n", "\n      ")
    text = f"name: bomb\nfaults:\n  - kind: kill\n    target: worker-1\n    params:\n      {params}\n"
    assert len(text) < 1000
    with pytest.raises(ScenarioFileError, match="YAML aliases are not allowed"):
        load(write(tmp_path, text))


def test_json_nan_and_infinity_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFileError, match=r"s\.json: not valid JSON: NaN is not a number"):
        load(write(tmp_path, '{"name": "x", "rate": NaN}', "s.json"))
    with pytest.raises(ScenarioFileError, match=r"s\.json: faults\[0\]\.at_s: must be at most"):
        load(write(tmp_path, json.dumps(faulted(at_s=1e300)), "s.json"))


def test_files_over_a_megabyte_and_non_utf8_files_are_refused(tmp_path: Path) -> None:
    big = write(tmp_path, "name: x\ndescription: " + "a" * 1_100_000 + "\n", "big.yaml")
    with pytest.raises(ScenarioFileError, match=r"big\.yaml: .*larger than 1 MB"):
        load(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: x\ndescription: caf\xe9\n")
    with pytest.raises(ScenarioFileError, match=r"latin\.yaml: not UTF-8 text .byte 24"):
        load(latin)
    with pytest.raises(ScenarioFileError, match=r"is not a file"):
        load(tmp_path)


@pytest.mark.parametrize("expression", ["9" * 400, "1" + "*10" * 120, "-" * 399 + "1", "(" * 250 + "1" + ")" * 250])
def test_expressions_that_overflow_or_nest_deeply_are_errors(expression: str) -> None:
    with pytest.raises(ScenarioFileError, match=r"^s\.yaml: faults\[0\]\.at_s: "):
        from_data(faulted(at_s=expression), "s.yaml")


FIELDS = ["name", "description", "profile", "workers", "connections", "rate", "timescale", "seed", "vars",
          "workload", "faults", "bounds", "xfail", "upstream", "death_notices", "at_s", "kind", "target",
          "duration_s", "params", "op", "handshake_quota", "attributes", "offset_ms", "latency", "pause", "kill",
          "hardened", "blog", "default", "any"]
WORDS = ["x", "kill", "pause", "toxic", "join", "worker-1", "worker-9", "busiest", "random", "stop", "start",
         "previous", "owned-by:busiest", "hardened", "lease", "2*lease", "uniform(0, heartbeat)", "1e308*10",
         "-lease", "lease +", "min()", "choice(1, 2)", "9" * 30, "a.b", "(((1)))"]
leaves = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-10**40, max_value=10**40)
          | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(WORDS) | st.text(max_size=12))
keys = st.sampled_from(FIELDS) | st.text(max_size=6) | st.integers(-3, 3) | st.booleans() | st.none()
documents = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(keys, inner, max_size=5), max_leaves=12)
scenario_like = st.fixed_dictionaries(
    {"name": st.sampled_from(["x", "y z", ""]) | leaves},
    optional={key: documents for key in FIELDS[1:15]})


def as_text(data: Any, kind: str) -> str:
    if kind == "json":
        return json.dumps(data, default=str)  # NaN and Infinity as Python writes them
    return yaml.safe_dump(data, default_flow_style=None)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=scenario_like | documents, kind=st.sampled_from(["yaml", "json"]),
       cut=st.integers(0, 3), noise=st.binary(max_size=6))
def test_random_documents_load_or_fail_in_one_line(tmp_path: Path, data: Any, kind: str, cut: int,
                                                   noise: bytes) -> None:
    """Every document the loader can be fed loads, or is a one-line ScenarioFileError naming the file:
    never a traceback (which the CLI would print with exit 1)."""
    try:
        text = as_text(data, kind).encode()
    except (ValueError, yaml.YAMLError):
        return  # not representable (e.g. a key YAML cannot dump); the loader never sees it
    if cut:  # damage the document: truncate it and add stray bytes
        text = text[: len(text) * cut // 4] + noise
    path = tmp_path / f"fuzz.{kind}"
    path.write_bytes(text)
    try:
        load(path)
    except ScenarioFileError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 1000, message


def test_the_dynamodb_server_round_trips_and_new_fault_kinds_are_checked() -> None:
    spec = from_data({"name": "on-moto", "dynamodb": "moto", "faults": [
        {"at_s": 1, "kind": "clock_step", "target": "worker-1", "params": {"step_ms": -700}}]})
    assert spec.dynamodb == "moto" and from_data(spec.to_json()).to_json() == spec.to_json()
    assert "dynamodb" not in from_data({"name": "bare", "faults": []}).to_json()
    with pytest.raises(ScenarioFileError, match="dynamodb: must be one of dynalite, moto"):
        from_data({"name": "x", "dynamodb": "dynamo", "faults": []}, "x.yaml")
    with pytest.raises(ScenarioFileError, match=r"faults\[0\]\.params\.step_ms: required for clock_step"):
        from_data({"name": "x", "faults": [{"kind": "clock_step", "target": "worker-1"}]}, "x.yaml")
    with pytest.raises(ScenarioFileError, match=r"faults\[0\]\.kind: forged_death_notice: the run has no "
                                                   r"death notices \(scenario death_notices: true\)"):
        from_data({"name": "x", "faults": [{"kind": "forged_death_notice", "target": "worker-1"}]}, "x.yaml")
