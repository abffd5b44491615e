"""Starts and stops one topology: backend, Toxiproxy, upstream simulator, router and N worker processes.

Every worker reaches DynamoDB, SQS + CloudWatch, and the upstream through its own three proxies
(``worker-N-dynamodb``, ``worker-N-services``, ``worker-N-upstream``), so the fault plane can cut one
worker off alone.  Each process writes its own history file under ``RUN_DIR/history/`` and its log under
``RUN_DIR/logs/``.  ``ClusterSpec.fleet_root`` runs the worker and router from another checkout (its
directory first on their import path) while the rest of the harness stays this one.  ``Cluster`` is a
context manager: leaving it (also on an exception or Ctrl-C) resumes
paused workers, re-enables proxies and stops every child, so nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fleet.config import ENV_VARS, FleetConfig
from fleet.history import HistoryWriter
from harness import http_client
from harness.backends import Backend, BackendError, EmbeddedBackend, clear_data, start_embedded
from harness.backends.localstack import localstack_backend
from harness.ecs_tasks import ECS_STOP_TIMEOUT_MS, LocalTasks
from harness.faults.network import ToxiproxyClient, ToxiproxyError, ensure_toxiproxy
from harness.history import HistoryTail
from harness.processes import REPO_ROOT, Child, ProcessError, Started, python_env, spawn, start_thread
from harness.router_client import Signer, error_text
from harness.run_folders import absolute

SERVICE_PROXIES = ("dynamodb", "services", "upstream")
EVENT_ATTEMPTS = 4  # a START or STOP answered 503 is sent again, this many times in all


class ClusterError(Exception):
    """The topology could not be started; the message says which part and why."""


# What a part that could not start raises (a ClusterError: the parts' own checks)
START_ERRORS = (ProcessError, BackendError, ToxiproxyError, ClusterError)


@dataclass
class ClusterSpec:
    workers: int = 3
    profile: str = "hardened"
    timescale: float = 0.1
    run_dir: Path = Path("runs/latest")
    dynamodb: str = "dynalite"
    rate: float = 10.0
    replay_depth: int = 10_000
    seed: int = 0
    # FleetConfig fields to override (at scale 1, like every *_ms setting)
    overrides: dict[str, Any] = field(default_factory=dict)
    evict_older: bool = False
    # The simulator's gateway limits (``scenario_file.UPSTREAM_SETTINGS``: handshake_quota, handshake_burst)
    upstream: dict[str, float] = field(default_factory=dict)
    # Run against the LocalStack at this endpoint instead of the embedded backend (its data is cleared first).
    localstack_url: str = ""
    # Run the worker and router processes from this checkout (e.g. a worktree of an older commit); the
    # harness processes (backend, Toxiproxy, simulator) stay ours.
    fleet_root: Path | None = None
    # Run each worker as a local ECS task whose exit sends a death notice (``harness.ecs_tasks``; embedded
    # backend only).
    death_notices: bool = False
    # A region's name when several topologies share a run folder (``harness.region.regions``): it prefixes
    # the worker ids (``east-worker-1``), the router's id and the topology's own files.
    region: str = ""

    def __post_init__(self) -> None:
        # every process is given this folder, and the worker and router run from the checkout: absolute
        self.run_dir = absolute(self.run_dir)

    def named(self, name: str) -> str:
        return f"{self.region}-{name}" if self.region else name

    def fleet_config(self) -> FleetConfig:
        return FleetConfig(profile=self.profile, timescale=self.timescale,  # type: ignore[arg-type]
                           worker_id="harness", **self.overrides)


@dataclass
class WorkerHandle:
    id: str
    child: Child | None
    env: dict[str, str]
    proxies: dict[str, str]  # service -> proxy name
    task_arn: str = ""  # the local ECS task of the running process (``ClusterSpec.death_notices``)

    @property
    def pid(self) -> int:
        return self.child.pid if self.child else 0


class Cluster(Started):
    """``backend`` and ``upstream``, when given, are someone else's: used, not stopped."""

    def __init__(self, spec: ClusterSpec, backend: Backend | None = None, upstream: Child | None = None) -> None:
        self.spec = spec
        self.run_dir = spec.run_dir
        self.config = spec.fleet_config()
        self.backend = backend
        self._own_backend = backend is None
        self.toxiproxy: ToxiproxyClient | None = None
        self._stop_toxiproxy: Callable[[], None] | None = None
        self.upstream: Child | None = upstream
        self._own_upstream = upstream is None
        self.router: Child | None = None
        self.workers: dict[str, WorkerHandle] = {}
        self.history = HistoryWriter(str(self.run_dir / "history" / f"{spec.named('harness')}.jsonl"), "harness")
        self.tasks: LocalTasks | None = None

    # -- start ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """The backend, Toxiproxy and the simulator at once (the backend takes the longest), then the workers
        and the router, which start up at once too.  Whatever part fails, one ``ClusterError`` says which,
        once every part started alongside it has ended (so ``stop`` finds all that started)."""
        (self.run_dir / "history").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "clock").mkdir(parents=True, exist_ok=True)
        try:
            run_together(self._start_backend, self._start_toxiproxy, self._start_upstream)
            if self.spec.death_notices:
                if not isinstance(self.backend, EmbeddedBackend):
                    raise ClusterError("death notices need the embedded backend (its ECS stands in for the "
                                       "tasks); on AWS they come from EventBridge")
                self.tasks = LocalTasks(self.backend.env(), self.backend.queue_url, self.history,
                                        stop_timeout_s=self.config.scaled_s(ECS_STOP_TIMEOUT_MS))
                self.tasks.start()
            for i in range(1, self.spec.workers + 1):  # they start up while the router does
                self.add_worker(self.spec.named(f"worker-{i}"), wait=False)
            router = self.spec.named("router")
            self.router = spawn(
                router, ["python", "-m", "fleet.router_http", "--host", "127.0.0.1", "--port", "0"],
                self.run_dir / "logs" / f"{router}.log", env=self._router_env(), cwd=self.fleet_root,
            )
            self.wait_workers_ready()
        except START_ERRORS as exc:
            raise ClusterError(str(exc)) from exc

    def _start_backend(self) -> None:
        if self.backend is None and self.spec.localstack_url:
            self.backend = localstack_backend(self.spec.localstack_url, config=self.config)
            clear_data(self.backend.env())
        elif self.backend is None:
            self.backend = start_embedded(self.spec.dynamodb, config=self.config, log_dir=self.run_dir / "logs")

    def _start_toxiproxy(self) -> None:
        self.toxiproxy, self._stop_toxiproxy = ensure_toxiproxy(self.run_dir, self.spec.seed)

    def _start_upstream(self) -> None:
        if self.upstream is None:
            self.upstream = start_upstream(self.spec)

    @property
    def upstream_url(self) -> str:
        assert self.upstream is not None
        return str(self.upstream.ready["ws_url"])

    @property
    def upstream_control_url(self) -> str:
        assert self.upstream is not None
        return str(self.upstream.ready["control_url"])

    @property
    def router_url(self) -> str:
        assert self.router is not None
        return str(self.router.ready["url"])

    @property
    def fleet_root(self) -> Path:
        """The checkout the worker and router processes run from."""
        return (self.spec.fleet_root or REPO_ROOT).resolve()

    def _fleet_env(self, extra: dict[str, str]) -> dict[str, str]:
        assert self.backend is not None
        settings = self.config.to_env()
        env = python_env(settings, root=self.fleet_root)
        env.update(self.backend.env())
        env.update(extra)
        return env

    def _router_env(self) -> dict[str, str]:
        return self._fleet_env({
            ENV_VARS["worker_id"]: self.spec.named("router"),
            ENV_VARS["allowed_ws_hosts"]: urlsplit(self.upstream_url).netloc,
            ENV_VARS["history_path"]: str(self.run_dir / "history" / f"{self.spec.named('router')}.jsonl"),
        })

    def _proxy(self, name: str, upstream_url: str) -> str:
        """Create (or replace) a proxy to ``upstream_url``'s host:port; its listen address."""
        assert self.toxiproxy is not None
        target = urlsplit(upstream_url).netloc
        if name in self.toxiproxy.get_proxies():
            self.toxiproxy.delete_proxy(name)
        return self.toxiproxy.create_proxy(name, target).listen

    def add_worker(self, worker_id: str, wait: bool = True, clock_offset_ms: int = 0) -> WorkerHandle:
        """Start (or restart, keeping its proxies) one worker process."""
        assert self.backend is not None
        handle = self.workers.get(worker_id)
        if handle is None:
            services = self.backend.endpoints["sqs"]
            listen = {
                "dynamodb": self._proxy(f"{worker_id}-dynamodb", self.backend.endpoints["dynamodb"]),
                "services": self._proxy(f"{worker_id}-services", services),
                "upstream": self._proxy(f"{worker_id}-upstream", self.upstream_control_url),
            }
            clock_file = self.run_dir / "clock" / worker_id
            clock_file.write_text(str(clock_offset_ms))
            env = self._fleet_env({
                ENV_VARS["worker_id"]: worker_id,
                ENV_VARS["history_path"]: str(self.run_dir / "history" / f"{worker_id}.jsonl"),
                ENV_VARS["clock_offset_file"]: str(clock_file),
                ENV_VARS["upstream_via"]: listen["upstream"],
                "AWS_ENDPOINT_URL_DYNAMODB": f"http://{listen['dynamodb']}",
                "AWS_ENDPOINT_URL_SQS": f"http://{listen['services']}",
                "AWS_ENDPOINT_URL_CLOUDWATCH": f"http://{listen['services']}",
                "AWS_ENDPOINT_URL_ECS": f"http://{listen['services']}",
            })
            handle = WorkerHandle(worker_id, None, env, {s: f"{worker_id}-{s}" for s in SERVICE_PROXIES})
            self.workers[worker_id] = handle
        handle.task_arn = self.tasks.launch(worker_id) if self.tasks is not None else ""
        handle.child = spawn(worker_id, ["python", "-m", "fleet.worker"],
                             self.run_dir / "logs" / f"{worker_id}.log",
                             env={**handle.env, ENV_VARS["task_arn"]: handle.task_arn}, ready_line=False,
                             cwd=self.fleet_root)
        if self.tasks is not None:
            self.tasks.watch(worker_id, handle.child, handle.task_arn)
        if wait:
            self.wait_workers_ready([worker_id])
        return handle

    def wait_workers_ready(self, ids: list[str] | None = None, timeout_s: float = 30.0) -> None:
        """Wait until each worker's running process has written its ``worker.start`` (with its pid) to its
        history and, hardened without a region gate, registered after it (a ``lease.renew``).  What an
        earlier process of the same id wrote does not count.  A worker told to end while it started (a later
        fault of the schedule killed or stopped it) is not waited for; one that exited by itself is an error."""
        deadline = time.monotonic() + timeout_s
        pending = set(ids or self.workers)
        # a gated region's workers register only once their region is active (fleet.region_gate)
        registers = self.config.profile == "hardened" and not self.config.region_gate_endpoints
        tails = {w: HistoryTail(self.run_dir, f"{w}.jsonl", types={"worker.start", "lease.renew"}) for w in pending}
        started: set[str] = set()
        while pending:
            for worker_id in list(pending):
                handle = self.workers[worker_id]
                if handle.child is not None and not handle.child.running():
                    if handle.child.told_to_end:
                        pending.discard(worker_id)
                        continue
                    raise ClusterError(f"{worker_id} exited with status {handle.child.process.returncode} "
                                       f"while starting; log {handle.child.log_path}:\n"
                                       f"{handle.child.log_tail()}")
                for event in tails[worker_id].new_events():
                    if event["type"] == "worker.start":
                        if event.get("pid") == handle.pid:
                            started.add(worker_id)
                    elif worker_id in started:
                        pending.discard(worker_id)
                if worker_id in started and not registers:
                    pending.discard(worker_id)
            if pending and time.monotonic() > deadline:
                waiting = ", ".join(sorted(pending))
                raise ClusterError(f"workers not ready within {timeout_s:.0f} s: {waiting}")
            if pending:
                time.sleep(0.05)

    # -- control -------------------------------------------------------------------------------------
    def start_connection(self, connection_id: str) -> None:
        start_connection(self.history, self.router_url, self.upstream_url, self.upstream_control_url, connection_id)

    def stop_connection(self, connection_id: str) -> None:
        stop_connection(self.history, self.router_url, connection_id)

    def streams(self) -> dict[str, Any]:
        return simulator_streams(self.upstream_control_url)

    def describe(self) -> dict[str, Any]:
        """What ``wsfleet up`` prints: everything a client needs to reach this topology."""
        assert self.backend is not None
        return {
            "router_url": self.router_url,
            "endpoints": {k: self.backend.endpoints[k] for k in ("dynamodb", "sqs", "cloudwatch")},
            "region": self.backend.region,
            "upstream_url": self.upstream_url,
            "upstream_control_url": self.upstream_control_url,
            "tables": {k: self.backend.tables[k] for k in ("connections", "messages")},
            "queue_url": self.backend.queue_url,
            "workers": [{"id": h.id, "pid": h.pid} for h in self.workers.values()],
            "run_dir": str(self.run_dir),
            "profile": self.spec.profile,
            "timescale": self.spec.timescale,
        }

    # -- stop ----------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Heal and stop everything started; safe to call twice and after a partial start."""
        if self.tasks is not None:
            self.tasks.close()  # the workers stopped now hand off: their exits announce nothing
        if self.toxiproxy is not None:
            with contextlib.suppress(Exception):  # stopping goes on whatever the proxy says
                self.toxiproxy.reset()
        # all at once: each hands its streams off within its own grace, and none takes up another's on the way out
        children = [handle.child for handle in self.workers.values() if handle.child is not None]
        if children:
            run_together(*(partial(child.stop, grace_s=max(5.0, 4 * self.config.lease_s)) for child in children))
        for child in (self.router, self.upstream if self._own_upstream else None):
            if child is not None:
                child.stop(grace_s=5.0)
        if self._stop_toxiproxy is not None:
            self._stop_toxiproxy()
            self._stop_toxiproxy = None
        if self._own_backend and isinstance(self.backend, EmbeddedBackend):
            self.backend.stop()
        self.history.close()


