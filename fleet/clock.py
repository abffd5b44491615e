"""The lease clock: wall-clock milliseconds plus a fault-injectable offset.

Lease expiries are wall-clock times compared across machines, so a skewed clock is a real fault.  The
harness skews one worker by setting ``WSFLEET_CLOCK_OFFSET_MS`` at start, or at run time by writing a
number of milliseconds into the file named by ``WSFLEET_CLOCK_OFFSET_FILE`` (re-read when it changes).
History timestamps never use this clock; self-fencing uses the monotonic clock.
"""

from __future__ import annotations

import os
import time


class LeaseClock:
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
