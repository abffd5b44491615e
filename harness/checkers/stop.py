"""I5 STOP honoured: after each ``conn.stopped`` the pk's upstream sessions close within a bound.

The sessions concerned are those of the pk open at the STOP or opened after it (before the next
``conn.started``); the latency is from the STOP to the last of their ``sub.close``.  The bound is
``stop_bound_ms`` from ``run.start``, else ``config.desired_check_ms + config.heartbeat_ms`` (the blog's
per-connection desired-state poll plus one heartbeat).  A session still open at the end is a violation once
the bound has passed before the end, and unknown when the run ended sooner; no bound at all: unknown.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.checkers.consuming import Consumption, sessions
from harness.checkers.events import History, RunInfo, as_events, run_info, select
from harness.checkers.result import UNKNOWN, CheckResult, Row, Validity, summarise

STOP_COLUMNS = ["pk", "stop_t", "sessions", "closed_t", "latency_ms", "bound_ms", "within_bound"]
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
    conn = select(history, ["conn.started", "conn.stopped"], ["t", "pk", "type"]).dropna(subset=["pk"])
    by_pk = session_frame.groupby("pk", sort=False).indices
    rows: list[Row] = []
    for pk, group in conn.groupby("pk", sort=True):
        times, types = group["t"].to_numpy(), group["type"].to_numpy()
        index = by_pk.get(pk, np.empty(0, dtype=int))
        opened = session_frame["open_t"].to_numpy()[index]
        ends = session_frame["end_t"].to_numpy()[index]
        still_open = session_frame["open_at_end"].to_numpy()[index]
        for i in np.flatnonzero(types == "conn.stopped"):
            stop_t = float(times[i])
            restarts = times[(types == "conn.started") & (times > stop_t)]
            until = float(restarts[0]) if restarts.size else np.inf
            concerned = (opened < until) & (ends > stop_t)
            if not concerned.any():
                closed_t: float | None = stop_t
            else:
                closed_t = None if still_open[concerned].any() else float(ends[concerned].max())
            latency = closed_t - stop_t if closed_t is not None else None
            within: bool | None
            if bound is None:
                within = None
            elif latency is not None:
                within = latency <= bound
            else:
                within = False if info.last_t - stop_t > bound else None
            rows.append({"pk": pk, "stop_t": stop_t, "sessions": int(concerned.sum()), "closed_t": closed_t,
                         "latency_ms": latency, "bound_ms": bound, "within_bound": within})
    late = [r for r in rows if r["within_bound"] is False]
    valid: Validity
    if late:
        valid = False
    elif any(r["within_bound"] is None for r in rows):
        valid = UNKNOWN
    else:
        valid = True
    details: dict[str, Any] = {
        "bound_ms": bound,
        "stops": len(rows),
        "late": len(late),
        "undecided": sum(1 for r in rows if r["within_bound"] is None),
        "latency_ms": summarise(r["latency_ms"] for r in rows),
        "late_examples": late[:DETAIL_ROWS],
    }
    return CheckResult("stop", valid, details, {"stops": rows})
