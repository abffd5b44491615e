"""Global Tables between two regions' embedded DynamoDB endpoints: the adapters around ``Replication``.

Each region's fleet reaches its DynamoDB through a change feed (``ChangeFeedProxy``, since dynalite has no
Streams); every write a region's endpoint accepts is recorded in the shared ``Replication`` as made there,
stamped with that region's clock (the harness's plus ``clock_offsets_ms[region]``: skew between regions).
A pump applies each write due (``Replication.take_due``) that wins straight to the other region's endpoint
(not through its feed, so a replicated write is not replicated back): a put of the winning image or a
deletion, up to ``BATCH_ITEMS`` in one ``BatchWriteItem``.  Last-writer-wins is atomic: the pump holds
the item in the target region exclusively (no write
of the item by its fleet is between being committed and being reported: each item's stripe of
``STRIPES`` locks, shared by the fleet's requests, exclusive for the pump) while it decides and applies.  A
region that does not answer keeps the write pending: it is tried again, in order, on the next
round (``replication.error`` each time).  The lag model is written to the history once (``replication.config``);
every ``stats_every_s`` a reporter apart from the pump (whose rounds wait on I/O) writes ``replication.stats``
{applied (since the last), backlog (writes made but not delivered: the replication backlog, not data lost),
behind_ms (how long ago the oldest of them was made), conflicts (pairs so far), paused, lag quantiles of
the lags drawn}; ``reports`` gives the recent ones (their ``t`` and ``behind_ms``) to the failback
automation, which decides on exactly what the history holds.
``missing(region)`` says what a region lacks now of the other region's writes (the writes on their way to it
that will replace what it holds, and those the pump is applying), for the history at each activation.
``pause`` / ``resume`` are the replication-pause fault; ``cut`` holds a region's writes back during its
outage; ``dynamodb_outage`` takes one region's DynamoDB out (its feed answers 503) and cuts it.

This is the local emulation only; on AWS the terraform replica is the real thing.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from harness.backends.base import ENDPOINT_ENV_VARS, LOCAL_CREDENTIALS
from harness.backends.resources import client
from harness.message_log import from_low_level
from harness.region.change_feed import ChangeFeedProxy
from harness.region.replication import Delivery, LagModel, Replication

PUMP_EVERY_S = 0.01
STRIPES = 64  # item locks per region (by key hash): the pump holds one while it applies a write of an item
BATCH_ITEMS = 25  # replicated writes a request (BatchWriteItem's limit)
STATS_EVERY_S = 1.0  # by default (a run's: ``RegionsSpec.stats_every_s``)
RECENT_REPORTS = 1000  # kept for ``reports``: far more than a failback's window holds
Emit = Callable[..., Any]  # HistoryWriter.emit


def scalars(image: Mapping[str, Any]) -> dict[str, Any]:
    """The string, number and boolean attributes of a low-level DynamoDB item, plain (the one reader of
    low-level items, ``harness.message_log.from_low_level``: numbers as int or float); lists, maps, sets,
    binaries and nulls left out."""
    return {name: value for name, value in from_low_level(image).items()
            if isinstance(value, str | int | float | bool)}


def key_name(key: Mapping[str, Any]) -> Hashable:
    """A hashable name for a low-level DynamoDB key ({"pk": {"S": ...}, "sk": {"N": ...}})."""
    return tuple(sorted((name, json.dumps(value, sort_keys=True)) for name, value in key.items()))


class SharedExclusive:
    """A lock many may hold shared (a region's fleet's requests) or one exclusively (the pump applying a
    replicated write); an exclusive request waits for the shared holders and stops new ones."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.shared = 0
        self.exclusive = False

    @contextlib.contextmanager
    def hold_shared(self) -> Iterator[None]:
        with self.condition:
            self.condition.wait_for(lambda: not self.exclusive)
            self.shared += 1
        try:
            yield
        finally:
            with self.condition:
                self.shared -= 1
                self.condition.notify_all()

    @contextlib.contextmanager
    def hold_exclusive(self) -> Iterator[None]:
        with self.condition:
            self.condition.wait_for(lambda: not self.exclusive)
            self.exclusive = True
            self.condition.wait_for(lambda: self.shared == 0)
        try:
            yield
        finally:
            with self.condition:
                self.exclusive = False
                self.condition.notify_all()


