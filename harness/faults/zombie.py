"""When an aimed zombie is thawed: a pure reading of the run's history as the workers write it.

A zombie (``harness.faults.plane.Zombie``) is a worker frozen right after a renewal, its task reported
stopped while its process still runs.  It is worth thawing once the others have buried that incarnation and
taken up a stream it held, and only while its own fence is still open: thawed then, its next write reaches the
store after the takeover and is refused (``fenced write``), and so is its renewal (``lease lost``); thawed
after its fence closed it sends nothing at all.

``ZombieWatch`` folds the events it is shown (``see``, in any order across files) into what that takes: the
frozen worker's incarnation (the ``gen`` of its last renewal answered ok) and when that renewal was sent (its
``expires_ms`` less a lease, on the worker's lease clock: ``offset_ms`` off the wall clock; at the latest, its
answer's time),
the streams that incarnation took and still holds (with their epochs), the incarnations death notices
buried, and the streams another worker took up at a later epoch (its ``log.mark``, where the profile marks
the log, else its ``lease.acquire``: the mark is what refuses the frozen writer's next batch).
``thaw(now_ms)`` is the decision: ``AFTER_TAKEOVER`` once buried and taken, ``AT_FENCE`` once ``fence_ms``
after that renewal's answer (``closes_ms``) has passed without it (a miss of the aim, which the fault
records), else None (wait).  ``fence_ms`` is the caller's: the fence (``fleet.lease.HardenedRules.fence_ms``,
counted from the renewal's sending) less what the thaw itself takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

AFTER_TAKEOVER = "after takeover"
AT_FENCE = "at its fence"


@dataclass
class ZombieWatch:
    worker: str
    fence_ms: float                         # how long after a renewal was sent it may be thawed
    lease_ms: float                         # a renewal's expiry is its sending on the lease clock plus a lease
    offset_ms: float = 0.0                  # the worker's lease clock less the wall clock
    marks: bool = True                      # takers mark the stream's log (hardened): the mark is the takeover
    gen: str | None = None                  # the incarnation of the last renewal answered ok
    renewed_ms: float | None = None         # when that renewal was sent (at the latest, when answered)
    held: dict[str, dict[str, float]] = field(default_factory=dict)  # gen -> pk -> epoch it holds
    buried: set[str] = field(default_factory=set)                    # "worker@gen" a death notice buried
    takes: list[tuple[str, float]] = field(default_factory=list)     # (pk, epoch) another worker took up
    taken: str | None = None                # the first stream of the frozen incarnation seen taken
    answered_ms: float | None = None        # when the last renewal answered ok was answered

    def see(self, event: dict[str, Any]) -> None:
        kind, worker, pk = event.get("type"), event.get("worker"), event.get("pk")
        ok = event.get("outcome") == "ok"
        if kind == "death.notice" and isinstance(event.get("buried"), list):
            self.buried.update(str(b) for b in event["buried"])
        elif worker == self.worker:
            gen = str(event.get("gen"))
            if kind == "lease.renew" and ok and pk is None and float(event["t"]) >= (self.answered_ms or 0.0):
                sent = float(event.get("expires_ms") or math.inf) - self.lease_ms - self.offset_ms
                self.gen, self.answered_ms, self.renewed_ms = gen, float(event["t"]), min(float(event["t"]), sent)
            elif kind == "lease.acquire" and ok and isinstance(pk, str):
                self.held.setdefault(gen, {})[pk] = float(event.get("epoch") or 0)
            elif kind in ("lease.release", "lease.lost") and isinstance(pk, str) and (ok or kind == "lease.lost"):
                self.held.get(gen, {}).pop(pk, None)
        elif kind == ("log.mark" if self.marks else "lease.acquire") and ok and isinstance(pk, str):
            self.takes.append((pk, float(event.get("epoch") or 0)))

    def thaw(self, now_ms: float) -> str | None:
        """``AFTER_TAKEOVER``, ``AT_FENCE`` or None (wait); see the module docstring."""
        if self.gen is None or self.renewed_ms is None:
            return AT_FENCE  # never renewed: no fence to thaw before
        held = self.held.get(self.gen, {})
        self.taken = next((pk for pk, epoch in self.takes if held.get(pk, float("inf")) < epoch), None)
        if f"{self.worker}@{self.gen}" in self.buried and self.taken is not None:
            return AFTER_TAKEOVER
        return AT_FENCE if now_ms >= self.closes_ms else None

    @property
    def closes_ms(self) -> float:
        """The last time it may be thawed (its last renewal's sending plus ``fence_ms``; now if it never renewed)."""
        return -math.inf if self.renewed_ms is None else self.renewed_ms + self.fence_ms
