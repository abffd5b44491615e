"""``wsfleet explore``: run generated schedules until one is invalid, then save it, shrink it and say how to
replay it; or, with ``keep_going``, run them all and classify every invalid one.

Run k uses seed ``S + k`` (``generator.generate``), in ``OUT/seed-<n>/``, with one progress line each
(seed, faults, operations, verdict, duration).  An invalid run's schedule is written to
``OUT/explore-<n>.yaml`` and classified by the invariant it fails (the first failing checker in
``INVARIANT_ORDER``).  The first run of each class is shrunk: ``shrink`` re-runs candidates in
``OUT/shrink-<n>/<i>/`` (each up to ``shrink_repeat`` times, since timing is real and a failure may show
only sometimes), keeping one only while it fails that same invariant, and the result is written beside it
as ``OUT/explore-<n>-min.yaml``.  Without ``keep_going`` the first invalid run ends the exploration.  A
run that could not run (the topology did not start, a step could not be applied) is reported and skipped.
``OUT/summary.json`` (rewritten after every run) counts runs by outcome, the fault mix, the load and backend
mix, and each class with its seeds and files.  Each run's coverage (``harness.checkers.coverage``: the
transitions its history shows) is printed after its progress line and totalled in ``summary.json``
(``coverage``), with the transitions no run reached (``not_covered``).

The runs borrow their embedded backend from one ``KeptBackends`` (one per engine, up for the whole batch,
renewed before each run).  Each run's ``verdict.json`` is written as it ends, and ``OUT/batch.json`` holds the
batch's settings: run again into the same folder with the same settings (``resumable``), the batch counts the
seeds already judged there without running them again, and runs the rest (a run cut short runs again, into
an emptied folder); ``summary.json`` then totals them all (its ``elapsed_s`` is this sitting's), in all and per
backend (``per_backend``).

A run whose schedule left the fault model on purpose (the generator draws a clock skew beyond the tolerance
now and then: ``run.start``'s ``fault_model``) is no finding when it fails: its schedule is written and it is
counted and named apart (``outside``), never shrunk, and it does not end the exploration.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.backends import KeptBackends
from harness.checkers.coverage import TRANSITIONS, coverage, not_covered
from harness.checkers.events import read_events
from harness.checkers.verdict import VERDICT_FILE
from harness.cluster import ClusterError
from harness.explore.generator import generate
from harness.explore.shrink import Budget, shrink, steps
from harness.faults.plane import FaultError
from harness.processes import ProcessError
from harness.scenarios.runner import ScenarioError, ScenarioRun, run_scenario
from harness.scenarios.scenario_file import ScenarioSpec, dump

Progress = Callable[[str], None]
# I1, I6 (on items, then on the batch log), I2, I5, then the rest: the order in which a failing run's invariant is named
BATCH_FILE = "batch.json"  # in the output folder: the settings of the batch run there
INVARIANT_ORDER = ("duplicate_claims", "zombie_writes", "log", "sequences", "stop", "bounds", "recovery")


@dataclass
class ExploreOptions:
    profile: str = "hardened"
    runs: int = 10
    seed: int = 1
    budget_s: float | None = None
    out: Path = Path("runs/explore")
    fleet_root: Path | None = None
    workers: int = 3
    connections: int | None = None  # None with rate None: drawn per run (generator.LOAD_MENU)
    timescale: float = 0.1
    rate: float | None = None
    dynamodb: str = "drawn"  # the embedded DynamoDB server: dynalite, moto, or drawn per run (generator.BACKENDS)
    shrink_runs: int = 20
    shrink_repeat: int = 1
    keep_going: bool = False


@dataclass
class Finding:
    """One invalid run: its seed, the invariants it fails (``INVARIANT_ORDER``), its schedule file and, for
    the first run of its class, the shrunk schedule."""

    seed: int
    invariants: list[str]
    schedule: Path
    minimal: Path | None = None
    outside: str | None = None  # why the schedule is outside the fault model, when it is
    backend: str | None = None  # the DynamoDB server it ran on

    @property
    def invariant(self) -> str:
        return self.invariants[0]


@dataclass
class Tally:
    """What a set of runs did: their outcomes, fault mix, load mix and the transitions they reached."""

    outcomes: Counter[str] = field(default_factory=Counter)
    fault_mix: Counter[str] = field(default_factory=Counter)
    load_mix: Counter[str] = field(default_factory=Counter)  # "<streams>x<rate>/s" -> runs
    coverage: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(TRANSITIONS, 0)))

    def summary(self) -> dict[str, Any]:
        return {"runs": self.outcomes.total(), "invalid": self.outcomes["invalid"], "outcomes": dict(self.outcomes),
                "fault_mix": dict(self.fault_mix.most_common()), "load_mix": dict(self.load_mix.most_common()),
                "coverage": dict(self.coverage), "not_covered": not_covered(self.coverage)}


@dataclass
class ExploreResult:
    verdicts: dict[int, dict[str, Any] | None] = field(default_factory=dict)  # seed -> verdict (None: not run)
    fault_mix: Counter[str] = field(default_factory=Counter)
    load_mix: Counter[str] = field(default_factory=Counter)  # "<streams>x<rate>/s" -> runs
    backend_mix: Counter[str] = field(default_factory=Counter)  # DynamoDB server -> runs
    notices_runs: int = 0  # runs with death notices
    coverage: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(TRANSITIONS, 0)))
    findings: list[Finding] = field(default_factory=list)
    elapsed_s: float = 0.0
    by_backend: dict[str, Tally] = field(default_factory=dict)  # DynamoDB server -> what its runs did

    def count(self, spec: ScenarioSpec, kinds: list[str], load: str, verdict: dict[str, Any] | None,
              reached: Counter[str] | None) -> None:
        """Count one run: ``kinds`` its faults (``describe_fault``), ``load`` its streams x rate, ``reached``
        the transitions its history shows (None: no history)."""
        self.verdicts[spec.seed] = verdict
        self.backend_mix[str(spec.dynamodb)] += 1
        self.notices_runs += spec.death_notices
        tally = self.by_backend.setdefault(str(spec.dynamodb), Tally())
        for mix in (self.fault_mix, tally.fault_mix):
            mix.update(kinds)
        for mix in (self.load_mix, tally.load_mix):
            mix[load] += 1
        tally.outcomes[outcome(verdict)] += 1
        if reached is not None:
            self.coverage.update(reached)
            tally.coverage.update(reached)

    @property
    def invalid(self) -> int:
        """Invalid runs within the fault model."""
        return sum(1 for v in self.verdicts.values() if outcome(v) == "invalid")

    @property
    def outside(self) -> list[Finding]:
        """The invalid runs whose schedules were outside the fault model."""
        return [f for f in self.findings if f.outside is not None]

    def classes(self) -> dict[str, list[Finding]]:
        """The findings within the fault model by the invariant they fail, in the order the classes were found."""
        classes: dict[str, list[Finding]] = {}
        for finding in self.findings:
            if finding.outside is None:
                classes.setdefault(finding.invariant, []).append(finding)
        return classes

    def summary(self, options: ExploreOptions) -> dict[str, Any]:
        outcomes = Counter(outcome(v) for v in self.verdicts.values())
        return {
            "profile": options.profile, "first_seed": options.seed, "timescale": options.timescale,
            "runs": len(self.verdicts), "outcomes": dict(outcomes), "elapsed_s": round(self.elapsed_s, 1),
            "fault_mix": dict(self.fault_mix.most_common()), "load_mix": dict(self.load_mix.most_common()),
            "backend_mix": dict(self.backend_mix.most_common()), "death_notice_runs": self.notices_runs,
            "coverage": dict(self.coverage), "not_covered": not_covered(self.coverage),
            "per_backend": {name: tally.summary() for name, tally in sorted(self.by_backend.items())},
            "classes": {invariant: [{"seed": f.seed, "fails": f.invariants, "backend": f.backend,
                                     "schedule": str(f.schedule),
                                     **({"minimal": str(f.minimal)} if f.minimal else {})} for f in found]
                        for invariant, found in self.classes().items()},
            "outside_model": {
                "runs": sum(1 for v in self.verdicts.values() if outside_model(v) is not None),
                "invalid": [{"seed": f.seed, "fails": f.invariants, "why": f.outside, "schedule": str(f.schedule)}
                            for f in self.outside],
            },
        }


def per_backend_lines(result: ExploreResult) -> list[str]:
    """The batch's end, per backend: runs and invalid runs, the fault and load mix, then a table of the
    transitions each backend's runs reached (a transition none reached reads 0)."""
    names = sorted(result.by_backend)
    lines = []
    for name in names:
        tally = result.by_backend[name]
        faults = ", ".join(f"{kind} {n}" for kind, n in condensed_mix(tally.fault_mix).most_common())
        loads = ", ".join(f"{load} {n}" for load, n in tally.load_mix.most_common())
        lines.append(f"{name}: {tally.outcomes.total()} runs, {tally.outcomes['invalid']} invalid "
                     f"({', '.join(f'{o} {n}' for o, n in tally.outcomes.most_common())}); faults: "
                     f"{faults or 'none'}; load: {loads}")
    reached = list(dict.fromkeys(t for name in names for t in result.by_backend[name].coverage))
    width = max(map(len, reached), default=0)
    lines.append(f"{'transition':<{width}}  " + "  ".join(f"{name:>8}" for name in names))
    lines += [f"{transition:<{width}}  " + "  ".join(f"{result.by_backend[name].coverage[transition]:>8}"
                                                     for name in names) for transition in reached]
    return lines


