"""The nemesis: faults as operations in the run's history, and the registry that builds them by name.

A fault is a tiny object (Toxiproxy's toxic is the model): ``start`` breaks something, ``stop`` ends the
fault the way the scenario means (a paused worker is continued, a partition healed), and ``heal`` undoes
whatever is still broken and is safe to call at any time, twice.  ``Nemesis`` records ``fault.start`` /
``fault.stop`` (src ``nemesis``) around each and heals everything still active on ``heal_all``, which the
scenario runner calls in a ``finally``: no process is left stopped, no proxy disabled, no clock skewed.

Kinds: ``kill`` (SIGKILL), ``term`` (SIGTERM, waits for the exit), ``restart`` (start a stopped worker
again), ``join`` (a new worker joins: scale-out), ``pause`` (SIGSTOP until stop, then SIGCONT),
``partition_aws`` / ``partition_upstream`` (the worker's proxies disabled: every live connection closed,
new ones refused), ``reset_upstream`` (the
simulator drops live sessions mid-stream), ``aws_reset`` / ``aws_timeout`` (Toxiproxy ``reset_peer`` /
``timeout`` toxics on the worker's DynamoDB proxy: requests in flight are reset or hang), ``toxic`` (any
toxic, either direction, on any of the worker's proxies, with a partial toxicity drawn afresh every
``refresh_s``), ``clock_skew`` (an offset of ``offset_ms``, any size, on the worker's lease clock, while
the fault lasts),
``clock_step`` (the worker's lease clock jumps by ``step_ms``, forward or back, any size, and stays there;
steps and skews add up), ``pause_mid_write`` (the worker's DynamoDB requests or answers are held for
``hold_ms`` and the worker is frozen while some are held: in the middle of a write),
``forged_death_notice`` (a death notice for a running worker's task), ``stopped_while_running`` (ECS
reports the worker's task stopped, with its notice, while its process runs on: after a ``pause``, a
zombie), ``zombie`` (frozen, reported stopped, thawed once the history shows it taken over: ``Zombie``),
and the AWS API failures of
``harness.faults.aws_api`` (throttling, 5xx, slow answers, SQS duplicates).

The registry (``REGISTRY``: kind -> class, built from the scenario's data by ``build``) is the one list of
fault kinds, local and AWS: each class says per target how it runs there or why not (``Fault.where``), and
``refusals`` turns that into the one-line refusals a scenario gets before anything starts.  A new kind is a
class here (or in a module of its own) and one entry in ``REGISTRY``.

Faults may overlap: the runner starts and stops them from several threads, so a fault keeps its own state
and ``Nemesis`` only appends to and removes from its list of active faults.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from fleet.history import HistoryWriter
from fleet.lease import HardenedRules
from harness.cluster import SERVICE_PROXIES, http_json
from harness.ecs_tasks import LocalTasks
from harness.faults.aws_api import AWS_API_FAULTS, AwsSlow
from harness.faults.fault import Fault, FaultError, Never, ProcessTopology, Runs, targets
from harness.faults.network import ToxiproxyClient, ToxiproxyError
from harness.faults.toxiproxy.toxics import TOXIC_TYPES
from harness.faults.zombie import ZombieWatch
from harness.history import HistoryTail
from harness.processes import start_thread

DEFAULT_REFRESH_S = 0.25


NO_SIGSTOP = Never("nothing on ECS sends SIGSTOP to a task")
NO_CLOCK = Never("nothing on AWS moves a task's clock")
NO_NOTICES = "the run has no death notices (scenario death_notices: true)"


class Kill(Fault):
    where = targets(aws=Runs("a FIS experiment for the worker's task: aws:ecs:task-kill-process, SIGKILL",
                             needs="fis", without="a SIGKILL is a FIS experiment: give the role (--role-arn, or "
                             "the outputs' fis_role_arn) and at least one --stop-alarm"))

    def start(self, topology: ProcessTopology) -> None:
        child = self._child(topology)
        child.signal(signal.SIGKILL)
        child.wait(10.0)


class Term(Fault):
    where = targets(aws=Runs("ECS StopTask of the worker's task (SIGTERM, then SIGKILL after the stop timeout)"))

    def start(self, topology: ProcessTopology) -> None:
        child = self._child(topology)
        child.signal(signal.SIGCONT)
        child.signal(signal.SIGTERM)
        if child.wait(max(10.0, 5 * topology.config.lease_s)) is None:
            raise FaultError(f"{self.target} did not exit after SIGTERM")


class Restart(Fault):
    where = targets(aws=Never("ECS's service scheduler replaces a stopped task by itself"))

    def start(self, topology: ProcessTopology) -> None:
        child = self._child(topology)
        if child.running() and child.wait(max(10.0, 5 * topology.config.lease_s)) is None:
            raise FaultError(f"restart: {self.target} is still running")
        topology.add_worker(self.target)


class Join(Fault):
    """Scale out: a new worker process, named by the target (``worker-4``), joins the fleet."""

    where = targets(aws=Never("a task joins when the service's desired count rises (its autoscaling, or the "
                              "operator)"))

    def start(self, topology: ProcessTopology) -> None:
        if self.target in topology.workers:
            raise FaultError(f"join: {self.target} exists already (a stopped worker comes back with restart)")
        topology.add_worker(self.target)


class Pause(Fault):
    where = targets(aws=NO_SIGSTOP)

    def start(self, topology: ProcessTopology) -> None:
        self._child(topology).signal(signal.SIGSTOP)
        self.active = True

    def heal(self, topology: ProcessTopology) -> None:
        handle = topology.workers.get(self.target)
        if self.active and handle is not None and handle.child is not None:
            handle.child.signal(signal.SIGCONT)
        self.active = False


class Partition(Fault):
    """Disable the target worker's proxies for the given services."""

    services: tuple[str, ...] = ()

    def start(self, topology: ProcessTopology) -> None:
        handle = self._worker(topology)
        assert topology.toxiproxy is not None
        for service in self.services:
            topology.toxiproxy.update_proxy(handle.proxies[service], enabled=False)
        self.active = True

    def heal(self, topology: ProcessTopology) -> None:
        handle = topology.workers.get(self.target)
        if self.active and handle is not None and topology.toxiproxy is not None:
            for service in self.services:
                topology.toxiproxy.update_proxy(handle.proxies[service], enabled=True)
        self.active = False


