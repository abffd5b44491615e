"""Shrinking a failing scenario: the smallest schedule that still fails the same invariant.

``shrink(spec, still_fails)`` is pure search; running the candidates is the caller's ``still_fails``
(``explore`` runs each one for real).  Passes, repeated until nothing more can be removed or the budget
of candidate runs is spent:

1. drop steps: each workload operation, and each fault step together with the ``restart`` steps of the same
   worker it makes necessary (a restart without the kill or term before it cannot run);
2. shorten durations: halve each fault's ``duration_s`` while it still fails (down to ``MIN_DURATION_S``);
3. lower toxicities: halve each partial toxicity while it still fails (down to ``MIN_TOXICITY``).

A candidate is kept only when ``still_fails`` says it fails the same invariant as the original; timing is
real, so a candidate that would fail sometimes may be dropped, which only makes the result less minimal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.scenarios.scenario_file import ScenarioSpec

MIN_DURATION_S = 0.01
MIN_TOXICITY = 0.05
StillFails = Callable[[ScenarioSpec], bool]


class Budget:
    """How many candidates may still be run."""

    def __init__(self, runs: int) -> None:
        self.left = runs

    def spend(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def steps(spec: ScenarioSpec) -> int:
    return len(spec.faults) + len(spec.workload)


def _without_fault(faults: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """``faults`` without step ``index`` and, for a kill or term, the next restart of that worker."""
    dropped = faults[index]
    keep = [f for i, f in enumerate(faults) if i != index]
    if dropped["kind"] in ("kill", "term"):
        later = [f for f in keep if f["kind"] == "restart" and f["target"] == dropped["target"]
                 and float(f.get("at_s", 0)) >= float(dropped.get("at_s", 0))]
        if later:
            keep.remove(min(later, key=lambda f: float(f.get("at_s", 0))))
    return keep


def _candidates_dropping(spec: ScenarioSpec) -> list[ScenarioSpec]:
    found = [replace(spec, faults=_without_fault(spec.faults, i)) for i in range(len(spec.faults))
             if spec.faults[i]["kind"] != "restart"]
    found += [replace(spec, workload=[o for j, o in enumerate(spec.workload) if j != i])
              for i in range(len(spec.workload))]
    return found


def _with_fault(spec: ScenarioSpec, index: int, change: Callable[[dict[str, Any]], bool]) -> ScenarioSpec | None:
    faults = copy.deepcopy(spec.faults)
    return replace(spec, faults=faults) if change(faults[index]) else None


def _halve_duration(step: dict[str, Any]) -> bool:
    duration = step.get("duration_s")
    if not isinstance(duration, int | float) or duration / 2 < MIN_DURATION_S:
        return False
    step["duration_s"] = round(duration / 2, 3)
    return True


def _halve_toxicity(step: dict[str, Any]) -> bool:
    params = step.get("params") or {}
    toxicity = params.get("toxicity")
    if not isinstance(toxicity, int | float) or toxicity >= 1.0 or toxicity / 2 < MIN_TOXICITY:
        return False
    params["toxicity"] = round(toxicity / 2, 3)
    return True


def shrink(spec: ScenarioSpec, still_fails: StillFails, budget: Budget,
           progress: Callable[[str], None] = lambda _: None) -> ScenarioSpec:
    """The smallest variant of ``spec`` found that ``still_fails``; ``spec`` itself when none is."""
    current = spec
    progress_made = True
    while progress_made:
        progress_made = False
        for candidate in _candidates_dropping(current):
            if not budget.spend():
                return current
            if still_fails(candidate):
                progress(f"shrink: dropped a step ({steps(current)} -> {steps(candidate)} steps)")
                current, progress_made = candidate, True
                break
    for change, what in ((_halve_duration, "duration"), (_halve_toxicity, "toxicity")):
        for index in range(len(current.faults)):
            while (candidate := _with_fault(current, index, change)) is not None:
                if not budget.spend() or not still_fails(candidate):
                    break
                progress(f"shrink: step {index} {what} lowered")
                current = candidate
    return current
