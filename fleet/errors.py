"""The fleet's one exception tree.  Third-party errors (botocore, websockets) are translated into it in
one place each (``fleet.store`` for AWS, ``fleet.upstream`` for the WebSocket), so callers never catch
library types."""

from __future__ import annotations


class FleetError(Exception):
    """Base of every error the fleet raises on purpose."""


class ConfigError(FleetError):
    """A setting is missing or malformed."""


class ValidationError(FleetError):
    """An event from outside (the router's input) is malformed; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class StoreError(FleetError):
    """A DynamoDB, SQS or CloudWatch request failed."""


class ConditionFailed(StoreError):
    """A conditional write was refused: somebody else holds the lease, or the fence moved."""


class StoreUnavailable(StoreError):
    """The backend did not answer (connection refused, timed out, throttled past retries).

    The request may or may not have been applied: its outcome is unknown (history outcome ``info``).
    """


class UpstreamError(FleetError):
    """The upstream WebSocket could not be opened, or dropped.  ``retry_after_s``: how long the upstream asked
    the client to wait before trying again (a refused handshake's ``Retry-After``), when it did."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