class PartitionAws(Partition):
    services = ("dynamodb", "services")


class PartitionUpstream(Partition):
    services = ("upstream",)


class ResetUpstream(Fault):
    """The simulator drops live sessions: every stream (target ``all``; param ``fraction`` in (0, 1]: that
    share of them, a gateway's mass disconnect) or one connection id."""

    where = targets(aws=Runs("the upstream simulator's control call"))

    def start(self, topology: ProcessTopology) -> None:
        fraction = self.params.get("fraction")
        if self.target == "all":
            path = "/disconnect" if fraction is None else f"/disconnect?fraction={float(fraction)!r}"
        else:
            path = f"/streams/{self.target}/disconnect"
        status, payload = http_json("POST", topology.upstream_control_url + path)
        if status != 200:
            raise FaultError(f"reset_upstream: the simulator answered {status}: {payload}")
        self.params["dropped"] = payload.get("disconnected", payload) if isinstance(payload, dict) else payload


@dataclass(eq=False)
class ToxicFault(Fault):
    """A Toxiproxy toxic on one of the worker's proxies while the fault lasts.

    Params: ``service`` (``dynamodb``, ``services`` = SQS + CloudWatch, ``upstream``), ``stream``
    (``upstream``: client -> server, the request is delayed or lost; ``downstream``: the request landed and
    the answer is delayed or lost), ``type`` (any toxic our server supports), ``attributes``, ``toxicity``
    (the chance a connection is affected) and ``refresh_s`` (default 0.25).  Toxicity is drawn once per
    connection and the worker reuses pooled connections, so with a toxicity below 1 the toxic is updated
    every ``refresh_s``, which makes every live connection draw again.  ``refresh_s`` 0: never updated, so
    the connections drawn at the start stay affected and the rest stay clean for the whole fault (a toxic
    that holds some connections' requests for seconds: an update would flush what it holds).
    """

    defaults: ClassVar[dict[str, Any]] = {"service": "dynamodb", "stream": "upstream", "toxicity": 1.0,
                                          "attributes": {}, "refresh_s": DEFAULT_REFRESH_S}

    def __post_init__(self) -> None:
        self.params = {**self.defaults, **self.params}
        if self.params.get("type") not in TOXIC_TYPES:
            raise FaultError(f"{self.kind}: params.type must be one of {', '.join(sorted(TOXIC_TYPES))}, "
                             f"not {self.params.get('type')!r}")
        if self.params["service"] not in SERVICE_PROXIES:
            raise FaultError(f"{self.kind}: params.service must be one of {', '.join(SERVICE_PROXIES)}")
        if self.params["stream"] not in ("upstream", "downstream"):
            raise FaultError(f"{self.kind}: params.stream must be upstream or downstream")
        if not 0.0 <= float(self.params["toxicity"]) <= 1.0:
            raise FaultError(f"{self.kind}: params.toxicity must be within 0 and 1")
        self._stop_refresh = threading.Event()
        self._refresher: threading.Thread | None = None

    @property
    def _name(self) -> str:
        return f"{self.kind}-{self.params['type']}-{self.params['stream']}-{id(self):x}"

    def start(self, topology: ProcessTopology) -> None:
        proxy = self._worker(topology).proxies[self.params["service"]]
        assert topology.toxiproxy is not None
        toxiproxy = topology.toxiproxy
        attributes = {k: int(v) for k, v in self.params["attributes"].items()}
        toxicity = float(self.params["toxicity"])
        toxiproxy.add_toxic(proxy, self.params["type"], name=self._name, stream=self.params["stream"],
                            toxicity=toxicity, attributes=attributes)
        self.active = True
        if toxicity < 1.0 and float(self.params["refresh_s"]) > 0:
            self._refresher = start_thread(threading.Thread(target=self._refresh, args=(toxiproxy, proxy, toxicity),
                                                            name=f"refresh-{self._name}", daemon=True))

    def _refresh(self, toxiproxy: ToxiproxyClient, proxy: str, toxicity: float) -> None:
        """Update the toxic every ``refresh_s``: each update is a fresh toxicity draw per connection."""
        while not self._stop_refresh.wait(float(self.params["refresh_s"])):
            try:
                toxiproxy.update_toxic(proxy, self._name, toxicity=toxicity)
            except ToxiproxyError:
                return  # removed meanwhile (healed, or the proxy was reset on teardown)

    def heal(self, topology: ProcessTopology) -> None:
        self._stop_refresh.set()
        if self._refresher is not None:
            self._refresher.join()
            self._refresher = None
        handle = topology.workers.get(self.target)
        if self.active and handle is not None and topology.toxiproxy is not None:
            with contextlib.suppress(ToxiproxyError):
                topology.toxiproxy.remove_toxic(handle.proxies[self.params["service"]], self._name)
        self.active = False


