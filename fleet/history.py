"""The history writer every process uses (DESIGN §4): one JSON object per line, appended to one file per
process.

Each event has ``t`` (Unix ms, float, this machine's wall clock: never a fault-skewed lease clock), ``src``
(``worker-3``, ``upstream``, ``router``, ``nemesis``, ``harness``) and ``type``, plus whatever fields apply
(``pk``, ``worker``, ``epoch``, ``seq``, ``outcome`` in ``ok`` / ``fail`` / ``info``).  Lines are written
with one ``write`` on an ``O_APPEND`` descriptor and no user-space buffer, so a SIGKILL loses at most the
event being written and never leaves half a line behind another.  Reading and merging is the harness's
job (``harness.history``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Literal

Outcome = Literal["ok", "fail", "info"]
# One encoder for every event (``json.dumps`` with options builds one per call).
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str).encode


class HistoryWriter:
    """Appends events to ``path``; with no path it discards them (production workers log to stdout)."""

    def __init__(self, path: str | None, src: str) -> None:
        self.src = src
        self.path = path or ""
        self._fd: int | None = None
        self._lock = threading.Lock()
        if self.path:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        """Write one event now; fields whose value is None are left out.  Returns the event."""
        event: dict[str, Any] = {"t": time.time() * 1000.0, "src": self.src, "type": type}
        event.update({k: v for k, v in fields.items() if v is not None})
        if self._fd is not None:
            line = (_ENCODE(event) + "\n").encode()
            with self._lock:
                os.write(self._fd, line)
        return event

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
