"""I5 STOP honoured: after every STOP the router accepted, nothing the stream emits later than the STOP plus a
bound is consumed or persisted, and every upstream session of the pk ends once it has nothing left to do.

The STOPs judged are the router's ``event`` entries of kind STOP with a 2xx ``status``
(``harness.checkers.events.desired_states``; older histories: the harness's ``conn.stopped``).  A START
accepted after it ends its obligation; one of unknown outcome (answered 5xx after its write was sent,
``harness.checkers.events.unknown_starts``) may have, so what is late only past it is undecided.  With
``bound`` B and ``deadline`` = stop + B, until then (or the end of the run):

- *live sessions* (open at the STOP) must all be closed by the deadline; ``latency_ms`` is from the STOP to
  the last of their ``sub.close``.
- *drain sessions* (opened after the STOP: a worker reading what the stream emitted before it, because its
  owner died before persisting it, DESIGN I2) may stay open while they store that backlog: each must close
  within B of the later of its opening and the answer to its consumer's last *backlog write* of the pk sent
  while it was open (``due``; a slow backend delays it, a worker reading without storing does not).  A
  drain that keeps reading live data writes it (a late write, below) or stops writing (then its session is
  overdue).
- *writes*: no ``msg.persist`` or ``checkpoint`` of the pk sent after the deadline may store a sequence
  emitted after the deadline (emission times: the upstream's ``emit`` events; a sequence without one is
  taken as emitted after the deadline, so older histories keep the plain rule "no write after the
  deadline").  Such a write with outcome ``ok`` is a violation, ``info`` undecided.  A *backlog write* is
  one whose last sequence was emitted by the deadline.

A session still open at the end, or when START came again, never closed for this STOP: a violation once it
was due before then; when it was not, undecided if the run ended, fine if START came (it ended what was
owed).  A START again before the deadline leaves nothing due.  The bound is ``stop_bound_ms`` from
``run.start``, else ``config.desired_check_ms + config.heartbeat_ms`` (the blog's per-connection
desired-state poll plus one heartbeat); no bound at all: every STOP undecided.  Undecided STOPs make the
verdict unknown.

The bound assumes the owner reaches DynamoDB: it learns of the STOP from its next renewal, retried once.
When a fault cuts the owner of a live session from DynamoDB during [stop, stop + B] (``STORE_FAULTS``: a
partition from AWS, a DynamoDB toxic or API fault aimed at it, a pause that freezes it), only its fence
promises anything: it stops consuming within a lease of its last renewal, which was sent before the STOP.
Its deadline is then the earlier of the fault's end + B and stop + lease + B (``deferred_by`` names the
fault).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.checkers.consuming import Consumption, accepted_writes, sessions
from harness.checkers.events import (
    STARTED,
    STOPPED,
    Events,
    Fault,
    RunInfo,
    desired_states,
    faults,
    run_info,
    select,
    unknown_starts,
)
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity, summarise

STOP_COLUMNS = ["pk", "stop_t", "sessions", "consumers", "closed_t", "latency_ms", "drains", "drains_closed_t",
                "late_writes", "possible_late_writes", "bound_ms", "deadline_t", "deferred_by", "within_bound",
                "maybe_restarted_t"]
# Faults that cut their target from DynamoDB (the service named in their params; these default to it); a
# frozen process (``pause``, ``pause_mid_write``, ``zombie``) reaches nothing, DynamoDB included.
STORE_FAULTS = frozenset({"partition_aws", "toxic", "aws_throttle", "aws_5xx", "aws_slow", "pause",
                          "pause_mid_write", "zombie"})
DETAIL_ROWS = 50

Emissions = tuple[np.ndarray, np.ndarray]


def stop_bound(info: RunInfo) -> float | None:
    if info.stop_bound_ms is not None:
        return info.stop_bound_ms
    check, heartbeat = info.duration("desired_check_ms"), info.duration("heartbeat_ms")
    return check + heartbeat if check is not None and heartbeat is not None else None


def store_cuts(fault_list: list[Fault], end_t: float) -> dict[str, list[tuple[float, float, str]]]:
    """Per worker, the (start, stop, label) of each fault cutting it from DynamoDB (open ones run to
    ``end_t``)."""
    cuts: dict[str, list[tuple[float, float, str]]] = {}
    for fault in fault_list:
        params = fault.params if isinstance(fault.params, dict) else {}
        if fault.kind not in STORE_FAULTS or params.get("service", "dynamodb") != "dynamodb":
            continue
        label = f"{fault.kind}:{params['type']}" if fault.kind == "toxic" and "type" in params else fault.kind
        for target in fault.targets:
            cuts.setdefault(target, []).append((fault.start_t, fault.stop_t if fault.stop_t is not None else end_t,
                                                f"{label} on {target}"))
    return cuts


def deadline_for(stop_t: float, bound: float, lease: float | None, owners: set[str],
                 cuts: dict[str, list[tuple[float, float, str]]]) -> tuple[float, str | None]:
    """The STOP's deadline and the fault that deferred it (None: stop + ``bound``)."""
    deadline, deferred_by = stop_t + bound, None
    for owner in sorted(owners):
        for start, stop, label in cuts.get(owner, []):
            if start <= stop_t + bound and stop >= stop_t:
                later = min(stop + bound, stop_t + lease + bound) if lease is not None else stop + bound
                if later > deadline:
                    deadline, deferred_by = later, label
    return deadline, deferred_by


