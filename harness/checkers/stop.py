"""I5 STOP honoured: after every STOP the router accepted, the pk's upstream sessions close and its writes
end within a bound.

The STOPs judged are the router's ``event`` entries of kind STOP with a 2xx ``status``
(``harness.checkers.events.desired_states``; older histories: the harness's ``conn.stopped``).  A START
accepted after it ends its obligation.  Until then (or the end of the run):

- *sessions*: the pk's sessions open at the STOP or opened after it must all be closed by ``stop + bound``;
  the latency is from the STOP to the last of their ``sub.close``.  A session still open at the end, or when
  START came again, never closed for this STOP: a violation once the bound has passed before then, and
  undecided when the run ended sooner.  A START again before ``stop + bound`` leaves nothing due.
- *writes*: no ``msg.persist`` or ``checkpoint`` of the pk may be accepted after ``stop + bound``: one sent
  after it with outcome ``ok`` is a violation, with outcome ``info`` undecided.

The bound is ``stop_bound_ms`` from ``run.start``, else ``config.desired_check_ms + config.heartbeat_ms``
(the blog's per-connection desired-state poll plus one heartbeat); no bound at all: every STOP undecided.
Undecided STOPs make the verdict unknown.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.checkers.consuming import Consumption, accepted_writes, sessions
from harness.checkers.events import STARTED, STOPPED, History, RunInfo, as_events, desired_states, run_info
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity, summarise

STOP_COLUMNS = ["pk", "stop_t", "sessions", "consumers", "closed_t", "latency_ms", "late_writes",
                "possible_late_writes", "bound_ms", "within_bound"]
DETAIL_ROWS = 50


def stop_bound(info: RunInfo) -> float | None:
    if info.stop_bound_ms is not None:
        return info.stop_bound_ms
    check, heartbeat = info.duration("desired_check_ms"), info.duration("heartbeat_ms")
    return check + heartbeat if check is not None and heartbeat is not None else None


def check_stop(history: History, *, bound_ms: float | None = None, info: RunInfo | None = None,
               consumed: Consumption | None = None) -> CheckResult:
    history = as_events(history)
    info = info if info is not None else run_info(history)
    bound = bound_ms if bound_ms is not None else stop_bound(info)
    session_frame = consumed.sessions if consumed is not None else sessions(history, info)
    writes = consumed.writes if consumed is not None else accepted_writes(history)
    by_pk = session_frame.groupby("pk", sort=False).indices
    writes_by_pk = writes.groupby("pk", sort=False).indices
    rows: list[Row] = []
    for pk, group in desired_states(history).groupby("pk", sort=True):
        times, types = group["t"].to_numpy(), group["type"].to_numpy()
        index = by_pk.get(pk, np.empty(0, dtype=int))
        opened = session_frame["open_t"].to_numpy()[index]
        ends = session_frame["end_t"].to_numpy()[index]
        still_open = session_frame["open_at_end"].to_numpy()[index]
        consumers = session_frame["consumer"].to_numpy()[index]
        pk_writes = writes.iloc[writes_by_pk.get(pk, np.empty(0, dtype=int))]
        for i in np.flatnonzero(types == STOPPED):
            stop_t = float(times[i])
            restarts = times[(types == STARTED) & (times > stop_t)]
            until = float(restarts[0]) if restarts.size else np.inf
            concerned = (opened < until) & (ends > stop_t)
            # a session still open when START came again (or at the end) never closed for this STOP
            unclosed = concerned & (still_open | (ends > until))
            if not concerned.any():
                closed_t: float | None = stop_t
            else:
                closed_t = None if unclosed.any() else float(ends[concerned].max())
            latency = closed_t - stop_t if closed_t is not None else None
            late = possible = 0
            within: bool | None = None
            if bound is not None:
                deadline = stop_t + bound
                after = (pk_writes["t"] > deadline) & (pk_writes["t"] < until)
                late = int((after & pk_writes["certain"]).sum())
                possible = int((after & ~pk_writes["certain"]).sum())
                if until <= deadline:
                    within = True  # START came again before anything was due
                elif latency is not None or min(until, info.last_t) > deadline:
                    within = latency is not None and latency <= bound and not late
                if within and possible:
                    within = None
            rows.append({"pk": pk, "stop_t": stop_t, "sessions": int(concerned.sum()),
                         "consumers": sorted({str(c) for c in consumers[concerned]}), "closed_t": closed_t,
                         "latency_ms": latency, "late_writes": late, "possible_late_writes": possible,
                         "bound_ms": bound, "within_bound": within})
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
        "latency_ms": summarise(r["latency_ms"] for r in rows),
        "late_examples": late_rows[:DETAIL_ROWS],
    }
    return CheckResult("stop", valid, details, {"stops": rows})
