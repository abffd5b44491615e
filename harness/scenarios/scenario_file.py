"""Scenario files: what a chaos run does (workload, fault steps), on what (profile, topology), and the
recovery bound it is held to.  YAML or JSON; the built-in catalog (``harness/scenarios/catalog/``), the
regression scenarios and every generated or shrunk schedule are written in this one format.

    name: pause                      # required; letters, digits, ``_ . -``
    description: SIGSTOP one worker for twice the lease, then SIGCONT.
    profile: hardened                # default; the command line may override it
    workers: 3                       # at least 2
    connections: 30
    rate: 5                          # messages per second per stream
    timescale: 0.1
    seed: 1                          # seeds uniform()/choice()/random targets (the command line may override)
    vars:                            # optional, evaluated in order, in seconds; usable in at_s / duration_s
      start: uniform(0, heartbeat)
    workload:                        # optional client operations, through the router
      - {at_s: 1.0, op: stop, target: owned-by:busiest}
      - {at_s: 1.2, op: start, target: previous}
    faults:
      - {at_s: start, kind: pause, target: random, duration_s: 2*lease}
    bounds:                          # recovery bound per fault kind (``any``: every other kind), in ms
      pause: {hardened: 1.1*lease + 500, default: lease + reconcile}
    xfail: "why it is known to fail" # optional (regression scenarios): a strict expected failure
    death_notices: true              # optional: a worker process that exits sends a death notice
                                     # (``harness.ecs_tasks``), as ECS and EventBridge do on AWS
    dynamodb: moto                   # optional: the embedded DynamoDB server (dynalite, the default, or
                                     # moto); the command line's --dynamodb overrides it

Numbers may be expressions (``harness.scenarios.expressions``): names are the configured durations at
the run's time scale, in seconds in ``*_s`` fields and in ms in bounds, ``*_ms`` params and toxic
``params.attributes``; a bound is thus computed for each scale, never scaled from another.  Any value may
instead be a mapping by profile (``hardened``, ``blog``, ``unsafe``, ``default``).

Fault targets: ``worker-N``, ``busiest`` (resolved when the step runs), ``all``, ``random`` (a worker drawn
from the seed) and ``random-other`` (one not drawn yet).  Workload targets: a connection id, ``random`` (a
started connection), ``stopped`` (a stopped one), ``owned-by:<worker-N|busiest|random>`` (a stream that
worker holds in the table), ``previous`` (the previous operation's connection); resolved when the operation
runs.

Bad input is refused before anything runs, with one line naming the file, the field and the rule: a file
over 1 MB or not UTF-8 text, YAML aliases (an alias bomb would expand without bound), JSON ``NaN`` and
``Infinity``, field names that are not text, values that are not text, numbers, true/false, lists or
mappings (a YAML date), non-finite numbers, counts and rates out of their bounds (``MAX_WORKERS``, ...),
and times outside ``[0, MAX_SECONDS]``.
"""

from __future__ import annotations

import datetime
import difflib
import json
import math
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from fleet.config import PROFILES, FleetConfig
from harness.faults.fault import LOCAL
from harness.faults.plane import REGISTRY, refusals
from harness.scenarios.expressions import ExpressionError, duration_names, evaluate, shown
from harness.scenarios.limits import (
    MAX_BYTES,
    MAX_CONNECTIONS,
    MAX_MS,
    MAX_RATE,
    MAX_SECONDS,
    MAX_SEED,
    MAX_TIMESCALE,
    MAX_UPSTREAM,
    MAX_WORKERS,
)

NAME = re.compile(r"[A-Za-z0-9_.-]{1,80}")
CONNECTION = re.compile(r"[A-Za-z0-9._:-]{1,128}")
FAULT_TARGETS = ("busiest", "all", "random", "random-other")
WORKER_RULES = ("busiest", "random")
OPS = ("start", "stop")
ANY_KIND = "any"
DEFAULT_PROFILE = "default"
TOP_LEVEL = {"name", "description", "profile", "workers", "connections", "rate", "timescale", "seed", "vars",
             "workload", "faults", "bounds", "xfail", "upstream", "death_notices",
             "dynamodb"}
DYNAMODB_SERVERS = ("dynalite", "moto")
# The simulated upstream's gateway limits a scenario may set (``python -m harness.upstream_sim --help``):
# handshakes a second at scale 1, and the bucket's size.
UPSTREAM_SETTINGS = ("handshake_quota", "handshake_burst")
DEFAULTS: dict[str, Any] = {"profile": "hardened", "workers": 3, "connections": 30, "rate": 5.0,
                            "timescale": 0.1, "seed": 1}


