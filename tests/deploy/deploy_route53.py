"""The Route 53 failover the harness creates (harness.region.route53) against terraform/modules/failover:
health-check type, port, SNI, path, interval and threshold, and each record's type, TTL, set identifier and
failover type.  The interval, threshold and TTL must be read from timings.json (``local.timings``), the file
the harness's experiment reads too (``harness.region.route53.DEPLOYED``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.region.route53 import (
    DEPLOYED,
    RECORD_TTL_S,
    RECORD_TYPE,
    SET_IDENTIFIERS,
    TIMINGS_FILE,
    HealthCheckSpec,
    health_check_config,
)
from tests.deploy.deploy_hcl import Instance

# terraform attribute -> the HealthCheckConfig key it sets
HEALTH_CHECK_FIELDS = {"type": "Type", "port": "Port", "resource_path": "ResourcePath",
                       "request_interval": "RequestInterval", "failure_threshold": "FailureThreshold",
                       "enable_sni": "EnableSNI"}


# terraform attribute -> its key in timings.json
TIMINGS = {"request_interval": "request_interval_s", "failure_threshold": "failure_threshold", "ttl": "record_ttl_s"}


def _timing(failover: Instance, where: str, attribute: str, body: dict[str, Any], problems: list[str]) -> Any:
    """A timing attribute's value, read from timings.json: a problem unless it is ``local.timings.<key>`` of
    that file."""
    key = TIMINGS[attribute]
    source = str(failover.module.locals.get("timings"))
    if str(body.get(attribute)) == f"${{local.timings.{key}}}" and TIMINGS_FILE.name in source \
            and "jsondecode(file(" in source:
        return DEPLOYED[key]
    problems.append(f"{where}: {attribute} is {body.get(attribute)!r}, not local.timings.{key} of "
                    f"{TIMINGS_FILE.name} (the harness's timings)")
    return failover.resolve(body.get(attribute))


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def route53_problems(terraform_dir: Path) -> list[str]:
    failover = Instance.root(terraform_dir).child("failover")
    expected = health_check_config("host", HealthCheckSpec())
    problems = []
    for name, check in failover.module.resource("aws_route53_health_check").items():
        resolved = failover.resolve(check)
        for attribute, key in HEALTH_CHECK_FIELDS.items():
            value = _timing(failover, f"health check {name}", attribute, check, problems) \
                if attribute in TIMINGS else resolved.get(attribute)
            if str(value).lower() != str(expected[key]).lower():
                problems.append(f"health check {name}: {attribute} is {value!r}, the harness creates "
                                f"{key}={expected[key]!r}")
    for name, record in failover.module.resource("aws_route53_record").items():
        resolved = failover.resolve(record)
        ttl = _timing(failover, f"record {name}", "ttl", record, problems)
        if (resolved.get("type"), str(ttl)) != (RECORD_TYPE, str(RECORD_TTL_S)):
            problems.append(f"record {name}: {resolved.get('type')} with TTL {ttl!r}, the harness "
                            f"creates {RECORD_TYPE} with TTL {RECORD_TTL_S}")
        kind = _first(record.get("failover_routing_policy", {})).get("type")
        if SET_IDENTIFIERS.get(kind) != record.get("set_identifier"):
            problems.append(f"record {name}: {kind} is set_identifier {record.get('set_identifier')!r}, the "
                            f"harness names it {SET_IDENTIFIERS.get(kind)!r}")
    return problems
