"""Fault kinds for AWS API failures: throttling, 5xx, slow answers, SQS duplicate and late deliveries.

Each fault puts one of our Toxiproxy server's HTTP-aware toxics (``harness.faults.toxiproxy.aws_toxics``;
the Go Toxiproxy has none) on the target worker's proxy for the service (``dynamodb``: the DynamoDB proxy;
``sqs``: the ``services`` proxy, which also carries CloudWatch, left untouched) while the fault lasts.
``fraction`` is the toxic's toxicity, drawn per request: the share of selected requests affected.
``operation`` (optional, every fault) limits it to comma-separated operation names, e.g. ``PutItem``.

Kinds and parameters (defaults in brackets):

- ``aws_throttle``: fraction [1.0], service [dynamodb]: DynamoDB ``ProvisionedThroughputExceededException``
  (or ``ThrottlingException`` with ``code``), SQS ``RequestThrottled``; HTTP 400, not forwarded.
- ``aws_5xx``: fraction [1.0], status 500|503 [500], service [dynamodb]: ``InternalServerError`` /
  ``InternalFailure`` (500) or ``ServiceUnavailable`` (503), not forwarded.
- ``aws_slow``: latency_ms [1000], fraction [1.0], service [dynamodb]: forwarded, answer held latency_ms.
- ``sqs_throttle``: fraction [1.0]: ``aws_throttle`` on SQS.
- ``sqs_duplicate``: fraction [1.0]: ``DeleteMessage`` / ``DeleteMessageBatch`` acknowledged but never
  forwarded, so the message is delivered again after its visibility timeout.
- ``sqs_late``: latency_ms [1000], fraction [1.0]: ``ReceiveMessage`` answers held latency_ms (a long
  poll answered past the client's timeout is lost to it; its messages come back after their visibility
  timeout).

Durations are used as given.  The effective parameters (defaults filled in, the toxic's error code) are
written back into ``params``, so the history's ``fault.start`` shows what was injected.  Bad parameters
raise ``FaultError`` when the fault is built, before anything is recorded or broken.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from harness.faults.fault import Fault, FaultError, Never, ProcessTopology, targets
from harness.faults.toxiproxy.aws_toxics import ERRORS, SERVICES

PROXY_OF_SERVICE = {"dynamodb": "dynamodb", "sqs": "services"}
THROTTLE_CODE = {"dynamodb": "ProvisionedThroughputExceededException", "sqs": "RequestThrottled"}
ERROR_CODE_5XX = {("dynamodb", 500): "InternalServerError", ("dynamodb", 503): "ServiceUnavailable",
                  ("sqs", 500): "InternalFailure", ("sqs", 503): "ServiceUnavailable"}


@dataclass
class AwsApiFault(Fault):
    """An HTTP-aware toxic on the target worker's proxy for ``service`` while the fault lasts."""

    toxic_type: ClassVar[str] = ""
    fixed: ClassVar[dict[str, Any]] = {}  # parameters the kind sets itself (not to be given)
    where = targets(aws=Never("AWS API errors, slow and repeated answers come from the local proxy; FIS injects "
                              "API faults into EC2 calls only"))

    def __post_init__(self) -> None:
        for name, value in self.fixed.items():
            if name in self.params and self.params[name] != value:
                raise FaultError(f"{self.kind}: {name} is always {value!r}")
            self.params[name] = value
        self.params.setdefault("service", "dynamodb")
        self.params["fraction"] = self._number("fraction", 1.0, 0.0, 1.0)
        if self.params["service"] not in SERVICES:
            raise FaultError(f"{self.kind}: service must be one of {', '.join(SERVICES)}, "
                             f"got {self.params['service']!r}")
        operation = self.params.setdefault("operation", "")
        if not isinstance(operation, str):
            raise FaultError(f"{self.kind}: operation must be a string of operation names, got {operation!r}")
        self.complete_params()

    def complete_params(self) -> None:
        """Check and fill in the kind's own parameters."""

    def toxic_attributes(self) -> dict[str, int | str]:
        return {"service": self.params["service"], "operation": self.params["operation"]}

    def _number(self, name: str, default: float, low: float, high: float) -> float:
        value = self.params.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise FaultError(f"{self.kind}: {name} must be a number from {low:g} to {high:g}, got {value!r}")
        return float(value)

    def _proxy(self, topology: ProcessTopology) -> str:
        return str(self._worker(topology).proxies[PROXY_OF_SERVICE[self.params["service"]]])

    def start(self, topology: ProcessTopology) -> None:
        proxy = self._proxy(topology)
        assert topology.toxiproxy is not None
        topology.toxiproxy.add_toxic(proxy, self.toxic_type, name=self.kind, stream="upstream",
                                    toxicity=self.params["fraction"],
                                    attributes=self.toxic_attributes())  # type: ignore[arg-type]
        self.active = True

    def heal(self, topology: ProcessTopology) -> None:
        handle = topology.workers.get(self.target)
        if self.active and handle is not None and topology.toxiproxy is not None:
            topology.toxiproxy.remove_toxic(handle.proxies[PROXY_OF_SERVICE[self.params["service"]]], self.kind)
        self.active = False


class AwsErrorFault(AwsApiFault):
    toxic_type = "aws_error"

    def error_code(self) -> str:
        raise NotImplementedError

    def complete_params(self) -> None:
        code = self.error_code()
        if (self.params["service"], code) not in ERRORS:
            known = ", ".join(known for service, known in ERRORS if service == self.params["service"])
            raise FaultError(f"{self.kind}: {self.params['service']} has no error {code!r}; known: {known}")
        self.params["code"] = code

    def toxic_attributes(self) -> dict[str, int | str]:
        return {**super().toxic_attributes(), "code": self.params["code"]}


class AwsThrottle(AwsErrorFault):
    def error_code(self) -> str:
        return str(self.params.get("code", THROTTLE_CODE[self.params["service"]]))


class SqsThrottle(AwsThrottle):
    fixed: ClassVar[dict[str, Any]] = {"service": "sqs"}


class Aws5xx(AwsErrorFault):
    def error_code(self) -> str:
        status = self.params.setdefault("status", 500)
        if status not in (500, 503):
            raise FaultError(f"{self.kind}: status must be 500 or 503, got {status!r}")
        return ERROR_CODE_5XX[(self.params["service"], status)]


class AwsSlow(AwsApiFault):
    toxic_type = "aws_slow"

    def complete_params(self) -> None:
        self.params["latency_ms"] = int(self._number("latency_ms", 1000, 0, 3_600_000))

    def toxic_attributes(self) -> dict[str, int | str]:
        return {**super().toxic_attributes(), "latency": self.params["latency_ms"]}


class SqsLate(AwsSlow):
    fixed: ClassVar[dict[str, Any]] = {"service": "sqs", "operation": "ReceiveMessage"}


class SqsDuplicate(AwsApiFault):
    toxic_type = "aws_swallow"
    fixed: ClassVar[dict[str, Any]] = {"service": "sqs", "operation": "DeleteMessage,DeleteMessageBatch"}


AWS_API_FAULTS: dict[str, type[Fault]] = {
    "aws_throttle": AwsThrottle, "aws_5xx": Aws5xx, "aws_slow": AwsSlow,
    "sqs_throttle": SqsThrottle, "sqs_duplicate": SqsDuplicate, "sqs_late": SqsLate,
}