def run_together(*starts: Callable[[], object]) -> None:
    """Run ``starts`` at once (the first in this thread, each other in a thread of its own) and wait for every
    one of them, whatever happens.  The parts' failures (``START_ERRORS``) as one ``ClusterError`` naming
    each; any other exception as it is (this thread's first)."""
    failed: list[BaseException] = []

    def run(start: Callable[[], None]) -> None:
        try:
            start()
        except BaseException as exc:  # raised below, once every part has ended
            failed.append(exc)

    threads = [start_thread(threading.Thread(target=run, args=(start,), name=f"cluster-part-{i}"))
               for i, start in enumerate(starts[1:], 1)]
    try:
        starts[0]()
    except START_ERRORS as exc:
        failed.insert(0, exc)
    finally:
        for thread in threads:
            thread.join()
    if failed:
        unexpected = [exc for exc in failed if not isinstance(exc, START_ERRORS)]
        if unexpected:
            raise unexpected[0]
        raise ClusterError("; ".join(str(exc) for exc in failed)) from failed[0]


def start_upstream(spec: ClusterSpec) -> Child:
    """The upstream simulator of ``spec``'s run, its history in the run folder."""
    return spawn("upstream", upstream_argv(spec), spec.run_dir / "logs" / "upstream.log")


def upstream_argv(spec: ClusterSpec) -> list[str]:
    """The simulator's command line: ``spec``'s rate, time scale, seed and gateway limits."""
    ping = max(0.05, 5.0 * spec.timescale)
    argv = ["python", "-m", "harness.upstream_sim", "--host", "127.0.0.1", "--port", "0",
            "--rate", str(spec.rate), "--replay-depth", str(spec.replay_depth),
            "--ping-interval", f"{ping:.3f}", "--ping-timeout", f"{ping:.3f}",
            "--timescale", str(spec.timescale), "--seed", str(spec.seed),
            "--history", str(spec.run_dir / "history" / "upstream.jsonl")]
    if spec.evict_older:
        argv.append("--evict-older")
    for name, value in sorted(spec.upstream.items()):
        argv += [f"--{name.replace('_', '-')}", f"{value:g}"]
    return argv


