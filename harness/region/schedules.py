"""Generated region fault schedules (pure: a seed in, schedules out) and the batch's summary.

A ``RegionSchedule`` is one region-level fault, a clock skew between the regions' replication stamps, and
up to two worker faults, each a ``Step`` at a time after the streams are consumed (seconds at scale 1; the
runner, ``harness.region.batch``, scales them):

- ``replication_pause`` (Global Tables stops delivering), ``region_cut`` (the primary cut off: router,
  workers, replication), ``dynamodb_outage`` (only the primary's DynamoDB), ``gray_failure`` (Route 53
  cannot reach the primary's API while its workers keep their upstream and DynamoDB), ``flapping`` (the
  same, ``flaps`` times on and off, ``period_s`` apart);
- ``worker_pause``: one worker of either region frozen (SIGSTOP) for the step's duration;
- ``start``: a STARTed stream through the failover name while the fault runs; one ``when`` ``failover`` is
  aimed at the failover window: sent once no region is active, sent anyway ``duration_s`` after ``at_s``
  if no failover began by then, and sent again until a router acknowledges it.

Every schedule whose region fault can move the zone's answer (``ANSWER_MOVERS``) has a START aimed at the
failover; half of
those whose primary is unhealthy for the whole fault (``BOTH_UNHEALTHY_WITH``) also make the standby
unreachable for Route 53 (a ``gray_failure`` of west) while the primary's fault runs, so both regions' health
checks fail at once (Route 53 then answers the primary again); and half of the schedules whose fault moves
the answer take the standby's store out (west cut off, ``region_cut``, or its DynamoDB out,
``dynamodb_outage``) from the failover's activation wait or after the standby became active, until after
the primary's fault ended: the failover gives up (``failover.abandoned``) or the automation, the primary
healthy again, fails back without waiting for replication (``failback.forced``).

Half of the schedules whose fault keeps the primary's DynamoDB answering (``PAUSED_WITH``: a gray failure,
flapping) also pause Global Tables (``replication_pause`` of ``global-tables``, ``when`` ``failover``) from
the instant the failover begins (the primary's control Off; without the gate, the zone answering the
standby), so the primary's last writes are still on their way when the activation wait ends and the
failover waits for them (``harness.region.automation.after_wait``).  The pause lasts the activation wait
(``ACTIVATION_WAIT_S``) plus, in half of them, a tenth to half of the replication wait's bound
(``REPLICATION_WAIT_S``): it ends within the wait, which then activates with nothing missing; in the other
half, 1.5 to 3 bounds: it outlasts the wait, which activates anyway at its bound (``failover.unreplicated``,
RPO by choice).  Drawn from a stream of its own (seeded ``region-aim:<seed>``),
so every other step of a seed's schedule is as it was.  A pause whose failover never began while the
schedule ran is not applied (the batch's result counts it).

``summary`` totals the batch's results per variant: runs, split brain (runs and streams consumed in both
regions), lost messages, lost control writes, and the activation checkers' findings.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from fleet.config import FleetConfig
from fleet.region_gate import activation_wait_s
from harness.region.automation import REPLICATION_WAIT_P99S
from harness.region.regions import RegionsSpec
from harness.region.route53 import HealthCheckSpec

REGION_FAULTS = ("replication_pause", "region_cut", "dynamodb_outage", "gray_failure", "flapping")
LEASE_S = 20.0  # the fleet's lease at scale 1: fault durations are drawn around it
# a flap shorter than the failure threshold's probes (3 x 10 s, as deployed) never turns the check: none is drawn
FLAP_MIN_S = HealthCheckSpec().failure_threshold * HealthCheckSpec().request_interval_s
# the region faults that fail the primary's health check (its API unreachable; a DynamoDB outage does not:
# the health check reads no table), so they can move the zone's answer and fail over
ANSWER_MOVERS = ("region_cut", "gray_failure", "flapping")
# of those, the ones that keep the primary unhealthy for their whole duration: the standby's check failing
# inside one fails both at once
BOTH_UNHEALTHY_WITH = ("region_cut", "gray_failure")
STANDBY_STORE_FAULTS = ("region_cut", "dynamodb_outage")  # the faults that take the standby's store out
# after a fault, the primary's check passing again (up to a check's turn) and the standby's store not answering
# for the automation's hysteresis (two check intervals, ``RegionsSpec.failback_hysteresis_s``) before it fails
# back without waiting for replication: a standby's store out for less than this after the fault never does
FORCED_FAILBACK_S = FLAP_MIN_S + 2 * HealthCheckSpec().request_interval_s
# the faults that keep the primary's DynamoDB answering, so a failover waits for its last writes: a replication
# pause from the failover's start makes it wait (``PAUSE_SHARE`` of them)
PAUSED_WITH = ("gray_failure", "flapping")
PAUSE_SHARE = 0.5
# at scale 1: the failover's activation wait (the old region's gate lease, a request timeout and the fencing
# margin), then its replication wait's bound (``REPLICATION_WAIT_P99S`` x the lag's 99th percentile)
ACTIVATION_WAIT_S = activation_wait_s(FleetConfig(profile="hardened", worker_id="schedule", timescale=1.0))
REPLICATION_WAIT_S = REPLICATION_WAIT_P99S * RegionsSpec.lag_p99_ms / 1000.0
# how far into the replication wait the pause ends, in its bounds: within it (room for the backlog to land at
# the lag), or past it (room for timers a loaded machine delays: in one run the activation wait ended 1 s late)
WITHIN_WAIT = (0.1, 0.5)
PAST_WAIT = (1.5, 3.0)


@dataclass(frozen=True)
class Step:
    at_s: float
    kind: str
    target: str
    duration_s: float = 0.0
    flaps: int = 0
    period_s: float = 0.0
    # "failover": a ``start`` aimed at the failover window (sent at the latest ``duration_s`` late); a
    # ``replication_pause`` begun when the failover begins, for ``duration_s``
    when: str = ""


@dataclass(frozen=True)
class RegionSchedule:
    seed: int
    clock_offsets_ms: dict[str, float]
    steps: tuple[Step, ...]

    def describe(self) -> str:
        parts = [f"{s.kind}({s.target}{', in the ' + s.when if s.when else ''}) at {s.at_s:.0f} s for "
                 f"{s.duration_s:.0f} s" for s in self.steps]
        skew = ", ".join(f"{region} {ms:+.0f} ms" for region, ms in self.clock_offsets_ms.items())
        return f"seed {self.seed}: " + "; ".join(parts) + (f"; clocks {skew}" if skew else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def generate(seed: int, count: int, workers: int = 2) -> list[RegionSchedule]:
    """``count`` schedules from ``seed`` (the same seed, the same schedules); ``workers``: per region."""
    if count < 1 or workers < 1:
        raise ValueError(f"need count >= 1 and workers >= 1, not count={count}, workers={workers}")
    return [_one(seed + index, workers) for index in range(count)]


def _one(seed: int, workers: int) -> RegionSchedule:
    rng = random.Random(seed)
    kind = REGION_FAULTS[seed % len(REGION_FAULTS)]  # every kind in every five consecutive seeds
    at = rng.uniform(0.0, LEASE_S)
    duration = rng.uniform(2 * LEASE_S, 3 * LEASE_S)  # long enough for a takeover; longer adds no interleaving
    target = "global-tables" if kind == "replication_pause" else "east"
    region_step = Step(at, kind, target, duration) if kind != "flapping" else \
        Step(at, kind, target, duration, flaps=rng.randint(2, 3), period_s=rng.uniform(FLAP_MIN_S, FLAP_MIN_S + 10.0))
    steps = [region_step, Step(at + rng.uniform(0.0, duration), "start", "router")]
    for _ in range(rng.randint(0, 2)):
        worker = f"{rng.choice(['east', 'west'])}-worker-{rng.randint(1, workers)}"
        pause_s = rng.uniform(LEASE_S / 4, 2 * LEASE_S)
        steps.append(Step(rng.uniform(0.0, at + duration), "worker_pause", worker, pause_s))
    skew = rng.uniform(-500.0, 500.0) if rng.random() < 0.5 else 0.0
    steps += _aimed(rng, region_step) + _paused_failover(seed, region_step)
    return RegionSchedule(seed, {"west": round(skew, 1)} if skew else {}, tuple(sorted(steps, key=lambda s: s.at_s)))


def _aimed(rng: random.Random, fault: Step) -> list[Step]:
    """The steps aimed at what drawn times rarely reach (drawn last, so the rest of a seed's schedule is as it
    was): a START in the failover window of a fault that moves the answer (it waits up to the fault's end and
    a check's turn), and, for half of the faults in ``BOTH_UNHEALTHY_WITH``, the standby unreachable for
    Route 53 from a time inside the fault for longer than its check takes to turn; then (drawn after those)
    for half of the faults that move the answer, the standby's store out from the time its check took to
    turn (the failover's start) up to two leases later (its activation wait, or after it), until a quarter
    to a whole lease past ``FORCED_FAILBACK_S`` after the fault's end (the primary healthy again while the
    standby is out, for longer than the automation waits before it moves back)."""
    if fault.kind not in ANSWER_MOVERS:
        return []
    end_s = max(fault.duration_s, 2 * fault.flaps * fault.period_s)
    steps = [Step(fault.at_s, "start", "router", end_s + FLAP_MIN_S, when="failover")]
    if fault.kind in BOTH_UNHEALTHY_WITH and rng.random() < 0.5:
        steps.append(Step(fault.at_s + rng.uniform(0.0, fault.duration_s / 2), "gray_failure", "west",
                          rng.uniform(FLAP_MIN_S + 5.0, FLAP_MIN_S + 20.0)))
    if rng.random() < 0.5:
        at_s = fault.at_s + FLAP_MIN_S + rng.uniform(0.0, 2 * LEASE_S)
        until_s = fault.at_s + end_s + FORCED_FAILBACK_S + rng.uniform(LEASE_S / 4, LEASE_S)
        steps.append(Step(at_s, rng.choice(STANDBY_STORE_FAULTS), "west", until_s - at_s))
    return steps


def _paused_failover(seed: int, fault: Step) -> list[Step]:
    """For ``PAUSE_SHARE`` of the faults in ``PAUSED_WITH``, a replication pause aimed at the failover: armed
    at the fault's start, begun when the failover begins, lasting the activation wait and then ``WITHIN_WAIT``
    (half of them) or ``PAST_WAIT`` of the replication wait's bound.  Its own random stream: the seed's other
    draws are untouched."""
    rng = random.Random(f"region-aim:{seed}")
    if fault.kind not in PAUSED_WITH or rng.random() >= PAUSE_SHARE:
        return []
    share = rng.uniform(*WITHIN_WAIT) if rng.random() < 0.5 else rng.uniform(*PAST_WAIT)
    return [Step(fault.at_s, "replication_pause", "global-tables", ACTIVATION_WAIT_S + share * REPLICATION_WAIT_S,
                 when="failover")]


def summary(results: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant: runs, runs with split brain, streams consumed in both regions, lost messages, lost
    control writes, activation findings, runs that could not be judged (a step did not happen); the STARTs
    and STOPs acknowledged just before the cut missing in the standby at its takeover, those beyond the
    replication lag at the cut, and those still reverted at the end; what the activated regions lacked of
    the other's writes at their activations, by kind (``missing_at_activation``: ``answering`` with the other
    region's DynamoDB answering, ``unreplicated`` where the automation's replication wait reached its bound,
    ``other_out`` with it out; ``harness.region.checks.gap_totals``); what the
    judged runs reached (``harness.region.reached``: fault kinds, transitions, interleavings), each the
    number of runs; and the mean wall and CPU seconds of a run."""
    totals: dict[str, dict[str, Any]] = {}
    for result in results:
        total = totals.setdefault(result["variant"], {"runs": 0, "split_brain_runs": 0, "split_brain_streams": 0,
                                                      "lost_messages": 0, "lost_control_writes": 0,
                                                      "activation_findings": 0, "unjudged": 0,
                                                      "control_missing_at_cut": 0, "control_beyond_lag": 0,
                                                      "control_reverted_at_end": 0, "reached": {},
                                                      "missing_at_activation": {"answering": {}, "unreplicated": {},
                                                                                "other_out": {}},
                                                      "wall_s": 0.0, "cpu_s": 0.0})
        total["runs"] += 1
        total["wall_s"] += result.get("wall_s", 0.0)
        total["cpu_s"] += result.get("cpu_s", 0.0)
        if result.get("error"):
            total["unjudged"] += 1
            continue
        streams = result["split_brain"]["streams"]
        total["split_brain_runs"] += streams > 0
        total["split_brain_streams"] += streams
        total["lost_messages"] += result["lost_messages"]
        total["lost_control_writes"] += result["lost_control_writes"]
        total["activation_findings"] += sum(result["activation"].values())
        control = result.get("control_at_cut") or {}
        total["control_missing_at_cut"] += control.get("starts", 0) + control.get("stops", 0)
        total["control_beyond_lag"] += control.get("beyond_lag", 0)
        total["control_reverted_at_end"] += control.get("reverted_at_end", 0)
        gaps = result.get("activation_gaps") or {}
        for side, kinds in total["missing_at_activation"].items():
            for kind, count in (gaps.get(side) or {}).items():
                kinds[kind] = kinds.get(kind, 0) + count
        for name in result.get("reached", []):
            total["reached"][name] = total["reached"].get(name, 0) + 1
    for total in totals.values():
        total["reached"] = dict(sorted(total["reached"].items()))
        total["wall_s"] = round(total["wall_s"] / total["runs"], 1)
        total["cpu_s"] = round(total["cpu_s"] / total["runs"], 1)
    return totals
