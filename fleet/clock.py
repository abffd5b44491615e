"""The fleet's clocks: the lease clock, the fence clock, and what the server's clock says about them.

* ``LeaseClock``: wall-clock milliseconds plus a fault-injectable offset.  Lease expiries are wall-clock
  times compared across machines, so a skewed clock is a real fault.  The harness skews one worker by
  setting ``WSFLEET_CLOCK_OFFSET_MS`` at start, or at run time by writing a number of milliseconds into the
  file named by ``WSFLEET_CLOCK_OFFSET_FILE`` (re-read when it changes).  History timestamps never use it.
* ``monotonic_s``: the clock self-fencing deadlines are kept on.  ``CLOCK_BOOTTIME`` keeps counting while a
  VM or laptop is suspended, where ``CLOCK_MONOTONIC`` stops: a fence on the latter would still look open
  after a suspend longer than the lease, while another worker has taken the streams over.
* ``Clock``: the port every lease and fence decision reads time through (``LeaseClock`` is the real one,
  ``FakeClock`` the one tests step by hand), so no decision reads a clock of its own.
* ``SkewEstimator``: bounds on (lease clock − server clock) from the ``Date`` header of the server's
  answers, NTP style (pure: fed by ``fleet.aws``, tested without a network).
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def monotonic_s() -> float:
    """Seconds on a clock that never goes back and keeps counting through a suspend (Linux
    ``CLOCK_BOOTTIME``; ``time.monotonic`` where the platform has no such clock)."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


class Clock(Protocol):
    """The two clocks of a worker: ``now_ms``, the lease clock (wall time in Unix ms, skewable: expiries are
    compared across machines), and ``fence_s``, the fence clock (seconds that never go back and count
    through a suspend: deadlines this process keeps for itself)."""

    def now_ms(self) -> int: ...

    def fence_s(self) -> float: ...


class LeaseClock:
    """The real ``Clock``: the wall clock plus the fault-injectable offset, and ``monotonic_s``."""

    def __init__(self, offset_ms: int = 0, offset_file: str = "") -> None:
        self._static_offset_ms = offset_ms
        self._file = offset_file
        self._file_mtime_ns = -1
        self._file_offset_ms = 0

    def offset_ms(self) -> int:
        if self._file:
            try:
                mtime = os.stat(self._file).st_mtime_ns
            except OSError:
                mtime = 0
                self._file_offset_ms = 0
            if mtime and mtime != self._file_mtime_ns:
                try:
                    with open(self._file) as f:
                        self._file_offset_ms = int(float(f.read().strip() or 0))
                    self._file_mtime_ns = mtime
                except (OSError, ValueError):
                    pass  # a half-written file: keep the previous offset and read it again next time
        return self._static_offset_ms + self._file_offset_ms

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms()

    def fence_s(self) -> float:
        return monotonic_s()


class FakeClock:
    """A ``Clock`` for tests: both clocks move only when told (``advance``), and the lease clock can be
    stepped alone (``step_ms``: a skew injected, an NTP correction) while the fence clock never goes back."""

    def __init__(self, now_ms: int = 1_700_000_000_000, fence_s: float = 1_000.0) -> None:
        self._now_ms = now_ms
        self._fence_s = fence_s

    def now_ms(self) -> int:
        return self._now_ms

    def fence_s(self) -> float:
        return self._fence_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time moves forward")
        self._fence_s += seconds
        self._now_ms += round(seconds * 1000)

    def step_ms(self, ms: int) -> None:
        self._now_ms += ms


@dataclass(frozen=True)
class SkewSample:
    """What one answer proves about ``offset = lease clock − server clock``: ``lower < offset <= upper``."""

    lower_ms: float
    upper_ms: float


class SkewEstimator:
    """Bounds on (lease clock − server clock) in ms, from answers whose ``Date`` header has a resolution
    of ``resolution_ms`` (HTTP dates: whole seconds).

    An answer dated ``D`` was produced at a server time in ``[D, D + resolution)``, at a moment the client
    saw between sending (``sent``) and receiving (``received``) on its lease clock, so
    ``sent − D − resolution < offset <= received − D``.  Answers produced at different phases of the
    server's second narrow the intersection well below the header's resolution.

    The estimate is the intersection of the newest samples that agree with each other: an older sample
    that would make it empty predates a step of one of the clocks (an injected skew, an NTP correction)
    and is ignored with everything older.  ``bounds`` is None until ``min_samples`` agree.
    """

    def __init__(self, min_samples: int = 4, max_samples: int = 256, resolution_ms: float = 1000.0) -> None:
        if min_samples < 1 or max_samples < min_samples:
            raise ValueError("need 1 <= min_samples <= max_samples")
        self.min_samples = min_samples
        self.resolution_ms = resolution_ms
        self._samples: deque[SkewSample] = deque(maxlen=max_samples)

    def add(self, sent_ms: float, received_ms: float, server_date_ms: float) -> SkewSample:
        """Record one answer: sent and received on the lease clock, ``Date`` as Unix ms."""
        if received_ms < sent_ms:
            raise ValueError("an answer cannot be received before its request was sent")
        sample = SkewSample(lower_ms=sent_ms - server_date_ms - self.resolution_ms,
                            upper_ms=received_ms - server_date_ms)
        self._samples.append(sample)
        return sample

    def bounds(self) -> tuple[float, float] | None:
        """``(lower, upper)``: the lease clock is ahead of the server's by more than ``lower`` and at most
        ``upper`` ms (negative: behind); None while fewer than ``min_samples`` recent answers agree."""
        lower, upper = float("-inf"), float("inf")
        agreeing = 0
        for sample in reversed(self._samples):
            new_lower, new_upper = max(lower, sample.lower_ms), min(upper, sample.upper_ms)
            if new_lower >= new_upper:
                break
            lower, upper = new_lower, new_upper
            agreeing += 1
        return (lower, upper) if agreeing >= self.min_samples else None
