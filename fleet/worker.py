"""The worker process: claims connections, keeps their upstream sessions, and hands them off.

Loops (all on one asyncio event loop):

* **notifications**: SQS long poll; each ``{"pk"}`` is a hint to (re)examine one connection.
* **heartbeat**: ``blog`` renews every held connection's lease; ``hardened`` renews its one worker item,
  which also returns its STOP mailbox, and moves the self-fencing deadline.
* **reconcile**: ``blog`` queries the state index for expired leases every reconcile interval, one page;
  ``hardened`` reads the workers table and schedules its next look at the earliest moment another
  worker could have died (its expiry plus the clock tolerance, with jitter), sweeping the index (every
  page) only when someone died or a slow safety-net interval passed.
* **desired-state check** (``blog``): a GetItem per held connection every check interval.
* **fence watchdog** (``hardened``): drops every session when the fencing deadline passes.
* **metrics**: ActiveConnections to CloudWatch.

SIGTERM or SIGINT: stop consuming, release every lease (``hardened`` also checkpoints and notifies so
another worker picks the stream up at once), retire the worker item, exit 0.

Run as ``python -m fleet.worker`` (or ``wsfleet worker``), configured by ``WSFLEET_*`` variables.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fleet.aws import AwsClients
from fleet.clock import LeaseClock
from fleet.config import FleetConfig
from fleet.connection import ConnectionRunner, Fence, HeldConnection, wait_until_set
from fleet.errors import ConditionFailed, ConfigError, StoreError, StoreUnavailable
from fleet.history import HistoryWriter
from fleet.lease import STARTED, ConnectionRecord, Holder, Lease, WorkerRecord, rules_for
from fleet.store import LeaseStore, Notification

# Acquisitions one reconcile keeps in flight: a dead worker's streams are claimed in parallel.
CLAIMS_IN_FLIGHT = 16


def log(event: str, **fields: Any) -> None:
    """One JSON log line on stdout (what CloudWatch Logs metric filters read in AWS)."""
    print(json.dumps({"t": round(time.time(), 3), "event": event, **fields}, default=str), flush=True)


class Worker:
    def __init__(self, config: FleetConfig, store: LeaseStore, history: HistoryWriter) -> None:
        self.config = config
        self.store = store
        self.history = history
        self.rules = rules_for(config)
        self.me = Holder(config.worker_id, uuid.uuid4().hex[:12])
        self.clock = LeaseClock(config.clock_offset_ms, config.clock_offset_file)
        self.fence = Fence()
        self.held: dict[str, HeldConnection] = {}
        self.stopping = asyncio.Event()
        self.registered = not self.rules.worker_liveness
        self.workers: dict[str, WorkerRecord] = {}
        self.handled_stops: frozenset[str] = frozenset()
        self.reconcile_now = asyncio.Event()
        self.sweep_requested = False
        self.runner = ConnectionRunner(config, self.rules, self.me, store, history, self.clock, self.fence,
                                       self._give_up)
        self._rng = random.Random()

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        self.history.emit("worker.start", worker=self.me.worker_id, profile=self.rules.name, pid=os.getpid())
        log("worker.start", worker=self.me.worker_id, profile=self.rules.name, gen=self.me.gen)
        if self.rules.worker_liveness:
            await self._register()
        loops: list[Callable[[], Awaitable[None]]] = [
            self._heartbeat_loop, self._reconcile_loop, self._metrics_loop
        ]
        if self.rules.per_connection_heartbeat:
            loops.append(self._desired_state_loop)
        if self.rules.self_fencing:
            loops.append(self._fence_watchdog)
        tasks = [asyncio.create_task(self._forever(loop)) for loop in loops]
        # Not cancelled on shutdown: a long poll abandoned mid-wait would still be handed a notification by
        # the queue (our own handoff ones included) and hide it for the visibility timeout.  It finishes its
        # poll and hands back whatever it got.
        notifications = asyncio.create_task(self._forever(self._notification_loop))
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._shutdown()
        await notifications

    async def _forever(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a loop, logging and restarting it after an unexpected error instead of dying silently."""
        while not self.stopping.is_set():
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log("loop.error", loop=loop.__name__, error=f"{type(exc).__name__}: {exc}")
                await self._pause(self.config.heartbeat_s)

    async def _pause(self, seconds: float) -> None:
        await wait_until_set(self.stopping, seconds)

    async def _shutdown(self) -> None:
        """Graceful: stop consuming, release (and in hardened checkpoint + notify), retire."""
        held = list(self.held.values())
        await self._hand_off(held, "shutdown")
        retire = self.rules.retire(self.me)
        if retire is not None and self.registered:
            try:
                await self.store.execute(self.config.workers_table, retire)
            except StoreError as exc:
                log("retire.error", error=str(exc))
        self.history.emit("worker.stop", worker=self.me.worker_id, reason="shutdown")
        log("worker.stop", worker=self.me.worker_id, released=len(held))

    # -- acquiring -----------------------------------------------------------------------------------
    def _capacity(self) -> int:
        return self.config.max_connections - len(self.held)

    async def try_acquire(self, pk: str, via: str, seen: ConnectionRecord | None = None) -> bool:
        if pk in self.held or self._capacity() <= 0 or not self.registered or self.stopping.is_set():
            return False
        if self.rules.self_fencing and not self.fence.allows():
            return False
        now = self.clock.now_ms()
        write = self.rules.acquire(pk, self.me, now, seen)
        try:
            item = await self.store.execute(self.config.connections_table, write)
        except ConditionFailed:
            self.history.emit("lease.acquire", pk=pk, worker=self.me.worker_id, outcome="fail", via=via)
            log("lease.acquire", pk=pk, outcome="fail", via=via)
            return False
        except StoreUnavailable as exc:
            self.history.emit("lease.acquire", pk=pk, worker=self.me.worker_id, outcome="info", via=via,
                              note=str(exc)[:200])
            log("lease.acquire", pk=pk, outcome="info", via=via)
            resolved = await self._resolve_unknown_acquire(pk)
            if resolved is None:
                return False
            item, via = resolved, "resolved"
        return await self._take_up(pk, item, via)

    async def _take_up(self, pk: str, item: dict[str, Any], via: str) -> bool:
        """Start consuming a connection whose lease the store says is ours."""
        lease = Lease.granted(item)
        self.history.emit("lease.acquire", pk=pk, worker=self.me.worker_id, epoch=lease.epoch, outcome="ok",
                          via=via, expires_ms=item.get("lease_expires_at_ms"))
        log("lease.acquire", pk=pk, outcome="ok", epoch=lease.epoch, via=via)
        held = HeldConnection(lease=lease, last_seq=lease.resume_seq, last_checkpoint_seq=lease.resume_seq)
        self.held[pk] = held
        if item.get("desired_state") != STARTED:
            await self._drop(held, "desired state is not STARTED", release=True)
            return False
        held.task = asyncio.create_task(self.runner.consume(held))
        return True

    async def _resolve_unknown_acquire(self, pk: str) -> dict[str, Any] | None:
        """After an acquire whose outcome is unknown, read the item: if the write landed, the stream is
        ours (with worker liveness nobody else can free it while we live), so take it up; else None."""
        if not self.rules.worker_liveness:
            return None  # a per-connection lease we do not renew simply lapses
        try:
            seen = await self.store.get_connection(pk)
        except StoreError:
            return None  # still unknown: our fence and the worker item's expiry settle it
        return dict(seen.__dict__) if seen is not None and self._ours(seen) else None

    def _ours(self, seen: ConnectionRecord) -> bool:
        """Held by this incarnation according to the store (only meaningful with worker liveness)."""
        return (self.rules.worker_liveness and seen.lease_owner == self.me.worker_id
                and seen.owner_gen == self.me.gen and self.registered)

    async def _hand_off(self, held: list[HeldConnection], reason: str) -> None:
        """Release these leases together, then announce them in batches so other workers' long polls
        return them together (hardened: with the released epoch, so the taker can acquire at once)."""
        released = await asyncio.gather(*(self._drop(h, reason, release=True) for h in held),
                                        return_exceptions=True)
        if not self.rules.resumes:
            return  # the published design leaves released streams to the next reconcile
        handoffs = [(h.pk, h.lease.epoch) for h, ok in zip(held, released, strict=True) if ok is True]
        try:
            await self.store.notify(handoffs)
        except StoreError as exc:
            log("notify.error", error=str(exc), streams=len(handoffs))

    async def _drop(self, held: HeldConnection, reason: str, release: bool) -> bool:
        """Stop consuming ``held``; with ``release`` give the lease back.  Whether a release was accepted."""
        if self.held.get(held.pk) is not held:
            return False
        held.stop_reason = reason
        held.stopping.set()
        if held.session is not None:
            await held.session.close()
        if held.task is not None and held.task is not asyncio.current_task():
            try:
                await asyncio.wait_for(asyncio.shield(held.task), self.config.heartbeat_s)
            except TimeoutError:
                held.task.cancel()
            except asyncio.CancelledError:
                pass
        del self.held[held.pk]
        if not release:
            self.history.emit("lease.lost", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch,
                              reason=reason)
            return False
        if self.rules.self_fencing and not self.fence.allows():
            self.history.emit("lease.lost", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch,
                              reason="fenced before release")
            return False
        write = self.rules.release(held.lease, self.me, self.clock.now_ms(), held.last_seq)
        try:
            await self.store.execute(self.config.connections_table, write)
            outcome = "ok"
        except ConditionFailed:
            outcome = "fail"
        except StoreError:
            outcome = "info"
        self.history.emit("lease.release", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch,
                          outcome=outcome, seq=held.last_seq, reason=reason)
        return outcome == "ok"

    async def _give_up(self, held: HeldConnection, reason: str) -> None:
        log("lease.give_up", pk=held.pk, reason=reason)
        await self._hand_off([held], reason)

    def _lose_all(self, reason: str) -> None:
        for held in list(self.held.values()):
            held.stop_reason = reason
            held.stopping.set()
            if held.session is not None:
                held.session.abort()
            if held.task is not None:
                held.task.cancel()
            del self.held[held.pk]
            self.history.emit("lease.lost", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch,
                              reason=reason)
        log("lease.lost_all", reason=reason)

    # -- notifications -------------------------------------------------------------------------------
    async def _notification_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                notes = await self.store.receive_notifications()
            except StoreError as exc:
                log("notify.receive_error", error=str(exc))
                await self._pause(self.config.heartbeat_s)
                continue
            try:
                if self.stopping.is_set():
                    await self.store.return_notifications(notes)
                    return
                await asyncio.gather(*(self._on_notification(note) for note in notes if note.pk))
                await self.store.delete_notifications(notes)
            except StoreError as exc:
                log("notify.settle_error", error=str(exc))

    async def _on_notification(self, note: Notification) -> None:
        pk = note.pk
        if not self.rules.worker_liveness:
            if pk not in self.held:
                await self.try_acquire(pk, "notify")
            return
        if note.released_epoch is not None and pk not in self.held:
            # a handoff: the releaser said what it left, so try that directly (the condition checks it is
            # still free at that epoch; if not, somebody else was faster and nothing is written)
            released = ConnectionRecord(pk=pk, desired_state=STARTED, ws_url="", epoch=note.released_epoch)
            await self.try_acquire(pk, "handoff", released)
            return
        try:
            seen = await self.store.get_connection(pk)
        except StoreError as exc:
            log("notify.read_error", pk=pk, error=str(exc))
            return
        if seen is None:
            return
        held = self.held.get(pk)
        if held is not None:
            if seen.desired_state != STARTED:
                await self._drop(held, "STOP", release=True)
            return
        owners: dict[str, WorkerRecord] = {}
        if seen.lease_owner and seen.lease_owner != self.me.worker_id:
            # read after the connection item, so it is at least as new: a generation it does not carry
            # has been replaced, never not yet registered
            try:
                owner = await self.store.get_worker(seen.lease_owner)
            except StoreError as exc:
                log("notify.read_error", pk=pk, error=str(exc))
                return
            owners = {owner.worker_id: owner} if owner is not None else {}
        if self.rules.claimable(seen, self.me, self.clock.now_ms(), owners):
            await self.try_acquire(pk, "notify", seen)

    # -- heartbeat -----------------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            interval = self.config.heartbeat_s
            if self.rules.per_connection_heartbeat:
                await asyncio.gather(*(self._renew_connection(h) for h in list(self.held.values())))
            elif not await self._renew_worker():
                interval /= 4  # a missed renewal is retried soon, so a short outage does not reach the fence
            self.history.emit("requests", worker=self.me.worker_id, held=len(self.held),
                              **dict(self.store.aws.requests))
            await self._pause(interval - (time.monotonic() - started))

    async def _renew_connection(self, held: HeldConnection) -> None:
        now = self.clock.now_ms()
        write = self.rules.renew(held.lease, self.me, now)
        try:
            item = await self.store.execute(self.config.connections_table, write)
        except ConditionFailed:
            self.history.emit("lease.renew", pk=held.pk, worker=self.me.worker_id, outcome="fail")
            await self._drop(held, "renew refused", release=False)
            return
        except StoreError as exc:
            self.history.emit("lease.renew", pk=held.pk, worker=self.me.worker_id, outcome="info",
                              note=str(exc)[:200])
            return
        self.history.emit("lease.renew", pk=held.pk, worker=self.me.worker_id, outcome="ok",
                          expires_ms=item.get("lease_expires_at_ms"))

    async def _register(self) -> None:
        """Register this incarnation (hardened); retried by the heartbeat until it succeeds."""
        now = self.clock.now_ms()
        write = self.rules.register(self.me, now)
        if write is None:
            return
        sent = time.monotonic()
        try:
            await self.store.execute(self.config.workers_table, write)
        except StoreError as exc:
            self.history.emit("worker.register", worker=self.me.worker_id, outcome="fail",
                              note=str(exc)[:200])
            return
        self.registered = True
        self.fence.broken = False
        self.fence.deadline = self.rules.fence_deadline(sent)
        self.history.emit("lease.renew", worker=self.me.worker_id, outcome="ok", gen=self.me.gen,
                          expires_ms=write.update.set["expires_at_ms"])
        self.sweep_requested = True
        self.reconcile_now.set()

    async def _renew_worker(self) -> bool:
        """Renew this incarnation's item (registering first if needed); whether it was renewed in time."""
        if not self.registered:
            await self._register()
            return self.registered
        now = self.clock.now_ms()
        handled = self.handled_stops
        write = self.rules.renew_worker(self.me, now, handled)
        if write is None:
            return True
        sent = time.monotonic()
        try:
            item = await self.store.execute(self.config.workers_table, write)
        except ConditionFailed:
            self.history.emit("lease.renew", worker=self.me.worker_id, outcome="fail", gen=self.me.gen)
            await self._abandon_incarnation("worker lease expired", retire=False)
            return False
        except StoreError as exc:
            self.history.emit("lease.renew", worker=self.me.worker_id, outcome="info", note=str(exc)[:200])
            return False
        on_time = time.monotonic() - sent <= self.rules.timeout_ms / 1000.0
        if not on_time:
            # Answered later than the rules assume: it may have landed after a taker read us as expired,
            # so it does not move the fence (the item's expiry did move: the outcome is unknown).
            self.history.emit("lease.renew", worker=self.me.worker_id, outcome="info", note="answered late",
                              expires_ms=item.get("expires_at_ms"))
        else:
            self.fence.deadline = max(self.fence.deadline, self.rules.fence_deadline(sent))
            self.history.emit("lease.renew", worker=self.me.worker_id, outcome="ok", gen=self.me.gen,
                              expires_ms=item.get("expires_at_ms"))
        self.handled_stops = self.handled_stops - handled
        stops = WorkerRecord.from_item(item).stop_requests
        if stops:
            self.handled_stops = self.handled_stops | stops
            for pk in stops:
                held = self.held.get(pk)
                if held is not None:
                    await self._drop(held, "STOP", release=True)
        await self._checkpoint_due()
        return on_time

    async def _checkpoint_due(self) -> None:
        """Checkpoint ``last_seq`` of held connections whose checkpoint is older than the interval."""
        interval = self.config.scaled_s(self.config.checkpoint_ms)
        now_mono = time.monotonic()
        for held in list(self.held.values()):
            if now_mono - held.checkpointed_at >= interval and held.last_seq != held.last_checkpoint_seq:
                await self._checkpoint(held)
                held.checkpointed_at = now_mono

    async def _checkpoint(self, held: HeldConnection) -> None:
        if not self.fence.allows():
            return
        write = self.rules.checkpoint(held.lease, self.me, self.clock.now_ms(), held.last_seq)
        if write is None:
            return
        seq = held.last_seq
        sent = time.time() * 1000.0
        try:
            await self.store.execute(self.config.connections_table, write)
            outcome = "ok"
            held.last_checkpoint_seq = seq
        except ConditionFailed:
            outcome = "fail"
        except StoreError:
            outcome = "info"
        self.history.emit("checkpoint", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch, seq=seq,
                          outcome=outcome, sent=sent)
        if outcome == "fail":
            await self._drop(held, "checkpoint refused: fenced", release=False)

    async def _abandon_incarnation(self, reason: str, retire: bool) -> None:
        """Drop every stream and continue as a new incarnation (registered by the next heartbeat).

        With ``retire``, once no write of the old incarnation can still land (a request timeout plus the
        fencing margin after the fence closed), its worker item is expired at once, so its streams are
        claimable now rather than when the item would have run out.
        """
        self.fence.broken = True
        self._lose_all(reason)
        old, self.me = self.me, Holder(self.me.worker_id, uuid.uuid4().hex[:12])
        self.runner.me = self.me
        self.registered = False
        write = self.rules.retire(old)
        if not retire or write is None:
            return
        await self._pause(self.config.scaled_s(self.config.aws_timeout_ms + self.config.fence_margin_ms))
        try:
            await self.store.execute(self.config.workers_table, write)
        except StoreError as exc:
            log("retire.error", error=str(exc))

    async def _fence_watchdog(self) -> None:
        while not self.stopping.is_set():
            remaining = self.fence.deadline - time.monotonic()
            if remaining <= 0 and self.registered and not self.fence.broken:
                await self._abandon_incarnation("self-fenced: no renewal before the fencing deadline",
                                                retire=True)
                remaining = self.config.heartbeat_s
            await self._pause(min(max(remaining, 0.01), self.config.heartbeat_s))

    # -- reconcile -----------------------------------------------------------------------------------
    async def _refresh_workers(self) -> None:
        self.workers = await self.store.workers()

    async def _reconcile_loop(self) -> None:
        if self.rules.worker_liveness:
            await self._paced_reconcile_loop()
            return
        while not self.stopping.is_set():
            await self._pause(self.config.reconcile_s)
            if self.stopping.is_set():
                return
            await self._sweep(expired_only=self.rules.name == "blog", max_pages=1)

    async def _sweep(self, expired_only: bool, max_pages: int | None, dead: list[str] | None = None) -> None:
        """Try to acquire every claimable connection the index lists, several at a time."""
        now = self.clock.now_ms()
        claims: set[asyncio.Task[bool]] = set()
        listed = [seen async for seen in self.store.started_connections(now if expired_only else None, max_pages)]
        if self.rules.worker_liveness:
            # owners read after their connections, so no generation is judged from an older read
            await self._refresh_workers()
        self.history.emit("reconcile", worker=self.me.worker_id, listed=len(listed), dead=dead)
        claimable = [s for s in listed if s.pk not in self.held
                     and (self._ours(s) or self.rules.claimable(s, self.me, now, self.workers))]
        log("reconcile", listed=len(listed), claimable=len(claimable))
        for seen in claimable:
            if self._capacity() - len(claims) <= 0:
                break
            if self._ours(seen):
                # an acquire of ours whose answer was lost: the lease is ours, take the stream up
                claims.add(asyncio.create_task(self._take_up(seen.pk, dict(seen.__dict__), "adopted")))
            else:
                claims.add(asyncio.create_task(self.try_acquire(seen.pk, "reconcile", seen)))
            if len(claims) >= CLAIMS_IN_FLIGHT:
                _, claims = await asyncio.wait(claims, return_when=asyncio.FIRST_COMPLETED)
        if claims:
            await asyncio.wait(claims)

    async def _paced_reconcile_loop(self) -> None:
        """hardened: look when another worker could have died, sweep when one did (or when due)."""
        sweep_every = self.config.reconcile_s
        next_sweep = 0.0
        seen_state: dict[str, tuple[str, bool]] = {}
        tolerance_s = self.config.scaled_s(self.config.clock_tolerance_ms)
        while not self.stopping.is_set():
            if self.registered:
                await self._refresh_workers()
                now_ms = self.clock.now_ms()
                others = [w for w in self.workers.values() if w.worker_id != self.me.worker_id]
                # an incarnation is gone when its item expired (or was retired), or a new one of the same
                # worker replaced it; each such change triggers one sweep
                state = {w.worker_id: (w.gen, self.rules.dead(w, now_ms)) for w in others}
                died = [w for w in others if state[w.worker_id] != seen_state.get(w.worker_id, (w.gen, False))]
                seen_state = state
                if died or self.sweep_requested or time.monotonic() >= next_sweep:
                    self.sweep_requested = False
                    await self._sweep(expired_only=False, max_pages=None, dead=[w.worker_id for w in died])
                    next_sweep = time.monotonic() + sweep_every * self._rng.uniform(0.8, 1.0)
                live = [w.expires_at_ms for w in others if w.expires_at_ms + tolerance_s * 1000 >= now_ms]
                wait = next_sweep - time.monotonic()
                if live:
                    wait = min(wait, (min(live) - now_ms) / 1000.0 + tolerance_s)
                wait += self._rng.uniform(0.0, tolerance_s / 4)
            else:
                wait = self.config.heartbeat_s
            self.reconcile_now.clear()
            await wait_until_set(self.reconcile_now, max(0.01, wait))

    # -- desired state (blog) and metrics ------------------------------------------------------------
    async def _desired_state_loop(self) -> None:
        while not self.stopping.is_set():
            await self._pause(self.config.desired_check_s)
            for held in list(self.held.values()):
                try:
                    seen = await self.store.get_connection(held.pk)
                except StoreError as exc:
                    log("desired_state.error", pk=held.pk, error=str(exc))
                    continue
                if seen is None or seen.desired_state != STARTED:
                    await self._drop(held, "STOP", release=True)

    async def _metrics_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                await self.store.put_active_connections(len(self.held), self.me.worker_id)
            except StoreError as exc:
                log("metric.error", error=str(exc))
            await self._pause(self.config.scaled_s(self.config.metric_interval_ms))