class ScenarioFileError(ValueError):
    """A scenario file is unreadable or invalid; the message names the file, the field and the problem."""


@dataclass(frozen=True)
class Step:
    at_s: float           # seconds after the fault phase begins (0 = right away)
    kind: str
    target: str           # worker id, "busiest" or "all" once expanded
    duration_s: float = 0.0   # 0: an instant fault (stopped as soon as it is applied)
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 4), "kind": self.kind, "target": self.target,
                "duration_s": round(self.duration_s, 4), "params": self.params}


@dataclass(frozen=True)
class Op:
    at_s: float
    op: str               # "start" or "stop"
    target: str           # resolved when the operation runs

    def to_json(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 4), "op": self.op, "target": self.target}


@dataclass(frozen=True)
class Plan:
    """A scenario expanded for one run: concrete steps and operations, and the bounds in ms."""

    steps: list[Step]
    ops: list[Op]
    bound_ms: dict[str, float]
    bound_scale1_ms: dict[str, float]


@dataclass
class ScenarioSpec:
    name: str
    description: str = ""
    profile: str = "hardened"
    workers: int = 3
    connections: int = 30
    rate: float = 5.0
    timescale: float = 0.1
    seed: int = 1
    vars: dict[str, Any] = field(default_factory=dict)
    workload: list[dict[str, Any]] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    bounds: dict[str, Any] = field(default_factory=dict)
    xfail: str | None = None
    upstream: dict[str, float] = field(default_factory=dict)  # UPSTREAM_SETTINGS
    death_notices: bool = False
    dynamodb: str | None = None  # DYNAMODB_SERVERS; None: the runner's default
    path: str = "<scenario>"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {k: getattr(self, k) for k in (
            "name", "description", "profile", "workers", "connections", "rate", "timescale", "seed")}
        for key in ("vars", "upstream", "workload", "faults", "bounds"):
            if getattr(self, key) or key in ("faults", "bounds"):
                data[key] = getattr(self, key)
        if self.xfail:
            data["xfail"] = self.xfail
        if self.death_notices:
            data["death_notices"] = True
        if self.dynamodb:
            data["dynamodb"] = self.dynamodb
        return data

    def expand(self, profile: str, seed: int, config: FleetConfig, workers: int) -> Plan:
        """Steps, operations and bounds for one run; the same inputs always give the same plan."""
        rng = random.Random(f"{self.name}:{seed}")
        seconds = duration_names(config.durations(), 1000.0)
        where = self.path
        for key, value in self.vars.items():
            seconds[key] = _number(self.path, f"vars.{key}", _for_profile(value, profile), seconds, rng)
        drawn: list[str] = []
        steps = []
        for i, raw in enumerate(self.faults):
            at = f"faults[{i}]"
            params = {key: _param(where, f"{at}.params.{key}", _for_profile(v, profile), seconds, config, rng)
                      for key, v in (raw.get("params") or {}).items()}
            steps.append(Step(
                at_s=_number(where, f"{at}.at_s", _for_profile(raw.get("at_s", 0), profile), seconds, rng,
                             (0.0, MAX_SECONDS)),
                kind=raw["kind"], target=_fault_target(str(raw["target"]), workers, rng, drawn),
                duration_s=_number(where, f"{at}.duration_s", _for_profile(raw.get("duration_s", 0), profile),
                                   seconds, rng, (0.0, MAX_SECONDS)),
                params=params))
        ops = [Op(_number(where, f"workload[{i}].at_s", _for_profile(raw.get("at_s", 0), profile), seconds, rng,
                          (0.0, MAX_SECONDS)),
                  raw["op"], str(raw["target"])) for i, raw in enumerate(self.workload)]
        kinds = sorted({s.kind for s in steps})
        scale1 = replace(config, timescale=1.0)
        return Plan(steps, ops, self._bounds(kinds, profile, config, rng), self._bounds(kinds, profile, scale1, rng))

    def _bounds(self, kinds: list[str], profile: str, config: FleetConfig, rng: random.Random) -> dict[str, float]:
        ms = duration_names(config.durations(), 1.0)
        bounds = {}
        for kind in kinds:
            key = kind if kind in self.bounds else ANY_KIND
            if key in self.bounds:
                value = _for_profile(self.bounds[key], profile)
                if value is not None:
                    bounds[kind] = _number(self.path, f"bounds.{key}", value, ms, rng, (0.0, MAX_MS))
        return bounds