def emissions(history: Events) -> dict[str, Emissions]:
    """Per pk, its emitted sequences (sorted) and their emission times, from the upstream's ``emit`` events."""
    emits = select(history, "emit", ["t", "pk", "seq"]).dropna().sort_values(["pk", "seq"], kind="stable")
    return {str(pk): (group["seq"].to_numpy(), group["t"].to_numpy()) for pk, group in emits.groupby("pk")}


def emitted_at(emitted: Emissions | None, seqs: np.ndarray) -> np.ndarray:
    """When each of ``seqs`` was emitted (NaN: no ``emit`` event for it)."""
    if emitted is None or not len(emitted[0]):
        return np.full(len(seqs), np.nan)
    known, times = emitted
    at = np.clip(np.searchsorted(known, seqs), 0, len(known) - 1)
    return np.where(known[at] == seqs, times[at], np.nan)


def _drain_verdicts(opened: np.ndarray, ends: np.ndarray, unclosed: np.ndarray, consumers: np.ndarray,
                    backlog_writes: pd.DataFrame, bound: float, judged_until: float,
                    restarted: bool) -> list[bool | None]:
    """Per drain session: closed within ``bound`` of the later of its opening and the answer to its consumer's
    last backlog write sent while it was open (True), not (False), or still open at ``judged_until`` though
    due before (False) or not: True when START came again then (``restarted``: nothing was due any more),
    None when the run ended."""
    verdicts: list[bool | None] = []
    sent, answered = backlog_writes["t"].to_numpy(), backlog_writes["answered_t"].to_numpy()
    writers = backlog_writes["consumer"].to_numpy()
    for open_t, end_t, open_still, consumer in zip(opened, ends, unclosed, consumers, strict=True):
        own = answered[(writers == consumer) & (sent >= open_t) & (sent <= end_t)]
        due = max(open_t, own.max() if own.size else open_t) + bound
        not_due: bool | None = True if restarted else None
        verdicts.append((not_due if due >= judged_until else False) if open_still else bool(end_t <= due))
    return verdicts


