"""The region activation gate: one authority outside every region says which region may consume, in the
spirit of Route 53 Application Recovery Controller's routing controls.  Without a gate (``region_gate_url``
empty, the default) every region may; with a standby region fed by Global Tables, that lets the standby's
warm fleet claim the streams it sees replicated, while the primary consumes them (split brain).

A worker reads its region's control, ``GET {region_gate_url}/{region}`` answering ``{"state": "On"}`` or
``{"state": "Off"}``, at every heartbeat before its renewals (``fleet.liveness``).  The gate is a lease like
the worker's own (``GateState``): an On answer keeps the region open until the read was sent plus the fence
time; an Off answer closes it at once; no answer lets it lapse.  While it is closed a worker registers
nothing and claims nothing, and one holding streams abandons them and retires; the fence never outlives the
gate.  The authority's failover turns the old region Off, waits longer than that lease, then turns the new
one On, so the two regions' consumers never overlap, however late replication is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from fleet.clock import monotonic_s
from fleet.config import FleetConfig
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
    """Reads ``url/region`` (one request, within ``timeout_s``); an empty URL: no gate, always open.  Times are
    on ``clock``, the worker's fence clock (``fleet.clock.Clock.fence_s``), as the fence the gate bounds."""

    def __init__(self, url: str, region: str, lease_s: float, timeout_s: float,
                 clock: Callable[[], float] = monotonic_s) -> None:
        self.url = f"{url.rstrip('/')}/{region}" if url else ""
        self.timeout_s = timeout_s
        self.clock = clock
        self.state = GateState(lease_s, -math.inf if url else math.inf)

    @property
    def open_until(self) -> float:
        return self.state.open_until

    async def admits(self) -> bool:
        """Read the control (with a gate) and say whether the region may consume now."""
        if self.url:
            sent = self.clock()
            self.state.answered(sent, await self._read())
        return self.state.open(self.clock())

    async def _read(self) -> str | None:
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(self.url) as response:
                if response.status != 200:
                    return None
                state = json.loads(await response.read()).get("state")
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as exc:
            log("region_gate.error", url=self.url, error=str(exc) or type(exc).__name__)
            return None
        return state if state in (ON, OFF) else None


def gate_for(config: FleetConfig, clock: Callable[[], float] = monotonic_s) -> RegionGate:
    """The gate of ``config``'s region, on the fence clock ``clock``; its lease is the hardened fence time
    (lease, less the fencing margin and a request's timeout), which outlasts a heartbeat."""
    fence_s = HardenedRules(config).fence_ms / 1000.0
    return RegionGate(config.region_gate_url, config.region, max(fence_s, config.heartbeat_s),
                      config.scaled_s(config.aws_timeout_ms), clock)
