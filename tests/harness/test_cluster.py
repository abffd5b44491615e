"""End to end on a real topology (embedded backend, simulator, router, worker processes), with the
simulator's session records and the tables as evidence: STOP, repeated START, ``last_seq``, and that a
topology leaves nothing behind however it ends."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from harness.backends.resources import client
from harness.cluster import Cluster, ClusterSpec
from harness.faults.plane import Nemesis
from harness.processes import HARNESS_PID_VAR

pytestmark = pytest.mark.e2e


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def live_sessions(cluster: Cluster, connection_id: str) -> list[dict[str, Any]]:
    stream = cluster.streams().get(connection_id, {})
    return [s for s in stream.get("sessions", []) if s["closed"] is None]


def item(cluster: Cluster, connection_id: str) -> dict[str, Any]:
    assert cluster.backend is not None
    raw = client(cluster.backend.env(), "dynamodb").get_item(
        TableName=cluster.backend.tables["connections"], Key={"pk": {"S": f"CONN#{connection_id}"}},
        ConsistentRead=True,
    )["Item"]
    return {k: next(iter(v.values())) for k, v in raw.items()}


@pytest.fixture(scope="module", params=["blog", "hardened"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    spec = ClusterSpec(workers=2, profile=request.param, timescale=0.1,
                       run_dir=tmp_path_factory.mktemp(f"cluster-{request.param}"))
    with Cluster(spec) as running:
        yield running


def test_each_start_is_consumed_by_exactly_one_worker(cluster: Cluster) -> None:
    ids = [f"one{i}" for i in range(6)]
    for connection_id in ids:
        cluster.start_connection(connection_id)
    for connection_id in ids:
        sessions = wait_for(lambda c=connection_id: live_sessions(cluster, c), 10, f"a session for {connection_id}")
        assert len(sessions) == 1
    time.sleep(cluster.config.lease_s)  # a lease later, still exactly one reader each
    assert all(len(live_sessions(cluster, c)) == 1 for c in ids)


def test_stop_closes_the_session_within_the_profile_interval(cluster: Cluster) -> None:
    cluster.start_connection("stopme")
    wait_for(lambda: live_sessions(cluster, "stopme"), 10, "the session")
    stopped = time.monotonic()
    cluster.stop_connection("stopme")
    wait_for(lambda: not live_sessions(cluster, "stopme"), 15, "the session to close")
    took = time.monotonic() - stopped
    if cluster.spec.profile == "hardened":
        bound = cluster.config.heartbeat_s  # the owner's mailbox is read with its next renewal
    else:
        bound = cluster.config.desired_check_s + cluster.config.heartbeat_s
    assert took <= bound + 0.3, f"STOP took {took:.2f} s (bound {bound:.2f} s)"
    assert item(cluster, "stopme")["desired_state"] == "STOPPED"


def test_repeated_start(cluster: Cluster) -> None:
    cluster.start_connection("again")
    first = wait_for(lambda: live_sessions(cluster, "again"), 10, "the session")[0]
    time.sleep(cluster.config.heartbeat_s)
    before = item(cluster, "again")
    restarted_ms = time.time() * 1000
    cluster.start_connection("again")
    after = item(cluster, "again")
    if cluster.spec.profile == "hardened":
        # idempotent: owner, epoch and last_seq untouched, the same session goes on
        assert {k: after.get(k) for k in ("lease_owner", "epoch", "last_seq", "owner_gen")} == \
               {k: before.get(k) for k in ("lease_owner", "epoch", "last_seq", "owner_gen")}
        time.sleep(cluster.config.lease_s)
        assert [s["session"] for s in live_sessions(cluster, "again")] == [first["session"]]
    else:
        # the published START overwrites the item: the live lease is gone, so the START's own notification
        # is acquired again at once (or the item still shows it free)
        history = cluster.run_dir / "history"

        def reacquired() -> bool:
            return any('"lease.acquire"' in line and '"CONN#again"' in line and '"ok"' in line
                       and json.loads(line)["t"] > restarted_ms
                       for f in history.glob("worker-*.jsonl") for line in f.read_text().splitlines())

        assert (after["lease_owner"] == "" and after["lease_expires_at_ms"] == "0") or wait_for(
            reacquired, 5, "the clobbered lease to be acquired again")


def test_last_seq(cluster: Cluster) -> None:
    cluster.start_connection("seq")
    wait_for(lambda: live_sessions(cluster, "seq"), 10, "the session")
    time.sleep(2 * cluster.config.lease_s)
    owner = live_sessions(cluster, "seq")[0]["worker"]
    cluster.workers[owner].child.signal(signal.SIGTERM)  # type: ignore[union-attr]
    cluster.workers[owner].child.wait(10)  # type: ignore[union-attr]
    released = item(cluster, "seq")
    if cluster.spec.profile == "hardened":
        assert int(released["last_seq"]) > 0  # checkpointed with the release
    else:
        assert int(released["last_seq"]) == 0  # the published design never advances it
    cluster.add_worker(owner)


def test_a_topology_leaves_nothing_behind_even_when_broken(tmp_path: Path) -> None:
    spec = ClusterSpec(workers=2, profile="hardened", timescale=0.1, run_dir=tmp_path / "broken")
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}  # other fixtures' topologies
    with pytest.raises(RuntimeError, match="mid-fault"), Cluster(spec) as cluster:
        nemesis = Nemesis(cluster)
        try:
            nemesis.start("pause", "worker-1")
            nemesis.start("partition_aws", "worker-2")
            assert any(p.status() == psutil.STATUS_STOPPED for p in me.children(recursive=True))
            raise RuntimeError("mid-fault")
        finally:
            nemesis.heal_all()
    assert cluster.toxiproxy is not None
    leftovers = [p for p in me.children(recursive=True)
                 if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                 and "harness.reaper" not in p.cmdline()]  # the reaper lives as long as this process
    assert leftovers == []
    events = (spec.run_dir / "history" / "nemesis.jsonl").read_text()
    assert events.count('"fault.start"') == 2 and events.count('"fault.stop"') == 2


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_mid_fault_leaves_nothing_running_or_stopped(
        tmp_path: Path, signum: signal.Signals, status: int) -> None:
    """Started with SIGINT ignored, as a non-interactive shell starts a background job (the scenario once
    ignored Ctrl-C then and ran to its end); SIGTERM, as a CI runner cancelling a job sends."""
    import subprocess
    import sys

    run_dir = tmp_path / "interrupted"
    scenario = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "scenario", "pause", "--run-dir", str(run_dir), "--no-report",
         "--connections", "6"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )

    def leftovers() -> list[str]:
        """The processes this run started (they carry its harness's pid), whoever else runs on the machine."""
        found = []
        for process in psutil.process_iter(["pid", "cmdline", "status"]):
            with contextlib.suppress(psutil.Error):
                if (process.info["status"] != psutil.STATUS_ZOMBIE and process.info["pid"] != scenario.pid
                        and process.environ().get(HARNESS_PID_VAR) == str(scenario.pid)):
                    found.append(f"{process.info['pid']} {' '.join(process.info['cmdline'] or [])[:80]}")
        return found

    nemesis = run_dir / "history" / "nemesis.jsonl"
    wait_for(lambda: nemesis.exists() and '"fault.start"' in nemesis.read_text(), 60, "the pause to begin")
    running = leftovers()
    assert len(running) >= 6, running  # the check sees them: 3 workers, router, simulator, servers
    scenario.send_signal(signum)
    _, stderr = scenario.communicate(timeout=60)
    assert scenario.returncode == status, stderr
    assert "Traceback" not in stderr and ("interrupted" if signum == signal.SIGINT else "terminated") in stderr

    wait_for(lambda: not leftovers(), 10, "every child to exit")
    history = nemesis.read_text()
    assert '"fault.stop"' in history  # the pause was healed (SIGCONT) before everything stopped


def test_the_localstack_backend_path_runs_a_fleet(tmp_path: Path) -> None:
    """``--backend localstack``: every service at one edge endpoint (a moto server stands in for LocalStack,
    which needs a Docker engine these machines lack), resources created and cleared through it."""
    from harness.backends.servers import start_moto

    edge = start_moto(tmp_path / "logs", name="edge")
    try:
        spec = ClusterSpec(workers=2, profile="hardened", timescale=0.1, run_dir=tmp_path / "ls",
                           localstack_url=edge.url)
        with Cluster(spec) as cluster:
            assert cluster.backend is not None and cluster.backend.kind == "localstack"
            assert set(cluster.backend.endpoints.values()) == {edge.url}
            cluster.start_connection("edge1")
            sessions = wait_for(lambda: live_sessions(cluster, "edge1"), 15, "a session through LocalStack")
            assert len(sessions) == 1
    finally:
        edge.stop()