def failing_invariants(verdict: dict[str, Any]) -> list[str]:
    """The checkers that found a violation, in ``INVARIANT_ORDER`` (others after, by name)."""
    failing = [name for name, check in verdict.get("checkers", {}).items() if check.get("valid") is False]
    rank = {name: i for i, name in enumerate(INVARIANT_ORDER)}
    return sorted(failing, key=lambda n: (rank.get(n, len(rank)), n))


def outside_model(verdict: dict[str, Any] | None) -> str | None:
    """Why the run's schedule was outside the fault model, as its ``run.start`` stated; None when it was not
    (or did not say)."""
    stated = ((verdict or {}).get("fault_model") or {})
    return str(stated.get("stated")) if stated.get("within") is False else None


def excused_by_model(verdict: dict[str, Any] | None) -> str | None:
    """Why an invalid run's failure lies outside the fault model (its verdict's ``fault_model.flag``): the stated
    reason; None when the run is valid, or fails something its schedule does not excuse."""
    stated = ((verdict or {}).get("fault_model") or {})
    return str(stated.get("stated")) if stated.get("flag") else None


def outcome(verdict: dict[str, Any] | None) -> str:
    """``valid``, ``invalid``, ``invalid outside the model`` or ``unknown``; ``could not run`` without a
    verdict."""
    if verdict is None:
        return "could not run"
    said = {True: "valid", False: "invalid"}.get(verdict["valid"], "unknown")
    return f"{said} outside the model" if said == "invalid" and excused_by_model(verdict) else said


