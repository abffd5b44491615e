"""``TaskSet``: background tasks a worker owns (claims, STOP drops, checkpoints), so they run off the loop
that spawned them and can be awaited or cancelled together at shutdown."""

from __future__ import annotations

import asyncio
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
