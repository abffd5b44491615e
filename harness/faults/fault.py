"""The fault interface every kind implements, and the error a fault raises when it cannot be applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.cluster import Cluster


class FaultError(Exception):
    """A fault could not be applied (unknown kind, unknown target, the target already gone)."""


@dataclass(eq=False)  # two faults are the same fault only if they are one object
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
