"""Reading and merging a run's event history (DESIGN §4); writing is ``fleet.history.HistoryWriter``,
re-exported here for harness code.

A run folder holds ``history/*.jsonl``: one JSON object per line, one file per process.  There is one
reader, ``read_typed_history``: every file's events merged in ``t`` order (stable: ties keep file-name
order, then line order) and split by type (``TypedHistory``: per type, its fields as columns and each
event's position in the history), which is what the checkers read (``harness.checkers.events``): a long
history is mostly a few types with few fields each, and one frame with a column per field anywhere costs
more to build than checking it.  ``read_history`` is a ``pandas.DataFrame`` view of it, one column per field
present anywhere (missing values are NaN / None).  ``HistoryTail`` is the live side: what a runner waits
for while the processes write (new whole lines, picked by their parsed type).  A final line
that does not parse is taken for the half-written last event of a killed writer and dropped (listed in
``frame.attrs["dropped_lines"]`` / ``TypedHistory.dropped_lines``); an unparsable line anywhere else, or an
event without a numeric ``t`` or a ``type``, is an error naming the file and the line.

Event catalog (the contract every component writes; the checkers in ``harness.checkers`` read only this).
Every event: ``t`` (Unix ms, float, the one machine's wall clock), ``src``, ``type``, and where it applies
``pk`` (always ``CONN#<connection_id>``), ``worker`` and ``gen`` (the incarnation: DESIGN §11; events of
older fleets have no ``gen``), ``epoch``, ``seq``, ``outcome`` (``ok`` / ``fail`` / ``info``; ``info`` =
unknown, e.g. a timeout).

- harness (src ``harness``):
  ``run.start`` {scenario, profile, timescale, config (effective durations in ms: lease_ms, heartbeat_ms,
  reconcile_ms, desired_check_ms, clock_tolerance_ms, ...), connections, workers, bound_ms (a number, or
  {fault kind: ms}), seed, optional stop_bound_ms, optional fault_model ("within" or "outside: <why>")};
  ``run.stop`` {settled_t: when the settle phase began (Unix ms): it waited, up to a bound, until what every
  stream had emitted by then was stored, and the sequences checker judges what was emitted before it};
  ``conn.started`` {pk} / ``conn.stopped`` {pk}: when the harness made desired state STARTED / STOPPED;
  ``final.persisted`` {pk, seqs: list of every seq found in the messages table at the end, one entry per
  stored message, so a seq stored twice appears twice; items: the same messages with their writer, [{seq,
  worker, gen, epoch, sent_ms, batch}], null where unknown; unreadable: [{sk, problem}], the items neither
  stored layout explains, absent when none}: the store's ground truth, written at the end
  (``harness.ground_truth``); ``final.log`` {pk, entries: [{batch, kind, epoch, worker, gen, take,
  seq_from, seq_to, written_ms}]}: a stream's batch log in batch order (hardened); ``final.connection`` {pk,
  desired_state, lease_owner, owner_gen, epoch, last_seq, ckpt_worker, ckpt_gen, ckpt_epoch}: each connection
  item at the end;
  ``final.emitted`` {pk, head_seq}: the simulator's head per stream at the end;
  ``task.stopped`` {worker, task, exit_code, outcome}: with death notices on, a worker process exited and
  its task's STOPPED event was sent to the queue (``harness.ecs_tasks``).
- workers (src = worker id, e.g. ``worker-1``):
  ``worker.start`` {worker, profile, pid}; ``worker.stop`` {worker, reason};
  ``lease.acquire`` {pk, worker, epoch, outcome, expires_ms, via: notify | reconcile | start};
  ``lease.renew`` {pk (blog: one per connection; absent: the hardened worker-level lease covering all the
  worker's connections), worker, outcome, expires_ms};
  ``lease.lost`` {pk, worker, epoch, reason}; ``lease.release`` {pk, worker, epoch, outcome, seq, reason,
  behind: released with the drain mark, what the stream emitted before its STOP not all read or stored};
  ``ws.open`` {pk, worker, epoch, from_seq, outcome}; ``ws.close`` {pk, worker, reason, and when the
  session is to be reopened: policy (``fleet.backoff``), attempt (retries since the last open, from 1),
  retry_in_ms (the delay before it), retry_after_ms (the upstream's Retry-After at the run's time scale,
  when it sent one)};
  ``msg.persist`` {pk, worker, epoch, seq_from, seq_to, outcome, sent (when the request was built)};
  ``log.mark`` {pk, worker, gen, epoch, take (the take-up's number in its incarnation), b, seq, outcome, note}
  (hardened: a take-up's mark put in the stream's message log);
  ``checkpoint`` {pk, worker, epoch, seq, outcome, sent};
  ``death.notice`` {worker, task, outcome: confirmed (ECS says the task stopped, and when) | refuted,
  stopped_at_ms (ECS's stop time), buried: the incarnations expired by it, ``worker@gen`` (never one
  that renewed after the stop time), reason}.
- upstream simulator (src ``upstream``):
  ``sub.open`` {pk, session, worker, gen, from_seq}; ``sub.close`` {pk, session, worker, gen, reason:
  client_close | keepalive_timeout | evicted | server_shutdown | server_reset | error | max_age | idle_timeout,
  last_pong_t, last_seq_sent};
  ``emit`` {pk, seq}; ``handshakes`` {attempted, accepted, rejected (answered 429 by the new-connection quota),
  window_start (Unix ms), window_ms}: one per window (a second at time scale 1) that saw a subscription
  handshake.
- router (src ``router``): ``event`` {kind: START | STOP, pk, status (HTTP status)}; an accepted (2xx)
  START / STOP is when desired state changed (the checkers prefer these to ``conn.*``).
- nemesis (src ``nemesis``): ``fault.start`` / ``fault.stop`` {kind, target (a worker id, a list of them,
  or another component's name), params}.

A session is *consuming* from ``sub.open`` to ``sub.close``, except that for reason ``keepalive_timeout`` it
ends at ``last_pong_t`` (the client stopped reading then; the rest is zombie-connection time).
"""

