"""``wsfleet explore``: run generated schedules until one is invalid, then save it, shrink it and say how to
replay it.

Run k uses seed ``S + k`` (``generator.generate``), in ``OUT/seed-<n>/``, with one progress line each
(seed, faults, operations, verdict, duration).  The first invalid run's schedule is written to
``OUT/explore-<n>.yaml``; ``shrink`` then re-runs candidates in ``OUT/shrink/<i>/``, keeping one only while
it fails the same invariant (the first failing checker in ``INVARIANT_ORDER``), and the result is written
beside it as ``OUT/explore-<n>-min.yaml``.  A run that could not run (the topology did not start, a step
could not be applied) is reported and skipped.  The summary counts runs by outcome and the fault mix.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.cluster import ClusterError
from harness.explore.generator import generate
from harness.explore.shrink import Budget, shrink, steps
from harness.faults.plane import FaultError
from harness.processes import ProcessError
from harness.scenarios.runner import ScenarioError, ScenarioRun, run_scenario
from harness.scenarios.scenario_file import ScenarioSpec, dump

Progress = Callable[[str], None]
# I1, I6, I2, I5, then the rest: the order in which a failing run's invariant is named
INVARIANT_ORDER = ("duplicate_claims", "zombie_writes", "sequences", "stop", "bounds", "recovery")


@dataclass
class ExploreOptions:
    profile: str = "hardened"
    runs: int = 10
    seed: int = 1
    budget_s: float | None = None
    out: Path = Path("runs/explore")
    fleet_root: Path | None = None
    workers: int = 3
    connections: int = 20
    timescale: float = 0.1
    rate: float = 5.0
    dynamodb: str = "dynalite"
    shrink_runs: int = 20


@dataclass
class ExploreResult:
    verdicts: dict[int, dict[str, Any] | None] = field(default_factory=dict)  # seed -> verdict (None: not run)
    fault_mix: Counter[str] = field(default_factory=Counter)
    failing: Path | None = None
    minimal: Path | None = None
    invariant: str | None = None
    elapsed_s: float = 0.0

    @property
    def invalid(self) -> int:
        return sum(1 for v in self.verdicts.values() if v is not None and v["valid"] is False)


def failing_invariants(verdict: dict[str, Any]) -> list[str]:
    """The checkers that found a violation, in ``INVARIANT_ORDER`` (others after, by name)."""
    failing = [name for name, check in verdict.get("checkers", {}).items() if check.get("valid") is False]
    rank = {name: i for i, name in enumerate(INVARIANT_ORDER)}
    return sorted(failing, key=lambda n: (rank.get(n, len(rank)), n))


def describe_fault(step: dict[str, Any]) -> str:
    """``kill``, or for a toxic ``toxic:latency/dynamodb/downstream@0.3``: the fault mix's label."""
    params = step.get("params") or {}
    if step["kind"] != "toxic":
        return str(step["kind"])
    label = f"toxic:{params.get('type')}/{params.get('service', 'dynamodb')}/{params.get('stream', 'upstream')}"
    toxicity = params.get("toxicity", 1.0)
    return label + (f"@{toxicity:g}" if toxicity < 1 else "")


def run_once(spec: ScenarioSpec, run_dir: Path, options: ExploreOptions) -> dict[str, Any] | None:
    """The verdict of one run of ``spec``; None when it could not be run."""
    run = ScenarioRun(spec, profile=options.profile, run_dir=run_dir, dynamodb=options.dynamodb,
                      fleet_root=options.fleet_root)
    try:
        return run_scenario(run)
    except (ScenarioError, ClusterError, ProcessError, FaultError) as exc:
        (run_dir / "could-not-run.txt").write_text(f"{exc}\n")
        return None


def explore(options: ExploreOptions, progress: Progress) -> ExploreResult:
    result = ExploreResult()
    started = time.monotonic()
    for k in range(options.runs):
        if options.budget_s is not None and time.monotonic() - started > options.budget_s:
            progress(f"budget of {options.budget_s:.0f} s spent after {k} runs")
            break
        seed = options.seed + k
        spec = generate(seed, profile=options.profile, workers=options.workers, connections=options.connections,
                        rate=options.rate, timescale=options.timescale)
        kinds = [describe_fault(s) for s in spec.faults]
        result.fault_mix.update(kinds)
        run_started = time.monotonic()
        verdict = run_once(spec, options.out / f"seed-{seed}", options)
        result.verdicts[seed] = verdict
        outcome = ("COULD NOT RUN" if verdict is None else "VALID" if verdict["valid"] is True
                   else f"INVALID ({', '.join(failing_invariants(verdict))})" if verdict["valid"] is False
                   else "UNKNOWN")
        progress(f"run {k + 1}/{options.runs} seed {seed}: faults [{', '.join(kinds)}], "
                 f"{len(spec.workload)} operations -> {outcome} in {time.monotonic() - run_started:.0f} s")
        if verdict is not None and verdict["valid"] is False:
            _save_and_shrink(spec, verdict, options, result, progress)
            break
    result.elapsed_s = time.monotonic() - started
    return result


def _save_and_shrink(spec: ScenarioSpec, verdict: dict[str, Any], options: ExploreOptions, result: ExploreResult,
                     progress: Progress) -> None:
    invariant = failing_invariants(verdict)[0]
    result.invariant = invariant
    result.failing = dump(spec, options.out / f"{spec.name}.yaml")
    progress(f"seed {spec.seed} fails {invariant}; schedule written to {result.failing}; shrinking "
             f"({steps(spec)} steps, at most {options.shrink_runs} candidate runs)")
    tried = 0

    def still_fails(candidate: ScenarioSpec) -> bool:
        nonlocal tried
        tried += 1
        found = run_once(candidate, options.out / "shrink" / str(tried), options)
        fails = found is not None and invariant in failing_invariants(found)
        progress(f"shrink candidate {tried} ({steps(candidate)} steps): {'still fails' if fails else 'passes'}")
        return fails

    shrunk = shrink(spec, still_fails, Budget(options.shrink_runs), progress)
    minimal = replace(shrunk, name=f"{spec.name}-min",
                      description=f"{spec.description}; shrunk to {steps(shrunk)} steps, fails {invariant}")
    result.minimal = dump(minimal, options.out / f"{minimal.name}.yaml")
