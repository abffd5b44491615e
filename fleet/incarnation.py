"""One registration of a worker and its self-fence, as a pure machine (``fleet.machine_io`` values in and
out): register, renew, and fence itself when no renewal was answered in time.  ``fleet.liveness`` interprets
it; the tests step it on their own clocks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fleet.lease import Holder, WorkerRecord
from fleet.machine_io import (
    Abandon,
    Answer,
    Arm,
    ClockName,
    Emit,
    Heartbeat,
    Input,
    LoseStream,
    Mailbox,
    Outcome,
    Output,
    ReadClock,
    Reading,
    Send,
)
from fleet.profiles import Profile


class Incarnation:
    """One registration of a worker and its self-fence: register, renew, and fence itself when no renewal
    was answered in time.

    The fence of a renewal is anchored on the fence clock read BEFORE the lease clock that computes the
    expiry written (issue 25 hole 7): however long the process stalls between the two, or before the request
    goes out, the fence never outlives the expiry.  One renewal in flight at a time; a fence that closed never
    reopens (a stream may already have stopped on it)."""

    def __init__(self, profile: Profile, me: Holder, task_arn: str = "", workers_table: str = "workers") -> None:
        self.profile, self.me, self.task_arn, self.table = profile, me, task_arn, workers_table
        self.registered = False
        self.over = False
        self.deadline = -math.inf
        self.beat_ok = False  # every renewal of the last heartbeat answered in time
        self._expires: Any = None  # the expiry the registration wrote
        self._anchor = 0.0
        self._beat = Heartbeat()
        self._waiting: str | None = None
        self._in_flight: set[str | None] = set()

    def allows(self, fence_s: float) -> bool:
        """Whether a stream of this incarnation may be consumed when the fence clock reads ``fence_s``."""
        return self.registered and not self.over and fence_s < self.deadline

    @property
    def busy(self) -> bool:
        return self._waiting is not None or bool(self._in_flight)

    def step(self, event: Input) -> list[Output]:
        if self.over:
            return []
        if isinstance(event, Heartbeat):
            if self.busy:
                return []
            self._beat, self._waiting, self.beat_ok = event, "anchor", True
            return [ReadClock(ClockName.FENCE)]
        if isinstance(event, Reading) and event.clock is ClockName.FENCE and self._waiting == "anchor":
            self._anchor, self._waiting = event.value, "expiry"  # the anchor first: hole 7
            return [ReadClock(ClockName.LEASE)]
        if isinstance(event, Reading) and event.clock is ClockName.LEASE and self._waiting == "expiry":
            self._waiting = None
            return self._writes(int(event.value))
        if isinstance(event, Reading) and event.clock is ClockName.FENCE:  # the armed watchdog
            if self.registered and event.value >= self.deadline:
                return self._abandon("self-fenced: no renewal before the fencing deadline", retire=True)
            return []
        if isinstance(event, Answer):
            return self._answered(event)
        return []

    def _writes(self, now_ms: int) -> list[Output]:
        beat = self._beat
        if not self.registered:
            write = self.profile.rules.register(self.me, now_ms, self.task_arn)
            if write is None:  # no worker liveness: nothing to register, nothing fences
                self.registered, self.deadline = True, math.inf
                return []
            self._in_flight, self._expires = {None}, write.update.set.get("expires_at_ms")
            return [Send("register", self.table, write)]
        renewals = self.profile.renewals(self.me, beat.leases, now_ms, beat.handled_stops, beat.taken_gifts)
        self._in_flight = {r.pk for r in renewals}
        return [Send("renew", self.table if r.pk is None else self.profile.rules.connections_table, r.write, r.pk)
                for r in renewals]

    def _answered(self, answer: Answer) -> list[Output]:
        if answer.pk not in self._in_flight:
            return []
        self._in_flight.discard(answer.pk)
        self.beat_ok = self.beat_ok and answer.outcome is Outcome.OK
        if not self.registered:
            if answer.outcome is not Outcome.OK:
                return [Emit("worker.register", {"outcome": "fail", "note": answer.note})]
            self.registered = True
            self.deadline = min(self.profile.fence_deadline(self._anchor), self._beat.open_until)
            return [Emit("lease.renew", {"outcome": "ok", "expires_ms": self._expires}), Arm(self.deadline)]
        if answer.outcome is Outcome.FAIL:
            failed = Emit("lease.renew", {"pk": answer.pk, "outcome": "fail"})
            if answer.pk is None:
                return [failed, *self._abandon("worker lease expired", retire=False)]
            return [failed, LoseStream(answer.pk, "renew refused")]
        if answer.outcome is Outcome.UNKNOWN or answer.item is None:
            return [Emit("lease.renew", {"pk": answer.pk, "outcome": "info", "note": answer.note})]
        return self._renewed(answer, answer.item)

    def _renewed(self, answer: Answer, item: Mapping[str, Any]) -> list[Output]:
        expires = item.get("expires_at_ms", item.get("lease_expires_at_ms"))
        on_time = self.profile.on_time(answer.at_s - self._anchor)
        out: list[Output] = []
        note = "" if on_time else "answered late"  # it may have landed after a taker read us as expired
        if on_time and answer.pk is None and answer.at_s >= self.deadline:
            on_time, note = False, "answered after the fence closed"  # it never reopens: the watchdog abandons
        elif on_time and answer.pk is None:
            self.deadline = min(max(self.deadline, self.profile.fence_deadline(self._anchor)), self._beat.open_until)
            out.append(Arm(self.deadline))
        self.beat_ok = self.beat_ok and on_time
        fields = {"pk": answer.pk, "outcome": "ok" if on_time else "info", "expires_ms": expires}
        out.append(Emit("lease.renew", {**fields, "note": note} if note else fields))
        if answer.pk is None:  # the mailbox is settled either way; gifts are taken only on time
            out.append(Mailbox(WorkerRecord.from_item(item), on_time))
        return out

    def _abandon(self, reason: str, retire: bool) -> list[Output]:
        self.over, self._waiting, self._in_flight = True, None, set()
        return [Abandon(reason, retire)]