from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from fleet.history import HistoryWriter
from harness.history_columns import FieldColumn, TypeColumnsBuilder

__all__ = ["HistoryError", "HistoryTail", "HistoryWriter", "TypedHistory", "read_history", "read_typed_history"]

REQUIRED_FIELDS = ("t", "src", "type")
Event = dict[str, Any]
_LINES = msgspec.json.Decoder()  # JSON Lines: one event per line, blank lines skipped
PIECE_BYTES = 1 << 20  # about 8,000 events: read, turned into columns and dropped while in the cache
PARALLEL_BYTES = 32 << 20  # a history this long is read by two processes (~0.4 s of one)


class HistoryError(Exception):
    """A run folder or history file cannot be read as a history; the message says where and why."""


@dataclass(frozen=True)
class TypedHistory:
    """A run's events split by type.  ``columns[type]`` are that type's fields as columns, rows in history
    order (``harness.history_columns``), ``positions[type]`` their row numbers in ``read_history``'s frame
    and ``times[type]`` their ``t`` (float64); ``dropped_lines`` as ``read_history``'s."""

    columns: dict[str, dict[str, FieldColumn]]
    positions: dict[str, np.ndarray]
    times: dict[str, np.ndarray]
    dropped_lines: list[dict[str, Any]]


def read_history(run_dir: str | Path) -> pd.DataFrame:
    """Every event of the run in ``run_dir`` as one DataFrame sorted by ``t``: a view of
    ``read_typed_history``'s columns (the one reader), one column per field present anywhere."""
    typed = read_typed_history(run_dir)
    rows = sum(len(times) for times in typed.times.values())
    fields: dict[str, np.ndarray] = {}
    for name in sorted(typed.columns, key=lambda name: typed.positions[name][0]):  # fields in order of appearance
        for field, column in typed.columns[name].items():
            fields.setdefault(field, np.full(rows, np.nan, dtype=object))[typed.positions[name]] = column.raw()
    merged = _ordered(pd.DataFrame(fields, index=pd.RangeIndex(rows)).infer_objects())
    merged.attrs["dropped_lines"] = typed.dropped_lines
    merged.attrs["files"] = [str(path) for path in _history_files(run_dir)]
    return merged


