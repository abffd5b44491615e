"""Claiming many streams at once: how much a worker acts on in parallel, and how fast it opens sessions.

A burst of STARTs (or a dead worker's streams) should be owned as fast as the upstream's new-connection quota
allows, not one notification batch at a time.  Two pieces, used by ``fleet.notices`` and
``fleet.connection``:

* ``ClaimSlots``: at most ``claims_in_flight`` notifications being acted on (their reads and acquires) at
  once, shared by the ``notify_pollers`` SQS pollers.  A poller reserves room before it receives, so it never
  takes more from the queue than the worker can act on before the messages turn visible again; each slot is
  given back as soon as its notification is acted on.  Per stream, one at a time: a notification for a stream
  whose earlier one is still being acted on waits for it (so two notifications of one stream never race into
  two acquires; ``Worker.try_acquire`` also refuses a stream already being acquired or held).
* ``HandshakePacer``: spaces the worker's upstream handshakes ``1 / rate`` apart on average, each gap drawn
  from ``[0.5, 1.5]`` of it (jitter, so a fleet's workers do not hit the quota in step).  A handshake refused
  anyway (429) waits its ``Retry-After`` (``fleet.backoff``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# Each gap between two handshakes is this share of the mean interval, drawn uniformly.
HANDSHAKE_JITTER = (0.5, 1.5)


class ClaimSlots:
    """At most ``limit`` units of claim work in flight; per-stream single flight (``one_at_a_time``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.most_used = 0  # the high-water mark (tests and logs)
        self._freed = asyncio.Event()
        self._busy: dict[str, asyncio.Event] = {}

    async def reserve(self, most: int) -> int:
        """Wait until a slot is free, then take up to ``most`` (at least one); how many were taken."""
        while self.used >= self.limit:
            self._freed.clear()
            await self._freed.wait()
        taken = min(most, self.limit - self.used)
        self.used += taken
        self.most_used = max(self.most_used, self.used)
        return taken

    def release(self, count: int = 1) -> None:
        if count <= 0:
            return
        self.used -= count
        self._freed.set()

    async def one_at_a_time(self, key: str, act: Callable[[], Awaitable[T]]) -> T:
        """``act()``, once every earlier ``act`` of the same ``key`` has finished."""
        while (busy := self._busy.get(key)) is not None:
            await busy.wait()
        done = self._busy[key] = asyncio.Event()
        try:
            return await act()
        finally:
            del self._busy[key]
            done.set()


class HandshakePacer:
    """Handshake slots ``1 / per_s`` apart on average (jittered); ``clock``: monotonic seconds."""

    def __init__(self, per_s: float, rng: random.Random, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = 1.0 / per_s
        self.rng = rng
        self.clock = clock
        self.next_s = float("-inf")

    def slot(self) -> float:
        """Reserve the next handshake slot: how long its caller waits before its handshake."""
        now = self.clock()
        at = max(now, self.next_s)
        self.next_s = at + self.interval_s * self.rng.uniform(*HANDSHAKE_JITTER)
        return at - now
