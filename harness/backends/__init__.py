"""Backends the fleet and the harness run against: embedded servers, LocalStack (DESIGN §10); a deployed fleet
on AWS is the AWS target, ``harness.aws``.

One code path: a backend is endpoints, a region, credentials, table names and a queue URL, handed to every
process as environment (``Backend.env()``).  ``start_embedded`` runs local servers (dynalite or serialised
moto for DynamoDB; moto for SQS, CloudWatch, Route 53); ``create_resources`` and ``clear_data`` prepare and
empty any backend from ``fleet.schema``.  ``python -m harness.backends`` serves an embedded backend.
"""

from __future__ import annotations

from harness.backends.base import ENDPOINT_ENV_VARS, LOCAL_CREDENTIALS, Backend, BackendError
from harness.backends.embedded import DYNAMODB_ENGINES, EmbeddedBackend, KeptBackends, start_embedded
from harness.backends.resources import clear_data, create_resources

__all__ = [
    "DYNAMODB_ENGINES",
    "ENDPOINT_ENV_VARS",
    "LOCAL_CREDENTIALS",
    "Backend",
    "BackendError",
    "EmbeddedBackend",
    "KeptBackends",
    "clear_data",
    "create_resources",
    "start_embedded",
]
