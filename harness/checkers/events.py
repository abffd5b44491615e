"""Typed views of a history for the checkers: the events of some types with the columns asked for (missing
fields filled with NaN), the run's settings from ``run.start``, the nemesis faults paired start with stop,
the worker ids the history knows, and consumer identities.

A *consumer* is a worker incarnation (``worker``, ``gen``; DESIGN §11), labelled ``worker@gen``, or
``worker`` alone when the event carries no gen (histories from fleets older than the incarnation contract).
Two labels are the same consumer when their workers are equal and their gens are equal or one is unknown
(``same_consumer``): an event without a gen cannot tell two incarnations of its worker apart, so it is never
taken for a second consumer beside them.  Faults and process events (``worker.start``, kills, pauses) act on
the worker id: every incarnation of that process."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

# Fields read as float64 (NaN when missing or not a number); every other field is read as text.
NUMERIC_FIELDS = frozenset({
    "t", "seq", "seq_from", "seq_to", "epoch", "expires_ms", "last_pong_t", "last_seq_sent", "from_seq",
    "head_seq", "status", "sent", "written_ms", "attempted", "accepted", "rejected",
})
# Fault kinds after which a process holds no lease belief any more (its process died).
CRASH_FAULTS = frozenset({"kill", "restart", "crash"})
# Fault kinds that freeze a process: it reads and writes nothing until fault.stop.
FREEZE_FAULTS = frozenset({"pause", "freeze", "sigstop"})

Windows = dict[str, list[tuple[float, float]]]
CONSUMER_SEP = "@"


class Events:
    """A history with its rows indexed by event type, built once, so that each selection a checker makes
    skips a scan of the whole history.  Every checker takes a ``History``: this or the bare DataFrame."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self._rows_by_type: dict[str, np.ndarray] | None = None

    def rows(self, types: Collection[str]) -> np.ndarray:
        """Positions of the events of these types, in history order."""
        if self._rows_by_type is None:
            grouped = self.frame.groupby("type", sort=False).indices if len(self.frame) else {}
            self._rows_by_type = {str(name): index for name, index in grouped.items()}
        found = [self._rows_by_type[name] for name in types if name in self._rows_by_type]
        return np.sort(np.concatenate(found)) if found else np.empty(0, dtype="int64")


History: TypeAlias = "pd.DataFrame | Events"


def as_events(history: History) -> Events:
    return history if isinstance(history, Events) else Events(history)


def frame_of(history: History) -> pd.DataFrame:
    return history.frame if isinstance(history, Events) else history


def select(history: History, types: str | Collection[str], columns: Sequence[str],
           raw: Collection[str] = ()) -> pd.DataFrame:
    """The events whose ``type`` is (one of) ``types``, in history order, with exactly ``columns``
    (``NUMERIC_FIELDS`` as float64, ``raw`` ones as stored, others as text with NaN for missing) and a
    fresh 0..n-1 index."""
    wanted = [types] if isinstance(types, str) else list(types)
    frame = frame_of(history)
    present = [name for name in dict.fromkeys(columns) if name in frame.columns]
    if isinstance(history, Events):
        rows = frame.iloc[history.rows(wanted)][present]
    else:
        rows = frame.loc[frame["type"].isin(wanted).to_numpy(), present]
    data: dict[str, Any] = {}
    for name in columns:
        if name not in rows.columns:
            data[name] = np.full(len(rows), np.nan)
        elif name in raw:
            data[name] = rows[name].to_numpy(dtype=object)
        elif name in NUMERIC_FIELDS:
            data[name] = pd.to_numeric(rows[name], errors="coerce").to_numpy(dtype="float64")
        else:
            data[name] = _text(rows[name])
    return pd.DataFrame(data)


def worker_of(frame: pd.DataFrame) -> pd.Series:
    """The ``worker`` column, falling back to ``src`` for events a worker wrote about itself."""
    return frame["worker"].where(frame["worker"].notna(), frame["src"])


def consumer_of(frame: pd.DataFrame) -> pd.Series:
    """The consumer label of each event: ``worker@gen``, or the worker alone when ``gen`` is missing or empty
    (``frame`` needs the columns ``worker``, ``src`` and ``gen``)."""
    workers = worker_of(frame).astype(object)
    gens = frame["gen"].astype(object)
    known = (gens.notna() & (gens.astype(str) != "")).to_numpy()
    labels = workers.to_numpy(dtype=object).copy()
    labels[known] = [f"{w}{CONSUMER_SEP}{g}" for w, g in zip(labels[known], gens.to_numpy()[known], strict=True)]
    return pd.Series(labels, index=frame.index, dtype=object)


