"""What one scenario run on a deployed fleet costs at most, estimated before it runs (a guardrail: printed
before anything creates load).

The load is a ceiling, from the scenario and the fleet's settings (``run_ceiling_s``: the runner's longest
wait in every phase), and the bill is that load times list prices (``PRICES``: us-east-1, on-demand, as
published in 2025; DynamoDB's after its November 2024 cut).  Not counted: free tiers, data transfer, the
fleet's own idle cost between runs, and anything outside the deployment.  Each line says its quantity, so
a reader can redo it with their region's prices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.batch_log import MAX_MESSAGES, MESSAGE_OVERHEAD_BYTES
from fleet.config import FleetConfig
from harness.scenarios.scenario_file import Plan

PRICES_AS_OF = "us-east-1 list prices, 2025"
PRICES: dict[str, tuple[float, str]] = {  # item -> (USD per unit, unit)
    "fargate_vcpu": (0.04048, "vCPU-hour"),
    "fargate_memory": (0.004445, "GB-hour"),
    "dynamodb_write": (0.625e-6, "write request unit"),
    "dynamodb_read": (0.125e-6, "read request unit"),
    "sqs": (0.40e-6, "request"),
    "api_gateway": (1.00e-6, "HTTP API request"),
    "lambda_request": (0.20e-6, "invocation"),
    "lambda_compute": (0.0000166667, "GB-second"),
    "logs_ingest": (0.50, "GB ingested"),
    "metrics_put": (0.01e-3, "PutMetricData request"),
    "fis": (0.10, "action-minute"),
}
SETUP_S = 60.0                # starting the simulator's sessions and every stream, and the teardown
HISTORY_EVENT_BYTES = 350     # one JSON history line in CloudWatch Logs
LAMBDA_GB_S = 0.128 * 0.2     # one router invocation: 128 MB for about 200 ms
LONG_POLL_S = 20.0
SIMULATED_DATA_BYTES = 12     # the upstream simulator's message data, "<stream id>:<seq>"
WRITE_UNIT_BYTES = 1024       # a write request unit stores up to 1 KB of an item


@dataclass(frozen=True)
class RunLoad:
    """What a run asks of the deployment."""

    seconds: float                # how long the fleet carries the run's streams, at most
    workers: int
    connections: int
    rate: float                   # messages per second per stream
    operations: int               # START and STOP calls through the router
    fis_action_minutes: float
    config: FleetConfig
    worker_vcpu: float = 0.5      # terraform's worker_cpu 512
    worker_gb: float = 1.0        # terraform's worker_memory_mb 1024


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit: str
    usd: float


def run_ceiling_s(plan: Plan, config: FleetConfig) -> float:
    """The longest a run of ``plan`` lasts (``harness.scenarios.runner``'s phases, each at its longest):
    setup, a lease of steady running, the schedule, twice the largest bound plus two leases to recover,
    and five leases to settle."""
    schedule = max([s.at_s + s.duration_s for s in plan.steps] + [o.at_s for o in plan.ops] + [0.0])
    recover = 2 * max(plan.bound_ms.values(), default=0.0) / 1000.0 + 2 * config.lease_s
    return SETUP_S + config.lease_s + schedule + recover + 5 * config.lease_s


def message_write_units(messages: float, rate: float, config: FleetConfig) -> float:
    """Write units of storing ``messages`` at ``rate`` per stream: the published design puts an item per
    message (1 unit each); ``hardened`` puts one log item per stream per flush (``fleet.batch_log``: a batch,
    at most ``MAX_MESSAGES``), each rounded up to whole write units."""
    if config.profile != "hardened":
        return messages
    per_batch = min(MAX_MESSAGES, max(1.0, rate * config.scaled_s(config.flush_ms)))
    units = math.ceil(per_batch * (SIMULATED_DATA_BYTES + MESSAGE_OVERHEAD_BYTES) / WRITE_UNIT_BYTES)
    return messages / per_batch * units


def estimate(load: RunLoad) -> list[CostLine]:
    """One line per billed item, largest first."""
    config, hours = load.config, load.seconds / 3600.0
    messages = load.connections * load.rate * load.seconds
    beats = load.seconds / config.heartbeat_s
    tasks = load.workers + 1  # and the upstream simulator's task
    quantities = {
        "fargate_vcpu": tasks * load.worker_vcpu * hours,
        "fargate_memory": tasks * load.worker_gb * hours,
        "dynamodb_write": message_write_units(messages, load.rate, config) + (load.connections + load.workers) * beats,
        "dynamodb_read": load.workers * (load.seconds / config.reconcile_s + beats) * max(1, load.connections // 8),
        "sqs": load.operations * 3 + load.workers * load.seconds / LONG_POLL_S,
        "api_gateway": load.operations,
        "lambda_request": load.operations,
        "lambda_compute": load.operations * LAMBDA_GB_S,
        "logs_ingest": 2 * messages * HISTORY_EVENT_BYTES / 1e9,  # the worker's and the simulator's events
        "metrics_put": load.workers * load.seconds / config.scaled_s(config.metric_interval_ms),
        "fis": load.fis_action_minutes,
    }
    lines = [CostLine(item, quantity, PRICES[item][1], quantity * PRICES[item][0])
             for item, quantity in quantities.items() if quantity > 0]
    return sorted(lines, key=lambda line: -line.usd)
