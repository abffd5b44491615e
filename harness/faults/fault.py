"""The fault interface every kind implements, what it needs of the topology it breaks (``ProcessTopology``),
where each kind can run (``Runs`` / ``Never`` per target), and the error a fault raises when it cannot be
applied.

A kind says, as data on its class (``Fault.where``, made by ``targets``), for each target (``LOCAL``: a
``Cluster`` of local processes; ``AWS``: a deployed fleet, ``harness.aws``) either how that target runs it,
with what the run must provide for it (a capability: ``death_notices`` locally, ``fis`` on AWS), or why it
never can.  ``harness.faults.plane``'s registry reads it to refuse a scenario before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from fleet.config import FleetConfig
from harness.ecs_tasks import LocalTasks
from harness.faults.network import ToxiproxyClient
from harness.processes import Child

LOCAL = "local"
AWS = "aws"


class FaultError(Exception):
    """A fault could not be applied (unknown kind, unknown target, the target already gone)."""


@dataclass(frozen=True)
class Runs:
    """The target runs the kind: ``how``; if ``needs`` names a capability, only in a run that provides it
    (``without``: why not otherwise)."""

    how: str
    needs: str = ""
    without: str = ""


@dataclass(frozen=True)
class Never:
    """The target cannot run the kind, and ``why``."""

    why: str


LOCALLY = Runs("the harness's own processes, proxies and clock files")
NO_AWS_ACTION = Never("no AWS action of the harness does this: a network fault on a deployment is a FIS "
                      "experiment of its own (see `wsfleet aws-plan`)")


def targets(local: Runs | Never = LOCALLY, aws: Runs | Never = NO_AWS_ACTION) -> Mapping[str, Runs | Never]:
    """A kind's ``where``: how each target runs it, or why not."""
    return MappingProxyType({LOCAL: local, AWS: aws})


class Worker(Protocol):
    """One worker of a ``ProcessTopology``: its process (None before it started), its proxies by service and
    its local ECS task."""

    @property
    def child(self) -> Child | None: ...

    @property
    def proxies(self) -> Mapping[str, str]: ...

    @property
    def task_arn(self) -> str: ...


class ProcessTopology(Protocol):
    """What a fault needs of the topology it breaks: workers whose processes it can signal and whose proxies it
    can cut, the Toxiproxy that holds those proxies, the clock files under ``run_dir/clock``, the simulator's
    control API, the local ECS tasks (death notices) and a way to start a worker.  ``harness.cluster.Cluster``
    is one."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def config(self) -> FleetConfig: ...

    @property
    def workers(self) -> Mapping[str, Worker]: ...

    @property
    def toxiproxy(self) -> ToxiproxyClient | None: ...

    @property
    def tasks(self) -> LocalTasks | None: ...

    @property
    def upstream_control_url(self) -> str: ...

    def add_worker(self, worker_id: str) -> object: ...


@dataclass(eq=False)  # two faults are the same fault only if they are one object
class Fault:
    kind: str
    target: str
    params: dict[str, Any] = field(default_factory=dict)
    active: bool = False
    # where the kind can run, by target (``LOCAL``, ``AWS``); a kind that says nothing runs locally only
    where: ClassVar[Mapping[str, Runs | Never]] = targets()

    def start(self, topology: ProcessTopology) -> None:
        raise NotImplementedError

    def stop(self, topology: ProcessTopology) -> None:
        self.heal(topology)

    def heal(self, topology: ProcessTopology) -> None:
        """Undo what is still broken; idempotent.  Instant faults have nothing to undo."""

    def _worker(self, topology: ProcessTopology) -> Worker:
        handle = topology.workers.get(self.target)
        if handle is None or handle.child is None:
            raise FaultError(f"{self.kind}: no worker {self.target!r} (workers: {', '.join(topology.workers)})")
        return handle

    def _child(self, topology: ProcessTopology) -> Child:
        child = self._worker(topology).child
        assert child is not None
        return child