class GlobalTables:
    """Replicates every write between the regions' endpoints (``endpoints``: region -> DynamoDB URL), with
    the lags of ``lag``; each region's fleet must use ``feed_url(region)`` as its DynamoDB endpoint."""

    def __init__(self, endpoints: Mapping[str, str], lag: LagModel, emit: Emit,
                 clock_offsets_ms: Mapping[str, float] | None = None, stats_every_s: float = STATS_EVERY_S) -> None:
        self.replication = Replication(regions=tuple(endpoints), lag=lag)
        self.emit = emit
        self.stats_every_s = stats_every_s
        self.recent: collections.deque[tuple[float, float]] = collections.deque(maxlen=RECENT_REPORTS)
        self.lock = threading.Lock()
        self.clock_offsets_ms = dict(clock_offsets_ms or {})
        self.keys: dict[Hashable, dict[str, Any]] = {}
        self.stripes = {region: [SharedExclusive() for _ in range(STRIPES)] for region in endpoints}
        self.feeds = {region: ChangeFeedProxy(url, self._recorder(region)) for region, url in endpoints.items()}
        for region, feed in self.feeds.items():
            feed.guard = self._guard(region)
        self.direct = {region: client({ENDPOINT_ENV_VARS["dynamodb"]: url, **LOCAL_CREDENTIALS}, "dynamodb")
                       for region, url in endpoints.items()}
        self.applied = 0
        self.applying = 0  # taken from the replication as due, not yet applied
        self.taken: list[Delivery] = []  # those deliveries (what a region lacks until they land)
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._run, name="global-tables", daemon=True)
        self._reporter = threading.Thread(target=self._report, name="global-tables-stats", daemon=True)

    def feed_url(self, region: str) -> str:
        return self.feeds[region].url

    def start(self) -> GlobalTables:
        for feed in self.feeds.values():
            feed.start()
        self.emit("replication.config", lag=self.replication.lag.describe(), clock_offsets_ms=self.clock_offsets_ms)
        self._pump.start()
        self._reporter.start()
        return self

    def fresh(self, lag: LagModel, emit: Emit, clock_offsets_ms: Mapping[str, float] | None = None,
              stats_every_s: float = STATS_EVERY_S) -> None:
        """Fresh state for the next run of a batch, on the same endpoints and feeds, once the last run's
        fleets have stopped: nothing in flight (what was pending is dropped, the pump's current batch
        finished first), every table of both regions emptied (directly: nothing of it replicates), no fault
        on, and ``lag``, ``clock_offsets_ms``, ``emit`` and ``stats_every_s`` the run's (its
        ``replication.config`` written)."""
        with self.lock:
            self.replication.paused = True
        while True:  # the pump's current batch, taken before the pause, lands first (a short wait)
            with self.lock:
                if self.applying == 0:
                    break
            time.sleep(PUMP_EVERY_S)
        for region, ddb in self.direct.items():
            self.feeds[region].down = False
            for table in ddb.list_tables()["TableNames"]:
                schema = ddb.describe_table(TableName=table)["Table"]["KeySchema"]
                names = [key["AttributeName"] for key in schema]
                for page in ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
                    keys = [{name: item[name] for name in names} for item in page.get("Items", [])]
                    for start in range(0, len(keys), BATCH_ITEMS):
                        ddb.batch_write_item(RequestItems={table: [{"DeleteRequest": {"Key": key}}
                                                                   for key in keys[start:start + BATCH_ITEMS]]})
        with self.lock:
            self.replication = Replication(regions=tuple(self.direct), lag=lag)
            self.keys.clear()
            self.clock_offsets_ms = dict(clock_offsets_ms or {})
            self.emit = emit
            self.stats_every_s = stats_every_s
            self.recent.clear()
        emit("replication.config", lag=lag.describe(), clock_offsets_ms=self.clock_offsets_ms)

    def stop(self) -> None:
        self._stop.set()
        self._pump.join(timeout=5.0)
        self._reporter.join(timeout=5.0)
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
            return self._stats(time.time() * 1000.0)

    def _stats(self, now_ms: float) -> dict[str, Any]:
        return {"applied": self.applied, "backlog": self.replication.backlog() + self.applying,
                "conflicts": self.replication.conflicts, "paused": self.replication.paused,
                "behind_ms": self.replication.behind_ms(now_ms), "lag_ms": self.replication.lag_quantiles()}

    def reports(self, after_ms: float) -> tuple[float, list[tuple[float, float]]]:
        """Now (Unix ms) and the ``replication.stats`` reports made after ``after_ms`` (each its ``t`` and
        ``behind_ms``, in order): every report made until now, since one is recorded as it is stamped."""
        with self.lock:
            return time.time() * 1000.0, [report for report in self.recent if report[0] > after_ms]

    def missing(self, region: str) -> list[dict[str, Any]]:
        """What ``region`` lacks now of the other region's writes (``Replication.missing``), per item: its
        ``table``, ``key``, ``age_ms`` (how long ago the oldest write it lacks was made), and the item as the
        region ``held`` it and as it is ``coming`` (their scalar attributes; None: no item, or deleted)."""
        with self.lock:
            now_ms = time.time() * 1000.0
            found = self.replication.missing(region, self.taken)
            keys = {m.item: self.keys[m.item[1]] for m in found}
        return [{"table": m.item[0], "key": scalars(keys[m.item]), "age_ms": round(now_ms - m.since_ms, 1),
                 "held": None if m.held is None or m.held.image is None else scalars(m.held.image),
                 "coming": None if m.coming.image is None else scalars(m.coming.image)} for m in found]

    def delivered_before(self, ms: float) -> bool:
        """Whether every write made before ``ms`` (Unix ms) has been delivered, but for those from or to a region
        cut off."""
        with self.lock:
            return self.applying == 0 and self.replication.pending_before(ms) == 0

    def caught_up(self) -> bool:
        """No write has been due for longer than the lag's median (after a pause, what fell due meanwhile is
        delivered)."""
        with self.lock:
            return self.applying == 0 and \
                self.replication.overdue_ms(time.time() * 1000.0) <= self.replication.lag.median_ms

    @staticmethod
    def _stripe(table: str, key: Mapping[str, Any]) -> int:
        return hash((table, key_name(key))) % STRIPES

    def _guard(self, region: str) -> Callable[[list[tuple[str, dict[str, Any]]]],
                                              contextlib.AbstractContextManager[object]]:
        """A request of ``region``'s fleet holds the stripes of the items it writes, shared, in order."""
        @contextlib.contextmanager
        def guard(items: list[tuple[str, dict[str, Any]]]) -> Iterator[None]:
            with contextlib.ExitStack() as held:
                for index in sorted({self._stripe(table, key) for table, key in items}):
                    held.enter_context(self.stripes[region][index].hold_shared())
                yield
        return guard

    def _recorder(self, region: str) -> Callable[[str, dict[str, Any], dict[str, Any] | None, float], None]:
        def written(table: str, key: dict[str, Any], image: dict[str, Any] | None, written_ms: float) -> None:
            name = key_name(key)
            with self.lock:
                self.keys[name] = key
                self.replication.written(region, (table, name), image, written_ms,
                                         written_ms + self.clock_offsets_ms.get(region, 0.0))
        return written

    def _run(self) -> None:
        while not self._stop.wait(PUMP_EVERY_S):
            for region in self.stripes:
                self._land(region)

    def _report(self) -> None:
        """Every ``stats_every_s``, apart from the pump: its rounds wait for the fleets' requests of the items
        they apply (I/O) and for the other region's answer, and a report waiting with them would say nothing
        just while replication falls behind."""
        applied_then = 0
        while not self._stop.wait(self.stats_every_s):
            with self.lock:
                t = time.time() * 1000.0
                stats = self._stats(t)
                self.recent.append((t, stats["behind_ms"]))
            self.emit("replication.stats", t=t, applied=stats["applied"] - applied_then,
                      backlog=stats["backlog"], behind_ms=stats["behind_ms"], conflicts=stats["conflicts"],
                      paused=stats["paused"], lag_ms=stats["lag_ms"])
            applied_then = stats["applied"]

    def _land(self, region: str) -> None:
        """Apply what is due in ``region``: of several writes of one item due at once only the last (the
        others would be overwritten at once), ``BATCH_ITEMS`` items a request, each batch holding its items'
        stripes exclusively (every write of them by the region's fleet that the endpoint committed is
        reported, so last-writer-wins is decided on what the table holds); what the region does not take
        stays pending, in order."""
        with self.lock:
            due = self.replication.take_due(time.time() * 1000.0, region)
            self.applying, self.taken = len(due), due
        last = {d.version.item: d for d in due}  # a write of an item due with a later one of it is superseded
        latest = [d for d in due if last[d.version.item] is d]
        done = 0
        for start in range(0, len(latest), BATCH_ITEMS):
            batch = latest[start:start + BATCH_ITEMS]
            stripes = sorted({self._stripe(d.version.item[0], self.keys[d.version.item[1]]) for d in batch})
            with contextlib.ExitStack() as held:
                for index in stripes:
                    held.enter_context(self.stripes[region][index].hold_exclusive())
                with self.lock:
                    winners = [d for d in batch if self.replication.wins(d)]
                if winners and not self._apply(region, winners):
                    break
                with self.lock:
                    for delivery in winners:
                        self.replication.landed(delivery)
                    self.applied += len(winners)
            done += len(batch)
        with self.lock:
            self.replication.put_back(latest[done:])
            self.applying, self.taken = 0, []

    def _apply(self, region: str, deliveries: list[Delivery]) -> bool:
        """Apply replicated writes of distinct items in one ``BatchWriteItem``; whether the region took them
        all (if not, they stay pending: applying one twice writes the same image)."""
        requests: dict[str, list[dict[str, Any]]] = {}
        for delivery in deliveries:
            table, name = delivery.version.item
            image = delivery.version.image
            requests.setdefault(table, []).append({"DeleteRequest": {"Key": self.keys[name]}} if image is None
                                                  else {"PutRequest": {"Item": image}})
        try:
            unprocessed = self.direct[region].batch_write_item(RequestItems=requests).get("UnprocessedItems")
        except (BotoCoreError, ClientError) as exc:
            self.emit("replication.error", region=region, error=str(exc)[:200])
            return False
        if unprocessed:
            self.emit("replication.error", region=region, error=f"unprocessed: {sum(map(len, unprocessed.values()))}")
            return False
        return True
