"""The worker's CloudWatch metric: ActiveConnections, the streams it holds, every metric interval."""

from __future__ import annotations

import asyncio
from collections.abc import Sized

from fleet.connection import wait_until_set
from fleet.errors import StoreError
from fleet.logline import log
from fleet.ports import WorkerStore


async def publish_active_connections(store: WorkerStore, worker_id: str, held: Sized, stopping: asyncio.Event,
                                     every_s: float) -> None:
    """Until ``stopping`` is set: put how many streams ``held`` holds, every ``every_s`` (an error is logged,
    the loop goes on)."""
    while not stopping.is_set():
        try:
            await store.put_active_connections(len(held), worker_id)
        except StoreError as exc:
            log("metric.error", error=str(exc))
        await wait_until_set(stopping, every_s)
