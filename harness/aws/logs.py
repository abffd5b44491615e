"""A deployed fleet's history, read back from CloudWatch Logs into a run folder the checkers read.

On AWS the workers and the router write their history events to standard output (``WSFLEET_HISTORY_PATH``
``/dev/stdout``, in terraform's ``fleet_settings``), so they land in the log groups beside the processes'
log lines.  ``fetch_history`` reads the log groups between two times (``FilterLogEvents``, every
page), keeps the lines that are history events (a JSON object with a numeric ``t``, a ``src`` and a
``type``; log lines have ``event`` instead), and writes them as ``history/<src>.jsonl`` under the run
folder, in time order, next to what the harness wrote itself.  The same checkers then run on it.

The log groups are written by the system under test, so what they say about their source is checked: a
``src`` that names one of the harness's own sources (``harness``, ``nemesis``: the run's own records of what
it did) or that is not a process name (empty, over 128 characters, a NUL, a slash, ...) is refused, counted
per reason in ``Fetched.refused``, and never written: the harness's files hold only the harness's events.
Each log group writes only the sources it owns (``groups`` pairs a group with its role): ``router`` only from
the router's group, ``upstream`` (the simulator's records: the run's ground truth of who consumed) only from
the simulator's, and the workers' group any other process name; a worker forging the ground truth is refused.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAFE_SRC = str.maketrans({c: "_" for c in ":."})
HARNESS_SOURCES = ("harness", "nemesis")  # what the harness itself writes: never taken from the deployment
SOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
WORKERS, ROUTER, UPSTREAM = "workers", "router", "upstream"  # the roles of the deployment's log groups
OWNED_SOURCES = (ROUTER, UPSTREAM)  # sources only the log group of that role may write


@dataclass(frozen=True)
class Fetched:
    """What ``fetch_history`` wrote: events per source, the log lines that were not history, and the events
    ``keep`` left out."""

    events: dict[str, int]
    other_lines: int
    left_out: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # why a line's src was refused -> lines


def source_problem(src: str, role: str = WORKERS) -> str | None:
    """Why the deployment's log group of ``role`` (``WORKERS``, ``ROUTER``, ``UPSTREAM``) may not write history
    as ``src``, or None."""
    shown = repr(src) if len(src) <= 40 else repr(src[:37]) + "..."
    if src.lower() in HARNESS_SOURCES:
        return f"src {shown} is the harness's own source: the deployment cannot write its events"
    if not SOURCE.fullmatch(src):
        return (f"src {shown} is not a process name (a letter or digit, then letters, digits, '.', '_', ':', '-'; "
                "at most 128 characters)")
    if role in OWNED_SOURCES and src != role:
        return f"src {shown} in the {role} log group, which writes only src {role!r}"
    if role not in OWNED_SOURCES and src.lower() in OWNED_SOURCES:
        return f"src {shown} in the {role} log group: only the {src.lower()} log group writes it"
    return None


def history_event(message: str) -> dict[str, Any] | None:
    """The history event in one log line, or None for any other line (a log line, a stack trace, ...)."""
    try:
        event = json.loads(message)
    except ValueError:
        return None
    if (isinstance(event, dict) and isinstance(event.get("t"), int | float) and not isinstance(event["t"], bool)
            and isinstance(event.get("src"), str) and event["src"] and isinstance(event.get("type"), str)):
        return event
    return None


def log_messages(logs: Any, group: str, start_ms: int, end_ms: int) -> Iterator[str]:
    """Every message of ``group`` stamped from ``start_ms`` to ``end_ms``, across all its streams and pages."""
    for page in logs.get_paginator("filter_log_events").paginate(logGroupName=group, startTime=start_ms,
                                                                 endTime=end_ms):
        for event in page.get("events", []):
            yield str(event.get("message", ""))


def fetch_history(logs: Any, groups: Iterable[tuple[str, str]], start_ms: int, end_ms: int, run_dir: Path,
                  keep: Callable[[dict[str, Any]], bool] | None = None) -> Fetched:
    """Write the history events of ``groups`` ((log group, role) pairs) between the two times (Unix ms) to
    ``run_dir/history``; with ``keep``, only the events it keeps (e.g. one run's streams of a fleet others use
    too)."""
    by_src: dict[str, list[dict[str, Any]]] = defaultdict(list)
    refused: dict[str, int] = defaultdict(int)
    other = left_out = 0
    for group, role in groups:
        for message in log_messages(logs, group, start_ms, end_ms):
            event = history_event(message.strip())
            if event is None:
                other += 1
            elif (problem := source_problem(event["src"], role)) is not None:
                refused[problem] += 1
            elif keep is not None and not keep(event):
                left_out += 1
            else:
                by_src[event["src"]].append(event)
    history = run_dir / "history"
    history.mkdir(parents=True, exist_ok=True)
    for src, events in by_src.items():
        events.sort(key=lambda event: event["t"])
        with (history / f"{src.translate(SAFE_SRC)}.jsonl").open("a") as out:
            out.writelines(json.dumps(event, separators=(",", ":")) + "\n" for event in events)
    return Fetched({src: len(events) for src, events in sorted(by_src.items())}, other, left_out, dict(refused))