class AwsReset(ToxicFault):
    """Requests in flight on the worker's DynamoDB connections are reset."""

    defaults: ClassVar[dict[str, Any]] = {**ToxicFault.defaults, "type": "reset_peer", "attributes": {"timeout": 0}}


class AwsTimeout(ToxicFault):
    """The worker's DynamoDB requests hang (a black hole) while the fault lasts."""

    defaults: ClassVar[dict[str, Any]] = {**ToxicFault.defaults, "type": "timeout", "attributes": {"timeout": 0}}


class ForgedDeathNotice(Fault):
    """A death notice for the target's task while its process runs (``harness.ecs_tasks``): what a wrong, late
    or malicious sender could put on the queue.  The fleet must confirm with ECS and change nothing."""

    where = targets(Runs("a message on the local ECS stand-in's queue", needs="death_notices", without=NO_NOTICES),
                    Never("the harness puts nothing on a deployment's queue"))

    def start(self, topology: ProcessTopology) -> None:
        tasks, task_arn = _task_of(self, topology)
        tasks.send_notice(task_arn, "forged: the task is running")


def _task_of(fault: Fault, topology: ProcessTopology) -> tuple[LocalTasks, str]:
    """The local ECS stand-in and the target's task; FaultError in a run without death notices."""
    handle = fault._worker(topology)
    if topology.tasks is None or not handle.task_arn:
        raise FaultError(f"{fault.kind}: {NO_NOTICES}")
    return topology.tasks, handle.task_arn