def _for_profile(value: Any, profile: str) -> Any:
    """A mapping whose keys are all profile names (or ``default``) holds one value per profile."""
    if isinstance(value, dict) and value and set(value) <= {*PROFILES, DEFAULT_PROFILE}:
        return value.get(profile, value.get(DEFAULT_PROFILE))
    return value


def _number(path: str, where: str, value: Any, names: dict[str, float], rng: random.Random,
            within: tuple[float, float] = (-MAX_MS, MAX_MS)) -> float:
    """The value of a number or expression, refused (ScenarioFileError) outside ``within``."""
    try:
        number = evaluate(value, names, rng)
    except ExpressionError as exc:
        raise ScenarioFileError(f"{path}: {where}: {exc}") from None
    low, high = within
    if not low <= number <= high:
        rule = f"must be at least {low:g}" if number < low else f"must be at most {high:.0f}"
        raise ScenarioFileError(f"{path}: {where}: {rule} (it is {number:g})")
    return number


def _param(path: str, where: str, value: Any, seconds: dict[str, float], config: FleetConfig,
           rng: random.Random) -> Any:
    """Params ending in ``_ms`` / ``_s`` may be expressions (in ms / s), and so may the Toxiproxy
    ``attributes`` (in ms: ``latency``, ``jitter``, ``timeout``, ``delay`` of slow_close); others pass through."""
    if where.endswith(".attributes") and isinstance(value, dict):
        return {k: _param(path, f"{where}.{k}_ms", v, seconds, config, rng) if isinstance(v, str) else v
                for k, v in value.items()}
    if where.endswith("_ms") and value is not None:
        return round(_number(path, where, value, duration_names(config.durations(), 1.0), rng))
    if where.endswith("_s") and value is not None:
        return _number(path, where, value, seconds, rng, (-MAX_SECONDS, MAX_SECONDS))
    return value


def _fault_target(target: str, workers: int, rng: random.Random, drawn: list[str]) -> str:
    if target == "random":
        chosen = f"worker-{rng.randint(1, workers)}"
    elif target == "random-other":
        left = [f"worker-{i}" for i in range(1, workers + 1) if f"worker-{i}" not in drawn]
        chosen = rng.choice(left or [f"worker-{i}" for i in range(1, workers + 1)])
    else:
        return target
    drawn.append(chosen)
    return chosen


