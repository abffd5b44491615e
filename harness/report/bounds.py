"""A run's bounds, as computed: its recovery bounds by label at its own time scale, the same bounds as its
scenario file computed them at time scale 1 (``run.start``'s ``bound_scale1_ms``; never the bound divided by
the scale: part of a bound, the work allowance, is not scaled; a run that did not record the scale-1 figure
gets none), the published worst case (lease + reconcile), and the run's settings read back from
``run.start``."""

from __future__ import annotations

import dataclasses
from typing import Any

from fleet.config import PROFILES, FleetConfig
from fleet.errors import ConfigError
from harness.checkers.events import RunInfo
from harness.report.model import RunData
from harness.report.text import bound_text, number


def run_config(info: RunInfo, timescale: float | None = None) -> FleetConfig | None:
    """The run's settings (``run.start``'s effective durations divided by its time scale) at ``timescale``
    (default: the run's own), or None when the run does not say enough."""
    if not info.timescale or info.timescale <= 0 or info.profile not in PROFILES:
        return None
    names = {f.name for f in dataclasses.fields(FleetConfig)}
    unscaled: dict[str, Any] = {name: round(ms / info.timescale) for name in info.config
                if name.endswith("_ms") and name in names and (ms := info.duration(name)) is not None}
    try:
        return FleetConfig(profile=info.profile, timescale=timescale or info.timescale,  # type: ignore[arg-type]
                           worker_id="report", **unscaled)
    except (ConfigError, TypeError, ValueError):
        return None


def _labelled(bound: Any) -> dict[str, float]:
    """A recorded bound by label: ``"bound"`` for one number, else one per fault kind."""
    if isinstance(bound, dict):
        return {f"bound ({kind})": float(v) for kind, v in bound.items() if number(v) is not None}
    found = number(bound)
    return {"bound": found} if found is not None else {}


def bounds_of(run: RunData) -> dict[str, float]:
    """The run's recovery bounds by label."""
    return _labelled(run.info.bound_ms)


def bounds_at_scale_one(run: RunData) -> dict[str, float]:
    """The same bounds as the run's scenario file computed them for time scale 1, by label."""
    return _labelled(run.info.bound_scale1_ms)


def bound_texts(run: RunData) -> dict[str, str]:
    """``bounds_of`` as sentences, with the scale-1 figure where the run recorded it."""
    scale_one = bounds_at_scale_one(run)
    return {label: bound_text(ms, run.info.timescale, scale_one.get(label))
            for label, ms in bounds_of(run).items()}


def published_bound_ms(run: RunData) -> float | None:
    """The published worst case, lease + reconcile, from the run's (already scaled) config."""
    lease, reconcile = run.info.duration("lease_ms"), run.info.duration("reconcile_ms")
    return lease + reconcile if lease is not None and reconcile is not None else None


def published_at_scale_one(run: RunData) -> float | None:
    """Lease + reconcile computed for the run's settings at time scale 1."""
    config = run_config(run.info, 1.0)
    return config.scaled_ms(config.lease_ms + config.reconcile_ms) if config is not None else None


def published_bound_text(run: RunData) -> str | None:
    ms = published_bound_ms(run)
    return None if ms is None else bound_text(ms, run.info.timescale, published_at_scale_one(run))