class StoppedWhileRunning(Fault):
    """ECS reports the target's task STOPPED, and its death notice goes out, while its process still runs
    (``harness.ecs_tasks.LocalTasks.stop_while_running``): the process is not told, and ECS kills it after the
    stop timeout.  After a ``pause`` of the same worker, a zombie: the others bury it and take its streams
    while its own fence is still open; thawed (the pause's end) before the fence closes, its next batch and
    renewal reach the store after the takeover and must be refused; a ``kill`` then ends it, as ECS would."""

    where = targets(Runs("the local ECS stand-in stops the task and sends its notice, the process left running",
                         needs="death_notices", without=NO_NOTICES),
                    Never("the harness cannot make ECS report a running task stopped"))

    def start(self, topology: ProcessTopology) -> None:
        tasks, task_arn = _task_of(self, topology)
        tasks.stop_while_running(task_arn, "ECS reports the task stopped; its process runs on")


# The zombie's timing, in leases: how long it waits for a renewal to freeze right after (one is sent every
# heartbeat, a quarter lease), and how long before its fence closes it is thawed at the latest (for the thawed
# process to send its next batch and read what refused it).
ZOMBIE_RENEWAL_WAIT = 0.5
ZOMBIE_SETTLE = 0.1
ZOMBIE_POLL_S = 0.01


@dataclass(eq=False)
class Zombie(Fault):
    """A worker ECS reports stopped while its process, frozen, still runs, thawed when that can matter.

    Right after a renewal was answered (at most ``ZOMBIE_RENEWAL_WAIT``) it is frozen (SIGSTOP) and its task
    reported stopped (``StoppedWhileRunning``).  The run's history is read as the workers write it
    (``HistoryTail``) and ``harness.faults.zombie.ZombieWatch`` decides when to thaw (SIGCONT): once the others
    buried this incarnation and took up a stream it held, or, failing that, just before its fence closes.

    Thawed, a process runs its overdue timers before it reads any answer (an ``epoll_wait`` interrupted by the
    stop returns nothing once its timeout has passed), so whatever it had in flight times out and is sent
    again.  Thawed before its next renewal is due (taken over within a heartbeat of the freeze), its next batch
    goes out first and is refused (``fenced write``), then its renewal (``lease lost:renewal refused``).  Frozen
    longer, its overdue renewal and next batch go out together; the renewal is refused by the burial in one
    round trip, the batch in two (the put, then the read of what took its number), so the incarnation is
    abandoned before the batch's refusal is read: ``lease lost``, and rightly no ``fenced write``.  With
    ``lost_renewal`` (the default), its DynamoDB ``UpdateItem`` answers are held past their timeout from the
    thaw until its fence has closed (``aws_slow``), and it is thawed two settles (a fifth of a lease) before
    its fence closes: its renewal's outcome unknown, it writes on, its batch is refused and it reads that it
    was superseded (``fenced write``), then self-fences, its session ending within the thaw's grace (a
    heartbeat).
    ``fault.stop`` says how it was thawed (``thawed``: ``after takeover`` or ``at its fence``, a miss), the
    stream ``taken`` and how long it was frozen (``frozen_ms``).  The fault ends at the thaw, or with
    ``lost_renewal`` once the held answers are let go (a timeout past its fence), and a ``kill`` step ends the
    process, as ECS would after its stop timeout."""

    where = targets(Runs("the worker frozen and the local ECS stand-in reporting its task stopped",
                         needs="death_notices", without=NO_NOTICES),
                    Never("nothing on AWS freezes a task while ECS reports it stopped"))

    defaults: ClassVar[dict[str, Any]] = {"lost_renewal": True}

    def __post_init__(self) -> None:
        self.params = {**self.defaults, **self.params}
        if not isinstance(self.params["lost_renewal"], bool):
            raise FaultError(f"{self.kind}: params.lost_renewal must be true or false")
        self._pause = Pause("pause", self.target, {})
        self._stopped = StoppedWhileRunning("stopped_while_running", self.target, {})
        self._lost: AwsSlow | None = None

    def start(self, topology: ProcessTopology) -> None:
        self._worker(topology)
        rules, lease_s = HardenedRules(topology.config), topology.config.lease_s
        watch = ZombieWatch(self.target, rules.fence_ms - 1000 * ZOMBIE_SETTLE * lease_s, rules.lease_ms,
                            _clock_offset(topology, self.target), marks=topology.config.profile == "hardened")
        tail = HistoryTail(topology.run_dir, "worker-*.jsonl")
        _watch(tail, watch)
        before = watch.renewed_ms
        _watch(tail, watch, until=lambda: watch.renewed_ms != before, within_s=ZOMBIE_RENEWAL_WAIT * lease_s)
        self._pause.start(topology)
        self.active, frozen = True, time.time()
        self._stopped.start(topology)
        _watch(tail, watch, until=lambda: watch.thaw(time.time() * 1000.0) is not None)
        thawed = watch.thaw(time.time() * 1000.0)
        if self.params["lost_renewal"]:
            self._lost = AwsSlow("zombie-renewal", self.target, {"operation": "UpdateItem",
                                                                  "latency_ms": rules.lease_ms})
            self._lost.start(topology)  # thawed a settle before the last moment: it writes for two
            time.sleep(max(0.0, watch.closes_ms / 1000.0 - ZOMBIE_SETTLE * lease_s - time.time()))
        self._pause.heal(topology)
        self.params.update(thawed=thawed, taken=watch.taken or "", frozen_ms=round(1000 * (time.time() - frozen)))
        if self._lost is not None:  # the fault's own timing: held until the fence has surely closed
            time.sleep(ZOMBIE_SETTLE * lease_s + rules.timeout_ms / 1000.0)
            self._lost.heal(topology)

    def heal(self, topology: ProcessTopology) -> None:
        if self._lost is not None:
            self._lost.heal(topology)
        self._pause.heal(topology)
        self.active = False


