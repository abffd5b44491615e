"""The region activation gate: one authority outside every region says which region may consume, Route 53
Application Recovery Controller's routing controls.  Without a gate (no ``region_gate_endpoints``, the
default) every region may; with a standby region fed by Global Tables, that lets the standby's warm fleet
claim the streams it sees replicated, while the primary consumes them (split brain).

The authority is ARC's data plane: a cluster of endpoints (``region_gate_endpoints``, each ``region=url``),
each answering ``GetRoutingControlState`` for this region's routing control (``region_gate_control``, an
ARN) with ``On`` or ``Off``, called with SigV4 through botocore's ``route53-recovery-cluster`` client.  A
read tries the endpoint that answered last, then each other in turn, and gives up (no answer) when none
answers: the gate fails closed.  The harness serves a stand-in of that API
(``harness.region.routing_control``), so the same code runs locally and on AWS.

A worker reads its region's control at every heartbeat before its renewals (``fleet.liveness``), a router
before every write (``fleet.router``).  The gate is a lease like the worker's own (``GateState``): an On
answer keeps the region open until the read was sent plus the fence time; an Off answer closes it at once;
no answer lets it lapse.  While it is closed a worker registers nothing and claims nothing, one holding
streams abandons them and retires, and a router refuses writes; the fence never outlives the gate.  The
authority's failover turns the old region Off, waits ``activation_wait_s`` of the old region's settings
(that lease, then a request's timeout for the last write sent under it to land, and the fencing margin for
clock rates), then turns the new one On, so the two regions' consumers never overlap, however late
replication is.  With a gate, each region's workers number the message log in its own segments
(``log_region_tag``, ``fleet.batch_log``), so a region activated before the other's last batches reached it
never writes a key the other wrote.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.aws import aws_errors
from fleet.batch_log import segment_tag
from fleet.clock import monotonic_s
from fleet.config import FleetConfig
from fleet.errors import StoreError
from fleet.lease import HardenedRules
from fleet.logline import log

ON, OFF = "On", "Off"


@dataclass
class GateState:
    """The gate's decision, from the answers read (pure: a time and an answer in, a deadline out)."""

    lease_s: float
    open_until: float = -math.inf  # fence-clock time the region may consume until; closed before any On

    def answered(self, sent_s: float, state: str | None) -> None:
        """A read sent at ``sent_s`` answered ``state`` (None: no answer, or not one of On / Off)."""
        if state == ON:
            self.open_until = max(self.open_until, sent_s + self.lease_s)
        elif state == OFF:
            self.open_until = min(self.open_until, sent_s)

    def open(self, now_s: float) -> bool:
        return now_s < self.open_until


class RegionGate:
    """Reads ``control`` through ``endpoints`` (url, ARC data-plane client: ``AwsClients.gate_clients``), each request
    bounded by the client's timeout; no endpoints: no gate, always open.  Times are on
    ``clock``, the worker's fence clock (``fleet.clock.Clock.fence_s``), as the fence the gate bounds."""

    def __init__(self, endpoints: Sequence[tuple[str, Any]], control: str, lease_s: float,
                 clock: Callable[[], float] = monotonic_s) -> None:
        self.endpoints = list(endpoints)
        self.clock = clock
        self.control = control
        self.state = GateState(lease_s, -math.inf if endpoints else math.inf)

    @property
    def open_until(self) -> float:
        return self.state.open_until

    async def admits(self) -> bool:
        """Read the control (with a gate) and say whether the region may consume now."""
        if self.endpoints:
            sent = self.clock()
            self.state.answered(sent, await self._read())
        return self.state.open(self.clock())

    async def _read(self) -> str | None:
        """The control's state from the first endpoint that answers (it is tried first next time); None
        when none does, or an answer is neither On nor Off."""
        for index, (url, arc) in enumerate(self.endpoints):
            try:
                async with aws_errors("GetRoutingControlState"):
                    answer = await arc.get_routing_control_state(RoutingControlArn=self.control)
            except StoreError as exc:
                log("region_gate.error", endpoint=url, error=str(exc)[:200])
                continue
            self.endpoints = self.endpoints[index:] + self.endpoints[:index]
            state = answer.get("RoutingControlState")
            return state if state in (ON, OFF) else None
        return None


def gate_lease_s(config: FleetConfig) -> float:
    """The gate's lease: the hardened fence time (lease, less the fencing margin and a request's timeout),
    which outlasts a heartbeat."""
    return max(HardenedRules(config).fence_ms / 1000.0, config.heartbeat_s)


def gate_for(config: FleetConfig, clients: Sequence[tuple[str, Any]],
             clock: Callable[[], float] = monotonic_s) -> RegionGate:
    """The gate of ``config``'s region, reading through ``clients`` (``AwsClients.gate_clients``), on the fence
    clock ``clock``."""
    return RegionGate(clients, config.region_gate_control, gate_lease_s(config), clock)


def activation_wait_s(config: FleetConfig) -> float:
    """How long the authority must wait, after turning ``config``'s region Off, before another region may be
    turned On: the region's gate lease (every worker and router there has stopped by then, whether it read
    the Off or could not read at all), a request's timeout (the last write sent under the gate has landed
    or failed) and the fencing margin (clock rates)."""
    return gate_lease_s(config) + config.scaled_s(config.aws_timeout_ms) \
        + config.scaled_s(config.fence_margin_ms)


def log_region_tag(config: FleetConfig) -> int:
    """The tag of ``config``'s region in the message log's keys (``fleet.batch_log.segment_tag``): with a gate
    (regions that take over from one another), its region's; without, 0 (one region: the log's numbers alone)."""
    return segment_tag(config.region) if config.region_gate_endpoints else 0