def condensed_mix(mix: Counter[str]) -> Counter[str]:
    """The fault mix with each toxic counted by its type alone (``toxic:latency``), not by service, direction
    and toxicity: what one line can show."""
    condensed: Counter[str] = Counter()
    for label, count in mix.items():
        condensed[label.split("/", 1)[0]] += count
    return condensed


def describe_fault(step: dict[str, Any]) -> str:
    """``kill``, or for a toxic ``toxic:latency/dynamodb/downstream@0.3``: the fault mix's label."""
    params = step.get("params") or {}
    if step["kind"] != "toxic":
        return str(step["kind"])
    label = f"toxic:{params.get('type')}/{params.get('service', 'dynamodb')}/{params.get('stream', 'upstream')}"
    toxicity = params.get("toxicity", 1.0)
    return label + (f"@{toxicity:g}" if toxicity < 1 else "")


def run_once(spec: ScenarioSpec, run_dir: Path, options: ExploreOptions,
             backends: KeptBackends | None = None) -> dict[str, Any] | None:
    """The verdict of one run of ``spec`` (on a backend of ``backends``, renewed, when given); None when it
    could not be run."""
    run = ScenarioRun(spec, profile=options.profile, run_dir=run_dir, dynamodb=spec.dynamodb,
                      fleet_root=options.fleet_root, backends=backends)
    try:
        return run_scenario(run)
    except (ScenarioError, ClusterError, ProcessError, FaultError) as exc:
        (run_dir / "could-not-run.txt").write_text(f"{exc}\n")
        return None


