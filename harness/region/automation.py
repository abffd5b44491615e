"""The operator's failover automation, as pure decisions (observations in, where to move the activation out).

- Away from the primary (``Automation.step``): on the PRIMARY's health check alone, at once, while the
  standby's control store (its DynamoDB) answers.  The gate, not DNS, decides which region consumes: the
  standby's own check failing says only that clients cannot reach its API, so with both checks failing
  (Route 53 then answers the primary, which proves nothing about it) the activation still moves.  The
  activation wait keeps the two regions apart (``fleet.region_gate.activation_wait_s``), ``RoutingControls``
  one failover at a time.
- Back to the primary (``Failback``): only once the primary's own check has passed without a break for
  ``hysteresis_s`` (a flapping check restarts the wait, so it does not move the activation back and forth)
  and replication has caught up over that window: the ``FAILBACK_QUANTILE`` (nearest rank) of the
  replication's reports of the window (``replication.stats``: ``behind_ms``, how long ago the oldest write
  not yet delivered was made; writes keep coming, so a backlog of zero writes is never seen) within
  ``lag_bound_ms``, the lag's 99th percentile.  Not every report: about 1 % of writes take longer than the
  99th percentile, each holding ``behind_ms`` over the bound for a moment (how much longer it took), so at
  tens of writes a second a window of every report within the bound is luck, and the failback waited on
  it.  A backlog (an outage's or a pause's writes still undelivered) holds every report over the bound
  until it drains: a window with more than a tenth of its reports over the bound does not fail back.  The
  90th percentile, because the tail's moments over the bound take about 2 % of the time at the writes a
  run makes (rate x E[lag - bound | over] x 1 %: 30 writes/s, 57 ms at scale 0.1), so a window rarely holds
  more than a tenth of them, while a backlog that is still draining for more than a tenth of the window
  holds it back.  What the primary lacks when it turns On is checked apart (``activation.missing``).
- Back to the primary with the standby out (``Automation.step``, ``forced``): while a failback waits for
  replication, the standby's control store not answering (the standby cut off or its DynamoDB out) for
  ``hysteresis_s`` without a break moves the activation back, the primary's check passing, without waiting
  for replication: the standby's writes cannot be delivered until it returns, so the backlog would hold
  the failback (and nothing would consume) for as long as the standby is out.  What the lag at the cut
  still carried is lost from the standby's side, as a failover loses it from the primary's; one read that
  did not answer (a slow store) moves nothing.
- After the activation wait (``fit_after_wait``): the target is read again, and the failover gives up
  (the target stays Off, the hold On) if it can no longer take the activation: the primary its check
  failing, the standby its control store not answering.  The next ``step`` decides again from there.
- Then replication (``after_wait``, polled until it decides): the old region is Off and, its gate run
  out, writes nothing more, but its last writes may still be on their way to the target (a gray failure
  with replication lagging or paused: the old region's DynamoDB answers).  While the target lacks any of
  them (what ``activation.missing`` records: the writes still coming that will replace what it holds) and
  the old region's store answers, the move waits, as AWS's guidance for evacuating a live region of a
  global table says (stop the writes in the old region, let replication drain, watching
  ``ReplicationLatency`` / pending items, then start them in the new one:
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-global-table-design.prescriptive-guidance.evacuation.html).
  Every write lacked is waited for, not only those that can matter: the operator sees only what is
  pending, not what kind it is, and a superseded heartbeat arrives with the lag like any other write.
  With the old region's store out (cut off, its DynamoDB down) nothing more can arrive: no wait (a
  failover's RPO).  The wait is bounded (``limit_s``; by default ``REPLICATION_WAIT_P99S`` x the lag's
  99th percentile): at the bound the move activates anyway and the history says what was still missing
  (``failover.unreplicated``): RPO by choice, which the checker counts apart.  Twice the 99th percentile:
  the old region's last write is at least the fencing margin old when the activation wait ends, so a
  replication that lags as modelled (log-normal) exceeds the bound for about one write in 200,000; one
  that does not drain by then is stalled (a pause, a stuck partition), and waiting on buys nothing
  predictable.  At the timings terraform deploys (lag p99 3 s) that is 6 s on top of the 53 s the
  takeover takes otherwise (the standby On at 50 s, then 3 s of work: ``harness.region.failover.rto_budget_s``),
  within the 60 s RTO.  A bound of 0 is no replication wait at all (the
  deliberately unsafe ``no-wait`` variant's): nothing recorded, what the target lacks is a finding.

``harness.region.checks`` judges the same rules over a run's history (``early_failbacks``,
``moves_while_unhealthy``, ``flapping_moves``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PRIMARY, STANDBY = "primary", "standby"
FAILBACK_QUANTILE = 0.9  # of the replication's reports over the hysteresis window (see above)
REPLICATION_WAIT_P99S = 2.0  # a move's replication wait at most, in 99th percentiles of the lag (see above)
ABANDON, WAIT, ACTIVATE, UNREPLICATED = "abandon", "wait", "activate", "unreplicated"  # ``after_wait``'s answers
Report = tuple[float, float]  # a replication report: (when, in seconds on the reports' clock; behind_ms)


@dataclass
class Failback:
    """Decides when to move the activation back to the primary, from what it is shown, in order."""

    lag_bound_ms: float
    hysteresis_s: float
    quantile: float = FAILBACK_QUANTILE
    since_s: float | None = None  # when the primary's check last began to pass without a break
    reports: list[Report] = field(default_factory=list)  # those of the last ``hysteresis_s``
    behind_ms: float = 0.0  # the latest report's

    def observe(self, now_s: float, primary_healthy: bool, reports: Iterable[Report] = ()) -> bool:
        """Whether to fail back now (the caller then moves the activation and stops asking); ``reports``: the
        replication's reports made since the last call, in order, none later than ``now_s``."""
        self.reports = [r for r in [*self.reports, *reports] if r[0] >= now_s - self.hysteresis_s]
        self.behind_ms = self.reports[-1][1] if self.reports else self.behind_ms
        if not primary_healthy:
            self.since_s = None
            return False
        if self.since_s is None:
            self.since_s = now_s
        behind = sorted(b for _, b in self.reports)
        return now_s - self.since_s >= self.hysteresis_s and bool(behind) \
            and behind[math.ceil(self.quantile * len(behind)) - 1] <= self.lag_bound_ms


