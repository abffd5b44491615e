"""What a running backend offers, whatever its kind (``Backend``), and the environment pointing at it.

Every fleet process reaches AWS through the SDK's standard per-service endpoint variables (DESIGN §10), so
a backend is fully described by its endpoints, region, queue URL and table names.  botocore derives each
variable from the service id: spaces and hyphens become underscores, upper-cased (``Route 53`` ->
``AWS_ENDPOINT_URL_ROUTE_53``); ``ENDPOINT_ENV_VARS`` spells them out and a test checks them against botocore.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.config import ENV_VARS

# Service name (as the SDK's client name) -> the variable botocore reads that service's endpoint from.
ENDPOINT_ENV_VARS: dict[str, str] = {
    "dynamodb": "AWS_ENDPOINT_URL_DYNAMODB",
    "dynamodbstreams": "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
    "sqs": "AWS_ENDPOINT_URL_SQS",
    "cloudwatch": "AWS_ENDPOINT_URL_CLOUDWATCH",
    "route53": "AWS_ENDPOINT_URL_ROUTE_53",
    "ecs": "AWS_ENDPOINT_URL_ECS",
    "ec2": "AWS_ENDPOINT_URL_EC2",
    "logs": "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS",
    "sts": "AWS_ENDPOINT_URL_STS",
    "fis": "AWS_ENDPOINT_URL_FIS",
    "apigatewayv2": "AWS_ENDPOINT_URL_APIGATEWAYV2",
}

# Local emulators accept any credentials; these keep the SDK from looking for real ones.
LOCAL_CREDENTIALS: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
}

# Table role -> FleetConfig field holding its name.
TABLE_FIELDS: dict[str, str] = {
    "connections": "connections_table",
    "messages": "messages_table",
    "workers": "workers_table",
}


class BackendError(RuntimeError):
    """A backend could not be started or prepared; the message names the server and what it said."""


@dataclass
class Backend:
    """A running backend: where each service answers, and the resources the fleet uses there.

    ``kind`` is ``embedded``, ``localstack`` or ``aws``; for the local kinds ``env()`` adds test
    credentials, for ``aws`` the SDK's own credential chain applies.
    """

    kind: str
    region: str
    endpoints: dict[str, str]
    queue_url: str
    tables: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """The variables that point an SDK client or a fleet process at this backend."""
        env: dict[str, str] = {
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            ENV_VARS["region"]: self.region,
            ENV_VARS["queue_url"]: self.queue_url,
        }
        for service, url in self.endpoints.items():
            env[ENDPOINT_ENV_VARS[service]] = url
        for role, name in self.tables.items():
            env[ENV_VARS[TABLE_FIELDS[role]]] = name
        if self.kind != "aws":
            env.update(LOCAL_CREDENTIALS)
        return env

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary (what ``python -m harness.backends`` prints)."""
        return {
            "kind": self.kind,
            "region": self.region,
            "endpoints": dict(self.endpoints),
            "queue_url": self.queue_url,
            "tables": dict(self.tables),
        }
