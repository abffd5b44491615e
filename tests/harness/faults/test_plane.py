"""The fault plane's registry (every kind says, per target, how it runs there or why not) and its toxic faults
against a recording Toxiproxy client: direction and service chosen by params, a partial toxicity re-drawn by
updating the toxic every ``refresh_s``, and a heal that removes it."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fleet.config import FleetConfig
from harness.faults import plane
from harness.faults.fault import AWS, LOCAL, Never, Runs
from harness.faults.plane import REGISTRY, FaultError, build, refusals, where


class RecordingToxiproxy:
    def __init__(self, updates_wanted: int = 0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.added: dict[str, Any] = {}
        self.enough_updates = threading.Event()
        self.updates_wanted = updates_wanted

    def add_toxic(self, proxy: str, type: str, *, stream: str, name: str, toxicity: float,
                  attributes: dict[str, int]) -> None:
        self.calls.append(("add", proxy, name))
        self.added = {"proxy": proxy, "type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes}

    def update_toxic(self, proxy: str, name: str, *, toxicity: float) -> None:
        self.calls.append(("update", proxy, name))
        if sum(1 for c in self.calls if c[0] == "update") >= self.updates_wanted:
            self.enough_updates.set()

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.calls.append(("remove", proxy, name))


def cluster(toxiproxy: RecordingToxiproxy) -> Any:
    proxies = {s: f"worker-1-{s}" for s in ("dynamodb", "services", "upstream")}
    return SimpleNamespace(toxiproxy=toxiproxy, workers={"worker-1": SimpleNamespace(child=object(), proxies=proxies)})


def test_a_full_toxicity_toxic_on_the_answers_of_one_service() -> None:
    toxiproxy = RecordingToxiproxy()
    fault = build("toxic", "worker-1", {"type": "latency", "service": "services", "stream": "downstream",
                                        "attributes": {"latency": 300}})
    fault.start(cluster(toxiproxy))
    assert toxiproxy.added == {"proxy": "worker-1-services", "type": "latency", "stream": "downstream",
                               "toxicity": 1.0, "attributes": {"latency": 300}}
    fault.stop(cluster(toxiproxy))
    fault.heal(cluster(toxiproxy))  # idempotent
    assert [c[0] for c in toxiproxy.calls] == ["add", "remove"]


def test_a_partial_toxicity_is_drawn_afresh_until_the_fault_stops() -> None:
    toxiproxy = RecordingToxiproxy(updates_wanted=3)
    fault = build("toxic", "worker-1", {"type": "reset_peer", "toxicity": 0.3, "refresh_s": 0.01})
    fault.start(cluster(toxiproxy))
    assert toxiproxy.enough_updates.wait(5.0)
    fault.stop(cluster(toxiproxy))
    kinds = [c[0] for c in toxiproxy.calls]
    assert kinds[0] == "add" and kinds[-1] == "remove" and kinds.count("update") >= 3
    assert {c[1] for c in toxiproxy.calls} == {"worker-1-dynamodb"}  # the default service
    assert len({c[2] for c in toxiproxy.calls}) == 1                # one toxic, updated in place
    assert fault._refresher is None  # the refresher was joined: nothing updates the removed toxic


def test_the_old_aws_kinds_are_toxics_with_their_defaults() -> None:
    params = build("aws_timeout", "worker-1").params
    assert {k: params[k] for k in ("type", "service", "stream", "attributes", "toxicity")} == {
        "type": "timeout", "service": "dynamodb", "stream": "upstream", "attributes": {"timeout": 0}, "toxicity": 1}
    assert build("aws_reset", "worker-1").params["type"] == "reset_peer"


@pytest.mark.parametrize(("params", "message"), [
    ({"type": "earthquake"}, "params.type must be one of aws_error, .*bandwidth, latency"),
    ({"type": "latency", "service": "s3"}, "params.service must be one of dynamodb, services, upstream"),
    ({"type": "latency", "stream": "sideways"}, "params.stream must be upstream or downstream"),
    ({"type": "latency", "toxicity": 2}, "params.toxicity must be within 0 and 1"),
])
def test_bad_toxic_params_are_refused(params: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message):
        build("toxic", "worker-1", params)


def test_a_hold_toxic_with_refresh_0_keeps_the_connections_it_drew_for_the_whole_fault() -> None:
    toxiproxy = RecordingToxiproxy()
    fault = build("toxic", "worker-1", {"type": "latency", "toxicity": 0.4, "refresh_s": 0,
                                        "attributes": {"latency": 4000}})
    fault.start(cluster(toxiproxy))
    fault.stop(cluster(toxiproxy))
    assert [c[0] for c in toxiproxy.calls] == ["add", "remove"]  # never updated: nothing it held is flushed
    assert toxiproxy.added["toxicity"] == 0.4


def test_clock_steps_stay_and_add_up_with_skews(tmp_path) -> None:
    (tmp_path / "clock").mkdir()
    (tmp_path / "clock" / "worker-1").write_text("0")
    fleet = SimpleNamespace(run_dir=tmp_path, workers={"worker-1": SimpleNamespace(child=object())})
    clock = tmp_path / "clock" / "worker-1"
    skew = build("clock_skew", "worker-1", {"offset_ms": 300})
    skew.start(fleet)
    build("clock_step", "worker-1", {"step_ms": -700}).start(fleet)
    assert clock.read_text() == "-400"
    skew.stop(fleet)
    step = build("clock_step", "worker-1", {"step_ms": 250})
    step.start(fleet)
    step.stop(fleet)  # an instant fault: the step stays
    assert clock.read_text() == "-450"


class RecordingChild:
    def __init__(self, calls: list[tuple[str, ...]]) -> None:
        self.calls = calls

    def signal(self, sig: int) -> None:
        self.calls.append(("signal", str(sig)))


def test_a_pause_mid_write_freezes_the_worker_while_its_requests_are_held() -> None:
    toxiproxy = RecordingToxiproxy()
    proxies = {s: f"worker-1-{s}" for s in ("dynamodb", "services", "upstream")}
    fleet = SimpleNamespace(toxiproxy=toxiproxy, workers={"worker-1": SimpleNamespace(
        child=RecordingChild(toxiproxy.calls), proxies=proxies)})
    fault = build("pause_mid_write", "worker-1", {"hold_ms": 20, "stream": "downstream"})
    fault.start(fleet)
    assert toxiproxy.added["stream"] == "downstream" and toxiproxy.added["attributes"] == {"latency": 20}
    fault.stop(fleet)
    assert [c[0] if c[0] != "signal" else c[1] for c in toxiproxy.calls] == [
        "add", str(signal.SIGSTOP), str(signal.SIGCONT), "remove"]
    with pytest.raises(FaultError):
        build("pause_mid_write", "worker-1", {"stream": "sideways"})


def test_stopped_while_running_reports_the_task_stopped_and_leaves_its_process_alone() -> None:
    """The zombie's ECS half: the worker's own task is reported stopped (the stand-in sends its notice),
    and no signal reaches the process (a pause before it keeps it frozen; a kill after it ends it)."""
    calls: list[tuple[str, ...]] = []
    reported: list[str] = []
    tasks = SimpleNamespace(stop_while_running=lambda arn, reason: reported.append(arn))
    fleet = SimpleNamespace(tasks=tasks, workers={"worker-1": SimpleNamespace(
        child=RecordingChild(calls), proxies={}, task_arn="arn:task/1")})
    build("stopped_while_running", "worker-1").start(fleet)
    assert reported == ["arn:task/1"] and calls == []
    with pytest.raises(FaultError, match="death notices"):
        build("stopped_while_running", "worker-1").start(SimpleNamespace(tasks=None, workers=fleet.workers))


def test_every_kind_says_for_each_target_how_it_runs_there_or_why_not() -> None:
    for kind in REGISTRY:
        for target in (LOCAL, AWS):
            runs = where(kind, target)
            said = runs.how if isinstance(runs, Runs) else runs.why
            assert said, (kind, target)
            assert not isinstance(runs, Runs) or bool(runs.needs) == bool(runs.without), (kind, target)


def test_a_kind_a_deployment_cannot_run_is_refused_with_its_own_reason() -> None:
    """Clock faults and forged notices were refused as "a network or AWS API fault needs FIS", which no FIS
    role would have changed."""
    refused = refusals(["clock_step", "forged_death_notice", "pause_mid_write", "term", "reset_upstream"], AWS,
                       {"fis"})
    assert refused == ["clock_step: nothing on AWS moves a task's clock",
                       "forged_death_notice: the harness puts nothing on a deployment's queue",
                       "pause_mid_write: nothing on ECS sends SIGSTOP to a task"]


@pytest.mark.parametrize(("target", "capability", "kind"), [(AWS, "fis", "kill"),
                                                            (LOCAL, "death_notices", "forged_death_notice"),
                                                            (LOCAL, "death_notices", "stopped_while_running"),
                                                            (LOCAL, "death_notices", "zombie")])
def test_a_kind_that_needs_a_capability_runs_only_in_a_run_that_provides_it(target: str, capability: str,
                                                                           kind: str) -> None:
    assert refusals([kind, kind], target, {capability}) == []
    refused = refusals([kind, kind], target, set())
    assert len(refused) == 1 and refused[0].startswith(f"{kind}: ")


def test_an_unknown_kind_is_an_error_not_a_refusal() -> None:
    with pytest.raises(FaultError, match="unknown fault kind 'nap'; known: "):
        refusals(["nap"], LOCAL, set())
    assert isinstance(where("pause", AWS), Never)


class FreezeWatchingChild(RecordingChild):
    """Records signals; once frozen, the others write ``on_freeze`` (their burial and take-up) to the history."""

    def __init__(self, calls: list[tuple[str, ...]], history: Path, on_freeze: list[dict[str, Any]]) -> None:
        super().__init__(calls)
        self.history, self.on_freeze = history, on_freeze

    def signal(self, sig: int) -> None:
        super().signal(sig)
        if sig == signal.SIGSTOP:
            with (self.history / "worker-3.jsonl").open("a") as file:
                file.writelines(json.dumps(e) + "\n" for e in self.on_freeze)


def frozen_fleet(tmp_path: Path, calls: list[tuple[str, ...]], on_freeze: list[dict[str, Any]]) -> Any:
    """worker-1 holds A and renewed a second ago (its fence, 1.5 s at scale 0.1 less the thaw's 0.2 s, closes
    0.3 s from now)."""
    history = tmp_path / "history"
    history.mkdir()
    now = time.time() * 1000
    (history / "worker-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (
        {"t": now - 2000, "src": "worker-1", "type": "lease.acquire", "worker": "worker-1", "gen": "g1", "pk": "A",
         "epoch": 1, "outcome": "ok"},
        {"t": now - 990, "src": "worker-1", "type": "lease.renew", "worker": "worker-1", "gen": "g1",
         "outcome": "ok", "expires_ms": now + 1000})))
    tasks = SimpleNamespace(stop_while_running=lambda arn, reason: calls.append(("reported", arn)))
    toxiproxy = RecordingToxiproxy()
    toxiproxy.calls = calls
    child = FreezeWatchingChild(calls, history, on_freeze)
    return SimpleNamespace(run_dir=tmp_path, config=FleetConfig(profile="hardened", timescale=0.1, worker_id="t"),
                           tasks=tasks, toxiproxy=toxiproxy, workers={"worker-1": SimpleNamespace(
                               child=child, task_arn="arn:task/1", proxies={"dynamodb": "w1-dynamodb"})})


def test_a_zombie_is_thawed_once_buried_and_taken_over_its_renewal_answers_held_across_the_thaw(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plane, "ZOMBIE_RENEWAL_WAIT", 0.01)  # renewed a moment ago already
    calls: list[tuple[str, ...]] = []
    now = time.time() * 1000
    fleet = frozen_fleet(tmp_path, calls, [
        {"t": now, "src": "worker-3", "type": "death.notice", "worker": "worker-3", "buried": ["worker-1@g1"]},
        {"t": now, "src": "worker-3", "type": "log.mark", "worker": "worker-3", "pk": "A", "epoch": 2,
         "outcome": "ok"}])
    fault = build("zombie", "worker-1")
    fault.start(fleet)
    fault.stop(fleet)
    assert calls == [("signal", str(signal.SIGSTOP)), ("reported", "arn:task/1"),
                     ("add", "w1-dynamodb", "zombie-renewal"), ("signal", str(signal.SIGCONT)),
                     ("remove", "w1-dynamodb", "zombie-renewal")]
    assert fault.params["thawed"] == "after takeover" and fault.params["taken"] == "A"


def test_a_zombie_nobody_took_over_is_thawed_at_its_fence_and_says_so(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plane, "ZOMBIE_RENEWAL_WAIT", 0.01)
    calls: list[tuple[str, ...]] = []
    fleet = frozen_fleet(tmp_path, calls, [])
    fault = build("zombie", "worker-1", {"lost_renewal": False})
    fault.start(fleet)
    fault.stop(fleet)
    assert calls == [("signal", str(signal.SIGSTOP)), ("reported", "arn:task/1"), ("signal", str(signal.SIGCONT))]
    assert fault.params["thawed"] == "at its fence" and fault.params["taken"] == ""
    with pytest.raises(FaultError, match="lost_renewal"):
        build("zombie", "worker-1", {"lost_renewal": "yes"})