def split_consumer(label: str) -> tuple[str, str | None]:
    """(worker, gen or None) of a consumer label."""
    worker, sep, gen = str(label).partition(CONSUMER_SEP)
    return worker, (gen if sep else None)


def same_consumer(a: str, b: str) -> bool:
    """Whether two consumer labels may be the same incarnation (see the module docstring)."""
    if a == b:
        return True
    (worker_a, gen_a), (worker_b, gen_b) = split_consumer(a), split_consumer(b)
    return worker_a == worker_b and (gen_a is None or gen_b is None or gen_a == gen_b)


def _text(column: pd.Series) -> np.ndarray:
    values = column.to_numpy(dtype=object)
    missing = pd.isna(values)
    if not isinstance(column.dtype, pd.StringDtype):
        values = np.array([_as_text(v) for v in values], dtype=object)
    values[missing] = np.nan
    return np.asarray(values, dtype=object)


def _as_text(value: Any) -> str:
    """A field value as text; whole floats (ints a column with gaps turned into floats) without '.0'."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class RunInfo:
    """The run's settings (from its first ``run.start``) and its time span."""

    scenario: str | None = None
    profile: str | None = None
    timescale: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    connections: int | None = None
    workers: int | None = None
    bound_ms: Any = None
    bound_scale1_ms: Any = None  # the same bounds computed by the scenario file for time scale 1
    stop_bound_ms: float | None = None
    seed: Any = None
    fault_model: str | None = None
    upstream: dict[str, Any] = field(default_factory=dict)  # the simulator's gateway limits (scenario file)
    settings: dict[str, Any] = field(default_factory=dict)  # the fleet settings the run set (--set)
    start_t: float | None = None
    stop_t: float | None = None
    # ``run.stop``'s ``settled_t``: the runner waited until what every stream emitted before it was stored
    settled_t: float | None = None
    first_t: float = 0.0
    last_t: float = 0.0

    @property
    def end_t(self) -> float:
        """When the run ended for the checkers' horizons: ``run.stop``, else the last event."""
        return self.stop_t if self.stop_t is not None else self.last_t

    def duration(self, name: str) -> float | None:
        """An effective duration from ``config`` in ms, or None when absent."""
        value = self.config.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return None

    def bound_for(self, kind: str) -> float | None:
        """The recovery bound in ms for a fault kind: ``bound_ms`` is one number or {kind: ms}."""
        bound = self.bound_ms.get(kind) if isinstance(self.bound_ms, dict) else self.bound_ms
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            return float(bound)
        return None


def run_info(history: History) -> RunInfo:
    frame = frame_of(history)
    if frame.empty:
        return RunInfo()
    times = frame["t"].to_numpy(dtype="float64")
    first_t, last_t = float(np.nanmin(times)), float(np.nanmax(times))
    stops = select(history, "run.stop", ["t", "settled_t"], raw=["settled_t"])
    stop_t = float(stops["t"].iloc[0]) if len(stops) else None
    settled = stops["settled_t"].iloc[0] if len(stops) else None
    settled_t = (float(settled) if isinstance(settled, int | float) and not isinstance(settled, bool)
                 and not np.isnan(settled) else None)
    fields = ["t", "scenario", "profile", "timescale", "config", "connections", "workers", "bound_ms",
              "bound_scale1_ms", "stop_bound_ms", "seed", "fault_model", "upstream", "settings"]
    starts = select(history, "run.start", fields, raw=fields)
    if starts.empty:
        return RunInfo(stop_t=stop_t, settled_t=settled_t, first_t=first_t, last_t=last_t)
    row = starts.iloc[0]

    def get(name: str) -> Any:
        value = row[name]
        if value is None or (not isinstance(value, dict | list) and pd.isna(value)):
            return None
        return value

    def number(name: str) -> float | None:
        value = get(name)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def count(name: str) -> int | None:
        value = number(name)
        return int(value) if value is not None else None

    config, upstream, settings = get("config"), get("upstream"), get("settings")
    return RunInfo(
        upstream=dict(upstream) if isinstance(upstream, dict) else {},
        settings=dict(settings) if isinstance(settings, dict) else {},
        scenario=get("scenario"),
        profile=get("profile"),
        timescale=number("timescale"),
        config=dict(config) if isinstance(config, dict) else {},
        connections=count("connections"),
        workers=count("workers"),
        bound_ms=get("bound_ms"),
        bound_scale1_ms=get("bound_scale1_ms"),
        stop_bound_ms=number("stop_bound_ms"),
        seed=get("seed"),
        fault_model=str(get("fault_model")) if get("fault_model") is not None else None,
        start_t=float(row["t"]),
        stop_t=stop_t,
        settled_t=settled_t,
        first_t=first_t,
        last_t=last_t,
    )


