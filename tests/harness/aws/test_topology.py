"""``wsfleet scenario --backend aws`` end to end, offline: moto stands in for AWS (ECS, Logs, DynamoDB, SQS, STS)
around a local fleet (``harness.aws.standin``).  The command reads only the outputs file and AWS
APIs: its router calls must pass the API Gateway stand-in's SigV4 check, its fault must be an ECS StopTask
that reaches the worker's process, and its history must come back from the Logs API into a valid verdict.
A dry run changes nothing, and a resource without the allowlisted tag stops the run before it starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import http_client
from harness.aws.deployment import read_outputs
from harness.aws.standin import SERVICE, StandIn, aws_standin
from harness.aws.topology import AwsNemesis, running_workers
from harness.backends.resources import client
from harness.ecs_tasks import CLUSTER
from harness.faults.fault import AWS, Runs
from harness.faults.plane import REGISTRY, where
from harness.history import read_history

# a fleet on the stand-in whose recovery is timed against its bound: run with the scenarios, alone on the machine
pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).parent / "scenarios" / "term_busiest.yaml"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    with aws_standin(tmp_path_factory.mktemp("standin"), workers=3, dynamodb="moto") as running:
        yield running


@pytest.fixture
def every_worker_running(standin: StandIn) -> None:
    """The stand-in with every worker running: the faults of earlier tests (a term, a kill) each stopped one
    of the module's workers for good, which left the third fault test one worker where a scenario needs two;
    the service's scheduler replaces them now, as ECS would between runs."""
    standin.replace_stopped()
    assert all(handle.child is not None and handle.child.running() for handle in standin.cluster.workers.values())


def wsfleet_aws(standin: StandIn, run_dir: Path, *extra: str, scenario: str = "") -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: only AWS's variables (here pointing at moto) and the outputs file;
    ``scenario``: a catalog scenario instead of term_busiest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WSFLEET_", "AWS_"))}
    env.update({k: v for k, v in standin.env.items() if k.startswith("AWS_")})
    named = [scenario] if scenario else ["--from", str(SCENARIO)]
    argv = [sys.executable, "-m", "harness.cli", "scenario", *named, "--backend", "aws",
            "--outputs", str(standin.outputs), "--account", standin.account, "--region", standin.env["AWS_REGION"],
            "--run-dir", str(run_dir), "--logs-wait", "0.5", "--no-report", *extra]
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def connection_items(standin: StandIn) -> int:
    assert standin.cluster.backend is not None
    table = standin.cluster.backend.tables["connections"]
    return len(client(standin.env, "dynamodb").scan(TableName=table, ConsistentRead=True)["Items"])


def stopped_tasks(standin: StandIn) -> set[str]:
    pages = client(standin.env, "ecs").get_paginator("list_tasks").paginate(cluster=CLUSTER, desiredStatus="STOPPED")
    return {arn for page in pages for arn in page.get("taskArns", [])}


