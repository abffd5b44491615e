"""Recovery phases (DESIGN §5) for every connection a fault affected, from the history alone.

For a ``fault.start`` at ``t0`` (every kind unless ``kinds`` restricts them), the affected connections are:
the pks a target worker was consuming at ``t0`` when the target names workers (ids the history knows or
that start with ``worker``; ``*``, ``all`` or ``workers`` name them all); otherwise, and for a ``join`` (the
streams moved to balance the fleet, whoever held them), the pks whose consuming part ended within
[t0, fault.stop (t0 if none) + ``fault_grace_ms``] (default: one heartbeat).
The old owner ``W`` is that part's worker, ``old_end`` its end.

- ``claim``: the first ``lease.acquire`` ok for the pk after t0 by another worker, or by W itself once it
  restarted (``worker.start``) or lost or released the lease; the new owner is its worker.  A takeover after W
  caught up (below) while W's session consumed on past the fault's window had another cause (a later
  rebalance, say) and is not the fault's: that connection was not disrupted.  When that owner
  never caught up (a later fault cut it off before it did), the recovery passes on: the claim is the next
  takeover by another consumer, the first of them that caught up (and still counts from t0).  Without a claim,
  when W's session stopped consuming for good within the fault's window (as above) the new owner is
  whoever opened the next session (``reconnect_in_place`` when W); otherwise the connection was not
  disrupted (a latency, a short partition, a pause its session survived): it recovers when W catches up.
- ``detect``: when the old lease became claimable: the earlier of W's ``lease.release`` ok and the expiry
  W's last ok lease events before the takeover promised (blog: per-pk ``expires_ms``; hardened:
  worker-level ``lease.renew`` ``expires_ms`` + ``config.clock_tolerance_ms``; the later of both when both
  exist), or when a confirmed death notice buried W's incarnation (``death.notice``, hardened) if earlier;
  None without lease events, or when the lease never lapsed before the end.
- ``connect``: the new owner's first ``sub.open`` after t0 (and after its claim).
- ``resume``: its first ``msg.persist`` ok from then on.
- ``caught_up``: its first ``msg.persist`` ok whose ``seq_to`` reaches the highest seq emitted before its
  connect (not disrupted: before fault.stop, else t0).  Recovery = caught_up − t0.
- ``gap``: from ``old_end`` until some worker's consuming part continues past it (0 when they overlapped).

Phase times are reported from t0 (``<phase>_ms``) and as steps from the previous phase that happened
(``step_<phase>_ms``, so the steps add up to the recovery).  A connection STOPPED during its recovery, or
already STOPPED when the fault began (a worker still consuming it then breaks I5, not recovery), is marked
``stopped`` and left out of the statistics and bounds.  A connection that never caught up before
the end has recovery None: the checker is invalid if the run has a bound for that fault kind, else unknown.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.checkers.consuming import Consumption, consumption
from harness.checkers.events import (
    STOPPED,
    Events,
    Fault,
    RunInfo,
    consumer_of,
    desired_states,
    faults,
    known_workers,
    run_info,
    same_consumer,
    select,
    split_consumer,
    worker_of,
)
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity, summarise

PHASES = ("detect", "claim", "connect", "resume", "caught_up")
PHASE_COLUMNS = [
    "fault", "fault_kind", "fault_target", "pk", "old_worker", "new_worker", "t0", "fault_stop_t",
    "old_end_t",
    *(f"{p}_t" for p in PHASES), *(f"{p}_ms" for p in PHASES), *(f"step_{p}_ms" for p in PHASES),
    "gap_ms", "recovery_ms", "disrupted", "reconnect_in_place", "recovered", "stopped", "bound_ms",
    "within_bound",
]
ALL_WORKERS = frozenset({"*", "all", "workers"})
DETAIL_ROWS = 50

Arrays = tuple[np.ndarray, ...]

# Fault kinds whose target is not where the disruption is: a worker joining moves other workers' streams.
WINDOW_KINDS = frozenset({"join"})


def check_recovery(history: Events, *, kinds: Collection[str] | None = None,
                   fault_grace_ms: float | None = None, info: RunInfo | None = None,
                   consumed: Consumption | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    consumed = consumed if consumed is not None else consumption(history, info)
    grace = fault_grace_ms if fault_grace_ms is not None else (info.duration("heartbeat_ms") or 0.0)
    look = _Lookups.build(history, info, consumed)
    workers = known_workers(history)
    fault_rows: list[Row] = []
    rows: list[Row] = []
    for fault in faults(history):
        if kinds is not None and fault.kind not in kinds:
            continue
        affected = _affected(fault, consumed, workers, grace, info)
        fault_rows.append({"fault": fault.index, "kind": fault.kind, "target": fault.target,
                           "start_t": fault.start_t, "stop_t": fault.stop_t, "affected": len(affected)})
        rows.extend(_phases(fault, pk, old_worker, old_consumer, old_end, session_end, look, info, grace)
                    for pk, old_worker, old_consumer, old_end, session_end in affected)

    judged = [r for r in rows if not r["stopped"]]
    unrecovered = [r for r in judged if not r["recovered"]]
    bounded = any(r["bound_ms"] is not None for r in unrecovered)
    valid: Validity = False if bounded else (UNKNOWN if unrecovered else True)
    details: dict[str, Any] = {
        "faults": fault_rows,
        "affected": len(rows),
        "recovered": sum(1 for r in judged if r["recovered"]),
        "unrecovered": len(unrecovered),
        "stopped": len(rows) - len(judged),
        "recovery_ms": summarise(r["recovery_ms"] for r in judged),
        "phases_ms": phase_stats(judged),
        "never_recovered": [{k: r[k] for k in ("fault", "fault_kind", "pk", "old_worker", "new_worker")}
                            for r in unrecovered[:DETAIL_ROWS]],
    }
    return CheckResult("recovery", valid, details, {"phases": rows})


def phase_stats(rows: list[Row]) -> dict[str, dict[str, float | None]]:
    """{phase: {p50, p95, max}} of the times from t0 (and of the gap) over these rows."""
    stats = {phase: summarise(r[f"{phase}_ms"] for r in rows) for phase in PHASES}
    stats["gap"] = summarise(r["gap_ms"] for r in rows)
    return stats


def _affected(fault: Fault, consumed: Consumption, workers: set[str], grace: float,
              info: RunInfo) -> list[tuple[str, str, str, float, float]]:
    """(pk, old worker, old consumer, end of the old consuming part, end of its session's last consuming part)
    of each connection the fault affected."""
    parts = consumed.parts
    parts = parts.assign(session_end=parts.groupby(["pk", "session"], sort=False)["end"].transform("max"))
    if fault.kind in WINDOW_KINDS:
        targets = set()
    elif ALL_WORKERS & set(fault.targets):
        targets = set(workers)
    else:
        targets = {t for t in fault.targets if t in workers or t.startswith("worker")}
    t0 = fault.start_t
    if targets:
        # held at t0: a session open then whose last consuming part began before it (a session whose
        # reading was already cut by its keepalive just before a freeze still belonged to that worker)
        raw_end = consumed.sessions.set_index(["pk", "session"])["end_t"]
        session_closed = raw_end.reindex(pd.MultiIndex.from_frame(parts[["pk", "session"]])).to_numpy()
        hit = parts.loc[parts["worker"].isin(targets) & (parts["start"] <= t0)
                        & ((parts["end"] >= t0) | (session_closed >= t0))]
        chosen = hit.sort_values("start", kind="stable").groupby("pk", sort=True).tail(1)
    else:
        hit = parts.loc[(parts["end"] >= t0) & (parts["end"] <= _window_end(fault, grace))
                        & (parts["end"] < info.last_t)]
        chosen = hit.sort_values("end", kind="stable").groupby("pk", sort=True).head(1)
    chosen = chosen.sort_values("pk", kind="stable")
    return list(zip(chosen["pk"], chosen["worker"], chosen["consumer"], chosen["end"].astype(float),
                    chosen["session_end"].astype(float), strict=True))


def _window_end(fault: Fault, grace: float) -> float:
    """Until when a consuming part's end counts as caused by the fault."""
    return (fault.stop_t if fault.stop_t is not None else fault.start_t) + grace


def _phases(fault: Fault, pk: str, old: str, old_consumer: str, old_end: float, session_end: float,
            look: _Lookups, info: RunInfo, grace: float) -> Row:
    t0 = fault.start_t
    restart = _first_after(look.starts.get(old), t0, strict=True)
    lost = _first_after(look.losses.get((pk, old)), t0)
    # the fault cut the stream when the old session stopped consuming for good within its window (a
    # session that resumes reading after a pause was not cut)
    cut = session_end <= _window_end(fault, grace) and session_end < info.last_t
    # catching up means reaching the head emitted before the fault stopped
    head = look.head_before(pk, fault.stop_t if fault.stop_t is not None else t0)
    persisted = look.persists.get((pk, old))
    kept_up_t = _caught_up(persisted, t0, head)
    claims = _claims(look, pk, t0, old_consumer, restart, lost)
    if claims and not cut and kept_up_t is not None and kept_up_t < claims[0][0]:
        claims = []  # W caught up first and consumed on past the window: a later move had another cause
    # a stream another consumer was already consuming when the fault began (its old owner had been superseded
    # and not yet noticed: an I1 overlap, judged there) was not disrupted: it recovers as that consumer catches up
    already = None if claims else look.other_consumer_at(pk, t0, old_consumer)
    disrupted = bool(claims) or (cut and already is None)
    claim_t: float | None = None
    if claims:
        # the first claimer that caught up (a claimer cut off by a later fault hands the recovery on)
        outcomes = [_recovery_by(look, pk, new, claim) for claim, new in claims]
        chosen = next((i for i, o in enumerate(outcomes) if o[2] is not None), 0)
        (claim_t, new), (connect_t, resume_t, caught_up_t) = claims[chosen], outcomes[chosen]
    elif disrupted:
        new, connect_t = None, None
        times, owners = look.pk_opens.get(pk, (np.empty(0), np.empty(0, dtype=object)))
        later = np.flatnonzero(times > t0)
        if later.size:
            connect_t, new = float(times[later[0]]), str(owners[later[0]])
        _, resume_t, caught_up_t = (_recovery_by(look, pk, new, t0) if new is not None
                                    else (None, None, None))
    else:
        # not disrupted: persisting counts from t0, by W or by the consumer already consuming it then
        new, connect_t = already or old, None
        if already is not None:
            persisted = look.persists.get((pk, already))
        resume_t = _first_after(persisted[0] if persisted else None, t0)
        caught_up_t = kept_up_t if already is None else _caught_up(persisted, t0, head)
    detect_t = _detect(look, pk, old, old_consumer, t0, claim_t, restart, info)
    stop_t = _first_after(look.stops.get(pk), t0)
    stopped = look.stopped_at(pk, t0) or (
        stop_t is not None and stop_t <= (caught_up_t if caught_up_t is not None else info.last_t))
    times_of = dict(zip(PHASES, (detect_t, claim_t, connect_t, resume_t, caught_up_t), strict=True))
    row: Row = {
        "fault": fault.index, "fault_kind": fault.kind, "fault_target": fault.target, "pk": pk,
        "old_worker": old, "new_worker": new, "t0": t0, "fault_stop_t": fault.stop_t, "old_end_t": old_end,
    }
    row.update({f"{p}_t": t for p, t in times_of.items()})
    row.update({f"{p}_ms": (t - t0 if t is not None else None) for p, t in times_of.items()})
    previous = t0
    for phase, t in times_of.items():
        row[f"step_{phase}_ms"] = t - previous if t is not None else None
        previous = t if t is not None else previous
    if old_end >= info.last_t or (not disrupted and old_end > _window_end(fault, grace)):
        resumed_at: float | None = old_end  # consumption went on through the fault
    else:
        resumed_at = look.consuming_after(pk, old_end)
    bound = info.bound_for(fault.kind)
    recovery = caught_up_t - t0 if caught_up_t is not None else None
    row.update({
        "gap_ms": max(0.0, resumed_at - old_end) if resumed_at is not None else None,
        "recovery_ms": recovery,
        "disrupted": bool(disrupted),
        "reconnect_in_place": bool(disrupted and claim_t is None and new == old),
        "recovered": recovery is not None,
        "stopped": bool(stopped),
        "bound_ms": bound,
        "within_bound": (None if bound is None or stopped else recovery is not None and recovery <= bound),
    })
    return row


def _claims(look: _Lookups, pk: str, t0: float, old_consumer: str, restart: float | None,
            lost: float | None) -> list[tuple[float, str]]:
    """(time, worker) of each takeover of pk after t0: the first by another consumer (a new incarnation of
    the old worker counts), or by the old one after it restarted or lost the lease; then each acquire by a
    consumer other than the one before it."""
    times, owners = look.acquires.get(pk, (np.empty(0), np.empty(0, dtype=object)))
    claims: list[tuple[float, str]] = []
    previous: str | None = None
    for t, owner in zip(times[times > t0].tolist(), owners[times > t0].tolist(), strict=True):
        if previous is None:
            if (same_consumer(owner, old_consumer) and (restart is None or t < restart)
                    and (lost is None or t < lost)):
                continue
        elif same_consumer(owner, previous):
            continue
        claims.append((t, split_consumer(owner)[0]))
        previous = owner
    return claims


def _recovery_by(look: _Lookups, pk: str, new: str, after: float) -> tuple[float | None, ...]:
    """(connect, resume, caught_up) of worker ``new`` after ``after``: its first session, its first write
    from that session, and its first write reaching the head emitted before that session."""
    connect_t = _first_after(look.opens.get((pk, new)), after)
    if connect_t is None:
        return None, None, None
    persisted = look.persists.get((pk, new))
    resume_t = _first_after(persisted[0] if persisted else None, connect_t)
    return connect_t, resume_t, _caught_up(persisted, connect_t, look.head_before(pk, connect_t))


def _detect(look: _Lookups, pk: str, old: str, old_consumer: str, t0: float, claim_t: float | None,
            restart: float | None, info: RunInfo) -> float | None:
    limit = claim_t if claim_t is not None else info.last_t
    if restart is not None:
        limit = min(limit, restart)
    expiries = []
    per_pk = _last_before(look.pk_expiry.get((pk, old)), limit)
    if per_pk is not None:
        expiries.append(per_pk)
    worker_level = _last_before(look.worker_expiry.get(old), limit)
    if worker_level is not None:
        expiries.append(worker_level + (info.duration("clock_tolerance_ms") or 0.0))
    candidates = [max(expiries)] if expiries else []
    for ended in (look.releases.get((pk, old)), look.burials.get(old_consumer)):
        if ended is not None:
            later = ended[(ended >= t0) & (ended < limit)]
            if later.size:
                candidates.append(float(later[0]))
    if not candidates:
        return None
    detect = min(candidates)
    return None if claim_t is None and detect > info.last_t else detect


def _caught_up(persisted: Arrays | None, start: float, head: float) -> float | None:
    if persisted is None:
        return None
    times, seq_to = persisted
    first = int(np.searchsorted(times, start, side="left"))
    reached = np.flatnonzero(seq_to[first:] >= head)
    return float(times[first + reached[0]]) if reached.size else None


def _first_after(times: np.ndarray | None, t: float, strict: bool = False) -> float | None:
    if times is None:
        return None
    index = int(np.searchsorted(times, t, side="right" if strict else "left"))
    return float(times[index]) if index < times.size else None


def _last_before(pairs: Arrays | None, limit: float) -> float | None:
    """The value of the last (time, value) pair before ``limit``."""
    if pairs is None:
        return None
    times, values = pairs
    index = int(np.searchsorted(times, limit, side="left")) - 1
    return float(values[index]) if index >= 0 else None


@dataclass(frozen=True)
class _Lookups:
    """Time-sorted arrays per pk, per worker or per (pk, worker), for the phase searches."""

    opens: dict[Any, np.ndarray]
    pk_opens: dict[Any, Arrays]
    persists: dict[Any, Arrays]
    acquires: dict[Any, Arrays]
    pk_expiry: dict[Any, Arrays]
    worker_expiry: dict[Any, Arrays]
    releases: dict[Any, np.ndarray]
    burials: dict[Any, np.ndarray]
    losses: dict[Any, np.ndarray]
    starts: dict[Any, np.ndarray]
    stops: dict[Any, np.ndarray]
    desired: dict[Any, Arrays]
    heads: dict[Any, Arrays]
    parts: dict[Any, Arrays]
    part_consumers: dict[Any, Arrays]

    @classmethod
    def build(cls, history: Events, info: RunInfo, consumed: Consumption) -> _Lookups:
        opens = select(history, "sub.open", ["t", "pk", "worker"]).dropna(subset=["pk"])
        opens["worker"] = opens["worker"].fillna("?")
        persists = select(history, "msg.persist", ["t", "src", "pk", "worker", "seq_to", "outcome"])
        persists = persists.loc[(persists["outcome"] == "ok") & persists["pk"].notna()]
        persists = persists.assign(worker=worker_of(persists))
        lease = select(history, ["lease.acquire", "lease.renew", "lease.release", "lease.lost"],
                       ["t", "src", "type", "pk", "worker", "gen", "outcome", "expires_ms"])
        lease = lease.assign(consumer=consumer_of(lease), worker=worker_of(lease))
        ok = lease["outcome"] == "ok"
        acquired = lease.loc[ok & (lease["type"] == "lease.acquire") & lease["pk"].notna()]
        promising = lease["type"].isin(["lease.acquire", "lease.renew"]) & lease["expires_ms"].notna()
        promised = lease.loc[ok & promising]
        workers = select(history, "worker.start", ["t", "src", "worker"])
        workers = workers.assign(worker=worker_of(workers))
        emits = select(history, "emit", ["t", "pk", "seq"]).dropna(subset=["pk", "seq"])
        emits["seq"] = emits.groupby("pk", sort=False)["seq"].cummax()
        states = desired_states(history)
        stops = states.loc[states["type"] == STOPPED]
        notices = select(history, "death.notice", ["t", "outcome", "buried"], raw=("buried",))
        buried = notices.loc[notices["outcome"] == "confirmed"].explode("buried").dropna(subset=["buried"])
        return cls(
            opens=_times(opens, ["pk", "worker"]),
            pk_opens=_pairs(opens, ["pk"], "worker"),
            persists=_pairs(persists, ["pk", "worker"], "seq_to"),
            acquires=_pairs(acquired, ["pk"], "consumer"),
            pk_expiry=_pairs(promised.loc[promised["pk"].notna()], ["pk", "worker"], "expires_ms"),
            worker_expiry=_pairs(promised.loc[promised["pk"].isna() & (promised["type"] == "lease.renew")],
                                 ["worker"], "expires_ms"),
            releases=_times(lease.loc[ok & (lease["type"] == "lease.release")], ["pk", "worker"]),
            burials=_times(buried, ["buried"]),
            losses=_times(lease.loc[lease["type"].isin(["lease.lost", "lease.release"])], ["pk", "worker"]),
            starts=_times(workers, ["worker"]),
            stops=_times(stops, ["pk"]),
            desired=_pairs(states, ["pk"], "type"),
            heads=_pairs(emits, ["pk"], "seq"),
            parts=_pairs(consumed.parts.rename(columns={"start": "t"}), ["pk"], "end"),
            part_consumers=_pairs(consumed.parts.rename(columns={"start": "t"}), ["pk"], "consumer"),
        )

    def stopped_at(self, pk: str, t: float) -> bool:
        """Whether the last START or STOP of pk before t was a STOP."""
        pairs = self.desired.get(pk)
        if pairs is None:
            return False
        times, states = pairs
        index = int(np.searchsorted(times, t, side="left")) - 1
        return index >= 0 and states[index] == STOPPED

    def head_before(self, pk: str, t: float) -> float:
        """The highest seq emitted for pk before t (-inf when none)."""
        found = _last_before(self.heads.get(pk), t)
        return found if found is not None else float("-inf")

    def other_consumer_at(self, pk: str, t: float, consumer: str) -> str | None:
        """The worker of another consumer than ``consumer`` whose consuming part of pk covers t, if any."""
        found, owners = self.parts.get(pk), self.part_consumers.get(pk)
        if found is None or owners is None:
            return None
        (starts, ends), (_, consumers) = found, owners
        for start, end, other in zip(starts.tolist(), ends.tolist(), consumers.tolist(), strict=True):
            if start <= t <= end and not same_consumer(str(other), consumer):
                return split_consumer(str(other))[0]
        return None

    def consuming_after(self, pk: str, t: float) -> float | None:
        """When some worker consumed pk again after t: the earliest start of a part still going after t."""
        found = self.parts.get(pk)
        if found is None:
            return None
        starts, ends = found
        later = starts[ends > t]
        return float(later.min()) if later.size else None


def _times(frame: pd.DataFrame, keys: list[str]) -> dict[Any, np.ndarray]:
    times = frame["t"].to_numpy(dtype="float64")
    return {_key(k): np.sort(times[index]) for k, index in frame.groupby(keys, sort=False).indices.items()}


def _pairs(frame: pd.DataFrame, keys: list[str], column: str) -> dict[Any, Arrays]:
    times = frame["t"].to_numpy(dtype="float64")
    values = frame[column].to_numpy()
    found: dict[Any, Arrays] = {}
    for key, index in frame.groupby(keys, sort=False).indices.items():
        order = index[np.argsort(times[index], kind="stable")]
        found[_key(key)] = (times[order], values[order])
    return found


def _key(key: Any) -> Any:
    return key[0] if isinstance(key, tuple) and len(key) == 1 else key
