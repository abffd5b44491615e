"""Tests of harness.region.route53: Route 53's health-check and failover rules, a client's TTL cache, the
probe's timeouts against real sockets, and the records created in the Route 53 API (a moto server)."""

from __future__ import annotations

import http.server
import socket
import time
from typing import Any

import boto3
import pytest

from harness.region.route53 import (
    CachedResolver,
    FailoverZone,
    HealthCheck,
    HealthCheckSpec,
    create_failover,
    probe,
)
from tests.harness.threaded import serving


def test_a_checker_changes_its_view_only_after_the_threshold_of_consecutive_results() -> None:
    check = HealthCheck(HealthCheckSpec(failure_threshold=3, checkers=1))
    for ok in (False, False, True, False, False):  # a success in between starts the count again
        check.record(0, ok)
    assert check.views == [True]
    check.record(0, False)
    assert check.views == [False] and not check.healthy
    for _ in range(2):
        check.record(0, True)
    assert not check.healthy  # as many successes to come back
    check.record(0, True)
    assert check.healthy


@pytest.mark.parametrize(("healthy_checkers", "healthy"), [(3, True), (2, False), (16, True), (0, False)])
def test_the_endpoint_is_healthy_while_more_than_18_percent_of_checkers_say_so(healthy_checkers: int,
                                                                            healthy: bool) -> None:
    check = HealthCheck(HealthCheckSpec(failure_threshold=1, checkers=16))
    for checker in range(healthy_checkers, 16):
        check.record(checker, False)
    assert check.healthy is healthy  # 3 of 16 is 18.75 %, 2 of 16 is 12.5 %


def test_checkers_are_staggered_across_the_scaled_interval() -> None:
    offsets = HealthCheck(HealthCheckSpec(request_interval_s=10, checkers=4)).probe_offsets(timescale=0.1)
    assert offsets == pytest.approx([0.0, 0.25, 0.5, 0.75])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_failover_reaches_a_client_at_most_a_ttl_after_route53_decides_it() -> None:
    spec = HealthCheckSpec(failure_threshold=1, checkers=2)
    zone = FailoverZone("primary.example", "standby.example", HealthCheck(spec), HealthCheck(spec))
    clock = Clock()
    client = CachedResolver(zone, ttl_s=30.0, clock=clock)
    assert client.resolve() == "primary.example"
    for checker in range(2):
        zone.primary_check.record(checker, False)
    assert zone.answer() == "standby.example"
    clock.now = 29.9
    assert client.resolve() == "primary.example"  # cached
    clock.now = 30.0
    assert client.resolve() == "standby.example"
    for checker in range(2):
        zone.secondary_check.record(checker, False)
    assert zone.answer() == "primary.example"  # both unhealthy: Route 53 answers PRIMARY


class Answering(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (302, True), (404, False), (503, False)])
def test_a_probe_is_healthy_on_a_2xx_or_3xx(status: int, healthy: bool) -> None:
    handler = type("Handler", (Answering,), {"status": status})
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as address:
        assert probe(f"http://{address}/health") is healthy


def test_a_probe_fails_when_nothing_listens_or_the_answer_is_late() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert not probe(f"http://127.0.0.1:{port}/health", connect_timeout_s=0.5)
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        assert not probe(f"http://127.0.0.1:{silent.getsockname()[1]}/health", answer_timeout_s=0.3)
        assert time.monotonic() - started < 2.0


def test_the_failover_records_and_health_checks_are_created_in_route53(moto_aws: str) -> None:
    route53 = boto3.client("route53", region_name="us-east-1")
    zone_id = route53.create_hosted_zone(Name="example.com", CallerReference="z")["HostedZone"]["Id"]
    spec = HealthCheckSpec(path="/health", request_interval_s=10, failure_threshold=3)
    checks = create_failover(route53, zone_id, "router.example.com",
                             {"PRIMARY": "a.execute-api.example", "SECONDARY": "b.execute-api.example"}, spec, 30)
    records = {r["SetIdentifier"]: r for r in route53.list_resource_record_sets(HostedZoneId=zone_id)
               ["ResourceRecordSets"] if "SetIdentifier" in r}
    assert {(k, r["Failover"], r["TTL"], r["HealthCheckId"]) for k, r in records.items()} == {
        ("primary", "PRIMARY", 30, checks["PRIMARY"]), ("standby", "SECONDARY", 30, checks["SECONDARY"])}
    config = route53.get_health_check(HealthCheckId=checks["PRIMARY"])["HealthCheck"]["HealthCheckConfig"]
    assert (config["Type"], config["RequestInterval"], config["FailureThreshold"], config["ResourcePath"]) == (
        "HTTPS", 10, 3, "/health")

