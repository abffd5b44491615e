"""Global Tables between two regions, emulated: the decisions, with no I/O (the adapters feed it each region's
writes and apply what it returns to the other region's tables).

- *Per item in order, asynchronous, with a lag that has a tail*: each write is due in every other region
  after a lag drawn for it (``LagModel``: log-normal with a median and a 99th percentile, seeded; a
  99th percentile equal to the median is a fixed lag), but never before an earlier write of the same item
  to that region: order is kept per item only, as AWS keeps it per partition, and writes of different
  items overtake one another.  The lags drawn are reported (``lag_quantiles``).
- *Last writer wins on a hidden timestamp*: each write is stamped with its origin region's clock
  (``clock_ms``; skew between regions can be injected), and a replicated write replaces the item a region
  holds only when its stamp is later (ties: a write made over the other wins, else the origin region's
  name, then the order recorded, so every region settles on the same item).  The adapter applies it
  atomically (``harness.region.global_tables``).
- *Conflicts counted* (the real service does not report them): two writes of one item are in conflict when
  each was made without the other having reached its region, that is, neither is an ancestor of the
  other.  Each version remembers the one it replaced where it was made.
- *A region cut off* (an outage): nothing leaves it or reaches it while it is in ``cut``; its writes not yet
  delivered stay pending (the RPO if it never came back) and are delivered when it is back.
- *Replication pause* (a fault): nothing is delivered while paused; what fell due meanwhile is delivered,
  in order per item, on resume.
- *What a region lacks* (``missing``): per item, the other regions' writes still on their way to it that
  will replace what it holds (the item as it holds it and as it will hold it, and how long ago the oldest of
  them was made): what a region activated now starts without.

Items are named by (table, key); an image of ``None`` is a deletion.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

ItemName = tuple[str, Hashable]  # (table, key)
Z_99 = 2.3263478740408408  # the standard normal's 99th percentile


@dataclass
class LagModel:
    """Replication lags: log-normal with median ``median_ms`` and 99th percentile ``p99_ms`` (None or equal to
    the median: every lag is the median), drawn from a generator seeded with ``seed``."""

    median_ms: float
    p99_ms: float | None = None
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if self.median_ms < 0 or (self.p99_ms is not None and self.p99_ms < self.median_ms):
            raise ValueError("a lag model needs a median >= 0 and a 99th percentile at least the median")
        self.rng = random.Random(self.seed)

    @property
    def sigma(self) -> float:
        if self.p99_ms is None or self.median_ms == 0 or self.p99_ms == self.median_ms:
            return 0.0
        return math.log(self.p99_ms / self.median_ms) / Z_99

    def draw(self) -> float:
        return self.median_ms * math.exp(self.sigma * self.rng.gauss(0.0, 1.0)) if self.sigma else self.median_ms

    def describe(self) -> dict[str, Any]:
        return {"distribution": "log-normal" if self.sigma else "fixed", "median_ms": self.median_ms,
                "p99_ms": self.median_ms if self.p99_ms is None else self.p99_ms, "seed": self.seed}


@dataclass(frozen=True)
class Version:
    """One write of one item, as made in its origin region."""

    item: ItemName
    image: dict[str, Any] | None   # None: deleted
    written_ms: float              # when it was made (the harness's clock: what the lag is counted from)
    origin: str
    number: int                    # unique, in the order writes were recorded
    replaced: int | None           # the version it replaced in its origin region (None: the item was new)
    clock_ms: float                # the hidden timestamp: its origin region's clock when it was made

    def wins_over(self, other: Version) -> bool:
        return (self.clock_ms, self.origin, self.number) > (other.clock_ms, other.origin, other.number)


@dataclass(frozen=True)
class Delivery:
    """A replicated write to apply in ``region`` (``version.image``; None: delete the item)."""

    region: str
    version: Version
    due_ms: float                  # when it may be applied: made + its lag, not before the item's previous one


@dataclass(frozen=True)
class Missing:
    """An item a region holds older than it will: ``held`` its version there (None: it has none), ``coming``
    the version it will hold once what is on its way lands; ``since_ms``: when the oldest write on its way
    that replaces ``held`` was made."""

    item: ItemName
    held: Version | None
    coming: Version
    since_ms: float


@dataclass
class Replication:
    regions: tuple[str, ...]
    lag: LagModel
    paused: bool = False
    cut: set[str] = field(default_factory=set)                                # regions in an outage
    conflicting: set[frozenset[int]] = field(default_factory=set)              # pairs of version numbers
    held: dict[tuple[str, ItemName], Version] = field(default_factory=dict)   # what each region holds
    versions: dict[int, Version] = field(default_factory=dict)
    in_flight: list[Delivery] = field(default_factory=list)                   # in the order written
    lags: list[float] = field(default_factory=list)                           # each delivery's, as drawn
    _last_due: dict[tuple[str, ItemName], float] = field(default_factory=dict)
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    def written(self, region: str, item: ItemName, image: dict[str, Any] | None, written_ms: float,
                clock_ms: float | None = None) -> Version:
        """A write made in ``region`` (by its fleet) at ``written_ms``, stamped ``clock_ms`` by the region's
        clock (by default the same): it holds it now, and every other region gets it later."""
        previous = self.held.get((region, item))
        version = Version(item, image, written_ms, region, next(self._numbers),
                          previous.number if previous else None, written_ms if clock_ms is None else clock_ms)
        self.versions[version.number] = version
        self.held[(region, item)] = version
        for other in self.regions:
            if other != region:
                lag = self.lag.draw()
                self.lags.append(lag)
                due = max(written_ms + lag, self._last_due.get((other, item), -math.inf))
                self._last_due[(other, item)] = due
                self.in_flight.append(Delivery(other, version, due))
        return version

    def due(self, now_ms: float, region: str | None = None) -> list[Delivery]:
        """The replicated writes to apply now (to ``region``, or to every region; none while paused), in the
        order they fell due (so in order per item): each that wins where it lands, taken as landed."""
        applied = []
        for delivery in self.take_due(now_ms, region):
            if self.wins(delivery):
                self.landed(delivery)
                applied.append(delivery)
        return applied

    def take_due(self, now_ms: float, region: str | None = None) -> list[Delivery]:
        """The deliveries due now (to ``region``, or to every region; none while paused), in the order they
        fell due, out of the in-flight list: the caller lands each (``wins``, then ``landed``) or puts it
        back (``put_back``)."""
        if self.paused or region in self.cut:
            return []  # (the pump asks every 10 ms: a region cut off is not scanned for, nor the list rebuilt)
        ready = sorted((d for d in self.in_flight if d.due_ms <= now_ms and region in (None, d.region)
                        and d.region not in self.cut and d.version.origin not in self.cut),
                       key=lambda d: (d.due_ms, d.version.number))
        if not ready:
            return []
        taken = {id(d) for d in ready}
        self.in_flight = [d for d in self.in_flight if id(d) not in taken]
        return ready

    def put_back(self, deliveries: list[Delivery]) -> None:
        """Deliveries taken and not landed: pending again, ahead of the rest (in their order)."""
        self.in_flight[:0] = deliveries

    def wins(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` replaces what its region holds of the item (last writer wins); a conflict
        with it is counted."""
        held = self.held.get((delivery.region, delivery.version.item))
        if held is not None and not self._descends(held, delivery.version) \
                and not self._descends(delivery.version, held):
            self.conflicting.add(frozenset((held.number, delivery.version.number)))
        return held is None or self._wins(delivery.version, held)

    def landed(self, delivery: Delivery) -> None:
        """``delivery`` was applied in its region: the region holds it."""
        self.held[(delivery.region, delivery.version.item)] = delivery.version

    @property
    def conflicts(self) -> int:
        """Pairs of writes of one item made in different regions, each without the other (each pair once,
        though both regions see it)."""
        return len(self.conflicting)

    def backlog(self) -> int:
        """Writes made but not yet delivered: the replication backlog (what a region lost now would leave
        behind, superseded heartbeats included; not itself data lost)."""
        return len(self.in_flight)

    def lag_quantiles(self) -> dict[str, float]:
        """The lags drawn so far: p50, p99 and max (ms; zeros before any)."""
        if not self.lags:
            return {"p50": 0.0, "p99": 0.0, "max": 0.0}
        ordered = sorted(self.lags)

        def at(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 1)
        return {"p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1], 1)}

    def pending_before(self, ms: float) -> int:
        """Writes made before ``ms`` not yet delivered, leaving out those from or to a region cut off (they wait
        for it to come back)."""
        return sum(1 for d in self.in_flight if d.version.written_ms < ms
                   and d.region not in self.cut and d.version.origin not in self.cut)

    def overdue_ms(self, now_ms: float) -> float:
        """How long the most overdue pending write has been due (0: none is): 0 when replication keeps up,
        more during a pause or an outage."""
        return max((now_ms - d.due_ms for d in self.in_flight), default=0.0)

    def behind_ms(self, now_ms: float) -> float:
        """How long ago the oldest write not yet delivered was made (0: none): about the lag when replication
        keeps up, more after a pause or during an outage."""
        return max((now_ms - d.version.written_ms for d in self.in_flight), default=0.0)

    def missing(self, region: str, taken: list[Delivery] | None = None) -> list[Missing]:
        """What ``region`` lacks now of the other regions' writes, per item (in the order first written): the
        deliveries to it still in flight (and ``taken``: those a pump has taken and not landed yet) whose last
        winner replaces what it holds.  A write already superseded where it goes (an older image) is not
        missing; a region cut off lacks what waits for it all the same."""
        pending: dict[ItemName, list[Version]] = {}
        for delivery in [*(taken or []), *self.in_flight]:
            if delivery.region == region:
                pending.setdefault(delivery.version.item, []).append(delivery.version)
        found = []
        for item, versions in pending.items():
            held = self.held.get((region, item))
            newer = [v for v in sorted(versions, key=lambda v: v.number) if held is None or self._wins(v, held)]
            coming = held
            for version in newer:
                if coming is None or self._wins(version, coming):
                    coming = version
            if newer and coming is not None:
                found.append(Missing(item, held, coming, min(v.written_ms for v in newer)))
        return found

    def _wins(self, version: Version, held: Version) -> bool:
        """Whether ``version`` replaces ``held``: the later stamp wins; at the same stamp, a write made over
        the other (which had reached its region) wins, else the tie-break of ``Version.wins_over``."""
        if version.clock_ms == held.clock_ms and self._descends(held, version):
            return False
        if version.clock_ms == held.clock_ms and self._descends(version, held):
            return True
        return version.wins_over(held)

    def _descends(self, version: Version, ancestor: Version) -> bool:
        """Whether ``ancestor`` was in the region where ``version`` was made when it was made."""
        number: int | None = version.number
        while number is not None:
            if number == ancestor.number:
                return True
            number = self.versions[number].replaced
        return False
