"""The worker's CloudWatch metric: ActiveConnections, the streams it holds, every metric interval."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.errors import StoreError
from fleet.logline import log

if TYPE_CHECKING:
    from fleet.worker import Worker


async def publish_active_connections(w: Worker) -> None:
    """Until the worker stops: put how many streams it holds (an error is logged, the loop goes on)."""
    while not w.stopping.is_set():
        try:
            await w.store.put_active_connections(len(w.held), w.me.worker_id)
        except StoreError as exc:
            log("metric.error", error=str(exc))
        await w.pause(w.config.scaled_s(w.config.metric_interval_ms))
