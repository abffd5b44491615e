"""The new-connection quota under a storm: how the fleet's reconnects met the simulated gateway's limit.

The simulator meters WebSocket handshakes with a token bucket (``upstream.handshake_quota`` a second at
time scale 1, a burst of ``handshake_burst``, from ``run.start``) and writes one ``handshakes`` event per
window of one scaled second that saw any: ``attempted``, ``accepted``, ``rejected`` (429).  A window with
rejections is *saturated*: the fleet asked for more than the quota.  A fleet that keeps the pipe full
accepts close to the quota in every saturated window; one whose retries are synchronised, or back off too
far, leaves windows half empty while streams wait.

Valid when no window was saturated (the quota never bound), or when the peak accepted in a window is at
least 90 % of the quota and never above the quota plus the burst (more would be the simulator's fault).
Without a quota or without ``handshakes`` events the check does not apply (valid).  Reported besides:
the totals, the saturated windows, and the utilisation of the saturated windows (their mean accepted over
the quota).
"""

from __future__ import annotations

from typing import Any

from harness.checkers.events import Events, RunInfo, run_info, select
from harness.checkers.result import CheckResult, Validity

FULL_PIPE = 0.9  # a saturated window accepting at least this share of the quota uses it


def check_handshakes(history: Events, *, info: RunInfo | None = None) -> CheckResult:
    info = info if info is not None else run_info(history)
    windows = select(history, "handshakes", ["t", "attempted", "accepted", "rejected"])
    quota = info.upstream.get("handshake_quota")
    if not isinstance(quota, int | float) or quota <= 0 or windows.empty:
        return CheckResult("handshakes", True, {"applies": False, "message": "no quota, or no handshakes"})
    burst = float(info.upstream.get("handshake_burst") or quota)
    accepted = windows["accepted"].astype(float)
    rejected = windows["rejected"].astype(float)
    saturated = accepted[rejected > 0]
    peak = float(accepted.max())
    valid: Validity = saturated.empty or (FULL_PIPE * quota <= peak <= quota + burst + 1)  # 1: rounding
    details: dict[str, Any] = {
        "applies": True,
        "quota_per_s": float(quota),
        "burst": burst,
        "peak_accepted_per_s": peak,
        "attempted": int(windows["attempted"].astype(float).sum()),
        "accepted": int(accepted.sum()),
        "rejected": int(rejected.sum()),
        "saturated_windows": len(saturated),
        "utilisation": float(saturated.mean() / quota) if len(saturated) else None,
        "message": ("the quota never bound" if saturated.empty else
                    f"peak {peak:.0f} accepted a second against a quota of {quota:g} (burst {burst:g})"),
    }
    return CheckResult("handshakes", valid, details)
