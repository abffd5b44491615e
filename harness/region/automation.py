"""The operator's failover automation, as a pure decision (observations in, whether to move out): when the
zone's answer changes, whether and when to move the region activation.

- Away from the primary (its health check failed): at once; the activation wait keeps the two regions
  apart (``fleet.region_gate.activation_wait_s``), ``RoutingControls`` one failover at a time.
- Back to the primary (``Failback``): only once the primary's own check passes (with both regions
  unhealthy Route 53 answers the primary again, which proves nothing about it), and replication has caught
  up (no backlog beyond the lag: the oldest undelivered write younger than ``lag_bound_ms``; writes keep
  coming, so a backlog of zero writes is never seen) without a break for ``hysteresis_s`` while the zone
  kept answering the primary.  A flapping check or a replication still
  behind restarts the wait: a failback never activates a primary whose tables lack what the standby wrote,
  and a flapping check does not move the activation back and forth.

``harness.region.checks`` judges the same rules over a run's history (``early_failbacks``,
``moves_while_unhealthy``, ``flapping_moves``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Failback:
    """Decides when to move the activation back to the primary, from what it is shown, in order."""

    lag_bound_ms: float
    hysteresis_s: float
    since_s: float | None = None  # when every condition last began to hold without a break

    def observe(self, now_s: float, answers_primary: bool, primary_healthy: bool, behind_ms: float) -> bool:
        """Whether to fail back now (the caller then moves the activation and stops asking); ``behind_ms``:
        how long ago the oldest write not yet delivered was made."""
        if not (answers_primary and primary_healthy and behind_ms <= self.lag_bound_ms):
            self.since_s = None
            return False
        if self.since_s is None:
            self.since_s = now_s
        return now_s - self.since_s >= self.hysteresis_s
