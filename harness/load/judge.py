"""The end of a Locust run against a running ``wsfleet up``: the same settle, final scan and verdict as a
scenario's (``harness.scenarios.runner``), over the streams the Locust users STARTed.

``judge(state, history, say)`` finds the users' streams (their ``load.start`` events in the run folder),
waits as a scenario's settle does (one lease, then until every one of them still STARTed has stored what it
had emitted when the settle began and no drain holds one of them, at most four leases more), records
``run.stop`` and the ground truth (``harness.ground_truth.record_final``: the simulator's heads, every stored
message, every connection item of the users' streams) into the Locust history, then writes the run folder's
``verdict.json`` with every checker (``harness.checkers.verdict.write_verdict``) and returns it;
``failing_checkers`` names those that apply and are not valid.  ``UpTopology`` is the running ``up`` seen
from outside its process: its state file (``.wsfleet/up.json``), its simulator's control API, its backend
and its workers' history files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from fleet.config import FleetConfig
from fleet.history import HistoryWriter
from harness.backends.resources import client
from harness.checkers.verdict import write_verdict
from harness.cluster import simulator_streams, start_connection, stop_connection
from harness.history import HistoryTail
from harness.scenarios.runner import record_final_scan, settle_streams
from harness.scenarios.topology import WorkerReports

PREFIX = "load-"  # the connection ids of the Locust users (``load-<pid>-<n>``)


class _NoFaults:
    """A Locust run's faults are its storm, which the locustfile applies itself: nothing to heal here."""

    def start(self, kind: str, target: str, **params: Any) -> Any:
        raise NotImplementedError(f"{kind}: a Locust run applies no scheduled faults")

    def stop(self, fault: Any) -> None:
        raise NotImplementedError("a Locust run applies no scheduled faults")

    def heal_all(self) -> None:
        return None


class UpTopology:
    """A running ``wsfleet up`` (its state file's contents), as the scenario runner's phases ask of a fleet
    (``harness.scenarios.topology.Topology``)."""

    def __init__(self, state: dict[str, Any], history: HistoryWriter) -> None:
        self.state = state
        self.run_dir = Path(state["run_dir"])
        self.history = history
        self.nemesis = _NoFaults()
        self.logs = str(self.run_dir / "logs")
        self._reports = WorkerReports(self.run_dir)

    def start_connection(self, connection_id: str) -> None:
        start_connection(self.history, self.state["router_url"], self.state["upstream_url"],
                         self.state["upstream_control_url"], connection_id)

    def stop_connection(self, connection_id: str) -> None:
        stop_connection(self.history, self.state["router_url"], connection_id)

    def streams(self) -> dict[str, Any]:
        return simulator_streams(self.state["upstream_control_url"])

    def live_workers(self) -> set[str]:
        """The workers of the state file whose process still runs (a storm may have killed some)."""
        return {str(w["id"]) for w in self.state.get("workers", []) if psutil.pid_exists(int(w["pid"]))}

    def dynamodb(self) -> tuple[Any, dict[str, str]]:
        return client(self.state["backend_env"], "dynamodb"), dict(self.state["tables"])

    def stored_through(self, ids: list[str]) -> dict[str, float]:
        return self._reports.stored_through(ids)

    def draining(self, ids: list[str]) -> list[str]:
        return self._reports.draining(ids, self.live_workers())



def started_ids(run_dir: Path) -> list[str]:
    """The connection ids the Locust users of this run folder STARTed (every Locust process's history)."""
    events = HistoryTail(run_dir, "locust-*.jsonl", types={"load.start"}).new_events()
    return sorted({str(e["pk"]).removeprefix("CONN#") for e in events if isinstance(e.get("pk"), str)})


def still_started(topology: UpTopology, ids: list[str]) -> list[str]:
    """The connection ids of ``ids`` whose desired state is STARTED now (a user whose STOP was cut by the end
    of the test left its stream STARTED; a STOPped stream's later emissions are never stored)."""
    dynamodb, tables = topology.dynamodb()
    wanted = {f"CONN#{i}" for i in ids}
    pages = dynamodb.get_paginator("scan").paginate(TableName=tables["connections"], ConsistentRead=True)
    return sorted(item["pk"]["S"].removeprefix("CONN#") for page in pages for item in page.get("Items", [])
                  if item["pk"]["S"] in wanted and item.get("desired_state", {}).get("S") == "STARTED")


def judge(state: dict[str, Any], history: HistoryWriter, say: Callable[[str], None]) -> dict[str, Any]:
    """Settle, scan and judge the run (see the module docstring); the verdict."""
    topology = UpTopology(state, history)
    ids = started_ids(topology.run_dir)
    lease_s = FleetConfig(timescale=float(state.get("timescale", 1.0))).lease_s
    started = still_started(topology, ids)
    say(f"judging {len(ids)} streams ({len(started)} still STARTed): settling (at least {lease_s:g} s)")
    settled_t, behind, draining = settle_streams(topology, started, ids, lease_s, timeout_s=4 * lease_s)
    if behind or draining:
        say(f"after the settle {len(behind)} streams were behind and {len(draining)} draining")
    history.emit("run.stop", settled_t=settled_t)
    record_final_scan(topology, ids, PREFIX)
    return write_verdict(topology.run_dir)


def failing_checkers(verdict: dict[str, Any]) -> list[str]:
    """The checkers of ``verdict`` that apply to the run (``applies`` not false) and are not valid."""
    return sorted(name for name, check in verdict["checkers"].items()
                  if check.get("valid") is not True and check.get("applies", True) is not False)
