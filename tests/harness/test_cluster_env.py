"""What a cluster's processes are told, without starting them: the user's settings win over what the backend
suggests, and the upstream simulator runs at the cluster's time scale and seed; and when a (re)started worker
counts as ready."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from harness import cluster as cluster_module
from harness.backends import BackendError, EmbeddedBackend
from harness.cluster import Cluster, ClusterError, ClusterSpec, WorkerHandle, upstream_argv
from harness.faults.network import ToxiproxyError
from harness.processes import Child, ProcessError, spawn
from harness.upstream_sim.__main__ import build_parser


class Endpoints:
    """A backend's environment: where its services are."""

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1"}


def fleet_env(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    cluster = Cluster(ClusterSpec(run_dir=tmp_path, overrides=overrides), backend=Endpoints())  # type: ignore[arg-type]
    try:
        return cluster._fleet_env({"WSFLEET_WORKER_ID": "worker-1"})
    finally:
        cluster.history.close()


def test_the_users_settings_and_the_backends_endpoints_both_reach_the_processes(tmp_path: Path) -> None:
    told = fleet_env(tmp_path, flush_ms=500, max_connections=2000)
    assert (told["WSFLEET_FLUSH_MS"], told["WSFLEET_MAX_CONNECTIONS"]) == ("500", "2000")
    assert told["AWS_ENDPOINT_URL_DYNAMODB"] == "http://127.0.0.1:1"
    assert told["WSFLEET_WORKER_ID"] == "worker-1"


def test_the_simulator_runs_at_the_clusters_time_scale_and_seed_with_its_limits(tmp_path: Path) -> None:
    argv = upstream_argv(ClusterSpec(run_dir=tmp_path, timescale=0.25, seed=7,
                                     upstream={"handshake_quota": 50.0, "handshake_burst": 20.0}))
    assert argv[:3] == ["python", "-m", "harness.upstream_sim"]
    args = build_parser().parse_args(argv[3:])
    assert (args.timescale, args.seed, args.handshake_quota, args.handshake_burst) == (0.25, 7, 50, 20)


def restarted_worker(tmp_path: Path, profile: str) -> tuple[Cluster, Child, Path]:
    """A cluster whose worker-1 is a fresh process, with its predecessor's events already in its history."""
    cluster = Cluster(ClusterSpec(run_dir=tmp_path, profile=profile))
    history = tmp_path / "history" / "worker-1.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text('{"t":1,"src":"worker-1","type":"worker.start","worker":"worker-1","pid":1}\n'
                       '{"t":2,"src":"worker-1","type":"lease.renew","worker":"worker-1","outcome":"ok"}\n')
    child = spawn("worker-1", ["python", "-c", "import time; time.sleep(60)"], tmp_path / "worker-1.log",
                  ready_line=False)
    cluster.workers["worker-1"] = WorkerHandle("worker-1", child, {}, {})
    return cluster, child, history


@pytest.mark.parametrize("profile", ["blog", "hardened"])
def test_a_restarted_worker_is_ready_on_its_own_events_not_its_predecessors(tmp_path: Path, profile: str) -> None:
    cluster, child, history = restarted_worker(tmp_path, profile)
    try:
        with pytest.raises(ClusterError, match="workers not ready within 0 s: worker-1"):
            cluster.wait_workers_ready(["worker-1"], timeout_s=0.3)
        with history.open("a") as file:
            file.write(json.dumps({"t": 3, "src": "worker-1", "type": "worker.start", "worker": "worker-1",
                                   "pid": child.pid}) + "\n")
        if profile == "hardened":  # it is ready once registered: a renewal after its own start
            with pytest.raises(ClusterError, match="not ready"):
                cluster.wait_workers_ready(["worker-1"], timeout_s=0.3)
            with history.open("a") as file:
                file.write('{"t":4,"src":"worker-1","type":"lease.renew","worker":"worker-1","outcome":"ok"}\n')
        cluster.wait_workers_ready(["worker-1"], timeout_s=5)
    finally:
        child.stop(grace_s=1)
        cluster.history.close()