@dataclass
class Automation:
    """Where the activation should go, from what it is shown, in order; ``active``: where it last sent it
    (``PRIMARY``, ``STANDBY``, or None once a failover gave up: no region active)."""

    failback: Failback
    active: str | None = PRIMARY
    forced: bool = False  # whether the last move back was made with the standby's store out (not replicated)
    out_since_s: float | None = None  # when the standby's store last began not to answer without a break

    def step(self, now_s: float, primary_healthy: bool, reports: Iterable[Report],
             standby_answers: Callable[[], bool]) -> str | None:
        """The region to move the activation to now (the caller starts that failover), or None; ``reports``:
        the replication's since the last step (``Failback.observe``); ``standby_answers`` (asked only when
        it decides: a failover, or a failback held by the backlog: the latest report beyond the lag) whether
        the standby's control store answers."""
        if self.failback.observe(now_s, primary_healthy, reports) and self.active != PRIMARY:
            self.active, self.forced, self.out_since_s = PRIMARY, False, None
            return PRIMARY
        if not primary_healthy:
            self.out_since_s = None
            if self.active != STANDBY and standby_answers():
                self.active = STANDBY
                return STANDBY
            return None
        if self.active == PRIMARY:
            return None
        if self.failback.behind_ms <= self.failback.lag_bound_ms or standby_answers():
            self.out_since_s = None
            return None
        if self.out_since_s is None:
            self.out_since_s = now_s
        if now_s - self.out_since_s < self.failback.hysteresis_s:
            return None
        self.active, self.forced, self.out_since_s = PRIMARY, True, None
        return PRIMARY

    def gave_up(self, target: str) -> None:
        """A failover to ``target`` gave up after its wait: no region is active, unless a later move was
        decided meanwhile."""
        if self.active == target:
            self.active = None


def fit_after_wait(target: str, primary_healthy: bool, standby_answers: Callable[[], bool]) -> bool:
    """Whether ``target`` (``PRIMARY`` or ``STANDBY``) may still be turned On after the activation wait: the
    primary while its check passes, the standby while its control store answers."""
    return primary_healthy if target == PRIMARY else standby_answers()


def after_wait(fit: bool, lacking: int, old_answers: Callable[[], bool], waited_s: float, limit_s: float) -> str:
    """What a move does once its activation wait is over, asked again until it is not ``WAIT``: ``ABANDON``
    when the target can no longer take the activation (``fit``: ``fit_after_wait``); ``WAIT`` while the
    target lacks ``lacking`` writes of the old region that can still arrive (``old_answers``, asked only then:
    the old region's store answers) and ``waited_s`` (since the activation wait ended) is under ``limit_s``;
    ``UNREPLICATED`` at the limit with writes still lacking (the move activates anyway, and the history says
    so); else ``ACTIVATE`` (nothing lacking, the old region's store out, or ``limit_s`` 0: no replication
    wait)."""
    if not fit:
        return ABANDON
    if lacking == 0 or limit_s <= 0 or not old_answers():
        return ACTIVATE
    return WAIT if waited_s < limit_s else UNREPLICATED
