"""The simulated upstream's WebSocket handshakes as a gateway meters them: the new-connection quota (a token
bucket) and the count of handshakes per second that the history records.

A handshake is *attempted* when a subscription handshake reaches the simulator (one a browser made is refused
before it is counted), *rejected* when the quota answers it 429, *accepted* when it passed the quota and is
answered with the upgrade; the rest were refused as bad requests or during shutdown.  ``HandshakeCounts``
keeps the running totals and writes one ``handshakes`` event {attempted, accepted, rejected, window_start
(Unix ms), window_ms} for each window (one second at time scale 1) that saw any handshake, when the window
ends (or when the simulator stops).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

from fleet.history import HistoryWriter
from harness.upstream_sim.streams import now_ms

HandshakeOutcome = Literal["accepted", "rejected", "refused"]


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` of them kept; full at first.  ``clock`` gives the time in
    seconds (any monotonic origin)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive number of tokens a second, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1 token, got {burst!r}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()

    def take(self) -> float:
        """Take one token: 0.0 when there was one; otherwise nothing is taken and the answer is how many
        seconds it will be until there is one."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


@dataclass
class HandshakeTally:
    """How many handshakes were attempted, and how many of them accepted and rejected."""

    attempted: int = 0
    accepted: int = 0
    rejected: int = 0

    def add(self, outcome: HandshakeOutcome) -> None:
        self.attempted += 1
        if outcome == "accepted":
            self.accepted += 1
        elif outcome == "rejected":
            self.rejected += 1


class HandshakeCounts:
    """The running totals of handshakes, and their counts per window of ``window`` seconds of the event loop's
    clock, windows aligned to when counting began; each window that saw a handshake becomes one ``handshakes``
    event, written by a timer at its end (one timer at a time, none while no handshake comes)."""

    def __init__(self, *, window: float, history: HistoryWriter, loop: asyncio.AbstractEventLoop) -> None:
        self.totals = HandshakeTally()
        self._window = window
        self._history = history
        self._loop = loop
        self._origin = loop.time()
        self._origin_ms = now_ms()
        self._open: HandshakeTally | None = None  # the counts of the window now open, if it saw a handshake
        self._open_index = 0
        self._timer: asyncio.TimerHandle | None = None

    def record(self, outcome: HandshakeOutcome) -> None:
        index = math.floor((self._loop.time() - self._origin) / self._window)
        if self._open is not None and index != self._open_index:  # the window's timer has not fired yet
            self.flush()
        if self._open is None:
            self._open = HandshakeTally()
            self._open_index = index
            self._timer = self._loop.call_at(self._origin + (index + 1) * self._window, self.flush)
        self._open.add(outcome)
        self.totals.add(outcome)

    def flush(self) -> None:
        """Write the open window's event now: at its end, or when the simulator stops."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._open is None:
            return
        window_ms = self._window * 1000.0
        self._history.emit(
            "handshakes",
            window_start=self._origin_ms + self._open_index * window_ms,
            window_ms=window_ms,
            **asdict(self._open),
        )
        self._open = None