def run_coverage(run_dir: Path) -> Counter[str] | None:
    """The transitions a run's history shows (None: the run left no history)."""
    return coverage(read_events(run_dir)) if (run_dir / "history").is_dir() else None


class ExploreError(Exception):
    """An output folder this batch cannot use; the message says why."""


def batch_settings(options: ExploreOptions) -> dict[str, Any]:
    """What decides a seed's schedule and how it runs: two batches with the same settings judge a seed alike."""
    return {"profile": options.profile, "workers": options.workers, "connections": options.connections,
            "rate": options.rate, "timescale": options.timescale, "dynamodb": options.dynamodb,
            "fleet_root": str(options.fleet_root) if options.fleet_root else None}


def resumable(out: Path, options: ExploreOptions) -> bool:
    """Whether ``out`` holds a batch of these settings (``BATCH_FILE``), so this one carries it on; an
    ``ExploreError`` naming the first difference when it holds a batch of others."""
    path = out / BATCH_FILE
    if not path.is_file():
        return False
    before, now = json.loads(path.read_text()), batch_settings(options)
    for name, value in now.items():
        if before.get(name) != value:
            raise ExploreError(f"--out {out} holds a batch run with {name} {before.get(name)}, not {value}; "
                               "name a new folder, or add --force to empty it first")
    return True


def explore(options: ExploreOptions, progress: Progress) -> ExploreResult:
    """Run the batch ``options`` describes into ``options.out``; the seeds a batch of the same settings
    already judged there are counted, not run again (``resumable``)."""
    result = ExploreResult()
    started = time.monotonic()
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / BATCH_FILE).write_text(json.dumps(batch_settings(options), indent=1) + "\n")
    seeds = range(options.seed, options.seed + options.runs)
    judged = {seed: verdict for seed in seeds if (verdict := judged_before(options.out / f"seed-{seed}"))}
    if judged:
        progress(f"resuming {options.out}: {len(judged)} of {options.runs} seeds already judged "
                 f"({describe_seeds(judged)}); their verdicts are counted, not run again")
    with KeptBackends(options.out / "backends") as backends:
        for k, seed in enumerate(seeds):
            if (seed not in judged and options.budget_s is not None
                    and time.monotonic() - started > options.budget_s):
                progress(f"budget of {options.budget_s:.0f} s spent after {k} runs")
                break
            spec = generate(seed, profile=options.profile, workers=options.workers,
                            connections=options.connections, rate=options.rate, timescale=options.timescale,
                            dynamodb=options.dynamodb)
            _run(spec, k, judged.get(seed), options, result, progress, backends)
            result.elapsed_s = time.monotonic() - started
            (options.out / "summary.json").write_text(json.dumps(result.summary(options), indent=1) + "\n")
            if result.classes() and not options.keep_going:
                break
    return result


def judged_before(run_dir: Path) -> dict[str, Any] | None:
    """The verdict a run folder holds (a run that ended and was judged), or None."""
    path = run_dir / VERDICT_FILE
    return dict(json.loads(path.read_text())) if path.is_file() else None


