"""One held connection: the task that consumes its upstream stream and persists every message.

A ``HeldConnection`` exists from an accepted acquire until the lease is released, lost or fenced.  Its
task opens the upstream session (resuming after the last persisted sequence where the profile resumes),
persists each message through the profile's message rule, and reconnects when the upstream drops:
``blog`` after a fixed delay from the live head; ``hardened`` in place with exponential backoff and full
jitter, from the next sequence, giving the lease up when the upstream stays unreachable past the budget.

Before every write and after every received frame it asks the worker's fence whether it may still
consume (``Fence.allows``); the check is synchronous, so a process resumed after a pause drops what it
buffered instead of writing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fleet.clock import LeaseClock
from fleet.config import FleetConfig
from fleet.errors import ConditionFailed, StoreError, StoreUnavailable, UpstreamError
from fleet.history import HistoryWriter
from fleet.lease import Holder, Lease, Rules
from fleet.store import LeaseStore
from fleet.upstream import Backoff, UpstreamMessage, UpstreamSession, session_url


async def wait_until_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for ``event`` at most ``timeout_s``; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), max(0.0, timeout_s))
    return event.is_set()


class Fenced(Exception):
    """The worker may no longer consume: its lease could already be someone else's."""


@dataclass
class Fence:
    """The worker-wide self-fencing deadline on the monotonic clock (inf: never fences)."""

    deadline: float = float("inf")
    broken: bool = False

    def allows(self) -> bool:
        return not self.broken and time.monotonic() < self.deadline


@dataclass
class HeldConnection:
    lease: Lease
    last_seq: int = 0
    persisted: int = 0
    last_checkpoint_seq: int = 0
    checkpointed_at: float = field(default_factory=time.monotonic)
    session: UpstreamSession | None = None
    task: asyncio.Task[None] | None = None
    stop_reason: str = ""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pk(self) -> str:
        return self.lease.pk


class ConnectionRunner:
    """Runs the consume loop of held connections for one worker."""

    def __init__(
        self,
        config: FleetConfig,
        rules: Rules,
        me: Holder,
        store: LeaseStore,
        history: HistoryWriter,
        clock: LeaseClock,
        fence: Fence,
        give_up: Callable[[HeldConnection, str], Awaitable[None]],
    ) -> None:
        self.config = config
        self.rules = rules
        self.me = me
        self.store = store
        self.history = history
        self.clock = clock
        self.fence = fence
        self.give_up = give_up

    def _backoff(self) -> Backoff:
        return Backoff(
            base_s=self.config.scaled_s(self.config.reconnect_base_ms),
            cap_s=self.config.scaled_s(self.config.reconnect_max_ms),
            jitter=self.rules.resumes,
        )

    async def consume(self, held: HeldConnection) -> None:
        """The connection's task: subscribe, persist, reconnect, until stopped, fenced or given up."""
        backoff = self._backoff()
        down_since: float | None = None
        budget_s = self.config.scaled_s(self.config.upstream_budget_ms)
        while not held.stopping.is_set():
            from_seq = held.last_seq + 1 if self.rules.resumes else None
            url = session_url(held.lease.ws_url, from_seq, self.config.upstream_via)
            reason = "closed"
            try:
                if not self.fence.allows():
                    raise Fenced()
                async with UpstreamSession(url, self.me.worker_id, max(0.5, budget_s / 4)) as session:
                    held.session = session
                    self.history.emit("ws.open", pk=held.pk, worker=self.me.worker_id,
                                      epoch=held.lease.epoch, from_seq=from_seq, outcome="ok")
                    down_since = None
                    backoff.reset()
                    async for message in session:
                        if not self.fence.allows():
                            raise Fenced()
                        await self._persist(held, message)
                        if held.stopping.is_set():
                            break
            except Fenced:
                self._closed(held, "fenced")
                return
            except UpstreamError as exc:
                reason = str(exc)
            finally:
                held.session = None
            self._closed(held, held.stop_reason or reason)
            if held.stopping.is_set():
                return
            now = time.monotonic()
            down_since = down_since if down_since is not None else now
            if self.rules.resumes and now - down_since > budget_s:
                await self.give_up(held, "upstream unreachable past budget")
                return
            await wait_until_set(held.stopping, backoff.next_delay())

    def _closed(self, held: HeldConnection, reason: str) -> None:
        self.history.emit("ws.close", pk=held.pk, worker=self.me.worker_id, reason=reason[:200])

    async def _persist(self, held: HeldConnection, message: UpstreamMessage) -> None:
        if self.rules.idempotent_messages and message.seq <= held.last_seq:
            return  # a replay of what this owner already stored
        write = self.rules.message(held.lease, self.me, message.seq, message.data, self.clock.now_ms())
        retry = self._backoff()
        while True:
            if not self.fence.allows():
                raise Fenced()
            try:
                await self.store.execute(self.config.messages_table, write, purpose="messages")
                outcome, note = "ok", None
            except ConditionFailed:
                outcome, note = "fail", "already stored"
            except StoreUnavailable as exc:
                outcome, note = "info", str(exc)[:200]
            except StoreError as exc:
                outcome, note = "fail", str(exc)[:200]
            self.history.emit("msg.persist", pk=held.pk, worker=self.me.worker_id, epoch=held.lease.epoch,
                              seq_from=message.seq, seq_to=message.seq, outcome=outcome, note=note)
            if outcome == "ok" or note == "already stored" or not self.rules.idempotent_messages:
                break
            # hardened: the same idempotent write again until it lands or the fence closes
            await asyncio.sleep(retry.next_delay() / 10)
        held.last_seq = max(held.last_seq, message.seq)
        if outcome == "ok":
            held.persisted += 1