# -- loading and validation ----------------------------------------------------------------------------------
class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses aliases (``*name``): a few hundred bytes of nested aliases expand
    to gigabytes, and a scenario has no use for them."""

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"YAML aliases are not allowed (line {mark.line + 1})")
        return super().compose_node(parent, index)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def load(path: str | Path) -> ScenarioSpec:
    """Read and validate one scenario file (``.yaml``, ``.yml`` or ``.json``; UTF-8, at most 1 MB)."""
    path = Path(path)
    try:
        if not path.is_file():
            raise ScenarioFileError(f"{path}: is not a file" if path.exists() else
                                    f"{path}: cannot read: no such file")
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ScenarioFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ScenarioFileError(f"{path}: larger than 1 MB ({MAX_BYTES} bytes): not a scenario file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    form = "JSON" if path.suffix == ".json" else "YAML"
    try:
        data = (json.loads(text, parse_constant=_no_constant) if form == "JSON"
                else yaml.load(text, Loader=_NoAliasLoader))
    except (ValueError, yaml.YAMLError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ScenarioFileError(f"{path}: not valid {form}: {first[:200]}") from None
    except RecursionError:
        raise ScenarioFileError(f"{path}: not valid {form}: nested too deeply") from None
    return from_data(data, str(path))


def from_data(data: Any, path: str = "<scenario>") -> ScenarioSpec:
    """Validate decoded file content; every error names the field and what is wrong with it."""

    def fail(where: str, message: str) -> ScenarioFileError:
        return ScenarioFileError(f"{path}: {where}: {message}")

    if not isinstance(data, dict):
        raise ScenarioFileError(f"{path}: the file must hold a mapping (name, faults, bounds, ...)")
    for key in data:
        if not isinstance(key, str):
            raise fail(_field(key), "a field name must be text")
    unknown = sorted(set(data) - TOP_LEVEL)
    if unknown:
        raise fail(_field(unknown[0]), f"unknown field (known: {', '.join(sorted(TOP_LEVEL))})")
    name = data.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise fail("name", "required: letters, digits, '_', '.', '-' (at most 80)")
    values = {**DEFAULTS, **{k: data[k] for k in DEFAULTS if k in data}}
    if not isinstance(values["profile"], str) or values["profile"] not in PROFILES:
        raise fail("profile", f"{shown(values['profile'])} is not one of {', '.join(PROFILES)}")
    for key, low, high in (("workers", 2, MAX_WORKERS), ("connections", 1, MAX_CONNECTIONS)):
        if not _whole(values[key]) or not low <= values[key] <= high:
            raise fail(key, f"must be a whole number from {low} to {high}")
    for key, most in (("rate", MAX_RATE), ("timescale", MAX_TIMESCALE)):
        if not _real(values[key]) or not 0 < values[key] <= most:
            raise fail(key, f"must be a number above 0 and at most {most:g}")
    if not _whole(values["seed"]) or abs(values["seed"]) > MAX_SEED:
        raise fail("seed", f"must be a whole number (at most {MAX_SEED} either way)")
    for key, kind in (("description", str), ("xfail", str)):
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            raise fail(key, "must be text")
    if not isinstance(data.get("death_notices", False), bool):
        raise fail("death_notices", "must be true or false")
    _check_plain(data, "", fail)
    if data.get("dynamodb") is not None and data["dynamodb"] not in DYNAMODB_SERVERS:
        raise fail("dynamodb", f"must be one of {', '.join(DYNAMODB_SERVERS)}")
    spec = ScenarioSpec(
        name=name, description=data.get("description") or "", profile=values["profile"],
        workers=values["workers"], connections=values["connections"], rate=float(values["rate"]),
        timescale=float(values["timescale"]), seed=values["seed"], vars=_mapping(data, "vars", fail),
        workload=_list(data, "workload", fail), faults=_list(data, "faults", fail),
        bounds=_mapping(data, "bounds", fail), xfail=data.get("xfail"), upstream=_upstream(data, fail),
        death_notices=bool(data.get("death_notices", False)), dynamodb=data.get("dynamodb"), path=path,
    )
    _validate_entries(spec, fail)
    for profile in PROFILES:  # every expression must evaluate, for every profile
        try:
            spec.expand(profile, spec.seed, FleetConfig(profile=profile, timescale=spec.timescale,  # type: ignore[arg-type]
                                                        worker_id="check"), spec.workers)
        except ValueError as exc:
            raise ScenarioFileError(str(exc)) from None
    return spec


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _field(key: object) -> str:
    """A field name as an error message shows it: as written when it is plain, quoted (and cut) otherwise."""
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_.:-]{1,60}", key) else shown(key)


_KINDS = ((datetime.date, "a date"), (bytes, "binary data"), (set, "a set"))


def _check_plain(value: Any, where: str, fail: Any) -> None:
    """Everything below the top level is text, a finite number, true/false, null, a list or a mapping
    with text keys; ``where`` is the dotted path of ``value`` (``faults[0].params``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise fail(f"{where}.{_field(key)}" if where else _field(key), "a field name must be text")
            _check_plain(item, f"{where}.{_field(key)}" if where else _field(key), fail)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]", fail)
    elif isinstance(value, float) and not math.isfinite(value):
        raise fail(where, f"must be finite (it is {value})")
    elif not isinstance(value, str | int | float | type(None)):
        kind = next((name for cls, name in _KINDS if isinstance(value, cls)), type(value).__name__)
        raise fail(where, f"{kind} is not allowed (text, numbers, true/false, lists and mappings only)")


def _upstream(data: dict[str, Any], fail: Any) -> dict[str, float]:
    settings = _mapping(data, "upstream", fail)
    for key, value in settings.items():
        if key not in UPSTREAM_SETTINGS:
            raise fail(f"upstream.{key}", f"unknown setting (known: {', '.join(UPSTREAM_SETTINGS)})")
        if not _real(value) or not 0 < value <= MAX_UPSTREAM:
            raise fail(f"upstream.{key}", f"must be a number above 0 and at most {MAX_UPSTREAM:.0f}")
    return {key: float(value) for key, value in settings.items()}


