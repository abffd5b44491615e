"""Route 53 failover as the harness evaluates it: moto serves the Route 53 API but its health-check status is
canned, so the decision is made here, by Route 53's documented rules, from probes the harness sends.

- ``HealthCheck``: one endpoint's health.  Each of ``checkers`` health checkers probes every
  ``request_interval_s`` (staggered across the interval).  A checker's view flips after
  ``failure_threshold`` consecutive results against it, and the endpoint is healthy while more than 18 % of
  the checkers see it healthy.  A new health check starts healthy.
- ``probe``: one HTTPS (or HTTP) check.  It is healthy when a TCP connection opens within 4 s and a 2xx or
  3xx status arrives within 2 s after that.
- ``FailoverZone``: the PRIMARY record's target while its health check passes, else the SECONDARY's while
  its check passes.  With both unhealthy, Route 53 answers PRIMARY.
- ``CachedResolver``: what a client sees.  Each answer is kept for the record's TTL, so a failover reaches
  a client at most a TTL after Route 53 decides it.
- ``health_check_config`` and ``create_failover``: the health checks and failover records in the Route 53 API
  (moto locally), with the settings terraform/modules/failover uses.  tests/deploy compares the two.
- ``DEPLOYED``: the health checks' interval and failure threshold and the records' TTL, read from
  terraform/modules/failover/timings.json, the one file terraform deploys them from: the experiment's
  defaults are what is deployed.

Durations are at scale 1 here; the caller multiplies them by the run's time scale.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import http_client
from harness.processes import REPO_ROOT

HEALTHY_SHARE = 0.18       # the endpoint is healthy while more than this share of checkers say so
CONNECT_TIMEOUT_S = 4.0
ANSWER_TIMEOUT_S = 2.0
DEFAULT_CHECKERS = 16      # Route 53 probes from several regions, a few checkers each
SET_IDENTIFIERS = {"PRIMARY": "primary", "SECONDARY": "standby"}  # as terraform/modules/failover names them
TIMINGS_FILE = REPO_ROOT / "terraform" / "modules" / "failover" / "timings.json"
DEPLOYED: dict[str, int] = json.loads(TIMINGS_FILE.read_text(encoding="utf-8"))
RECORD_TYPE, RECORD_TTL_S = "CNAME", DEPLOYED["record_ttl_s"]  # terraform/modules/failover's records


@dataclass(frozen=True)
class HealthCheckSpec:
    """A health check's settings (terraform/modules/failover's: ``DEPLOYED``)."""

    path: str = "/health"
    request_interval_s: float = DEPLOYED["request_interval_s"]  # 30 (standard) or 10 (fast)
    failure_threshold: int = DEPLOYED["failure_threshold"]
    checkers: int = DEFAULT_CHECKERS

    def __post_init__(self) -> None:
        if self.request_interval_s <= 0 or not 1 <= self.failure_threshold <= 10 or self.checkers < 1:
            raise ValueError("a health check needs an interval > 0, a failure threshold of 1..10 and a checker")


@dataclass
class HealthCheck:
    """One endpoint's health as Route 53 judges it, from each checker's results in order."""

    spec: HealthCheckSpec
    views: list[bool] = field(init=False)     # each checker's current view (True: healthy)
    streaks: list[int] = field(init=False)    # consecutive results against that view

    def __post_init__(self) -> None:
        self.views = [True] * self.spec.checkers
        self.streaks = [0] * self.spec.checkers

    def record(self, checker: int, ok: bool) -> None:
        if ok == self.views[checker]:
            self.streaks[checker] = 0
            return
        self.streaks[checker] += 1
        if self.streaks[checker] >= self.spec.failure_threshold:
            self.views[checker], self.streaks[checker] = ok, 0

    @property
    def healthy(self) -> bool:
        return sum(self.views) > HEALTHY_SHARE * self.spec.checkers

    def probe_offsets(self, timescale: float = 1.0) -> list[float]:
        """When each checker probes within an interval (seconds after the interval starts, scaled)."""
        interval = self.spec.request_interval_s * timescale
        return [interval * i / self.spec.checkers for i in range(self.spec.checkers)]


def probe(url: str, connect_timeout_s: float = CONNECT_TIMEOUT_S, answer_timeout_s: float = ANSWER_TIMEOUT_S) -> bool:
    """One check of ``url``: a connection within the connect timeout (TCP, and TLS for https), then a 2xx or
    3xx status within the answer timeout."""
    try:
        answer = http_client.request("GET", url, timeout_s=answer_timeout_s, connect_s=connect_timeout_s)
    except http_client.Redirected:
        return True  # a 3xx is healthy to Route 53, which does not follow it either
    except http_client.NoAnswer:
        return False
    return 200 <= answer.status < 300


@dataclass
class FailoverZone:
    """The answer for the failover domain: PRIMARY's target while healthy, else SECONDARY's while healthy,
    else PRIMARY's."""

    primary: str
    secondary: str
    primary_check: HealthCheck
    secondary_check: HealthCheck

    def answer(self) -> str:
        if self.primary_check.healthy or not self.secondary_check.healthy:
            return self.primary
        return self.secondary


@dataclass
class CachedResolver:
    """A client's resolver: each answer is kept for ``ttl_s`` (scaled) from when it was fetched."""

    zone: FailoverZone
    ttl_s: float
    clock: Callable[[], float] = time.monotonic
    cached: str | None = None
    expires: float = 0.0

    def resolve(self) -> str:
        now = self.clock()
        if self.cached is None or now >= self.expires:
            self.cached, self.expires = self.zone.answer(), now + self.ttl_s
        return self.cached


def health_check_config(host: str, spec: HealthCheckSpec) -> dict[str, Any]:
    """The Route 53 ``HealthCheckConfig`` of terraform's ``aws_route53_health_check`` for ``host``."""
    return {"Type": "HTTPS", "FullyQualifiedDomainName": host, "Port": 443, "ResourcePath": spec.path,
            "RequestInterval": int(spec.request_interval_s), "FailureThreshold": spec.failure_threshold,
            "EnableSNI": True}


def create_failover(route53: Any, zone_id: str, domain: str, hosts: dict[str, str], spec: HealthCheckSpec,
                    ttl_s: int) -> dict[str, str]:
    """Create a health check per host and the PRIMARY / SECONDARY records of ``domain`` (CNAMEs with
    ``ttl_s``, as terraform's).  ``hosts``: failover type -> host.  Returns failover type -> health check id."""
    checks: dict[str, str] = {}
    changes = []
    for kind, host in hosts.items():
        created = route53.create_health_check(CallerReference=str(uuid.uuid4()),
                                              HealthCheckConfig=health_check_config(host, spec))
        checks[kind] = created["HealthCheck"]["Id"]
        changes.append({"Action": "UPSERT", "ResourceRecordSet": {
            "Name": domain, "Type": RECORD_TYPE, "SetIdentifier": SET_IDENTIFIERS[kind], "Failover": kind,
            "TTL": ttl_s, "HealthCheckId": checks[kind], "ResourceRecords": [{"Value": host}]}})
    route53.change_resource_record_sets(HostedZoneId=zone_id, ChangeBatch={"Changes": changes})
    return checks