def read_typed_history(run_dir: str | Path, piece_bytes: int = PIECE_BYTES) -> TypedHistory:
    """The events of ``read_history``, split by type (see ``TypedHistory``), read about ``piece_bytes`` at a
    time so the parsed events never all exist at once.  A long history's files are shared with a forked
    reader (``_read_files_in_columns``)."""
    files = _read_files_in_columns(_history_files(run_dir), piece_bytes)
    builders: dict[str, TypeColumnsBuilder] = {}
    for file in files:
        for name, columns in file.columns.items():
            builders.setdefault(name, TypeColumnsBuilder()).add_columns(columns, file.rows[name])
    type_id = {name: number for number, name in enumerate(builders)}
    all_ids = np.concatenate([np.asarray([type_id[name] for name in file.columns], dtype=np.int64)[file.kinds]
                              for file in files])
    all_times = np.concatenate([file.times for file in files])
    order = np.argsort(all_times, kind="stable")  # files in name order, then lines: ties keep that order
    position = np.empty(order.size, dtype="int64")
    position[order] = np.arange(order.size)
    rank = np.empty(order.size, dtype="int64")  # each event's row among its type's, in file order
    by_type = np.argsort(all_ids, kind="stable")
    counts = np.bincount(all_ids, minlength=len(builders))
    rank[by_type] = np.arange(order.size) - np.repeat(np.cumsum(counts) - counts, counts)
    ordered_ids = all_ids[order]
    typed = TypedHistory({}, {}, {}, [line for file in files for line in file.dropped])
    for name, builder in builders.items():
        rows = order[ordered_ids == type_id[name]]  # this type's events in history order (file-order indices)
        typed.columns[name] = {field: column.take(rank[rows]) for field, column in builder.build().items()}
        typed.positions[name] = position[rows]
        typed.times[name] = all_times[rows]
    return typed


@dataclass(frozen=True)
class _FileColumns:
    """One file's events in columns: per type (in order of first appearance) its fields and its number of
    events, each event's type (``kinds``: its index in ``columns``) and ``t``, in line order."""

    columns: dict[str, dict[str, FieldColumn]]
    rows: dict[str, int]
    kinds: np.ndarray
    times: np.ndarray
    dropped: list[dict[str, Any]]


def _read_files_in_columns(paths: list[Path], piece_bytes: int) -> list[_FileColumns]:
    """Every file in columns, in the order given.  When there is more than one core and this process runs
    only one thread (forking one that runs several can copy a lock another holds), a forked process reads
    about half of the bytes while this one reads the rest."""
    sizes = {path: path.stat().st_size for path in paths}
    if not _may_fork(sum(sizes.values())):
        return _columns_of_files(paths, piece_bytes)
    mine: list[Path] = []
    theirs: list[Path] = []
    for path in sorted(paths, key=sizes.__getitem__, reverse=True):  # largest first, to the lighter share
        min(mine, theirs, key=lambda share: sum(map(sizes.__getitem__, share))).append(path)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        forked = pool.submit(_columns_of_files, theirs, piece_bytes)
        read = dict(zip(mine, _columns_of_files(mine, piece_bytes), strict=True))
        read.update(zip(theirs, forked.result(), strict=True))
    return [read[path] for path in paths]


def _may_fork(size: int) -> bool:
    """Whether reading ``size`` bytes is worth a second process, and forking one is safe."""
    return size >= PARALLEL_BYTES and (os.cpu_count() or 1) > 1 and threading.active_count() == 1


def _columns_of_files(paths: list[Path], piece_bytes: int) -> list[_FileColumns]:
    """These files in columns, one after another."""
    with _cycle_collector_paused():
        return [_file_columns(path, piece_bytes) for path in paths]