def start_connection(history: HistoryWriter, router_url: str, upstream_url: str, control_url: str,
                     connection_id: str, signer: Signer | None = None) -> None:
    """As a user would: create the simulator's stream, START it through the router, then record
    ``conn.started``."""
    http_json("POST", f"{control_url}/streams/{connection_id}")
    send_event(router_url, "START", connection_id, f"{upstream_url}/streams/{connection_id}", signer=signer)
    history.emit("conn.started", pk=f"CONN#{connection_id}")


def stop_connection(history: HistoryWriter, router_url: str, connection_id: str,
                    signer: Signer | None = None) -> None:
    send_event(router_url, "STOP", connection_id, signer=signer)
    history.emit("conn.stopped", pk=f"CONN#{connection_id}")


def simulator_streams(control_url: str) -> dict[str, Any]:
    """The simulator's view: every stream, by id, with its head and sessions."""
    _, payload = http_json("GET", control_url + "/streams")
    return {s["id"]: s for s in payload.get("streams", [])}


def send_event(router_url: str, event_type: str, connection_id: str, ws_url: str | None = None,
               signer: Signer | None = None) -> None:
    """POST one router event; a 503 (outcome unknown: the router says the event is safe to repeat) is repeated
    a few times, as a client would, before it counts as a failure (``ClusterError``, with the answer's
    reason: the router's ``error`` or API Gateway's ``message``)."""
    body: dict[str, Any] = {"event_type": event_type, "connection_id": connection_id}
    if ws_url is not None:
        body["ws_url"] = ws_url
    for attempt in range(EVENT_ATTEMPTS):
        status, payload = http_json("POST", router_url + "/events", body, signer=signer)
        if status != 503:
            break
        time.sleep(0.1 * (attempt + 1))
    if not 200 <= status < 300:
        raise ClusterError(f"{event_type} {connection_id} answered {status}: {error_text(payload)}")


def http_json(method: str, url: str, body: Any = None, timeout_s: float = 10.0,
              signer: Signer | None = None) -> tuple[int, Any]:
    """One JSON request (signed by ``signer`` when given); returns (status, decoded body).  No answer, a
    redirect (never followed: a signed call's headers stay with the host it named) or a non-JSON success
    raise ``ClusterError``; a non-JSON error answer is returned as ``{"error": text}``."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if signer is not None:
        headers = signer.headers(method, url, data, headers)
    try:
        answer = http_client.request(method, url, timeout_s=timeout_s, body=data, headers=headers)
    except http_client.HttpError as exc:
        raise ClusterError(str(exc)) from exc
    try:
        return answer.status, answer.json()
    except ValueError as exc:
        if answer.status >= 400:
            return answer.status, {"error": answer.text}
        raise ClusterError(f"{method} {url} answered {answer.status} with a body that is not JSON") from exc
