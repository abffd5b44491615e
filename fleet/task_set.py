"""``TaskSet``: background tasks a worker owns (claims, STOP drops, checkpoints), so they run off the loop
that spawned them and can be awaited or cancelled together at shutdown.  ``ConsumeTasks``: each stream's
latest consume task, until it ends."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TaskSet:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def drain(self) -> None:
        """Wait for every task, including those spawned meanwhile."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await self.drain()


class ConsumeTasks:
    """Each stream's latest consume task until it ends (or declares its writes over, ``over``), whether its
    stream is still held or was let go: a stream is not taken up again in this process before (explore seed
    391: a stream dropped, its task cancelled but still storing, was adopted again at the next epoch while
    that task stored for seconds)."""

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, pk: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self.tasks[pk] = asyncio.create_task(coro)
        task.add_done_callback(functools.partial(self._ended, pk))
        return task

    def running(self, pk: str) -> bool:
        """Whether a consume task of ``pk`` may still write."""
        task = self.tasks.get(pk)
        return task is not None and not task.done()

    def over(self, pk: str) -> None:
        """The calling task, ``pk``'s consume task, has no more writes to make (it gives its stream up)."""
        self._ended(pk, asyncio.current_task())

    def _ended(self, pk: str, task: asyncio.Task[Any] | None) -> None:
        if self.tasks.get(pk) is task:
            del self.tasks[pk]
