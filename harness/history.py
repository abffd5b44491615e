"""Reading and merging a run's event history (DESIGN §4); writing is ``fleet.history.HistoryWriter``,
re-exported here for harness code.

A run folder holds ``history/*.jsonl``: one JSON object per line, one file per process.  ``read_history``
merges every file into one ``pandas.DataFrame`` sorted by ``t`` (stable: ties keep file-name order, then
line order), one column per field present anywhere (missing values are NaN / None).  A final line that does
not parse is taken for the half-written last event of a killed writer and dropped (listed in
``frame.attrs["dropped_lines"]``); an unparsable line anywhere else, or an event without a numeric ``t`` or a
``type``, is an error naming the file and the line.

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
  stored item, so a seq stored twice appears twice; items: the same items with their writer, [{seq, worker,
  gen, epoch, sent_ms}], null where unknown}: the store's ground truth, written at the end
  (``harness.ground_truth``); ``final.connection`` {pk, desired_state, lease_owner, owner_gen, epoch,
  last_seq, ckpt_worker, ckpt_gen, ckpt_epoch}: each connection item at the end;
  ``final.emitted`` {pk, head_seq}: the simulator's head per stream at the end;
  ``task.stopped`` {worker, task, exit_code, outcome}: with death notices on, a worker process exited and
  its task's STOPPED event was sent to the queue (``harness.tasks``).
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
  ``checkpoint`` {pk, worker, epoch, seq, outcome, sent};
  ``death.notice`` {worker, task, outcome: confirmed (ECS says the task stopped) | refuted, buried: the
  incarnations expired by it, ``worker@gen``, reason}.
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
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleet.history import HistoryWriter

__all__ = ["HistoryError", "HistoryTail", "HistoryWriter", "history_frame", "read_history"]

REQUIRED_FIELDS = ("t", "src", "type")


class HistoryError(Exception):
    """A run folder or history file cannot be read as a history; the message says where and why."""


def read_history(run_dir: str | Path) -> pd.DataFrame:
    """Every event of the run in ``run_dir``, merged from ``history/*.jsonl`` and sorted by ``t``."""
    folder = Path(run_dir) / "history"
    if not folder.is_dir():
        raise HistoryError(f"{run_dir} is not a run folder: it has no history/ folder")
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise HistoryError(f"{run_dir} is not a run folder: {folder} holds no *.jsonl files")
    frames: list[pd.DataFrame] = []
    dropped: list[dict[str, Any]] = []
    for path in files:
        frame, truncated = _read_file(path)
        if len(frame):
            frames.append(frame)
        if truncated is not None:
            dropped.append(truncated)
    merged = _ordered(_share_strings(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame())
    merged.attrs["dropped_lines"] = dropped
    merged.attrs["files"] = [str(path) for path in files]
    return merged


class HistoryTail:
    """The events appended to a run's history files since the last look (``new_events``), for a runner that
    waits for what the processes report.  ``pattern`` picks the files, ``matching`` (a substring of the
    wanted lines, e.g. ``"type":"msg.persist"``) skips the rest unparsed; only whole lines are read."""

    def __init__(self, run_dir: str | Path, pattern: str = "*.jsonl", matching: str = "") -> None:
        self.folder = Path(run_dir) / "history"
        self.pattern = pattern
        self.matching = matching.encode()
        self.offsets: dict[Path, int] = {}

    def new_events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for path in sorted(self.folder.glob(self.pattern)):
            for line in self.new_lines(path):
                if self.matching in line:
                    with contextlib.suppress(ValueError):
                        events.append(json.loads(line))
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


def history_frame(events: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """A history DataFrame from events already parsed (as ``read_history`` builds it): stable-sorted by
    ``t``, index 0..n-1, columns ``t``, ``src``, ``type`` first."""
    return _ordered(pd.DataFrame(list(events)))


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    for name in REQUIRED_FIELDS:
        if name not in frame.columns:
            frame[name] = pd.Series(dtype="float64" if name == "t" else "object")
    others = [c for c in frame.columns if c not in REQUIRED_FIELDS]
    frame = frame[[*REQUIRED_FIELDS, *others]]
    frame["t"] = frame["t"].astype("float64")
    return frame.sort_values("t", kind="stable").reset_index(drop=True)


def _share_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Make equal strings of each text column one object: JSON parsing creates a new object per value, and
    grouping or comparing a million distinct-but-equal objects is several times slower than shared ones."""
    for name in frame.columns:
        column = frame[name]
        if isinstance(column.dtype, pd.StringDtype):
            codes, uniques = pd.factorize(column)
            shared = np.asarray(uniques, dtype=object)[codes]
            shared[codes < 0] = np.nan
            frame[name] = pd.array(shared, dtype=column.dtype)
    return frame


def _read_file(path: Path) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """The events of one file, checked, and the dropped truncated final line (or None)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HistoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read ({exc.strerror})") from None
    numbered = [(number, line) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    truncated: dict[str, Any] | None = None
    try:
        events = json.loads("[" + ",".join(line for _, line in numbered) + "]")
    except json.JSONDecodeError:
        events, truncated = _parse_lines(path, numbered)
    if not all(type(event) is dict for event in events):
        index = next(i for i, event in enumerate(events) if type(event) is not dict)
        raise HistoryError(f"{path}: line {numbered[index][0]}: an event must be a JSON object")
    frame = pd.DataFrame(events)
    if frame.empty:
        return frame, truncated
    problems = [
        ("the event has no numeric 't'", ~_numbers(frame, "t")),
        ("the event has no 'type' or 'src' string", ~(_strings(frame, "type") & _strings(frame, "src"))),
    ]
    for complaint, bad in problems:
        if bad.any():
            raise HistoryError(f"{path}: line {numbered[int(np.flatnonzero(bad)[0])][0]}: {complaint}")
    return frame, truncated


def _numbers(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Which rows hold a number (not bool, not missing) in this column."""
    if name not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    column = frame[name]
    if pd.api.types.is_float_dtype(column) or pd.api.types.is_integer_dtype(column):
        return np.asarray(column.notna(), dtype=bool)
    return np.array([isinstance(v, int | float) and not isinstance(v, bool) and v == v for v in column])


def _strings(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Which rows hold a string in this column."""
    if name not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    column = frame[name]
    if isinstance(column.dtype, pd.StringDtype):
        return np.asarray(column.notna(), dtype=bool)
    return np.array([isinstance(v, str) for v in column])


def _parse_lines(path: Path, numbered: list[tuple[int, str]]) -> tuple[list[Any], dict[str, Any] | None]:
    """Slow path once the fast one failed: find the bad line; only the last one may be bad (truncated)."""
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
