"""Two regions under one run: each its own embedded backend (its own server processes), its own warm fleet
(``Cluster``, ``region`` naming its workers ``east-worker-1``, ...), Global Tables between their DynamoDB
endpoints (``GlobalTables``), one upstream simulator outside both, and Route 53 failover in front of the
two routers: created in the primary's moto Route 53 as terraform defines it (``zone_records``), judged by
the harness (``route53``).

- ``east`` is the PRIMARY region, ``west`` the SECONDARY.  Health checkers probe each router's
  ``/health`` on Route 53's schedule (``HealthCheckSpec``, scaled by the run's time scale); the zone's answer
  and each check's flips go to the history (``dns.answer``, ``health.check``, src ``route53``).
- Clients reach the router through ``router_url()``: a resolver that keeps each answer for the TTL
  (``dns.resolved`` when the answer it gives changes), as the router's callers do.
- With ``gate`` (the default), the region activation gate's authority (``RoutingControls``: a stand-in of
  Route 53 ARC's data plane, a cluster of endpoints read with SigV4) stands outside both regions with east
  On, and every worker and router reads its region's control before consuming or writing; ``fail_over``
  moves the activation (one failover at a time; after the wait the target is read again, and the failover
  gives up if it can no longer take it), by itself with ``automate``: the operator's automation
  (``harness.region.automation``), on the primary's health check alone while the standby's DynamoDB
  answers (``store_answers``), back through ``Failback``, or without waiting for replication while the
  standby's DynamoDB does not answer (``failback.forced``); after the activation wait, a move waits for what
  the new region lacks of the old one's writes while the old one's DynamoDB answers, up to a bound
  (``after_wait``; at the bound it activates and says so: ``failover.unreplicated``); at each activation,
  what the activated region lacks of the other's writes goes to the history (``activation.missing``), and
  after it the activated region's router re-applies its control journal (``fleet.router.reapply_journal``),
  as the automation would invoke it.
- ``unreachable``: regions Route 53's health checkers cannot reach (a gray failure: the region's API is
  unreachable from outside while its workers keep their upstream and DynamoDB); toggled, a flapping check.
- ``outage(region)`` cuts a region off (the fault): its router stops answering (SIGSTOP: connections open,
  nothing answers, as a dead region's endpoint behaves to a health checker), every proxy of its workers
  is disabled, so they reach neither DynamoDB, the queue, nor the upstream, and replication neither leaves
  nor reaches it (its writes not yet replicated stay behind).  ``heal(region)`` undoes it.

Every part is stopped when the block ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from fleet.config import FleetConfig
from fleet.history import HistoryWriter
from fleet.region_gate import activation_wait_s
from harness.backends.base import LOCAL_CREDENTIALS
from harness.backends.embedded import EmbeddedBackend, start_embedded
from harness.backends.resources import client
from harness.cluster import (
    SERVICE_PROXIES,
    Cluster,
    ClusterSpec,
    run_together,
    start_connection,
    start_upstream,
    stop_connection,
)
from harness.http_client import HttpError, request
from harness.processes import Child, Started, start_thread
from harness.region.automation import (
    ABANDON,
    PRIMARY,
    REPLICATION_WAIT_P99S,
    STANDBY,
    UNREPLICATED,
    WAIT,
    Automation,
    Failback,
    after_wait,
    fit_after_wait,
)
from harness.region.global_tables import STATS_EVERY_S, GlobalTables
from harness.region.replication import LagModel
from harness.region.route53 import (
    ANSWER_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    RECORD_TTL_S,
    CachedResolver,
    FailoverZone,
    HealthCheck,
    HealthCheckSpec,
    create_failover,
    probe,
)
from harness.region.routing_control import RoutingControls, control_arn

AWS_REGIONS = {"east": "us-east-1", "west": "us-west-2"}  # PRIMARY first
ZONE = "wsfleet.test"
REAPPLY_TIMEOUT_S = 30.0  # a scan of the connections table and a few events' writes
STORE_TIMEOUT_S = 1.0  # the automation's read of a region's DynamoDB: one attempt, answered within this
AUTOMATION_EVERY_S = 0.05  # the automation's polling (the checks and the replication have no signal to wait on)
LOCAL_CREDENTIALS_BY_KEY = {LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"]: LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}


@dataclass
class RegionsSpec:
    workers: int = 2                 # per region
    profile: str = "hardened"
    timescale: float = 0.1
    run_dir: Path = Path("runs/regions")
    rate: float = 5.0
    seed: int = 0
    lag_ms: float = 1000.0           # Global Tables' replication lag, median, at scale 1
    lag_p99_ms: float = 3000.0       # its 99th percentile (the tail), at scale 1
    clock_offsets_ms: dict[str, float] = field(default_factory=dict)  # each region's clock skew (hidden stamps)
    ttl_s: float = RECORD_TTL_S      # the failover record's TTL, at scale 1
    health: HealthCheckSpec = field(default_factory=HealthCheckSpec)  # as terraform deploys them
    gate: bool = True                # the region activation gate (fleet.region_gate), primary On
    # the operator's automation moves the activation (``harness.region.automation``: on the primary's health
    # check, while the standby's DynamoDB answers); otherwise the caller does (``fail_over``)
    automate: bool = False
    # back to the primary only once its check has passed for this long, at scale 1, and replication has caught
    # up over it (the 90th percentile of its reports of the window: nothing undelivered older than the lag's
    # 99th percentile; ``harness.region.automation.Failback``): two health-check intervals
    failback_hysteresis_s: float = 2 * HealthCheckSpec().request_interval_s
    # how often replication reports (``replication.stats``: what the failback decides on), at scale 1: the
    # failback's window (two health-check intervals) holds about twenty reports at any scale
    stats_every_s: float = STATS_EVERY_S
    # the failover's wait between the old region Off and the new one On, in seconds at the run's scale
    # (None: the old region's ``activation_wait_s``; shorter is unsafe, a deliberately unsafe variant's)
    activation_wait_s: float | None = None
    # after it, the longest wait for the old region's last writes to reach the new one while its DynamoDB
    # answers, in seconds at the run's scale (``harness.region.automation.after_wait``; None:
    # ``REPLICATION_WAIT_P99S`` x the lag's 99th percentile; 0: no replication wait, a deliberately unsafe
    # variant's)
    replication_wait_s: float | None = None

    def replication_limit_s(self) -> float:
        """The replication wait's bound at the run's scale."""
        return REPLICATION_WAIT_P99S * self.lag_p99_ms / 1000.0 * self.timescale \
            if self.replication_wait_s is None else self.replication_wait_s


class RegionsPool(Started):
    """What a batch of runs keeps up across them (``spec``'s profile and time scale; logs and the
    simulator's history in ``spec.run_dir``): both regions' embedded backends, Global Tables (their change
    feeds and pump), the routing controls and the upstream simulator.  ``lend`` gives a run fresh state on
    them; each run's ``TwoRegions`` brings its own fleets, routers, health checks and history."""

    def __init__(self, spec: RegionsSpec) -> None:
        self.spec = spec
        self.backends: dict[str, EmbeddedBackend] = {}
        self.tables: GlobalTables | None = None
        self.controls: RoutingControls | None = None
        self.upstream: Child | None = None

    def start(self) -> None:
        config = FleetConfig(profile=self.spec.profile, timescale=self.spec.timescale,  # type: ignore[arg-type]
                             worker_id="harness")

        def backend(name: str) -> None:
            self.backends[name] = start_embedded(region=AWS_REGIONS[name], config=config,
                                                 log_dir=self.spec.run_dir / "logs" / name)

        run_together(*(partial(backend, name) for name in AWS_REGIONS))  # at once: each takes seconds
        self.backends.update({name: self.backends.pop(name) for name in AWS_REGIONS})  # in AWS_REGIONS' order
        self.tables = GlobalTables({n: b.endpoints["dynamodb"] for n, b in self.backends.items()},
                                   _lag(self.spec), _ignore,
                                   stats_every_s=self.spec.stats_every_s * self.spec.timescale).start()
        self.controls = RoutingControls(list(AWS_REGIONS.values()), AWS_REGIONS["east"], _ignore,
                                        LOCAL_CREDENTIALS_BY_KEY).start()
        self.upstream = start_upstream(ClusterSpec(timescale=self.spec.timescale, run_dir=self.spec.run_dir,
                                                   rate=self.spec.rate, seed=self.spec.seed))

    def lend(self, spec: RegionsSpec, replication: HistoryWriter, route53: HistoryWriter) -> None:
        """Fresh state for a run of ``spec`` (its lag, clock skew and gate), its events to its writers:
        tables emptied and nothing in flight, the primary On (with the gate; without it the controls write
        nothing to the run), queues purged."""
        assert self.tables is not None and self.controls is not None
        self.tables.fresh(_lag(spec), replication.emit, spec.clock_offsets_ms, spec.stats_every_s * spec.timescale)
        self.controls.fresh(AWS_REGIONS["east"], route53.emit if spec.gate else _ignore)
        for backend in self.backends.values():
            client(backend.env(), "sqs").purge_queue(QueueUrl=backend.queue_url)

    def stop(self) -> None:
        if self.upstream is not None:
            self.upstream.stop(grace_s=5.0)
        if self.tables is not None:
            self.tables.stop()
        if self.controls is not None:
            self.controls.stop()
        for backend in self.backends.values():
            backend.stop()


def _lag(spec: RegionsSpec) -> LagModel:
    return LagModel(spec.lag_ms * spec.timescale, spec.lag_p99_ms * spec.timescale, seed=spec.seed)


def _ignore(*_: object, **__: object) -> None:
    """Where the pool's parts write between runs (and a gateless run's controls): nowhere."""


class TwoRegions(Started):
    """``pool``: a batch's ``RegionsPool`` (started, its profile and time scale ``spec``'s) to run on with
    fresh state; without it the run starts and stops its own."""

    def __init__(self, spec: RegionsSpec, pool: RegionsPool | None = None) -> None:
        self.spec = spec
        self.pool = pool or RegionsPool(spec)
        self._own_pool = pool is None
        self.backends = self.pool.backends
        self.clusters: dict[str, Cluster] = {}
        self.tables: GlobalTables | None = None
        self.upstream: Child | None = None
        self.controls: RoutingControls | None = None
        self.checks = {name: HealthCheck(spec.health) for name in AWS_REGIONS}
        primary, secondary = AWS_REGIONS
        self.zone = FailoverZone(primary, secondary, self.checks[primary], self.checks[secondary])
        self.resolver = CachedResolver(self.zone, spec.ttl_s * spec.timescale)
        self.cut: set[str] = set()
        self.unreachable: set[str] = set()  # a gray failure: Route 53 cannot reach the region, its fleet works on
        self.zone_id = ""
        self._history_dir = spec.run_dir / "history"
        self._history_dir.mkdir(parents=True, exist_ok=True)
        self.route53 = HistoryWriter(str(self._history_dir / "route53.jsonl"), "route53")
        self.replication = HistoryWriter(str(self._history_dir / "replication.jsonl"), "replication")
        self.harness = HistoryWriter(str(self._history_dir / "harness.jsonl"), "harness")  # STARTs, faults
        self._stop = threading.Event()
        self._checking = threading.Thread(target=self._check_health, name="route53", daemon=True)
        self._automating = threading.Thread(target=self._automate, name="automation", daemon=True)
        self._stores: dict[str, Any] = {}
        self._resolved: str | None = None
        self._lock = threading.Lock()
        self._automation_lock = threading.Lock()

    def _cluster_spec(self, region: str = "") -> ClusterSpec:
        spec = self.spec
        gate: dict[str, object] = {} if self.controls is None or not region else {
            "region_gate_endpoints": self.controls.endpoints,
            "region_gate_control": control_arn(AWS_REGIONS[region]), "control_journal": "on"}
        return ClusterSpec(workers=spec.workers, profile=spec.profile, timescale=spec.timescale,
                           run_dir=spec.run_dir, rate=spec.rate, seed=spec.seed, region=region, overrides=gate)

    def start(self) -> None:
        if self._own_pool:
            self.pool.start()
        self.pool.lend(self.spec, self.replication, self.route53)
        self.tables, self.upstream = self.pool.tables, self.pool.upstream
        self.controls = self.pool.controls if self.spec.gate else None
        assert self.tables is not None
        for name, backend in self.backends.items():
            through_feed = dataclasses.replace(backend, endpoints={**backend.endpoints,
                                                                   "dynamodb": self.tables.feed_url(name)})
            self.clusters[name] = Cluster(self._cluster_spec(name), backend=through_feed, upstream=self.upstream)
        run_together(*(cluster.start for cluster in self.clusters.values()))  # at once: workers take seconds
        self._create_zone()
        start_thread(self._checking)
        if self.spec.automate and self.controls is not None:
            start_thread(self._automating)

    def _create_zone(self) -> None:
        """The hosted zone, health checks and failover records in Route 53 (the primary's moto), from the
        definitions terraform uses; the harness judges the checks itself (moto's status is canned).  The
        local routers have no names: each record names its region's stand-in host."""
        route53 = client(self.backends["east"].env(), "route53")
        zone_id = route53.create_hosted_zone(Name=ZONE, CallerReference=str(time.time()))["HostedZone"]["Id"]
        hosts = {"PRIMARY": f"east.{ZONE}", "SECONDARY": f"west.{ZONE}"}
        checks = create_failover(route53, zone_id, f"router.{ZONE}", hosts, self.spec.health, int(self.spec.ttl_s))
        self.zone_id = zone_id
        self.route53.emit("route53.zone", zone_id=zone_id, health_checks=checks)

    def zone_records(self) -> list[dict[str, Any]]:
        """The failover records as Route 53 holds them, each with its health check's interval and threshold."""
        route53 = client(self.backends["east"].env(), "route53")
        records = route53.list_resource_record_sets(HostedZoneId=self.zone_id)["ResourceRecordSets"]
        found = []
        for record in (r for r in records if "Failover" in r):
            check = route53.get_health_check(HealthCheckId=record["HealthCheckId"])["HealthCheck"]["HealthCheckConfig"]
            found.append({"name": record["Name"], "failover": record["Failover"],
                          "set_identifier": record["SetIdentifier"], "ttl_s": record["TTL"],
                          "target": record["ResourceRecords"][0]["Value"], "check_interval_s": check["RequestInterval"],
                          "failure_threshold": check["FailureThreshold"]})
        return found

    def router_url(self) -> str:
        """The router a client reaches now: the zone's answer as its resolver caches it."""
        with self._lock:
            region = self.resolver.resolve()
        if region != self._resolved:
            self._resolved = region
            self.route53.emit("dns.resolved", region=region)
        return self.clusters[region].router_url

    def start_stream(self, connection_id: str) -> None:
        """A stream on the simulator, STARTed through the failover name (``conn.started`` in the history)."""
        east = self.clusters["east"]
        start_connection(self.harness, self.router_url(), east.upstream_url, east.upstream_control_url,
                         connection_id)

    def stop_stream(self, connection_id: str) -> None:
        """STOP a stream through the failover name (the router's ``event`` is in the history)."""
        stop_connection(self.harness, self.router_url(), connection_id)

    def outage(self, region: str) -> None:
        cluster = self.clusters[region]
        assert cluster.router is not None and cluster.toxiproxy is not None
        self.cut.add(region)
        if self.tables is not None:
            self.tables.cut(region)
        cluster.router.signal(signal.SIGSTOP)
        for handle in cluster.workers.values():
            for service in SERVICE_PROXIES:
                cluster.toxiproxy.update_proxy(handle.proxies[service], enabled=False)

    def fail_over(self, old: str, new: str) -> str:
        """With the gate: ``old`` Off, the activation wait of ``old``'s settings (or the spec's), then, while
        ``new`` lacks writes of ``old`` and ``old``'s DynamoDB answers, the wait for replication (bounded:
        ``after_wait``), ``new`` On, unless a later failover began meanwhile or ``new`` can no longer take
        the activation (``fit_after_wait``; the failover then gives up): ``RoutingControls.fail_over``'s
        outcome.  At the instant ``new`` turns On, what its tables lack of the other region's writes goes to
        the history (``activation.missing`` {region, generation, other, items, waited_ms: the replication
        wait, decided_ms: when the looks that let it turn On began}: ``GlobalTables.missing``), after
        ``failover.unreplicated`` {region, generation, other, waited_ms, items: what was lacking at the bound}
        when the wait reached its bound."""
        assert self.controls is not None and self.tables is not None
        tables, primary = self.tables, next(iter(AWS_REGIONS))
        role = PRIMARY if new == primary else STANDBY
        waited: dict[str, Any] = {}  # from when the activation wait ended (the first ``ready``); at the bound

        def ready() -> bool | None:
            waited["decided_ms"] = time.time() * 1000.0  # the looks below, on the history's clock
            now_s = time.monotonic()
            since_s = waited.setdefault("since_s", now_s)
            with self._lock:
                primary_healthy = self.checks[primary].healthy
            lacking = tables.missing(new)
            decision = after_wait(fit_after_wait(role, primary_healthy, lambda: self.store_answers(new)),
                                  len(lacking), lambda: self.store_answers(old), now_s - since_s,
                                  self.spec.replication_limit_s())
            waited["ms"] = round((now_s - since_s) * 1000.0, 1)
            if decision == UNREPLICATED:
                waited["lacking"] = lacking
            return None if decision == WAIT else decision != ABANDON

        def activated(generation: int) -> None:
            if "lacking" in waited:
                self.route53.emit("failover.unreplicated", region=AWS_REGIONS[new], generation=generation,
                                  other=AWS_REGIONS[old], waited_ms=waited["ms"], items=waited["lacking"])
            self.route53.emit("activation.missing", region=AWS_REGIONS[new], generation=generation,
                              other=AWS_REGIONS[old], items=tables.missing(new), waited_ms=waited.get("ms"),
                              decided_ms=waited.get("decided_ms"))

        wait_s = activation_wait_s(self.clusters[old].config) if self.spec.activation_wait_s is None \
            else self.spec.activation_wait_s
        outcome = self.controls.fail_over(AWS_REGIONS[old], AWS_REGIONS[new], wait_s, ready, activated)
        if outcome == "activated":
            self._reapply_journal(new)
        return outcome

    def store_answers(self, region: str) -> bool:
        """Whether ``region``'s DynamoDB answers a read of its connections table from outside the region (the
        automation's look before and after a failover to it): not while the region is cut off, nor while
        its DynamoDB is out (its feed answers 503); one attempt, within ``STORE_TIMEOUT_S``."""
        if region in self.cut or self.tables is None:
            return False
        if region not in self._stores:
            self._stores[region] = boto3.client(
                "dynamodb", region_name=AWS_REGIONS[region], endpoint_url=self.tables.feed_url(region),
                aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=Config(connect_timeout=STORE_TIMEOUT_S, read_timeout=STORE_TIMEOUT_S,
                              retries={"max_attempts": 1, "mode": "standard"}))
        try:
            self._stores[region].describe_table(TableName=self.backends[region].tables["connections"])
        except (BotoCoreError, ClientError):
            return False
        return True

    def _reapply_journal(self, region: str) -> None:
        """The automation's step after it activated ``region``: that region's router re-applies the control
        journal (``fleet.router.reapply_journal``: acknowledged STARTs and STOPs that last-writer-wins
        reverted); its answer goes to the history (``control.reapplied``)."""
        url = self.clusters[region].router_url + "/reapply-control"
        try:
            answer = request("POST", url, timeout_s=REAPPLY_TIMEOUT_S)
            status, payload = answer.status, answer.json()
        except (HttpError, ValueError) as exc:
            status, payload = None, {"error": str(exc)[:200]}
        self.route53.emit("control.reapplied", region=region, status=status, **payload)

    def heal(self, region: str) -> None:
        cluster = self.clusters[region]
        if region not in self.cut or cluster.router is None or cluster.toxiproxy is None:
            return
        self.cut.discard(region)
        if self.tables is not None:
            self.tables.cut(region, off=False)
        cluster.router.signal(signal.SIGCONT)
        for handle in cluster.workers.values():
            for service in SERVICE_PROXIES:
                cluster.toxiproxy.update_proxy(handle.proxies[service], enabled=True)

    def _check_health(self) -> None:
        """Each checker probes each router once an interval, at its own offset, each probe in its own thread
        (a probe of a region that does not answer takes its timeouts); flips and answers go to the history."""
        scale = self.spec.timescale
        offsets = self.checks["east"].probe_offsets(scale)
        interval = self.spec.health.request_interval_s * scale
        began = time.monotonic()
        for k in itertools.count():
            for checker, offset in enumerate(offsets):
                if self._stop.wait(max(0.0, began + k * interval + offset - time.monotonic())):
                    return
                for name in self.checks:
                    start_thread(threading.Thread(target=self._probe, args=(name, checker), daemon=True))

    def _probe(self, region: str, checker: int) -> None:
        scale = self.spec.timescale
        ok = region not in self.unreachable and probe(self.clusters[region].router_url + self.spec.health.path,
                                                      CONNECT_TIMEOUT_S * scale, ANSWER_TIMEOUT_S * scale)
        with self._lock:
            check = self.checks[region]
            was, answer = check.healthy, self.zone.answer()
            check.record(checker, ok)
            if check.healthy != was:
                self.route53.emit("health.check", region=region, healthy=check.healthy)
            if self.zone.answer() != answer:
                self.route53.emit("dns.answer", region=self.zone.answer())

    def _automate(self) -> None:
        """The operator's automation (``Automation``), polled: each move it decides runs in its own thread (a
        later one supersedes it while it waits); a move that gave up is told back."""
        primary, standby = AWS_REGIONS
        scale = self.spec.timescale
        automation = Automation(Failback(self.spec.lag_p99_ms * scale, self.spec.failback_hysteresis_s * scale))
        assert self.tables is not None
        seen_ms = -math.inf
        while not self._stop.wait(AUTOMATION_EVERY_S):
            now_ms, reports = self.tables.reports(after_ms=seen_ms)  # on the history's clock, as the checker
            seen_ms = reports[-1][0] if reports else seen_ms
            with self._lock:
                primary_healthy = self.checks[primary].healthy
            with self._automation_lock:
                target = automation.step(now_ms / 1000.0, primary_healthy, [(t / 1000.0, b) for t, b in reports],
                                         lambda: self.store_answers(standby))
                forced = automation.forced
            if target is None:
                continue
            new, old = (primary, standby) if target == PRIMARY else (standby, primary)
            if target == PRIMARY:  # forced: the standby's store out, replication not waited for
                self.route53.emit("failback.forced" if forced else "failback.ready",
                                  backlog=self.tables.stats()["backlog"], behind_ms=automation.failback.behind_ms,
                                  decided_ms=now_ms)
            start_thread(threading.Thread(target=self._move, args=(automation, old, new, target),
                                          name=f"fail-over-to-{new}", daemon=True))

    def _move(self, automation: Automation, old: str, new: str, target: str) -> None:
        if self.fail_over(old, new) == "abandoned":
            with self._automation_lock:
                automation.gave_up(target)

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._checking, self._automating):
            if thread.is_alive():
                thread.join(timeout=5.0)
        for name in list(self.cut):
            with contextlib.suppress(Exception):  # stopping goes on whatever a proxy says
                self.heal(name)
        if self.clusters:
            run_together(*(cluster.stop for cluster in self.clusters.values()))
        if self._own_pool:
            self.pool.stop()
        self.route53.close()
        self.replication.close()
        self.harness.close()

    def consumed_by(self, region: str, ids: list[str]) -> bool:
        """Whether each stream of ``ids`` has an open upstream session held by a worker of ``region``."""
        streams = self.clusters[region].streams()
        return all(any(s["closed"] is None and s["worker"].startswith(f"{region}-")
                       for s in streams.get(i, {}).get("sessions", [])) for i in ids)
