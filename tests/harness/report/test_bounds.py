"""A run's bounds stated as computed: the scale-1 figure the run recorded from its scenario file, never the
bound divided by the scale, and the published worst case (lease + reconcile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.report.bounds import bound_texts, bounds_at_scale_one, published_bound_text
from harness.report.model import load_run
from tests.harness.report.histories import small_run


@pytest.mark.parametrize("profile, bound_ms, scale_one", [
    ("hardened", 2700.0, 22500.0),  # e.g. 1.1 × lease + an unscaled 0.5 s work allowance
    ("blog", 8000.0, 80000.0),      # lease + reconcile: all of it scales
    ("hardened", 2700.0, None),     # a run that did not record the scale-1 bound: no scale-1 claim
])
def test_the_scale_one_bound_is_the_one_the_run_recorded(
    tmp_path: Path, profile: str, bound_ms: float, scale_one: float | None
) -> None:
    small_run(tmp_path, profile=profile, bound_ms=bound_ms, bound_scale1_ms=scale_one)
    run = load_run(tmp_path, lambda _: None)
    assert bounds_at_scale_one(run) == ({"bound": scale_one} if scale_one is not None else {})
    at_one = f" ({scale_one / 1000:g} s at scale 1)" if scale_one is not None else ""
    assert bound_texts(run) == {"bound": f"{bound_ms / 1000:g} s at time scale 0.1{at_one}"}
    assert published_bound_text(run) == "8 s at time scale 0.1 (80 s at scale 1)"