def check_stop(history: Events, *, bound_ms: float | None = None, info: RunInfo | None = None,
               consumed: Consumption | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    bound = bound_ms if bound_ms is not None else stop_bound(info)
    session_frame = consumed.sessions if consumed is not None else sessions(history, info)
    writes = consumed.writes if consumed is not None else accepted_writes(history)
    states = desired_states(history)
    any_stop = bool((states["type"] == STOPPED).any())
    emitted = emissions(history) if any_stop else {}  # only a STOP needs them
    cuts = store_cuts(faults(history), info.last_t) if any_stop else {}
    lease = info.duration("lease_ms")
    by_pk = session_frame.groupby("pk", sort=False).indices
    writes_by_pk = writes.groupby("pk", sort=False).indices
    rows: list[Row] = []
    maybe_starts = unknown_starts(history)
    for pk, group in states.groupby("pk", sort=True):
        times, types = group["t"].to_numpy(), group["type"].to_numpy()
        index = by_pk.get(pk, np.empty(0, dtype=int))
        pk_writes = writes.iloc[writes_by_pk.get(pk, np.empty(0, dtype=int))]
        record = _Record(session_frame["open_t"].to_numpy()[index], session_frame["end_t"].to_numpy()[index],
                         session_frame["open_at_end"].to_numpy()[index], session_frame["consumer"].to_numpy()[index],
                         session_frame["worker"].to_numpy()[index], pk_writes,
                         emitted_at(emitted.get(str(pk)), pk_writes["seq_to"].to_numpy()))
        maybe = maybe_starts.get(str(pk), np.empty(0))
        for i in np.flatnonzero(types == STOPPED):
            stop_t = float(times[i])
            restarts = times[(types == STARTED) & (times > stop_t)]
            until = float(restarts[0]) if restarts.size else np.inf
            row = {"pk": pk, **_judge(record, stop_t, until, bound, lease, cuts, info.last_t)}
            # a START of unknown outcome sent after the STOP may have landed then and ended what was due: a
            # verdict that is late only past it is undecided
            earlier = maybe[(maybe > stop_t) & (maybe < until)]
            if row["within_bound"] is False and earlier.size and _judge(
                    record, stop_t, float(earlier[0]), bound, lease, cuts, info.last_t)["within_bound"] is not False:
                row["within_bound"], row["maybe_restarted_t"] = None, float(earlier[0])
            rows.append(row)
    late_rows = [r for r in rows if r["within_bound"] is False]
    valid: Validity
    if late_rows:
        valid = False
    elif any(r["within_bound"] is None for r in rows):
        valid = UNKNOWN
    else:
        valid = True
    details: dict[str, Any] = {
        "bound_ms": bound,
        "stops": len(rows),
        "late": len(late_rows),
        "late_writes": sum(r["late_writes"] for r in rows),
        "undecided": sum(1 for r in rows if r["within_bound"] is None),
        "deferred": sum(1 for r in rows if r["deferred_by"] is not None),
        "latency_ms": summarise(r["latency_ms"] for r in rows),
        "late_examples": late_rows[:DETAIL_ROWS],
    }
    return CheckResult("stop", valid, details, {"stops": rows})


@dataclass(frozen=True)
class _Record:
    """One pk's sessions (as arrays) and accepted writes, with when each write's last sequence was emitted."""
    opened: np.ndarray
    ends: np.ndarray
    still_open: np.ndarray
    consumers: np.ndarray
    workers: np.ndarray
    writes: pd.DataFrame
    write_emitted: np.ndarray


def _judge(record: _Record, stop_t: float, until: float, bound: float | None, lease: float | None,
           cuts: dict[str, list[tuple[float, float, str]]], last_t: float) -> Row:
    """One STOP at ``stop_t`` whose obligation ends at ``until`` (a START again; inf: none): its row but the pk."""
    opened, ends, consumers, writes = record.opened, record.ends, record.consumers, record.writes
    concerned = (opened < until) & (ends > stop_t)
    live, drains = concerned & (opened <= stop_t), concerned & (opened > stop_t)
    # a session still open when START came again (or at the end) never closed for this STOP
    unclosed = record.still_open | (ends > until)
    closed_t = _last_close(stop_t, live, unclosed, ends)
    latency = closed_t - stop_t if closed_t is not None else None
    late = possible = 0
    within: bool | None = None
    deadline: float | None = None
    deferred_by: str | None = None
    if bound is not None:
        deadline, deferred_by = deadline_for(stop_t, bound, lease, {str(w) for w in record.workers[live]}, cuts)
        after = (writes["t"] > deadline) & (writes["t"] < until) & ~(record.write_emitted <= deadline)
        late = int((after & writes["certain"]).sum())
        possible = int((after & ~writes["certain"]).sum())
        judged_until = min(until, last_t)
        if until <= deadline:
            within = True  # START came again before anything was due
        elif latency is not None or judged_until > deadline:
            within = closed_t is not None and closed_t <= deadline and not late
        drained = _drain_verdicts(opened[drains], ends[drains], unclosed[drains], consumers[drains],
                                  writes.loc[record.write_emitted <= deadline], bound, judged_until,
                                  restarted=until <= last_t)
        if until > deadline and False in drained:
            within = False
        elif within and (possible or None in drained):
            within = None
    return {"stop_t": stop_t, "sessions": int(concerned.sum()),
            "consumers": sorted({str(c) for c in consumers[concerned]}), "closed_t": closed_t,
            "latency_ms": latency, "drains": int(drains.sum()),
            "drains_closed_t": _last_close(None, drains, unclosed, ends),
            "late_writes": late, "possible_late_writes": possible, "bound_ms": bound, "deadline_t": deadline,
            "deferred_by": deferred_by, "within_bound": within, "maybe_restarted_t": None}


def _last_close(nothing_open: float | None, sessions: np.ndarray, unclosed: np.ndarray,
                ends: np.ndarray) -> float | None:
    """When the last of ``sessions`` closed (``nothing_open`` when there are none; None: one never closed)."""
    if not sessions.any():
        return nothing_open
    return None if (sessions & unclosed).any() else float(ends[sessions].max())
