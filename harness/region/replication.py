"""Global Tables between two regions, emulated: the decisions, with no I/O (the adapters feed it each region's
writes and apply what it returns to the other region's tables).

- *Per item, asynchronous, with a lag*: a write made in one region is due in every other region ``lag_ms``
  after it was made, in the order it was made.
- *Last writer wins on a timestamp*: a replicated write replaces the item a region holds only when it was
  made later (ties: a write made over the other wins, else the origin region's name, then the order
  recorded, so every region settles on the same item).
- *Conflicts counted* (the real service does not report them): two writes of one item are in conflict when
  each was made without the other having reached its region, that is, neither is an ancestor of the
  other.  Each version remembers the one it replaced where it was made.
- *A region cut off* (an outage): nothing leaves it or reaches it while it is in ``cut``; its writes not yet
  delivered stay behind (the RPO) until it is back.
- *Replication pause* (a fault): nothing is delivered while paused; what fell due meanwhile is delivered,
  in order, on resume.

Items are named by (table, key); an image of ``None`` is a deletion.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

ItemName = tuple[str, Hashable]  # (table, key)


@dataclass(frozen=True)
class Version:
    """One write of one item, as made in its origin region."""

    item: ItemName
    image: dict[str, Any] | None   # None: deleted
    written_ms: float
    origin: str
    number: int                    # unique, in the order writes were recorded
    replaced: int | None           # the version it replaced in its origin region (None: the item was new)

    def wins_over(self, other: Version) -> bool:
        return (self.written_ms, self.origin, self.number) > (other.written_ms, other.origin, other.number)


@dataclass(frozen=True)
class Delivery:
    """A replicated write to apply in ``region`` (``version.image``; None: delete the item)."""

    region: str
    version: Version


@dataclass
class Replication:
    regions: tuple[str, ...]
    lag_ms: float
    paused: bool = False
    cut: set[str] = field(default_factory=set)                                # regions in an outage
    conflicting: set[frozenset[int]] = field(default_factory=set)              # pairs of version numbers
    held: dict[tuple[str, ItemName], Version] = field(default_factory=dict)   # what each region holds
    versions: dict[int, Version] = field(default_factory=dict)
    in_flight: list[Delivery] = field(default_factory=list)                   # in the order written
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    def written(self, region: str, item: ItemName, image: dict[str, Any] | None, written_ms: float) -> Version:
        """A write made in ``region`` (by its fleet): it holds it now, and every other region gets it later."""
        previous = self.held.get((region, item))
        version = Version(item, image, written_ms, region, next(self._numbers),
                          previous.number if previous else None)
        self.versions[version.number] = version
        self.held[(region, item)] = version
        self.in_flight += [Delivery(other, version) for other in self.regions if other != region]
        return version

    def due(self, now_ms: float) -> list[Delivery]:
        """The replicated writes to apply now (none while paused): each that wins where it lands, in order."""
        if self.paused:
            return []
        ready = [d for d in self.in_flight if d.version.written_ms + self.lag_ms <= now_ms
                 and d.region not in self.cut and d.version.origin not in self.cut]
        self.in_flight = [d for d in self.in_flight if d not in ready]
        applied = []
        for delivery in ready:
            held = self.held.get((delivery.region, delivery.version.item))
            if held is not None and not self._descends(held, delivery.version) \
                    and not self._descends(delivery.version, held):
                self.conflicting.add(frozenset((held.number, delivery.version.number)))
            if held is None or self._wins(delivery.version, held):
                self.held[(delivery.region, delivery.version.item)] = delivery.version
                applied.append(delivery)
        return applied

    @property
    def conflicts(self) -> int:
        """Pairs of writes of one item made in different regions, each without the other (each pair once,
        though both regions see it)."""
        return len(self.conflicting)

    def backlog(self) -> int:
        """Writes made but not yet delivered (the RPO if the origin region were lost now)."""
        return len(self.in_flight)

    def behind_ms(self, now_ms: float) -> float:
        """How long ago the oldest write not yet delivered was made (0: none): about the lag when replication
        keeps up, more after a pause or during an outage."""
        return max((now_ms - d.version.written_ms for d in self.in_flight), default=0.0)

    def _wins(self, version: Version, held: Version) -> bool:
        """Whether ``version`` replaces ``held``: the later write wins; at the same instant, a write made over
        the other (which had reached its region) wins, else the tie-break of ``Version.wins_over``."""
        if version.written_ms == held.written_ms and self._descends(held, version):
            return False
        if version.written_ms == held.written_ms and self._descends(version, held):
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