def test_a_dry_run_prints_the_plan_and_changes_nothing(standin: StandIn, tmp_path: Path) -> None:
    before = stopped_tasks(standin)
    done = wsfleet_aws(standin, tmp_path / "run", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "term -> busiest: ECS StopTask of the worker's task" in done.stdout
    assert "START 6 streams" in done.stdout and "total" in done.stdout  # the cost, before any load
    assert "dry run, nothing was changed" in done.stderr
    assert connection_items(standin) == 0 and stopped_tasks(standin) == before
    assert standin.gateway.passed == 0 and not (tmp_path / "run").exists()


def test_a_resource_without_the_allowlisted_tag_stops_the_run_before_it_starts(standin: StandIn,
                                                                               tmp_path: Path) -> None:
    standin.untag("service")
    standin.untag("api")
    try:
        done = wsfleet_aws(standin, tmp_path / "run")
    finally:
        standin.tag("service")
        standin.tag("api")
    assert done.returncode == 1, done.stderr
    assert "FAIL  service wsfleet-workers: not tagged wsfleet:chaos=allowed" in done.stderr
    assert "; not tagged wsfleet:chaos=allowed" in done.stderr.split("FAIL  router ")[1].splitlines()[0]
    assert "guardrail checks failed: nothing was run" in done.stderr
    assert connection_items(standin) == 0 and standin.gateway.passed == 0


def test_another_account_is_refused(standin: StandIn, tmp_path: Path) -> None:
    done = wsfleet_aws(standin, tmp_path / "run", "--account", "999999999999")
    assert done.returncode == 1
    assert "FAIL  account: the credentials are account 123456789012, the command names 999999999999" in done.stderr


def test_a_kill_step_without_a_stop_alarm_is_refused_before_the_run(standin: StandIn, tmp_path: Path) -> None:
    done = wsfleet_aws(standin, tmp_path / "run", scenario="crash")
    assert done.returncode == 1
    assert "crash cannot run against a deployment: kill: a SIGKILL is a FIS experiment" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("every_worker_running")
def test_a_scenario_runs_end_to_end_through_aws_apis(standin: StandIn, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = wsfleet_aws(standin, run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["valid"] is True and verdict["duplicate_claims"] == 0 and verdict["lost_sequences"] == 0

    # signed router calls: every one passed the SigV4 check (6 STARTs, 6 STOPs at the end, and any repeat of
    # a 503), none was refused, and the router accepted the STARTs; an unsigned one is refused as API Gateway
    # refuses it
    assert standin.gateway.passed >= 12 and standin.gateway.refused == {}
    history = read_history(run_dir)
    accepted = history[(history["type"] == "event") & (history["status"] == 200)]
    assert sorted(accepted["kind"]) == ["START"] * 6  # the STOPs at the end are after the observed window
    router_url = json.loads(standin.outputs.read_text())["router_url"]["value"]
    refused = http_client.request("POST", router_url + "/events", body=b"{}", timeout_s=5)
    assert refused.status == 403 and refused.json() == {"message": "Missing Authentication Token"}

    # the fault was an ECS StopTask, and ECS reports that task stopped
    faults = history[history["type"] == "fault.start"]
    assert list(faults["kind"]) == ["term"]
    params = faults.iloc[0]["params"]
    assert params["via"] == "ecs:StopTask" and params["task"] in stopped_tasks(standin)

    # the fleet's history came back from the Logs API: the workers', the router's and the simulator's files
    # are in the run folder, which the stand-in's processes never wrote to
    files = {path.name for path in (run_dir / "history").glob("*.jsonl")}
    assert {"harness.jsonl", "nemesis.jsonl", "router.jsonl", "upstream.jsonl"} <= files
    assert {"worker-1.jsonl", "worker-2.jsonl", "worker-3.jsonl"} <= files
    term_target = faults.iloc[0]["target"]
    stops = history[(history["type"] == "worker.stop") & (history["src"] == term_target)]
    assert list(stops["reason"]) == ["shutdown"]  # the StopTask reached the process as a SIGTERM


@pytest.mark.usefixtures("every_worker_running")
def test_crash_kills_through_a_fis_experiment(standin: StandIn, tmp_path: Path) -> None:
    """The catalog's crash: the kill step is a FIS experiment made for the busiest worker's task, which the
    stand-in's supervisor carries out (SIGKILL); its streams are taken over, nothing lost or claimed twice."""
    run_dir = tmp_path / "run"
    done = wsfleet_aws(standin, run_dir, "--stop-alarm", standin.stop_alarm, "--connections", "6", scenario="crash")
    assert done.returncode == 0, done.stderr[-3000:]
    history = read_history(run_dir)
    fault = history[history["type"] == "fault.stop"].iloc[0]
    assert fault["kind"] == "kill" and fault["params"]["via"] == "fis:StartExperiment"
    experiment = client(standin.env, "fis").get_experiment(id=fault["params"]["experiment"])["experiment"]
    target = experiment["targets"]["task"]  # the one task, among the service's tagged ones
    assert target["filters"] == [{"path": "TaskArn", "values": [fault["params"]["task"]]}]
    assert target["resourceTags"] == {"wsfleet:chaos": "allowed"} and target["parameters"]["service"] == SERVICE
    assert fault["params"]["task"] in stopped_tasks(standin)
    killed = history[history["src"] == fault["target"]]
    assert "worker.stop" not in set(killed["type"])  # killed, not shut down: it wrote nothing more
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["valid"] is True and verdict["duplicate_claims"] == 0 and verdict["lost_sequences"] == 0



@pytest.mark.usefixtures("every_worker_running")
def test_a_kill_spares_a_task_that_is_not_a_tagged_task_of_the_service(standin: StandIn, tmp_path: Path) -> None:
    """The workers' tasks lost the tag after the preflight: the FIS experiment resolves no target, every process
    lives on, and the run stops with exit 2 rather than be judged as if the kill had happened."""
    before = stopped_tasks(standin)
    standin.untag("tasks")
    try:
        done = wsfleet_aws(standin, tmp_path / "run", "--stop-alarm", standin.stop_alarm, "--connections", "2",
                           scenario="crash")
    finally:
        standin.tag("tasks")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "task still runs" in done.stderr
    assert stopped_tasks(standin) == before


def test_the_aws_nemesis_runs_exactly_the_kinds_the_registry_says_a_deployment_runs() -> None:
    assert set(AwsNemesis.RUNS) == {kind for kind in REGISTRY if isinstance(where(kind, AWS), Runs)}


def test_a_worker_whose_task_stopped_is_replaced_as_the_services_scheduler_would(standin: StandIn) -> None:
    """What the AWS backend counts (the workers table's incarnations whose task ECS lists as RUNNING) drops
    when a worker's process dies and is back to every worker once the stand-in's service replaces it."""
    env = standin.env
    deployment = read_outputs(standin.outputs)

    def running() -> dict[str, str]:
        return running_workers(client(env, "dynamodb"), client(env, "ecs"), deployment)

    standin.replace_stopped()
    before = running()
    assert sorted(before) == sorted(standin.cluster.workers)
    victim = sorted(before)[0]
    child = standin.cluster.workers[victim].child
    assert child is not None
    child.signal(signal.SIGKILL)
    deadline = time.monotonic() + 30
    while victim in running():  # the supervisor stops its task within a look or two
        assert time.monotonic() < deadline, f"{victim}'s task still listed as running"
        time.sleep(0.2)
    assert standin.replace_stopped() == [victim]
    after = running()
    assert sorted(after) == sorted(before) and after[victim] != before[victim]  # a new task
