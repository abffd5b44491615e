"""Typed views of a history for the checkers: the history by event type (``Events``, read with
``read_events``), the events of some types with the columns asked for (``select``: missing fields filled
with NaN), the run's settings from ``run.start``, the nemesis faults paired start with stop, the worker ids
the history knows, and consumer identities.

A *consumer* is a worker incarnation (``worker``, ``gen``; DESIGN §11), labelled ``worker@gen``, or
``worker`` alone when the event carries no gen (histories from fleets older than the incarnation contract).
Two labels are the same consumer when their workers are equal and their gens are equal or one is unknown
(``same_consumer``): an event without a gen cannot tell two incarnations of its worker apart, so it is never
taken for a second consumer beside them.  Faults and process events (``worker.start``, kills, pauses) act on
the worker id: every incarnation of that process."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.history import TypedHistory, read_typed_history
from harness.history_columns import NUMBERS, TEXT, FieldColumn

# Fields read as float64 (NaN when missing or not a number); every other field is read as text.
NUMERIC_FIELDS = frozenset({
    "t", "seq", "seq_from", "seq_to", "epoch", "expires_ms", "last_pong_t", "last_seq_sent", "from_seq",
    "head_seq", "status", "sent", "written_ms", "sent_ms", "attempted", "accepted", "rejected", "window_ms",
    "take",
})
# Fault kinds after which a process holds no lease belief any more (its process died).
CRASH_FAULTS = frozenset({"kill", "restart", "crash"})
# Fault kinds that freeze a process: it reads and writes nothing until fault.stop.
FREEZE_FAULTS = frozenset({"pause", "freeze", "sigstop", "zombie"})

Windows = dict[str, list[tuple[float, float]]]
CONSUMER_SEP = "@"


class _Table:
    """The events of one type in history order: their positions in the history, their ``t``, and each
    field as a column, converted on first use and kept (a long history holds hundreds of thousands of
    events of a type, selected by several checkers).  The events are the columns of a typed history
    (``harness.history_columns``); a table cut from another (``where``) reads that one's columns."""

    def __init__(self, events: Mapping[str, FieldColumn], positions: np.ndarray, times: np.ndarray,
                 cut_from: tuple[_Table, np.ndarray] | None = None) -> None:
        self.events = events
        self.positions = positions
        self.times = times
        self._cut_from = cut_from
        self._columns: dict[tuple[str, str], Any] = {}

    def __len__(self) -> int:
        return len(self.positions)

    def where(self, keep: np.ndarray) -> _Table:
        """The events where ``keep`` is true."""
        return _Table({}, self.positions[keep], self.times[keep], (self, keep))

    def has(self, name: str) -> bool:
        """Whether any event of the type has this field."""
        if self._cut_from is not None:
            return self._cut_from[0].has(name)
        return name in self.events

    def column(self, name: str, kind: str) -> Any:
        """The field as ``kind``: ``number`` (float64, NaN when missing or not a number), ``text`` (strings
        and NaN, as ``select`` gives them) or ``raw`` (the parsed values, NaN when missing)."""
        key = (name, kind)
        if key not in self._columns:
            if self._cut_from is not None:
                parent, keep = self._cut_from
                self._columns[key] = parent.column(name, kind)[keep]
            elif kind == "number":
                typed = self.events[name]
                self._columns[key] = (self.times if name == "t" else typed.values if typed.kind == NUMBERS
                                      else _number(self.column(name, "raw")))
            elif kind == "text":
                typed = self.events[name]
                shared = typed.shared_text() if typed.kind == TEXT else _text(self.column(name, "raw"))
                self._columns[key] = pd.Series(shared, copy=False).array
            else:
                self._columns[key] = self.events[name].raw()
        return self._columns[key]


class Events:
    """A history split by event type (``harness.history.read_typed_history``), the one form every checker
    takes: each selection touches only the events of its types and converts each column once."""

    def __init__(self, tables: Mapping[str, _Table]) -> None:
        self._tables = dict(tables)

    @classmethod
    def of_typed(cls, typed: TypedHistory) -> Events:
        return cls({name: _Table(columns, typed.positions[name], typed.times[name])
                    for name, columns in typed.columns.items()})

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables.values())

    @property
    def types(self) -> list[str]:
        """The event types present, in order of first appearance."""
        return [name for name, table in self._tables.items() if len(table)]

    def times(self) -> np.ndarray:
        """Every event's ``t`` (in no particular order)."""
        parts = [table.times for table in self._tables.values()]
        return np.concatenate(parts) if parts else np.empty(0)

    def until(self, t: float) -> Events:
        """The events at or before ``t``."""
        return Events({name: table.where(table.times <= t) for name, table in self._tables.items()})

    def tables(self, types: Collection[str] | None = None) -> list[_Table]:
        """The non-empty tables of these types (default: all)."""
        names = self._tables if types is None else dict.fromkeys(types)
        return [self._tables[name] for name in names if name in self._tables and len(self._tables[name])]


