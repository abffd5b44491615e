"""Global Tables between two regions' embedded DynamoDB endpoints: the adapters around ``Replication``.

Each region's fleet reaches its DynamoDB through a change feed (``ChangeFeedProxy``, since dynalite has no
Streams); every write a region's endpoint accepts is recorded in the shared ``Replication`` as made there.
A pump applies what ``Replication.due`` returns straight to the other region's endpoint (not through its
feed, so a replicated write is not replicated back): a ``PutItem`` of the winning image, or a
``DeleteItem``; a region that does not answer loses the write (``replication.error``).  Every
``STATS_EVERY_S`` the pump writes ``replication.stats`` {applied (since the last), backlog (writes made but
not delivered: the RPO if a region were lost then), conflicts (pairs so far), paused} to the history.
``pause`` / ``resume`` are the replication-pause fault; ``cut`` holds a region's writes back during its
outage; ``dynamodb_outage`` takes one region's DynamoDB out (its feed answers 503) and cuts it.

This is the local emulation only; on AWS the terraform replica is the real thing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from harness.backends.base import ENDPOINT_ENV_VARS, LOCAL_CREDENTIALS
from harness.backends.resources import client
from harness.region.change_feed import ChangeFeedProxy
from harness.region.replication import Delivery, Replication

PUMP_EVERY_S = 0.01
STATS_EVERY_S = 1.0
Emit = Callable[..., Any]  # HistoryWriter.emit


def key_name(key: Mapping[str, Any]) -> Hashable:
    """A hashable name for a low-level DynamoDB key ({"pk": {"S": ...}, "sk": {"N": ...}})."""
    return tuple(sorted((name, json.dumps(value, sort_keys=True)) for name, value in key.items()))


class GlobalTables:
    """Replicates every write between the regions' endpoints (``endpoints``: region -> DynamoDB URL); each
    region's fleet must use ``feed_url(region)`` as its DynamoDB endpoint."""

    def __init__(self, endpoints: Mapping[str, str], lag_ms: float, emit: Emit) -> None:
        self.replication = Replication(regions=tuple(endpoints), lag_ms=lag_ms)
        self.emit = emit
        self.lock = threading.Lock()
        self.keys: dict[Hashable, dict[str, Any]] = {}
        self.feeds = {region: ChangeFeedProxy(url, self._recorder(region)) for region, url in endpoints.items()}
        self.direct = {region: client({ENDPOINT_ENV_VARS["dynamodb"]: url, **LOCAL_CREDENTIALS}, "dynamodb")
                       for region, url in endpoints.items()}
        self.applied = 0
        self.applying = 0  # taken from the replication as due, not yet applied
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._run, name="global-tables", daemon=True)

    def feed_url(self, region: str) -> str:
        return self.feeds[region].url

    def start(self) -> GlobalTables:
        for feed in self.feeds.values():
            feed.start()
        self._pump.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._pump.join(timeout=5.0)
        for feed in self.feeds.values():
            feed.stop()

    def pause(self) -> None:
        with self.lock:
            self.replication.paused = True

    def resume(self) -> None:
        with self.lock:
            self.replication.paused = False

    def cut(self, region: str, off: bool = True) -> None:
        """A region's outage (``off``) or its return: nothing leaves or reaches it meanwhile."""
        with self.lock:
            (self.replication.cut.add if off else self.replication.cut.discard)(region)

    def dynamodb_outage(self, region: str, down: bool = True) -> None:
        """A region's DynamoDB out (or back): its fleet's and router's requests answered 503, and nothing
        replicates to or from it meanwhile."""
        self.feeds[region].down = down
        self.cut(region, off=down)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"applied": self.applied, "backlog": self.replication.backlog() + self.applying,
                    "conflicts": self.replication.conflicts, "paused": self.replication.paused,
                    "behind_ms": self.replication.behind_ms(time.time() * 1000.0)}

    def caught_up(self) -> bool:
        """No write waits longer than twice the lag (after a pause, what fell due meanwhile is delivered)."""
        with self.lock:
            return self.applying == 0 and \
                self.replication.behind_ms(time.time() * 1000.0) <= 2 * self.replication.lag_ms

    def _recorder(self, region: str) -> Callable[[str, dict[str, Any], dict[str, Any] | None, float], None]:
        def written(table: str, key: dict[str, Any], image: dict[str, Any] | None, written_ms: float) -> None:
            name = key_name(key)
            with self.lock:
                self.keys[name] = key
                self.replication.written(region, (table, name), image, written_ms)
        return written

    def _run(self) -> None:
        applied_then = 0
        last_stats = time.monotonic()
        while not self._stop.wait(PUMP_EVERY_S):
            with self.lock:
                due = self.replication.due(time.time() * 1000.0)
                self.applying = len(due)
            for delivery in due:
                self._apply(delivery)
                with self.lock:
                    self.applying -= 1
                    self.applied += 1
            if time.monotonic() - last_stats >= STATS_EVERY_S:
                last_stats = time.monotonic()
                stats = self.stats()
                self.emit("replication.stats", applied=stats["applied"] - applied_then, backlog=stats["backlog"],
                          conflicts=stats["conflicts"], paused=stats["paused"])
                applied_then = stats["applied"]

    def _apply(self, delivery: Delivery) -> None:
        table, name = delivery.version.item
        dynamodb = self.direct[delivery.region]
        try:
            if delivery.version.image is None:
                dynamodb.delete_item(TableName=table, Key=self.keys[name])
            else:
                dynamodb.put_item(TableName=table, Item=delivery.version.image)
        except (BotoCoreError, ClientError) as exc:  # the region is down: the write is lost to it, as it
            # would be after a region's outage outlasted the service's retries
            self.emit("replication.error", region=delivery.region, table=table, error=str(exc)[:200])
