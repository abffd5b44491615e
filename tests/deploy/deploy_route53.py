"""The Route 53 failover the harness creates (harness.region.route53) against terraform/modules/failover:
health-check type, port, SNI, path, interval and threshold, and each record's type, TTL, set identifier and
failover type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.region.route53 import RECORD_TTL_S, RECORD_TYPE, SET_IDENTIFIERS, HealthCheckSpec, health_check_config
from tests.deploy.deploy_hcl import Instance

# terraform attribute -> the HealthCheckConfig key it sets
HEALTH_CHECK_FIELDS = {"type": "Type", "port": "Port", "resource_path": "ResourcePath",
                       "request_interval": "RequestInterval", "failure_threshold": "FailureThreshold",
                       "enable_sni": "EnableSNI"}


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def route53_problems(terraform_dir: Path) -> list[str]:
    failover = Instance.root(terraform_dir).child("failover")
    expected = health_check_config("host", HealthCheckSpec())
    problems = []
    for name, check in failover.module.resource("aws_route53_health_check").items():
        resolved = failover.resolve(check)
        for attribute, key in HEALTH_CHECK_FIELDS.items():
            value = resolved.get(attribute)
            if str(value).lower() != str(expected[key]).lower():
                problems.append(f"health check {name}: {attribute} is {value!r}, the harness creates "
                                f"{key}={expected[key]!r}")
    for name, record in failover.module.resource("aws_route53_record").items():
        resolved = failover.resolve(record)
        if (resolved.get("type"), str(resolved.get("ttl"))) != (RECORD_TYPE, str(RECORD_TTL_S)):
            problems.append(f"record {name}: {resolved.get('type')} with TTL {resolved.get('ttl')!r}, the harness "
                            f"creates {RECORD_TYPE} with TTL {RECORD_TTL_S}")
        kind = _first(record.get("failover_routing_policy", {})).get("type")
        if SET_IDENTIFIERS.get(kind) != record.get("set_identifier"):
            problems.append(f"record {name}: {kind} is set_identifier {record.get('set_identifier')!r}, the "
                            f"harness names it {SET_IDENTIFIERS.get(kind)!r}")
    return problems
