"""I4 bounded recovery: every affected connection caught up within the run's bound for the fault kind.

``bound_ms`` comes from ``run.start`` (one number, or {fault kind: ms}).  A run without a bound fails
(DESIGN §11): ``applies`` is false and the message says "no bound set for this scenario"; so does a run
whose {fault kind: ms} has no bound for a fault kind that affected a connection.  A connection that never
caught up counts as exceeding the bound; connections STOPPED during their recovery are left out.
"""

from __future__ import annotations

from typing import Any

from harness.checkers.events import Events, RunInfo, run_info
from harness.checkers.recovery import check_recovery
from harness.checkers.result import CheckResult, Validity

DETAIL_ROWS = 50
# what a reader needs to see where an exceeded recovery spent its time (the phases are times from the fault)
EXAMPLE_FIELDS = ("fault", "fault_kind", "pk", "old_worker", "new_worker", "t0", "disrupted", "detect_ms",
                  "claim_ms", "connect_ms", "resume_ms", "recovery_ms", "gap_ms", "bound_ms")


def check_bounds(history: Events, *, recovery: CheckResult | None = None,
                 info: RunInfo | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    recovery = recovery if recovery is not None else check_recovery(history, info=info)
    rows = recovery.tables["phases"]
    judged = [r for r in rows if r["within_bound"] is not None]
    exceeded = [r for r in judged if not r["within_bound"]]
    applies = info.bound_ms is not None
    unbounded = sorted({str(r["fault_kind"]) for r in rows if r["bound_ms"] is None and not r["stopped"]})
    if not applies:
        message = "no bound set for this scenario"
    elif unbounded:
        message = f"no bound set for fault kind {', '.join(unbounded)}"
    else:
        message = f"{len(exceeded)} of {len(judged)} recoveries over the bound"
    valid: Validity = applies and not unbounded and not exceeded
    recoveries = [r["recovery_ms"] for r in judged if r["recovery_ms"] is not None]
    details: dict[str, Any] = {
        "message": message,
        "applies": applies,
        "bound_ms": info.bound_ms,
        "judged": len(judged),
        "exceeded": len(exceeded),
        "unrecovered": sum(1 for r in exceeded if r["recovery_ms"] is None),
        "max_recovery_ms": max(recoveries) if recoveries else None,
        "exceeded_examples": [
            {k: r[k] for k in EXAMPLE_FIELDS} for r in exceeded[:DETAIL_ROWS]
        ],
    }
    return CheckResult("bounds", valid, details)
