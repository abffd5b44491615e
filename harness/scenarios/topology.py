"""What the scenario runner needs of a fleet under test (``Topology``), and the local one (``LocalTopology``:
a ``Cluster`` of local processes).  The runner's phases use only this, so the same phases run against a
deployed fleet (``harness.aws.topology``), which answers each question through AWS APIs instead.

A topology gives: the harness's own history writer; START and STOP of a connection, as a user would send
them; the upstream simulator's streams (heads and sessions, its control API); the workers running now; the
DynamoDB client and table names (the ground truth, and ``owned-by`` targets); how far each stream is known to
be stored and which streams a drain holds now (the settle phase); and a nemesis that applies fault steps and
heals them all at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from fleet.history import HistoryWriter
from harness.backends.resources import client
from harness.cluster import Cluster
from harness.history import Event, HistoryTail

DRAIN_ENDS = frozenset({"drain.done", "lease.release", "lease.lost"})


class FaultPlane(Protocol):
    """Applies fault steps by kind and records them (``harness.faults.plane.Nemesis`` is one)."""

    def start(self, kind: str, target: str, **params: Any) -> Any: ...

    def stop(self, fault: Any) -> None: ...

    def heal_all(self) -> None: ...


class Topology(Protocol):
    run_dir: Path
    history: HistoryWriter
    nemesis: FaultPlane
    logs: str  # where the processes' logs are, for an error message

    def start_connection(self, connection_id: str) -> None:
        """Create the upstream stream, then START it through the router; ``ClusterError`` if not accepted."""

    def stop_connection(self, connection_id: str) -> None: ...

    def streams(self) -> dict[str, Any]:
        """The simulator's streams by id: ``head_seq`` and ``sessions`` ({worker, closed, ...})."""

    def live_workers(self) -> set[str]:
        """The ids of the workers running now (and not paused): their sessions count as owners."""

    def dynamodb(self) -> tuple[Any, dict[str, str]]:
        """A boto3 DynamoDB client and the table names by role (connections, messages, workers)."""

    def stored_through(self, ids: list[str]) -> dict[str, float]:
        """Per connection id of ``ids``, the highest seq known to be stored (what the workers reported
        answered)."""

    def draining(self, ids: list[str]) -> list[str]:
        """The connection ids of ``ids`` a drain holds now (it may still store what the stream emitted before
        its STOP)."""


class Drains:
    """The drains in progress, from the workers' events read in each file's order: a drain opens with its
    ``lease.acquire`` ok via ``drain`` and ends with the same incarnation's ``drain.done``, ``lease.release``
    or ``lease.lost`` at that epoch, or with its process (the worker's next ``worker.start``)."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, str, str, int], str] = {}  # (pk, worker, gen, epoch) -> connection id

    def follow(self, events: Iterable[Event]) -> None:
        for event in events:
            key = (str(event.get("pk")), str(event.get("worker")), str(event.get("gen")), int(event.get("epoch") or 0))
            if event.get("type") == "lease.acquire":
                if event.get("outcome") == "ok" and event.get("via") == "drain":
                    self.held[key] = key[0].removeprefix("CONN#")
            elif event.get("type") in DRAIN_ENDS:
                self.held.pop(key, None)
            elif event.get("type") == "worker.start":
                self.held = {k: c for k, c in self.held.items() if k[1] != key[1]}

    def of(self, running: set[str]) -> set[str]:
        """The connection ids drained now by a worker whose process still runs (a paused one may resume and
        store; a killed one's drain ended with it)."""
        return {connection_id for (_, worker, _, _), connection_id in self.held.items() if worker in running}


class LocalTopology:
    """A ``Cluster`` of local processes: workers are child processes, faults go through ``Nemesis``."""

    def __init__(self, cluster: Cluster) -> None:
        from harness.faults.plane import Nemesis

        self.cluster = cluster
        self.run_dir = cluster.run_dir
        self.history = cluster.history
        self.nemesis: FaultPlane = Nemesis(cluster)
        self.logs = str(cluster.run_dir / "logs")
        self._reports = WorkerReports(cluster.run_dir)

    def start_connection(self, connection_id: str) -> None:
        self.cluster.start_connection(connection_id)

    def stop_connection(self, connection_id: str) -> None:
        self.cluster.stop_connection(connection_id)

    def streams(self) -> dict[str, Any]:
        return self.cluster.streams()

    def live_workers(self) -> set[str]:
        return {h.id for h in self.cluster.workers.values()
                if h.child is not None and h.child.running() and not h.child.paused}

    def dynamodb(self) -> tuple[Any, dict[str, str]]:
        backend = self.cluster.backend
        assert backend is not None
        return client(backend.env(), "dynamodb"), dict(backend.tables)

    def stored_through(self, ids: list[str]) -> dict[str, float]:
        """From the workers' ``msg.persist`` events answered ok (their history files, read as they grow)."""
        return self._reports.stored_through(ids)

    def draining(self, ids: list[str]) -> list[str]:
        """From the workers' drain events (``Drains``), of the workers whose process runs (paused or not)."""
        running = {h.id for h in self.cluster.workers.values() if h.child is not None and h.child.running()}
        return self._reports.draining(ids, running)


class WorkerReports:
    """What a run's workers report in their history files, read as they grow: how far each stream is stored
    (``msg.persist`` answered ok) and the drains in progress (``Drains``)."""

    def __init__(self, run_dir: Path) -> None:
        self._tail = HistoryTail(run_dir, "worker-*.jsonl",
                                 types={"msg.persist", "lease.acquire", "worker.start", *DRAIN_ENDS})
        self._stored: dict[str, float] = {}
        self._drains = Drains()

    def stored_through(self, ids: list[str]) -> dict[str, float]:
        self._read()
        return {i: self._stored[i] for i in ids if i in self._stored}

    def draining(self, ids: list[str], running: set[str]) -> list[str]:
        """The connection ids of ``ids`` a drain of a worker of ``running`` holds now."""
        self._read()
        return sorted(self._drains.of(running) & set(ids))

    def _read(self) -> None:
        events = self._tail.new_events()
        self._drains.follow(events)
        for event in events:
            if (event.get("type") == "msg.persist" and event.get("outcome") == "ok"
                    and isinstance(event.get("pk"), str)):
                connection_id = event["pk"].removeprefix("CONN#")
                self._stored[connection_id] = max(self._stored.get(connection_id, 0),
                                                  float(event.get("seq_to") or 0))