@pytest.mark.parametrize("ended_by", ["a fault's SIGKILL", "itself"])
def test_a_worker_a_fault_ends_while_it_starts_is_not_waited_for_one_that_exits_by_itself_is_an_error(
        tmp_path: Path, ended_by: str) -> None:
    cluster, child, _ = restarted_worker(tmp_path, "hardened")
    try:
        if ended_by == "itself":
            os.kill(child.pid, signal.SIGKILL)  # not through the harness: as if the process had crashed
        else:
            child.signal(signal.SIGKILL)
        child.wait(10.0)
        if ended_by == "itself":
            with pytest.raises(ClusterError, match="worker-1 exited with status -9 while starting"):
                cluster.wait_workers_ready(["worker-1"], timeout_s=5)
        else:
            cluster.wait_workers_ready(["worker-1"], timeout_s=5)
    finally:
        child.stop(grace_s=1)
        cluster.history.close()


class Parts:
    """Stand-ins for the parts ``Cluster.start`` starts before the workers and the router, each recording
    that it started and was stopped; ``fail`` names the parts that fail to start.  The backend answers only
    once Toxiproxy and the simulator have tried (they start while it does), else it fails after 5 s."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: tuple[str, ...] = ()) -> None:
        self.fail = fail
        self.tried = {name: threading.Event() for name in ("backend", "toxiproxy", "upstream")}
        self.stopped: list[str] = []
        self.spawned: list[str] = []
        parts = self

        class Backend(EmbeddedBackend):
            def stop(self) -> None:
                parts.stopped.append("backend")

        class Toxiproxy:
            def get_proxies(self) -> dict[str, Any]:
                return {}

            def create_proxy(self, name: str, target: str) -> Any:
                return type("Proxy", (), {"listen": "127.0.0.1:2"})()

            def reset(self) -> None:
                pass

        class Upstream:
            def __init__(self) -> None:
                self.ready = {"ws_url": "ws://127.0.0.1:1", "control_url": "http://127.0.0.1:1"}

            def stop(self, grace_s: float) -> None:
                parts.stopped.append("upstream")

        def start_embedded(*_: Any, **__: Any) -> EmbeddedBackend:
            self.start("backend")
            if not (self.tried["toxiproxy"].wait(5.0) and self.tried["upstream"].wait(5.0)):
                raise BackendError("dynalite: Toxiproxy and the simulator did not start alongside")
            return Backend("embedded", "us-east-1", {"dynamodb": "http://127.0.0.1:1", "sqs": "http://127.0.0.1:1"},
                           "")

        def ensure_toxiproxy(*_: Any) -> tuple[Any, Any]:
            self.start("toxiproxy")
            return Toxiproxy(), lambda: self.stopped.append("toxiproxy")

        def start_upstream(_: Any) -> Any:
            self.start("upstream")
            return Upstream()

        def spawn(name: str, *_: Any, **__: Any) -> Child:
            self.spawned.append(name)
            raise ProcessError(f"{name} exited with status 1 while starting")

        for name, fake in (("start_embedded", start_embedded), ("ensure_toxiproxy", ensure_toxiproxy),
                           ("start_upstream", start_upstream), ("spawn", spawn)):
            monkeypatch.setattr(cluster_module, name, fake)

    def start(self, name: str) -> None:
        self.tried[name].set()
        if name in self.fail:
            raise {"backend": BackendError, "toxiproxy": ToxiproxyError, "upstream": ProcessError}[name](
                f"{name} did not start")


def test_toxiproxy_and_the_simulator_start_while_the_backend_starts(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(monkeypatch)
    with pytest.raises(ClusterError, match=r"^worker-1 exited with status 1 while starting$"), \
            Cluster(ClusterSpec(run_dir=tmp_path, workers=2)):
        pass
    assert parts.spawned == ["worker-1"]  # the first process started once the three had
    assert sorted(parts.stopped) == ["backend", "toxiproxy", "upstream"]


@pytest.mark.parametrize(("fail", "message"), [
    (("toxiproxy",), r"^toxiproxy did not start$"),
    (("backend", "upstream"), r"^backend did not start; upstream did not start$"),
])
def test_a_part_that_fails_to_start_is_one_error_and_what_started_is_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: tuple[str, ...], message: str) -> None:
    parts = Parts(monkeypatch, fail=fail)
    with pytest.raises(ClusterError, match=message), Cluster(ClusterSpec(run_dir=tmp_path, workers=2)):
        pass
    assert parts.spawned == []
    assert sorted(parts.stopped) == sorted({"backend", "toxiproxy", "upstream"} - set(fail))