def read_events(run_dir: str | Path) -> Events:
    """The history of the run in ``run_dir``, read by type (``harness.history.read_typed_history``)."""
    return Events.of_typed(read_typed_history(run_dir))


def select(history: Events, types: str | Collection[str], columns: Sequence[str],
           raw: Collection[str] = ()) -> pd.DataFrame:
    """The events whose ``type`` is (one of) ``types``, in history order, with exactly ``columns``
    (``NUMERIC_FIELDS`` as float64, ``raw`` ones as stored, others as text with NaN for missing) and a
    fresh 0..n-1 index."""
    tables = history.tables([types] if isinstance(types, str) else types)
    order = np.argsort(np.concatenate([table.positions for table in tables])) if len(tables) > 1 else None
    data: dict[str, Any] = {}
    for name in dict.fromkeys(columns):
        kind = "raw" if name in raw else "number" if name in NUMERIC_FIELDS else "text"
        parts = [table.column(name, kind) if table.has(name) else np.full(len(table), np.nan)
                 for table in tables]
        data[name] = _joined(parts, kind, order)
    return pd.DataFrame(data, columns=list(dict.fromkeys(columns)))


def _joined(parts: list[Any], kind: str, order: np.ndarray | None) -> Any:
    """One column from its parts (one per table, in table order), rows in history order (``order``)."""
    if not parts:
        return np.empty(0, dtype="float64" if kind == "number" else object)
    if order is None:
        return parts[0]
    if kind == "text" and len({part.dtype for part in parts}) == 1:
        return pd.concat([pd.Series(part, copy=False) for part in parts], ignore_index=True).array.take(order)
    values = np.concatenate([np.asarray(part, dtype=object if kind != "number" else "float64") for part in parts])
    return values[order] if kind != "text" else pd.Series(values[order]).array


def worker_of(frame: pd.DataFrame) -> pd.Series:
    """The ``worker`` column, falling back to ``src`` for events a worker wrote about itself."""
    return frame["worker"].where(frame["worker"].notna(), frame["src"])


def holder_of(item: Mapping[str, Any]) -> str:
    """The consumer label of a stored item (a log entry as the final scan read it): ``worker@gen``, or the worker
    alone without a generation."""
    return f"{item.get('worker')}{CONSUMER_SEP}{item['gen']}" if item.get("gen") else str(item.get("worker"))


def consumer_of(frame: pd.DataFrame) -> pd.Series:
    """The consumer label of each event: ``worker@gen``, or the worker alone when ``gen`` is missing or empty
    (``frame`` needs the columns ``worker``, ``src`` and ``gen``)."""
    labels = worker_of(frame).to_numpy(dtype=object).copy()
    gens = frame["gen"].to_numpy(dtype=object)
    known = np.asarray(pd.notna(gens), dtype=bool)
    known[known] = gens[known].astype(str) != ""
    if known.any():  # one label per distinct (worker, gen), shared by its events
        worker_codes, workers = pd.factorize(labels[known], use_na_sentinel=False)
        gen_codes, gen_names = pd.factorize(gens[known], use_na_sentinel=False)
        codes, pairs = pd.factorize(worker_codes * len(gen_names) + gen_codes)
        names = [f"{workers[pair // len(gen_names)]}{CONSUMER_SEP}{gen_names[pair % len(gen_names)]}"
                 for pair in pairs.tolist()]
        labels[known] = np.asarray(names, dtype=object)[codes]
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


def _number(values: np.ndarray) -> np.ndarray:
    """Field values (objects) as float64, NaN for missing or not a number."""
    if pd.api.types.infer_dtype(values, skipna=False) in ("floating", "integer", "mixed-integer-float"):
        return values.astype("float64")  # only numbers (a missing value is a NaN float): converted exactly
    return np.asarray(pd.to_numeric(values, errors="coerce"), dtype="float64")