def _mapping(data: dict[str, Any], key: str, fail: Any) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise fail(key, "must be a mapping of names to values")
    return dict(value)


def _list(data: dict[str, Any], key: str, fail: Any) -> list[dict[str, Any]]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise fail(key, "must be a list of mappings")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise fail(f"{key}[{i}]", "must be a mapping")
    return [dict(entry) for entry in value]


def _kind_hint(kind: Any) -> str:
    """What to write instead of ``kind``: the close names, else every kind (a non-text kind: that it is text)."""
    if not isinstance(kind, str):
        return f"a kind is text: one of {len(REGISTRY)}, e.g. kill, pause, toxic"
    close = difflib.get_close_matches(kind, sorted(REGISTRY), n=3)
    return f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(sorted(REGISTRY))}"


def _validate_entries(spec: ScenarioSpec, fail: Any) -> None:
    joined = {step.get("target") for step in spec.faults if step.get("kind") == "join"}  # may be faulted too
    for i, step in enumerate(spec.faults):
        at = f"faults[{i}]"
        extra = sorted(set(step) - {"at_s", "kind", "target", "duration_s", "params"})
        if extra:
            raise fail(f"{at}.{_field(extra[0])}", "unknown field (known: at_s, kind, target, duration_s, params)")
        if not isinstance(step.get("kind"), str) or step["kind"] not in REGISTRY:
            raise fail(f"{at}.kind", f"{shown(step.get('kind'))} is not a fault kind ({_kind_hint(step.get('kind'))})")
        target = step.get("target")
        worker = isinstance(target, str) and re.fullmatch(r"worker-(\d{1,6})", target)
        if not (target in FAULT_TARGETS or worker or (isinstance(target, str) and CONNECTION.fullmatch(target)
                                                      and step["kind"] == "reset_upstream")):
            raise fail(f"{at}.target", f"{shown(target)} is not a target (worker-N, {', '.join(FAULT_TARGETS)})")
        if worker and step["kind"] == "join" and int(worker.group(1)) <= spec.workers:
            raise fail(f"{at}.target", f"{target} exists already with {spec.workers} workers (join a new one)")
        if worker and step["kind"] != "join" and target not in joined and not 1 <= int(worker.group(1)) <= spec.workers:
            raise fail(f"{at}.target", f"{target} does not exist with {spec.workers} workers")
        if "params" in step and not isinstance(step["params"], dict | None):
            raise fail(f"{at}.params", "must be a mapping")
        step_ms = (step.get("params") or {}).get("step_ms")
        if step["kind"] == "clock_step" and not isinstance(step_ms, int | float | str):
            raise fail(f"{at}.params.step_ms", "required for clock_step: how far the clock jumps, in ms (+/-)")
        refused = refusals([step["kind"]], LOCAL, {"death_notices"} if spec.death_notices else set())
        if refused:  # what the kind needs of the run, as the fault registry says
            raise fail(f"{at}.kind", refused[0])
    for i, op in enumerate(spec.workload):
        at = f"workload[{i}]"
        extra = sorted(set(op) - {"at_s", "op", "target"})
        if extra:
            raise fail(f"{at}.{_field(extra[0])}", "unknown field (known: at_s, op, target)")
        if not isinstance(op.get("op"), str) or op["op"] not in OPS:
            raise fail(f"{at}.op", f"{shown(op.get('op'))} is not an operation ({', '.join(OPS)})")
        target = op.get("target")
        rule = target.removeprefix("owned-by:") if isinstance(target, str) else None
        if not isinstance(target, str) or not CONNECTION.fullmatch(target) or (
                target.startswith("owned-by:") and rule not in WORKER_RULES
                and not re.fullmatch(r"worker-\d+", rule or "")):
            raise fail(f"{at}.target", f"{shown(target)} is not a connection id, random, stopped, previous or "
                                       "owned-by:<worker-N|busiest|random>")
    for kind in spec.bounds:
        if kind != ANY_KIND and kind not in REGISTRY:
            raise fail(f"bounds.{_field(kind)}", f"not a fault kind (known: {ANY_KIND}, {', '.join(sorted(REGISTRY))})")


def dump(spec: ScenarioSpec, path: str | Path) -> Path:
    """Write ``spec`` as YAML (or JSON for a ``.json`` path); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = spec.to_json()
    text = json.dumps(data, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(
        data, sort_keys=False, default_flow_style=None, width=120)
    path.write_text(text)
    return path