def describe_seeds(seeds: Iterable[int]) -> str:
    """``seeds 1-37, 40`` : the seeds as runs of consecutive numbers."""
    spans: list[list[int]] = []
    for seed in sorted(seeds):
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return "seeds " + ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def _run(spec: ScenarioSpec, k: int, judged: dict[str, Any] | None, options: ExploreOptions,
         result: ExploreResult, progress: Progress, backends: KeptBackends) -> None:
    """Run one generated schedule (or count the verdict it was given before) and record what it did."""
    kinds = [describe_fault(s) for s in spec.faults]
    load = f"{spec.connections}x{spec.rate:g}/s"
    run_dir = options.out / f"seed-{spec.seed}"
    run_started = time.monotonic()
    if judged is None:
        shutil.rmtree(run_dir, ignore_errors=True)  # a run cut short left part of a history: it runs again
        verdict = run_once(spec, run_dir, options, backends)
    else:
        verdict = judged
    reached = run_coverage(run_dir) if verdict is not None else None
    result.count(spec, kinds, load, verdict, reached)
    if judged is None:
        said = outcome(verdict).upper()
        if said.startswith("INVALID"):
            why = excused_by_model(verdict)
            said += f" ({', '.join(failing_invariants(verdict or {}))}{f'; {why}' if why else ''})"
        notices = ", death notices" if spec.death_notices else ""
        progress(f"run {k + 1}/{options.runs} seed {spec.seed}: {load} on {spec.dynamodb}{notices}, faults "
                 f"[{', '.join(kinds)}], {len(spec.workload)} operations -> {said} in "
                 f"{time.monotonic() - run_started:.0f} s")
        if reached is not None:
            progress("  coverage: " + (", ".join(f"{name} {count}" for name, count in reached.items() if count)
                                       or "nothing"))
    if verdict is not None and verdict["valid"] is False:
        _record(spec, verdict, options, result, progress, backends, shrink_now=judged is None)


def _record(spec: ScenarioSpec, verdict: dict[str, Any], options: ExploreOptions, result: ExploreResult,
            progress: Progress, backends: KeptBackends, shrink_now: bool = True) -> None:
    """Save an invalid run's schedule; shrink it if it is the first of its class (and within the model).  A
    run judged before (``shrink_now`` false) is recorded as it was left: its shrunk schedule if it has one."""
    invariants = failing_invariants(verdict)
    new_class = invariants[0] not in result.classes()
    finding = Finding(spec.seed, invariants, dump(spec, options.out / f"{spec.name}.yaml"),
                      outside=excused_by_model(verdict), backend=spec.dynamodb)
    result.findings.append(finding)
    if not shrink_now:
        shrunk_file = options.out / f"{spec.name}-min.yaml"
        finding.minimal = shrunk_file if shrunk_file.is_file() else None
        return
    if finding.outside is not None:
        progress(f"seed {spec.seed} fails {finding.invariant} outside the fault model ({finding.outside}); "
                 f"schedule written to {finding.schedule}")
        return
    if not new_class or options.shrink_runs <= 0:
        progress(f"seed {spec.seed} fails {finding.invariant}; schedule written to {finding.schedule}")
        return
    invariant = finding.invariant
    progress(f"seed {spec.seed} fails {invariant}; schedule written to {finding.schedule}; shrinking "
             f"({steps(spec)} steps, at most {options.shrink_runs} candidates, each run up to "
             f"{options.shrink_repeat} time(s))")
    tried = 0

    def still_fails(candidate: ScenarioSpec) -> bool:
        nonlocal tried
        tried += 1
        for attempt in range(1, options.shrink_repeat + 1):
            run_dir = options.out / f"shrink-{spec.seed}" / f"{tried}-{attempt}"
            shutil.rmtree(run_dir, ignore_errors=True)  # left by a shrink cut short
            found = run_once(candidate, run_dir, options, backends)
            if found is not None and invariant in failing_invariants(found):
                progress(f"shrink candidate {tried} ({steps(candidate)} steps): still fails (run {attempt})")
                return True
        progress(f"shrink candidate {tried} ({steps(candidate)} steps): passes")
        return False

    shrunk = shrink(spec, still_fails, Budget(options.shrink_runs), progress)
    minimal = replace(shrunk, name=f"{spec.name}-min",
                      description=f"{spec.description}; shrunk to {steps(shrunk)} steps, fails {invariant}")
    finding.minimal = dump(minimal, options.out / f"{minimal.name}.yaml")