STARTUP_PATIENCE_S = 15.0  # a backend starting beside us gets this long


async def reach_backend(store: LeaseStore) -> None:
    """Read the connections table until it answers; after ``STARTUP_PATIENCE_S`` give up with the reason."""
    deadline = time.monotonic() + STARTUP_PATIENCE_S
    while True:
        try:
            await store.get_connection("CONN#__startup_probe__")
            return
        except StoreUnavailable as exc:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"DynamoDB did not answer for {STARTUP_PATIENCE_S:.0f} s: {exc}") from exc
            await asyncio.sleep(0.5)


async def serve(config: FleetConfig) -> None:
    history = HistoryWriter(config.history_path, config.worker_id)
    async with AwsClients(config) as aws:
        await reach_backend(LeaseStore(aws))
        worker = Worker(config, LeaseStore(aws), history)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        await worker.run()
    history.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        print("Settings (environment): " + ", ".join(sorted(FleetConfig().to_env())))
        return 0
    try:
        config = FleetConfig.from_env()
    except ConfigError as exc:
        print(f"wsfleet worker: {exc}", file=sys.stderr)
        return 2
    if not config.queue_url:
        print("wsfleet worker: WSFLEET_QUEUE_URL is not set (the notification queue)", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except StoreError as exc:
        print(f"wsfleet worker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