def _file_columns(path: Path, piece_bytes: int) -> _FileColumns:
    """One file in columns: each piece's events split by type, each type's fields added to its builder."""
    builders: dict[str, TypeColumnsBuilder] = {}
    kinds: list[np.ndarray] = []
    times: list[np.ndarray] = []
    dropped: list[dict[str, Any]] = []
    for events, fields in _file_pieces(path, dropped, piece_bytes):
        codes, names = pd.factorize(fields["type"])
        ids = np.empty(len(names), dtype=np.int64)
        for code, name in enumerate(names):
            ids[code] = list(builders).index(name) if name in builders else len(builders)
            rows = np.flatnonzero(codes == code)
            piece = events if len(names) == 1 else list(map(events.__getitem__, rows.tolist()))
            builders.setdefault(name, TypeColumnsBuilder()).add(piece, {k: v[rows] for k, v in fields.items()})
        kinds.append(ids[codes])
        times.append(fields["t"].astype("float64"))
    return _FileColumns({name: builder.build() for name, builder in builders.items()},
                        {name: builder.rows for name, builder in builders.items()},
                        np.concatenate(kinds) if kinds else np.empty(0, dtype=np.int64),
                        np.concatenate(times) if times else np.empty(0), dropped)


class HistoryTail:
    """The events appended to a run's history files since the last look (``new_events``), for a runner that
    waits for what the processes report.  ``pattern`` picks the files, ``types`` the events by their parsed
    ``type`` (every type when empty); only whole lines are read.  A whole line that is not an event (a killed
    writer's half line joined to its successor's first) is left to ``read_history``, which reports it."""

    def __init__(self, run_dir: str | Path, pattern: str = "*.jsonl", types: Iterable[str] = ()) -> None:
        self.folder = Path(run_dir) / "history"
        self.pattern = pattern
        self.types = frozenset(types)
        self.offsets: dict[Path, int] = {}

    def new_events(self) -> list[Event]:
        events: list[Event] = []
        for path in sorted(self.folder.glob(self.pattern)):
            for line in self.new_lines(path):
                try:
                    event = _LINES.decode(line)
                except msgspec.DecodeError:
                    continue
                if isinstance(event, dict) and (not self.types or event.get("type") in self.types):
                    events.append(event)
        return events

    def new_lines(self, path: Path) -> list[bytes]:
        """The whole lines appended to ``path`` since the last look at it (none if it does not exist)."""
        start = self.offsets.get(path, 0)
        try:
            with path.open("rb") as file:
                file.seek(start)
                data = file.read()
        except FileNotFoundError:
            return []
        whole = data.rfind(b"\n") + 1
        self.offsets[path] = start + whole
        return data[:whole].splitlines()


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    for name in REQUIRED_FIELDS:
        if name not in frame.columns:
            frame[name] = pd.Series(dtype="float64" if name == "t" else "object")
    others = [c for c in frame.columns if c not in REQUIRED_FIELDS]
    frame = frame[[*REQUIRED_FIELDS, *others]]
    frame["t"] = frame["t"].astype("float64")
    return frame.sort_values("t", kind="stable").reset_index(drop=True)


def _history_files(run_dir: str | Path) -> list[Path]:
    """The run's history files in name order."""
    folder = Path(run_dir) / "history"
    if not folder.is_dir():
        raise HistoryError(f"{run_dir} is not a run folder: it has no history/ folder")
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise HistoryError(f"{run_dir} is not a run folder: {folder} holds no *.jsonl files")
    return files


