"""The fleet's clocks: the lease clock, the fence clock, and what the server's clock says about them.

* ``LeaseClock``: wall-clock milliseconds plus a fault-injectable offset.  Lease expiries are wall-clock
  times compared across machines, so a skewed clock is a real fault.  The harness skews one worker by
  setting ``WSFLEET_CLOCK_OFFSET_MS`` at start, or at run time by writing a number of milliseconds into the
  file named by ``WSFLEET_CLOCK_OFFSET_FILE`` (re-read when it changes).  History timestamps never use it.
* ``monotonic_s``: the clock self-fencing deadlines are kept on.  ``CLOCK_BOOTTIME`` keeps counting while a
  VM or laptop is suspended, where ``CLOCK_MONOTONIC`` stops: a fence on the latter would still look open
  after a suspend longer than the lease, while another worker has taken the streams over.
* ``Clock``: the port every lease and fence decision reads time through, so none reads a clock of its own
  (``LeaseClock`` is the real one; ``LoopClock``, the tests' one, the event loop's time, virtual under
  ``looptime``).
* ``SkewEstimator``: bounds on (lease clock − server clock) from the ``Date`` header of the server's
  answers timed on the fence clock, NTP style (pure: fed by ``fleet.aws``, tested without a network).
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
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


class LoopClock:
    """A ``Clock`` on the running event loop's clock, for tests: on a loop whose time is virtual (the
    ``looptime`` plugin fast-forwards it to the next timer whenever every task waits) both clocks move only as
    that time does, so tests wait for nothing real.  Every ``LoopClock`` on one loop reads the same lease
    clock: the wall clock when the loop was first read, plus the loop's time since.  ``stall`` moves this one's
    clocks without the loop (its process stalled: a GC pause, a starved CPU); ``step_ms`` moves its lease
    clock alone (a skew injected)."""

    def __init__(self) -> None:
        self._stalled_s = 0.0
        self._stepped_ms = 0

    def fence_s(self) -> float:
        return asyncio.get_running_loop().time() + self._stalled_s

    def now_ms(self) -> int:
        loop = asyncio.get_running_loop()
        wall_ms, loop_s = _LOOP_ORIGINS.setdefault(loop, (time.time() * 1000.0, loop.time()))
        return round(wall_ms + (self.fence_s() - loop_s) * 1000.0) + self._stepped_ms

    def stall(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a stall moves time forward")
        self._stalled_s += seconds

    def step_ms(self, ms: int) -> None:
        self._stepped_ms += ms


# each loop's (wall clock ms, loop time) when a LoopClock first read it
_LOOP_ORIGINS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[float, float]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class SkewSample:
    """What one answer proves about ``offset = fence clock − server clock``: ``lower < offset <= upper``."""

    lower_ms: float
    upper_ms: float


class SkewEstimator:
    """Bounds on (lease clock − server clock) in ms, from answers whose ``Date`` header has a resolution
    of ``resolution_ms`` (HTTP dates: whole seconds).

    The answers are timed on the fence clock (``monotonic_s``, in ms), which never steps: what they bound is
    (fence clock − server clock), and the lease clock's own distance from the fence clock, read when the
    bounds are asked for, turns that into the lease clock's offset.  So a step of the lease clock (an
    injected skew, an NTP correction of this machine's wall clock) of any size, even mid-request, moves the
    estimate by exactly that step at once: no sample straddles it, and none has to agree with the others
    again first (intersecting answers from both sides of a sub-second step would exclude the true offset).

    An answer dated ``D`` was produced at a server time in ``[D, D + resolution)``, at a moment the client
    saw between sending (``sent``) and receiving (``received``), so
    ``sent − D − resolution < offset <= received − D``.  Answers produced at different phases of the
    server's second narrow the intersection well below the header's resolution.

    The estimate is the intersection of the newest samples that agree with each other: an older sample
    that would make it empty predates a step of the server's clock and is ignored with everything older.
    ``bounds`` is None until ``min_samples`` agree.
    """

    def __init__(self, min_samples: int = 4, max_samples: int = 256, resolution_ms: float = 1000.0) -> None:
        if min_samples < 1 or max_samples < min_samples:
            raise ValueError("need 1 <= min_samples <= max_samples")
        self.min_samples = min_samples
        self.resolution_ms = resolution_ms
        self._samples: deque[SkewSample] = deque(maxlen=max_samples)

    def add(self, sent_ms: float, received_ms: float, server_date_ms: float) -> SkewSample:
        """Record one answer: sent and received on the fence clock (ms), ``Date`` as Unix ms."""
        if received_ms < sent_ms:
            raise ValueError("an answer cannot be received before its request was sent")
        sample = SkewSample(lower_ms=sent_ms - server_date_ms - self.resolution_ms,
                            upper_ms=received_ms - server_date_ms)
        self._samples.append(sample)
        return sample

    def bounds(self, lease_ahead_ms: float) -> tuple[float, float] | None:
        """``(lower, upper)``: the lease clock is ahead of the server's by more than ``lower`` and at most
        ``upper`` ms (negative: behind), given that it reads ``lease_ahead_ms`` more than the fence clock
        (in ms) now; None while fewer than ``min_samples`` recent answers agree."""
        lower, upper = float("-inf"), float("inf")
        agreeing = 0
        for sample in reversed(self._samples):
            new_lower, new_upper = max(lower, sample.lower_ms), min(upper, sample.upper_ms)
            if new_lower >= new_upper:
                break
            lower, upper = new_lower, new_upper
            agreeing += 1
        return (lower + lease_ahead_ms, upper + lease_ahead_ms) if agreeing >= self.min_samples else None