@dataclass(frozen=True)
class Fault:
    """One nemesis operation: ``fault.start`` paired with the next ``fault.stop`` of the same kind and
    target (``stop_t`` None when it never stopped, e.g. a kill)."""

    index: int
    kind: str
    target: str
    targets: tuple[str, ...]
    params: Any
    start_t: float
    stop_t: float | None


def faults(history: History) -> list[Fault]:
    fields = ["t", "type", "kind", "target", "params"]
    rows = select(history, ["fault.start", "fault.stop"], fields, raw=fields)
    found: list[Fault] = []
    open_faults: list[int] = []
    for index, event in enumerate(rows.to_dict("records")):
        targets = _targets(event.get("target"))
        kind = str(event.get("kind"))
        if event["type"] == "fault.start":
            params = event.get("params")
            if isinstance(params, float) and params != params:
                params = None
            found.append(Fault(index, kind, ",".join(targets), targets, params, float(event["t"]), None))
            open_faults.append(len(found) - 1)
            continue
        for position, number in enumerate(open_faults):
            fault = found[number]
            if fault.kind == kind and fault.targets == targets:
                found[number] = Fault(fault.index, kind, fault.target, targets, fault.params, fault.start_t,
                                      float(event["t"]))
                del open_faults[position]
                break
    return [Fault(number, f.kind, f.target, f.targets, f.params, f.start_t, f.stop_t)
            for number, f in enumerate(found)]


def _targets(target: Any) -> tuple[str, ...]:
    if isinstance(target, list | tuple):
        return tuple(str(t) for t in target)
    if target is None or (isinstance(target, float) and target != target):
        return ()
    return (str(target),)


def fault_windows(fault_list: list[Fault], kinds: Collection[str], end_t: float) -> Windows:
    """Per target, the [start, stop] windows of the faults of these kinds (open ones run to ``end_t``)."""
    windows: Windows = {}
    for fault in fault_list:
        if fault.kind in kinds:
            for target in fault.targets:
                stop = fault.stop_t if fault.stop_t is not None else end_t
                windows.setdefault(target, []).append((fault.start_t, stop))
    return windows


STARTED, STOPPED = "conn.started", "conn.stopped"


def desired_states(history: History) -> pd.DataFrame:
    """When each pk's desired state became STARTED or STOPPED: columns ``t``, ``pk``, ``type`` (``STARTED`` or
    ``STOPPED``, i.e. ``conn.started`` / ``conn.stopped``), in time order.

    Read from the router's ``event`` entries (kind START / STOP) whose desired-state write was applied: a 2xx
    ``status``, or any event with ``written_ms`` (when that write was answered: a 503 after it says the
    state was recorded), at ``written_ms`` where the event has it (the router logs the event only after the
    mailbox post and the notification that follow the write) when the history has any START or STOP event;
    else from the harness's ``conn.started`` / ``conn.stopped`` (older histories, and runs that changed
    desired state without the router)."""
    router = select(history, "event", ["t", "pk", "kind", "status", "written_ms"]).dropna(subset=["pk"])
    router = router.loc[router["kind"].isin(["START", "STOP"])]
    if len(router):
        written = router["written_ms"].notna()
        accepted = router.loc[((router["status"] >= 200) & (router["status"] < 300)) | written]
        kinds = np.where(accepted["kind"] == "START", STARTED, STOPPED)
        times = accepted["written_ms"].where(accepted["written_ms"].notna(), accepted["t"]).to_numpy(dtype=float)
        frame = pd.DataFrame({"t": times, "pk": accepted["pk"].to_numpy(dtype=object), "type": kinds})
        return frame.sort_values("t", kind="stable").reset_index(drop=True)
    return select(history, [STARTED, STOPPED], ["t", "pk", "type"]).dropna(subset=["pk"]).reset_index(drop=True)


def known_workers(history: History) -> set[str]:
    """Every worker id the history names (``worker`` fields and the sources of ``worker.start``)."""
    frame = frame_of(history)
    names: set[str] = set()
    if "worker" in frame.columns:
        names.update(str(w) for w in frame["worker"].dropna().unique())
    starts = select(history, "worker.start", ["src"])
    names.update(str(s) for s in starts["src"].dropna().unique())
    return names
