"""What one region run reached, read from its history (pure: a history frame in, names out): the fault kinds
it started and the activation transitions and interleavings that happened.  The batch counts them per
variant (``harness.region.schedules.summary``), so "0 split brain" names the cases it covered.

- ``fault:<kind>``: a ``fault.start`` of that kind (harness events);
- ``failover``: the secondary's routing control turned On (each control's first state is the run's start,
  not a move); ``failback``: the primary's On again after it;
  ``repeated failover``: more than one failover in the run; ``failover superseded``: a failover (a
  generation that turned a region Off) that never turned its region On because a later one began while it
  waited out the old region's gate (``RoutingControls.fail_over``: one failover at a time); ``failover
  abandoned``: one that gave up after its wait, its region no longer able to take the activation
  (route53 ``failover.abandoned``); ``forced failback``: the primary's On after the automation moved back
  without waiting for replication, the standby's store out (route53 ``failback.forced``); ``waited for
  replication``: a move that, after its activation wait, waited for the old region's last writes
  (route53 ``activation.missing`` with ``waited_ms`` over 0); ``activated unreplicated``: one whose wait
  reached its bound and activated anyway (route53 ``failover.unreplicated``);
- ``answer flapped``: the zone's answer changed more than twice (route53 ``dns.answer``);
- ``both unhealthy``: both regions' health checks failing at once;
- ``start during fault``: a START a router acknowledged while a region fault ran; ``start during
  failover``: a START sent while no region was On (between a control turned Off and the next On): one a
  router answered then, whatever the answer (with the gate a router there refuses it: no region is active),
  or one the workload sent then (``workload.start``, which reaches no router when the old region is cut);
  whether such a START is acknowledged later and kept is the lost-STARTs checker's to say;
- ``worker pause during region fault``: a worker frozen while a region fault ran;
- ``clock skew``: the replication stamps of a region skewed (``replication.config``).
"""

from __future__ import annotations

import pandas as pd

from harness.region.routing_control import HOLD

REGION_FAULT_KINDS = ("replication_pause", "region_cut", "dynamodb_outage", "gray_failure", "flapping",
                      "region_outage")

COLUMNS = ("t", "src", "type", "kind", "target", "region", "state", "healthy", "status",
           "clock_offsets_ms", "generation", "waited_ms")


def _of(history: pd.DataFrame, kind: str, src: str | None = None) -> pd.DataFrame:
    rows = history[history["type"] == kind]
    return rows if src is None else rows[rows["src"] == src]


def _spans(history: pd.DataFrame, kinds: tuple[str, ...], end_ms: float) -> list[tuple[float, float]]:
    """The (start, stop) of each fault of ``kinds``, in order; one never stopped lasts to ``end_ms``."""
    faults = history[history["type"].isin(["fault.start", "fault.stop"]) & history["kind"].isin(kinds)]
    spans: list[tuple[float, float]] = []
    open_at: dict[tuple[str, str], float] = {}
    for row in faults.sort_values("t").itertuples():
        key = (row.kind, row.target)
        if row.type == "fault.start":
            open_at.setdefault(key, float(row.t))
        elif key in open_at:
            spans.append((open_at.pop(key), float(row.t)))
    return spans + [(t, end_ms) for t in open_at.values()]


def _within(t: float, spans: list[tuple[float, float]]) -> bool:
    return any(a <= t <= b for a, b in spans)


def reached(history: pd.DataFrame, primary: str, secondary: str) -> list[str]:
    """``primary``, ``secondary``: the regions' AWS names, as their routing controls are named."""
    if history.empty:
        return []
    history = history.reindex(columns=sorted(set(history.columns) | set(COLUMNS)))
    names: set[str] = set()
    end_ms = float(history["t"].max())
    names.update(f"fault:{kind}" for kind in _of(history, "fault.start")["kind"].dropna())
    gates = _of(history, "gate.state", "route53")
    gates = gates[gates["region"] != HOLD].sort_values("t")
    gates = gates[gates.groupby("region").cumcount() > 0]  # each control's first state is where the run began
    ons = list(gates[gates["state"] == "On"]["region"])
    failovers = ons.count(secondary)
    if failovers:
        names.add("failover")
        if primary in ons[ons.index(secondary) + 1:]:
            names.add("failback")
    if failovers > 1:
        names.add("repeated failover")
    began = sorted(set(gates[gates["state"] == "Off"]["generation"].dropna()))
    activated = set(gates[gates["state"] == "On"]["generation"].dropna())
    abandoned = set(_of(history, "failover.abandoned", "route53")["generation"].dropna())
    if abandoned:
        names.add("failover abandoned")
    if (_of(history, "activation.missing", "route53")["waited_ms"].fillna(0) > 0).any():
        names.add("waited for replication")
    if not _of(history, "failover.unreplicated", "route53").empty:
        names.add("activated unreplicated")
    forced = _of(history, "failback.forced", "route53")["t"]
    if not forced.empty and (gates[(gates["region"] == primary) & (gates["state"] == "On")]["t"] > forced.min()).any():
        names.add("forced failback")
    if any(g not in activated | abandoned for g in began[:-1]):
        names.add("failover superseded")
    if len(_of(history, "dns.answer", "route53")) > 2:
        names.add("answer flapped")
    unhealthy: dict[str, bool] = {}
    for row in _of(history, "health.check", "route53").sort_values("t").itertuples():
        unhealthy[str(row.region)] = not bool(row.healthy)
        if len(unhealthy) == 2 and all(unhealthy.values()):
            names.add("both unhealthy")
    region_faults = _spans(history, REGION_FAULT_KINDS, end_ms)
    off_spans, off_at = [], None
    for row in gates.itertuples():
        if row.state == "Off" and off_at is None:
            off_at = float(row.t)
        elif row.state == "On" and off_at is not None:
            off_spans.append((off_at, float(row.t)))
            off_at = None
    starts = _of(history, "event")
    starts = starts[starts["kind"] == "START"]
    if any(_within(float(t), region_faults) for t in starts[starts["status"].between(200, 299)]["t"]):
        names.add("start during fault")
    if any(_within(float(t), off_spans) for t in [*starts["t"], *_of(history, "workload.start")["t"]]):
        names.add("start during failover")
    if any(a <= d and c <= b for a, b in _spans(history, ("worker_pause",), end_ms) for c, d in region_faults):
        names.add("worker pause during region fault")
    config = _of(history, "replication.config")
    if any(isinstance(offsets, dict) and any(offsets.values()) for offsets in config["clock_offsets_ms"]):
        names.add("clock skew")
    return sorted(names)
