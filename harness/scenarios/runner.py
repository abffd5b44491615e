"""Runs one scenario end to end: topology up, streams started, faults applied on schedule, recovery
awaited, the store's ground truth recorded, checkers run, ``verdict.json`` written.

Phases, each announced on the progress callback: ``up`` (backend, simulator, router, workers), ``start``
(START every connection through the router; wait until the simulator sees a session for each), ``steady``
(one lease of normal running), ``faults`` (the schedule; a fault with a duration is stopped after it),
``recover`` (until every stream has a live session of a running worker, or the bound has passed twice),
``settle`` (one more lease, so the last backlog is persisted), ``final`` (the simulator's heads and every
stored message written to the history as ``final.emitted`` / ``final.persisted``).  Faults are healed
and every process stopped in ``finally``, whatever happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.backends.resources import client
from harness.checkers.verdict import write_verdict
from harness.cluster import Cluster, ClusterSpec
from harness.faults.plane import Fault, Nemesis
from harness.scenarios.catalog import SCENARIOS, Step, schedule

Progress = Callable[[str], None]


class ScenarioError(Exception):
    """The scenario could not be run (as opposed to: it ran and the fleet misbehaved)."""


@dataclass
class ScenarioRun:
    name: str
    profile: str = "hardened"
    timescale: float = 0.1
    workers: int = 3
    connections: int = 30
    seed: int = 1
    run_dir: Path = Path("runs/latest")
    rate: float = 5.0
    dynamodb: str = "dynalite"
    localstack_url: str = ""


def _quiet(_: str) -> None:
    pass


def run_scenario(run: ScenarioRun, progress: Progress = _quiet) -> dict[str, Any]:
    """Run ``run`` and return its verdict (also written to ``RUN_DIR/verdict.json``)."""
    if run.name not in SCENARIOS:
        raise ScenarioError(f"unknown scenario {run.name!r}; known: {', '.join(SCENARIOS)}")
    if run.workers < 2:
        raise ScenarioError("a scenario needs at least 2 workers (someone must take over)")
    scenario = SCENARIOS[run.name]
    spec = ClusterSpec(workers=run.workers, profile=run.profile, timescale=run.timescale,
                       run_dir=run.run_dir, dynamodb=run.dynamodb, rate=run.rate, seed=run.seed,
                       localstack_url=run.localstack_url)
    config = spec.fleet_config()
    steps = schedule(run.name, run.seed, config, run.workers)
    bound = scenario.bound(config)
    started = time.monotonic()

    def say(message: str) -> None:
        progress(f"[{time.monotonic() - started:6.1f}s] {run.name}/{run.profile}: {message}")

    say(f"starting {run.workers} workers (time scale {run.timescale}, lease {config.lease_s:.2f} s)")
    with Cluster(spec) as cluster:
        nemesis = Nemesis(cluster)
        try:
            cluster.history.emit(
                "run.start", scenario=run.name, profile=run.profile, timescale=run.timescale,
                config=config.durations(), connections=run.connections, workers=run.workers,
                bound_ms=bound, seed=run.seed, schedule=[s.to_json() for s in steps],
                stop_bound_ms=config.scaled_ms(config.heartbeat_ms if run.profile == "hardened"
                                               else config.desired_check_ms + config.heartbeat_ms),
            )
            ids = [f"c{i:03d}" for i in range(run.connections)]
            say(f"starting {len(ids)} connections through the router")
            for connection_id in ids:
                cluster.start_connection(connection_id)
            _await_owned(cluster, ids, timeout_s=config.reconcile_s + 4 * config.lease_s + 10)
            say("every stream has an owner; steady running")
            time.sleep(config.lease_s)
            _apply(cluster, nemesis, steps, config.lease_s, say)
            say("faults done; waiting for recovery")
            recover_for = 2 * (bound or 0) / 1000.0 + 2 * config.lease_s
            owned = _await_owned(cluster, ids, timeout_s=recover_for, raise_on_timeout=False)
            say("recovered" if owned else f"not every stream recovered within {recover_for:.1f} s")
            time.sleep(config.lease_s)
            _record_final(cluster, ids)
            cluster.history.emit("run.stop")
        finally:
            nemesis.heal_all()
    say("checking the history")
    verdict = write_verdict(run.run_dir)
    say(f"valid={verdict['valid']} duplicate_claims={verdict['duplicate_claims']} "
        f"lost={verdict['lost_sequences']} recovery max={verdict['recovery_ms'].get('max')} ms "
        f"(bound {bound})")
    return verdict


def _live_workers(cluster: Cluster) -> set[str]:
    return {h.id for h in cluster.workers.values()
            if h.child is not None and h.child.running() and not h.child.paused}


def _await_owned(cluster: Cluster, ids: list[str], timeout_s: float, raise_on_timeout: bool = True) -> bool:
    """Wait until every stream has an open session held by a running, unpaused worker."""
    deadline = time.monotonic() + timeout_s
    while True:
        live = _live_workers(cluster)
        streams = cluster.streams()
        missing = [i for i in ids if not any(
            s["closed"] is None and s["worker"] in live for s in streams.get(i, {}).get("sessions", []))]
        if not missing:
            return True
        if time.monotonic() > deadline:
            if raise_on_timeout:
                raise ScenarioError(f"{len(missing)} streams never got an owner within {timeout_s:.0f} s "
                                    f"(e.g. {', '.join(missing[:5])}); see {cluster.run_dir}/logs")
            return False
        time.sleep(0.05)


def _resolve(cluster: Cluster, target: str) -> str:
    if target != "busiest":
        return target
    counts = {w: 0 for w in _live_workers(cluster)}
    for stream in cluster.streams().values():
        for session in stream["sessions"]:
            if session["closed"] is None and session["worker"] in counts:
                counts[session["worker"]] += 1
    return max(sorted(counts), key=lambda w: counts[w])


def _apply(cluster: Cluster, nemesis: Nemesis, steps: list[Step], lease_s: float,
           say: Callable[[str], None]) -> None:
    begin = time.monotonic()
    for step in sorted(steps, key=lambda s: s.at_s):
        delay = begin + step.at_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        target = _resolve(cluster, step.target)
        say(f"fault {step.kind} -> {target}" + (f" for {step.duration_s:.2f} s" if step.duration_s else ""))
        fault: Fault = nemesis.start(step.kind, target, **step.params)
        if step.duration_s:
            time.sleep(step.duration_s)
        nemesis.stop(fault)


def _record_final(cluster: Cluster, ids: list[str]) -> None:
    """Ground truth into the history: each stream's head, and every stored message's sequence."""
    for connection_id, stream in cluster.streams().items():
        cluster.history.emit("final.emitted", pk=f"CONN#{connection_id}", head_seq=stream["head_seq"])
    assert cluster.backend is not None
    seqs: dict[str, list[int]] = {f"CONN#{i}": [] for i in ids}
    paginator = client(cluster.backend.env(), "dynamodb").get_paginator("scan")
    for page in paginator.paginate(TableName=cluster.backend.tables["messages"],
                                   ProjectionExpression="pk, message_data"):
        for item in page.get("Items", []):
            data = item.get("message_data", {}).get("S", "")
            _, _, seq = data.rpartition(":")
            if seq.isdigit():
                seqs.setdefault(item["pk"]["S"], []).append(int(seq))
    for pk, found in seqs.items():
        cluster.history.emit("final.persisted", pk=pk, seqs=sorted(found))