def _text(values: np.ndarray) -> np.ndarray:
    """Field values (objects) as text: strings kept, NaN for missing, other values by ``_as_text``; equal
    strings become one object (JSON parsing makes one per value, and grouping or comparing a million
    distinct-but-equal strings is several times slower than shared ones)."""
    if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "empty"):
        missing = pd.isna(values)
        values = np.array([_as_text(v) for v in values], dtype=object)
        values[missing] = np.nan
    codes, uniques = pd.factorize(values)
    shared: np.ndarray = np.append(np.asarray(uniques, dtype=object), np.nan)[codes]  # code -1: the NaN
    return shared


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
    dynamodb: str | None = None  # the embedded DynamoDB server the run used (dynalite, moto), when it says
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


def run_info(history: Events) -> RunInfo:
    times = history.times()
    if times.size == 0:
        return RunInfo()
    first_t, last_t = float(np.nanmin(times)), float(np.nanmax(times))
    stops = select(history, "run.stop", ["t", "settled_t"], raw=["settled_t"])
    stop_t = float(stops["t"].iloc[0]) if len(stops) else None
    settled = stops["settled_t"].iloc[0] if len(stops) else None
    settled_t = (float(settled) if isinstance(settled, int | float) and not isinstance(settled, bool)
                 and not np.isnan(settled) else None)
    fields = ["t", "scenario", "profile", "timescale", "config", "connections", "workers", "bound_ms",
              "bound_scale1_ms", "stop_bound_ms", "seed", "fault_model", "upstream", "settings", "dynamodb"]
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
        dynamodb=str(get("dynamodb")) if get("dynamodb") is not None else None,
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


def faults(history: Events) -> list[Fault]:
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


def desired_states(history: Events, earliest_stops: bool = False) -> pd.DataFrame:
    """When each pk's desired state became STARTED or STOPPED: columns ``t``, ``pk``, ``type`` (``STARTED`` or
    ``STOPPED``, i.e. ``conn.started`` / ``conn.stopped``), in time order.

    Read from the router's ``event`` entries (kind START / STOP) whose desired-state write was applied: a 2xx
    ``status``, or any event with ``written_ms`` (when that write was answered: a 503 after it says the
    state was recorded), at ``written_ms`` where the event has it (the router logs the event only after the
    mailbox post and the notification that follow the write) when the history has any START or STOP event;
    else from the harness's ``conn.started`` / ``conn.stopped`` (older histories, and runs that changed
    desired state without the router).

    ``earliest_stops``: every STOP from the earliest it can have landed, ``sent_ms`` where the event has it (the
    write's ``stopped_at_ms``, up to which the fleet drains, is taken after it), including a STOP whose write's
    outcome is unknown (answered 5xx without ``written_ms``, but with ``sent_ms``: the write was sent, and may
    have landed).  For I2, which requires only what was emitted while the stream was certainly STARTED; never
    for I5, which requires only what was certainly STOPPED."""
    router = _control_events(history)
    if len(router):
        written = router["written_ms"].notna()
        applied = ((router["status"] >= 200) & (router["status"] < 300)) | written
        unknown = _of_unknown_outcome(router) & (router["kind"] == "STOP")
        accepted = router.loc[applied | (unknown if earliest_stops else False)]
        kinds = np.where(accepted["kind"] == "START", STARTED, STOPPED)
        at = accepted["written_ms"].where(accepted["written_ms"].notna(), accepted["t"])
        from_sent = unknown.loc[accepted.index]
        if earliest_stops:
            from_sent = from_sent | ((accepted["kind"] == "STOP") & accepted["sent_ms"].notna())
        times = at.where(~from_sent, accepted["sent_ms"]).to_numpy(dtype=float)
        frame = pd.DataFrame({"t": times, "pk": accepted["pk"].to_numpy(dtype=object), "type": kinds})
        return frame.sort_values("t", kind="stable").reset_index(drop=True)
    return select(history, [STARTED, STOPPED], ["t", "pk", "type"]).dropna(subset=["pk"]).reset_index(drop=True)


def unknown_starts(history: Events) -> dict[str, np.ndarray]:
    """Per pk, when each START of unknown outcome was sent, sorted: answered 5xx with ``sent_ms`` but without
    ``written_ms`` (the router's desired-state write was sent and its answer lost, so it may have landed at any
    time after).  ``desired_states`` never counts them; I5 asks whether one could have ended a STOP's
    obligation."""
    router = _control_events(history)
    unknown = router.loc[_of_unknown_outcome(router) & (router["kind"] == "START")]
    return {str(pk): np.sort(group["sent_ms"].to_numpy(dtype=float)) for pk, group in unknown.groupby("pk")}


