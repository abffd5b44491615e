"""The nemesis: faults as operations in the run's history, and the registry that builds them by name.

A fault is a tiny object (Toxiproxy's toxic is the model): ``start`` breaks something, ``stop`` ends the
fault the way the scenario means (a paused worker is continued, a partition healed), and ``heal`` undoes
whatever is still broken and is safe to call at any time, twice.  ``Nemesis`` records ``fault.start`` /
``fault.stop`` (src ``nemesis``) around each and heals everything still active on ``heal_all``, which the
scenario runner calls in a ``finally``: no process is left stopped, no proxy disabled, no clock skewed.

Kinds: ``kill`` (SIGKILL), ``term`` (SIGTERM, waits for the exit), ``restart`` (start a stopped worker
again), ``pause`` (SIGSTOP until stop, then SIGCONT), ``partition_aws`` / ``partition_upstream`` (the
worker's proxies disabled: every live connection closed, new ones refused), ``reset_upstream`` (the
simulator drops live sessions mid-stream), ``aws_reset`` / ``aws_timeout`` (Toxiproxy ``reset_peer`` /
``timeout`` toxics on the worker's DynamoDB proxy: requests in flight are reset or hang), ``clock_skew``
(an offset on the worker's lease clock).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fleet.history import HistoryWriter
from harness.cluster import Cluster, http_json


class FaultError(Exception):
    """A fault could not be applied (unknown kind, unknown target, the target already gone)."""


@dataclass
class Fault:
    kind: str
    target: str
    params: dict[str, Any] = field(default_factory=dict)
    active: bool = False

    def start(self, cluster: Cluster) -> None:
        raise NotImplementedError

    def stop(self, cluster: Cluster) -> None:
        self.heal(cluster)

    def heal(self, cluster: Cluster) -> None:
        """Undo what is still broken; idempotent.  Instant faults have nothing to undo."""

    def _worker(self, cluster: Cluster) -> Any:
        handle = cluster.workers.get(self.target)
        if handle is None or handle.child is None:
            raise FaultError(f"{self.kind}: no worker {self.target!r} (workers: {', '.join(cluster.workers)})")
        return handle


class Kill(Fault):
    def start(self, cluster: Cluster) -> None:
        child = self._worker(cluster).child
        child.signal(signal.SIGKILL)
        child.wait(10.0)


class Term(Fault):
    def start(self, cluster: Cluster) -> None:
        child = self._worker(cluster).child
        child.signal(signal.SIGCONT)
        child.signal(signal.SIGTERM)
        if child.wait(max(10.0, 5 * cluster.config.lease_s)) is None:
            raise FaultError(f"{self.target} did not exit after SIGTERM")


class Restart(Fault):
    def start(self, cluster: Cluster) -> None:
        handle = self._worker(cluster)
        if handle.child.running():
            raise FaultError(f"restart: {self.target} is still running")
        cluster.add_worker(self.target)


class Pause(Fault):
    def start(self, cluster: Cluster) -> None:
        self._worker(cluster).child.signal(signal.SIGSTOP)
        self.active = True

    def heal(self, cluster: Cluster) -> None:
        handle = cluster.workers.get(self.target)
        if self.active and handle is not None and handle.child is not None:
            handle.child.signal(signal.SIGCONT)
        self.active = False


class Partition(Fault):
    """Disable the target worker's proxies for the given services."""

    services: tuple[str, ...] = ()

    def start(self, cluster: Cluster) -> None:
        handle = self._worker(cluster)
        assert cluster.toxiproxy is not None
        for service in self.services:
            cluster.toxiproxy.update_proxy(handle.proxies[service], enabled=False)
        self.active = True

    def heal(self, cluster: Cluster) -> None:
        handle = cluster.workers.get(self.target)
        if self.active and handle is not None and cluster.toxiproxy is not None:
            for service in self.services:
                cluster.toxiproxy.update_proxy(handle.proxies[service], enabled=True)
        self.active = False


class PartitionAws(Partition):
    services = ("dynamodb", "services")


class PartitionUpstream(Partition):
    services = ("upstream",)


class ResetUpstream(Fault):
    """The simulator drops live sessions: every stream (target ``all``) or one connection id."""

    def start(self, cluster: Cluster) -> None:
        path = "/disconnect" if self.target == "all" else f"/streams/{self.target}/disconnect"
        status, payload = http_json("POST", cluster.upstream_control_url + path)
        if status != 200:
            raise FaultError(f"reset_upstream: the simulator answered {status}: {payload}")
        self.params["dropped"] = payload.get("disconnected", payload) if isinstance(payload, dict) else payload


class AwsToxic(Fault):
    """A Toxiproxy toxic on the worker's DynamoDB proxy while the fault lasts."""

    toxic_type = ""
    attributes: ClassVar[dict[str, int]] = {}

    def start(self, cluster: Cluster) -> None:
        handle = self._worker(cluster)
        assert cluster.toxiproxy is not None
        attributes = {**self.attributes, **self.params.get("attributes", {})}
        cluster.toxiproxy.add_toxic(handle.proxies["dynamodb"], self.toxic_type, name=self.kind,
                                    stream="upstream", attributes=attributes)
        self.active = True

    def heal(self, cluster: Cluster) -> None:
        handle = cluster.workers.get(self.target)
        if self.active and handle is not None and cluster.toxiproxy is not None:
            cluster.toxiproxy.remove_toxic(handle.proxies["dynamodb"], self.kind)
        self.active = False


class AwsReset(AwsToxic):
    toxic_type = "reset_peer"
    attributes: ClassVar[dict[str, int]] = {"timeout": 0}


class AwsTimeout(AwsToxic):
    toxic_type = "timeout"
    attributes: ClassVar[dict[str, int]] = {"timeout": 0}


class ClockSkew(Fault):
    def start(self, cluster: Cluster) -> None:
        self._worker(cluster)
        (cluster.run_dir / "clock" / self.target).write_text(str(int(self.params["offset_ms"])))
        self.active = True

    def heal(self, cluster: Cluster) -> None:
        if self.active:
            (cluster.run_dir / "clock" / self.target).write_text("0")
        self.active = False


REGISTRY: dict[str, Callable[[str, str, dict[str, Any]], Fault]] = {
    "kill": Kill, "term": Term, "restart": Restart, "pause": Pause,
    "partition_aws": PartitionAws, "partition_upstream": PartitionUpstream,
    "reset_upstream": ResetUpstream, "aws_reset": AwsReset, "aws_timeout": AwsTimeout,
    "clock_skew": ClockSkew,
}


def build(kind: str, target: str, params: dict[str, Any] | None = None) -> Fault:
    factory = REGISTRY.get(kind)
    if factory is None:
        raise FaultError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(REGISTRY))}")
    return factory(kind, target, dict(params or {}))


class Nemesis:
    """Applies faults to a cluster and records them in the history."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.history = HistoryWriter(str(cluster.run_dir / "history" / "nemesis.jsonl"), "nemesis")
        self.active: list[Fault] = []

    def start(self, kind: str, target: str, **params: Any) -> Fault:
        fault = build(kind, target, params)
        self.history.emit("fault.start", kind=kind, target=target, params=fault.params)
        self.active.append(fault)
        fault.start(self.cluster)
        return fault

    def stop(self, fault: Fault) -> None:
        fault.stop(self.cluster)
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