def _file_pieces(path: Path, dropped: list[dict[str, Any]], piece_bytes: int
                 ) -> Iterator[tuple[list[Event], dict[str, np.ndarray]]]:
    """The checked events of one file, a piece of about ``piece_bytes`` at a time, each with its ``t``,
    ``src`` and ``type`` (objects).  A truncated final line is appended to
    ``dropped``; any other line that is not an event raises a ``HistoryError`` naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read ({exc.strerror})") from None
    start = 0
    while start < len(data):
        end = data.find(b"\n", min(start + piece_bytes, len(data)) - 1) + 1 or len(data)
        try:
            events = _LINES.decode_lines(data[start:end])
        except msgspec.DecodeError:  # a truncated or bad line, not UTF-8, or a NaN: the stdlib says which
            break
        fields = _required_fields(events)
        if fields is None:
            break
        yield events, fields
        start = end
    if start < len(data):  # the rest, a line at a time, to name the bad line or drop a truncated last one
        numbered = _numbered(_text_of(path, data, start), first=data.count(b"\n", 0, start) + 1)
        events, truncated = _parse_lines(path, numbered)
        fields = _required_fields(events)
        if fields is None:
            _refuse(path, events, numbered)
        if truncated is not None:
            dropped.append(truncated)
        if events:
            assert fields is not None
            yield events, fields


def _required_fields(events: list[Any]) -> dict[str, np.ndarray] | None:
    """Each event's ``t``, ``src`` and ``type`` (objects), or None when an event is not a dict or lacks one."""
    if set(map(type, events)) - {dict}:
        return None
    fields = {name: _field(events, name) for name in REQUIRED_FIELDS}
    if not (_numbers(fields["t"]) and _strings(fields["type"]) and _strings(fields["src"])):
        return None
    return fields


@contextlib.contextmanager
def _cycle_collector_paused() -> Iterator[None]:
    """Parsing a million events makes a million dicts, and the cyclic collector would walk every one of them
    again and again while they are made (a third of the read); they hold no cycles, so it can wait."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _text_of(path: Path, data: bytes, start: int = 0) -> str:
    """``data[start:]`` as text."""
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HistoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {start + exc.start})") from None


def _numbered(text: str, first: int = 1) -> list[tuple[int, str]]:
    """The non-blank lines of a text with their line numbers (the first line is ``first``)."""
    return [(number, line) for number, line in enumerate(text.split("\n"), first) if line.strip()]


def _field(events: list[Event], name: str) -> np.ndarray:
    """One field of every event (dicts), as objects (None where missing)."""
    return np.fromiter(map(dict.get, events, repeat(name)), dtype=object, count=len(events))


def _numbers(values: np.ndarray) -> bool:
    """Whether every value is a number (not bool, not NaN)."""
    if pd.api.types.infer_dtype(values, skipna=False) not in ("floating", "integer", "mixed-integer-float", "empty"):
        return False
    return not np.isnan(values.astype("float64")).any()


def _strings(values: np.ndarray) -> bool:
    """Whether every value is a string."""
    return pd.api.types.infer_dtype(values, skipna=False) in ("string", "empty")


def _refuse(path: Path, events: list[Any], numbered: list[tuple[int, str]]) -> None:
    """Raise the error for the first event that is not a dict, else the first without a numeric ``t``, else
    the first without a ``type`` and ``src`` string."""
    problems: list[tuple[str, Callable[[Any], bool]]] = [
        ("an event must be a JSON object", lambda e: type(e) is not dict),
        ("the event has no numeric 't'", lambda e: not _is_number(e.get("t"))),
        ("the event has no 'type' or 'src' string",
         lambda e: not (isinstance(e.get("type"), str) and isinstance(e.get("src"), str))),
    ]
    for complaint, bad in problems:
        index = next((i for i, event in enumerate(events) if bad(event)), None)
        if index is not None:
            raise HistoryError(f"{path}: line {numbered[index][0]}: {complaint}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _parse_lines(path: Path, numbered: list[tuple[int, str]]) -> tuple[list[Any], dict[str, Any] | None]:
    """Slow path once the fast one failed: the stdlib's reading of each line (which also takes the NaN that
    ``json.dumps`` writes), to find the bad line; only the last one may be bad (truncated)."""
    events: list[Any] = []
    for index, (number, line) in enumerate(numbered):
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if index == len(numbered) - 1:
                return events, {"file": str(path), "line": number, "text": line[:200]}
            raise HistoryError(
                f"{path}: line {number}: not a JSON event ({exc.msg} at column {exc.colno}): {line[:120]!r}"
            ) from None
    return events, None