def _control_events(history: Events) -> pd.DataFrame:
    """The router's ``event`` entries of kind START or STOP that name their pk."""
    router = select(history, "event", ["t", "pk", "kind", "status", "written_ms", "sent_ms"]).dropna(subset=["pk"])
    return router.loc[router["kind"].isin(["START", "STOP"])]


def _of_unknown_outcome(router: pd.DataFrame) -> pd.Series:
    """Which of ``router``'s events had their desired-state write sent and its answer lost: answered 5xx, with
    ``sent_ms`` but without ``written_ms``."""
    return (router["status"] >= 500) & router["written_ms"].isna() & router["sent_ms"].notna()


def known_workers(history: Events) -> set[str]:
    """Every worker id the history names (``worker`` fields and the sources of ``worker.start``)."""
    names: set[str] = set()
    for table in history.tables():
        if table.has("worker"):
            names.update(str(w) for w in pd.unique(table.column("worker", "text")) if isinstance(w, str))
    starts = select(history, "worker.start", ["src"])
    names.update(str(s) for s in starts["src"].dropna().unique())
    return names


HANDOVER_COLUMNS = ["pk", "t", "kind", "epoch", "to", "from"]


def handovers(history: Events) -> pd.DataFrame:
    """Every moment a pk's lease changed hands (DESIGN §12: supersession is dated at every handover), in time
    order (``HANDOVER_COLUMNS``); from ``t`` on, every epoch below ``epoch`` is superseded:

    - ``acquire``: a ``lease.acquire`` ok granted ``epoch`` to the consumer ``to`` (``from`` NaN: whoever held
      it before);
    - ``transfer``: a ``lease.release`` ok with ``to`` (a balance transfer): the giver ``from`` handed epoch + 1
      to the worker ``to`` (the release names no incarnation) by the release itself, before the recipient
      takes it up;
    - ``burial``: a ``death.notice`` that buried incarnations (``buried``): each pk whose latest acquire or
      transfer before it went to a buried incarnation is that incarnation's no longer (``from``), ``epoch``
      its epoch + 1, held by nobody yet (``to`` NaN).  A notice carries no pks: they are these."""
    acquires = select(history, "lease.acquire", ["t", "src", "pk", "worker", "gen", "epoch", "outcome"])
    acquires = acquires.loc[acquires["pk"].notna() & (acquires["outcome"] == "ok")]
    releases = select(history, "lease.release", ["t", "src", "pk", "worker", "gen", "epoch", "outcome", "to"])
    releases = releases.loc[releases["pk"].notna() & (releases["outcome"] == "ok") & releases["to"].notna()]
    handed = pd.concat([
        pd.DataFrame({"pk": acquires["pk"], "t": acquires["t"], "kind": "acquire", "epoch": acquires["epoch"],
                      "to": consumer_of(acquires), "from": np.nan}),
        pd.DataFrame({"pk": releases["pk"], "t": releases["t"], "kind": "transfer", "epoch": releases["epoch"] + 1,
                      "to": releases["to"], "from": consumer_of(releases)}),
    ], ignore_index=True).sort_values("t", kind="stable")
    notices = select(history, "death.notice", ["t", "buried"], raw=["buried"])
    burials: list[dict[str, Any]] = []
    for t, buried in zip(notices["t"], notices["buried"], strict=True):
        if not isinstance(buried, list) or not buried:
            continue
        before = handed.loc[handed["t"] < t].groupby("pk", sort=False).tail(1)
        for row in before.itertuples(index=False):
            holder = next((str(b) for b in buried if same_consumer(str(b), str(row.to))), None)
            if holder is not None:
                burials.append({"pk": row.pk, "t": float(t), "kind": "burial", "epoch": row.epoch + 1, "to": np.nan,
                                "from": holder})
    frame = pd.concat([handed, pd.DataFrame(burials, columns=HANDOVER_COLUMNS)], ignore_index=True)
    frame = frame.astype({"t": "float64", "epoch": "float64"})
    return frame.sort_values("t", kind="stable").reset_index(drop=True)[HANDOVER_COLUMNS]