def _watch(tail: HistoryTail, watch: ZombieWatch, until: Callable[[], bool] = lambda: True,
           within_s: float = float("inf")) -> None:
    """Show ``watch`` what the workers wrote since the last look, every ``ZOMBIE_POLL_S``, until ``until()`` or
    ``within_s`` passed."""
    deadline = time.monotonic() + within_s
    while True:
        for event in tail.new_events():
            watch.see(event)
        if until() or time.monotonic() >= deadline:
            return
        time.sleep(ZOMBIE_POLL_S)


_CLOCK_LOCK = threading.Lock()


def _clock_offset(topology: ProcessTopology, target: str) -> int:
    """The worker's lease-clock offset (its clock file), ms."""
    path = topology.run_dir / "clock" / target
    return int(path.read_text().strip() or 0) if path.exists() else 0


def _shift_clock(topology: ProcessTopology, target: str, by_ms: int) -> None:
    """Move the worker's lease-clock offset (its clock file) by ``by_ms``: skews and steps add up."""
    with _CLOCK_LOCK:
        (topology.run_dir / "clock" / target).write_text(str(_clock_offset(topology, target) + by_ms))


class ClockSkew(Fault):
    """The worker's lease clock is off by ``offset_ms`` while the fault lasts."""

    where = targets(aws=NO_CLOCK)

    def start(self, topology: ProcessTopology) -> None:
        self._worker(topology)
        _shift_clock(topology, self.target, int(self.params["offset_ms"]))
        self.active = True

    def heal(self, topology: ProcessTopology) -> None:
        if self.active:
            _shift_clock(topology, self.target, -int(self.params["offset_ms"]))
        self.active = False


class ClockStep(Fault):
    """The worker's lease clock jumps by ``step_ms`` (forward or back, any size) and stays there for the rest
    of the run, as after an NTP step: an instant fault with nothing to undo."""

    where = targets(aws=NO_CLOCK)

    def start(self, topology: ProcessTopology) -> None:
        self._worker(topology)
        _shift_clock(topology, self.target, int(self.params["step_ms"]))


