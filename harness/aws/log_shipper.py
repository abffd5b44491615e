"""What ECS's ``awslogs`` driver does for a deployed fleet, done for local processes: each process's history
lines go to a CloudWatch Logs group, one stream per process, stamped with the event's own time.

With moto standing in for AWS, this is what puts a local fleet's history where ``wsfleet aws-history`` (and
the AWS backend's runner) reads it back (``harness.aws.logs``).  ``ship`` sends what was appended
to the run's history files since the last call; a file's lines go out in order, at most
``BATCH_EVENTS`` per ``PutLogEvents``.  Lines that are not history events are sent as they are, as a
container's other output would be.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.aws.logs import history_event
from harness.history import HistoryTail

BATCH_EVENTS = 1000     # PutLogEvents takes 10,000 events or 1 MB; history lines are a few hundred bytes


class LogShipper:
    """Ships ``RUN_DIR/history/<src>.jsonl`` of the named sources to ``group`` (stream ``<src>``)."""

    def __init__(self, logs: Any, group: str, run_dir: Path, sources: list[str]) -> None:
        self.logs = logs
        self.group = group
        self.tail = HistoryTail(run_dir)
        self.sources = sources
        self.streams: set[str] = set()

    def ship(self) -> int:
        """Send every whole line appended since the last call; how many were sent."""
        sent = 0
        for src in self.sources:
            lines = [line.decode("utf-8") for line in self.tail.new_lines(self.tail.folder / f"{src}.jsonl")
                     if line.strip()]
            if not lines:
                continue
            if src not in self.streams:
                self._create(src)
            stamped = sorted(((self._stamp(line), n, line) for n, line in enumerate(lines)))  # in time order
            events = [{"timestamp": stamp, "message": line} for stamp, _, line in stamped]
            for start in range(0, len(events), BATCH_EVENTS):
                self.logs.put_log_events(logGroupName=self.group, logStreamName=src,
                                         logEvents=events[start:start + BATCH_EVENTS])
            sent += len(events)
        return sent

    def _create(self, src: str) -> None:
        existing = self.logs.describe_log_streams(logGroupName=self.group, logStreamNamePrefix=src)["logStreams"]
        if not any(stream["logStreamName"] == src for stream in existing):
            self.logs.create_log_stream(logGroupName=self.group, logStreamName=src)
        self.streams.add(src)

    @staticmethod
    def _stamp(line: str) -> int:
        """The event's own time; a line that is no event is stamped when it is shipped."""
        event = history_event(line)
        return int(event["t"]) if event is not None else int(time.time() * 1000)