@dataclass(eq=False)
class PauseMidWrite(Fault):
    """Freeze the worker in the middle of a write: a latency toxic of ``hold_ms`` on its DynamoDB proxy
    (``stream`` ``upstream``: requests are held on their way, so they land while the worker is frozen;
    ``downstream``: they landed and their answers are held), then SIGSTOP half a hold later, while the
    requests sent since are held; SIGCONT and the toxic removed when the fault stops."""

    where = targets(aws=NO_SIGSTOP)

    defaults: ClassVar[dict[str, Any]] = {"stream": "upstream", "hold_ms": 200}

    def __post_init__(self) -> None:
        self.params = {**self.defaults, **self.params}
        if self.params["stream"] not in ("upstream", "downstream"):
            raise FaultError(f"{self.kind}: params.stream must be upstream or downstream")
        self._toxic = ToxicFault("toxic", self.target, {"service": "dynamodb", "type": "latency",
                                                        "stream": self.params["stream"],
                                                        "attributes": {"latency": int(self.params["hold_ms"])}})
        self._pause = Pause("pause", self.target, {})

    def start(self, topology: ProcessTopology) -> None:
        self._toxic.start(topology)
        self.active = True
        time.sleep(int(self.params["hold_ms"]) / 2000.0)  # the fault's own timing: requests sent meanwhile are held
        self._pause.start(topology)

    def heal(self, topology: ProcessTopology) -> None:
        self._pause.heal(topology)
        self._toxic.heal(topology)
        self.active = False


REGISTRY: dict[str, type[Fault]] = {
    "kill": Kill, "term": Term, "restart": Restart, "join": Join, "pause": Pause,
    "partition_aws": PartitionAws, "partition_upstream": PartitionUpstream,
    "reset_upstream": ResetUpstream, "aws_reset": AwsReset, "aws_timeout": AwsTimeout, "toxic": ToxicFault,
    "clock_skew": ClockSkew, "clock_step": ClockStep, "pause_mid_write": PauseMidWrite,
    "forged_death_notice": ForgedDeathNotice, "stopped_while_running": StoppedWhileRunning, "zombie": Zombie,
    **AWS_API_FAULTS,
}


def build(kind: str, target: str, params: dict[str, Any] | None = None) -> Fault:
    factory = REGISTRY.get(kind)
    if factory is None:
        raise FaultError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(REGISTRY))}")
    return factory(kind, target, dict(params or {}))


def where(kind: str, target: str) -> Runs | Never:
    """How ``target`` (``LOCAL``, ``AWS``) runs ``kind``, or why it never can; FaultError for an unknown kind."""
    factory = REGISTRY.get(kind)
    if factory is None:
        raise FaultError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(REGISTRY))}")
    return factory.where.get(target, Never(f"{kind} says nothing of {target}"))


def refusals(kinds: list[str], target: str, provides: set[str]) -> list[str]:
    """Why each of ``kinds`` cannot run on ``target`` in a run that provides the capabilities ``provides`` (none:
    every one can), one line per kind: what a scenario is refused with before anything starts."""
    refused = []
    for kind in sorted(set(kinds)):
        runs = where(kind, target)
        if isinstance(runs, Never):
            refused.append(f"{kind}: {runs.why}")
        elif runs.needs and runs.needs not in provides:
            refused.append(f"{kind}: {runs.without}")
    return refused


class Nemesis:
    """Applies faults to a local topology and records them in the history."""

    def __init__(self, topology: ProcessTopology) -> None:
        self.topology = topology
        self.history = HistoryWriter(str(topology.run_dir / "history" / "nemesis.jsonl"), "nemesis")
        self.active: list[Fault] = []

    def start(self, kind: str, target: str, **params: Any) -> Fault:
        fault = build(kind, target, params)
        self.history.emit("fault.start", kind=kind, target=target, params=fault.params)
        self.active.append(fault)
        fault.start(self.topology)
        return fault

    def stop(self, fault: Fault) -> None:
        fault.stop(self.topology)
        if fault in self.active:
            self.active.remove(fault)
        self.history.emit("fault.stop", kind=fault.kind, target=fault.target, params=fault.params)

    def heal_all(self) -> None:
        """Heal every fault still active (in reverse order); used on teardown, also after errors."""
        for fault in reversed(list(self.active)):
            try:
                self.stop(fault)
            except Exception as exc:  # heal the rest whatever one of them says
                self.history.emit("fault.heal_error", kind=fault.kind, target=fault.target, error=str(exc))
        self.active.clear()
        self.history.close()
