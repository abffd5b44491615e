"""Balanced scale-out (``hardened``): when workers join, the busiest hand streams over to the idlest until the
fleet is within the band, with hysteresis so a flapping worker causes no thrash.  Pure decisions over the
workers table and a clock; the worker acts on them (``fleet.release.Releases.give_away``, ``fleet.liveness``).

- *Counts*: each renewal records how many streams its incarnation holds (``held`` on its worker item); a
  worker's count is that plus the gifts still on its item.
- *Who counts*: live incarnations (not expired) that have reported a count and that this worker has seen
  alive for ``settle_s`` at least: a worker that joins and leaves at once never draws streams.
- *Who draws*: only workers that *joined*: first seen more than ``settle_s`` after this worker's first
  look and holding nothing then, for ``JOIN_WINDOW_SETTLES`` settle times.  Scale-out and a restarted
  worker draw; the imbalance a takeover or a START burst leaves between the others moves nothing (each
  move is a short disruption: not one a failure should add to).
- *When*: only while the fleet is out of the band (max / min over ``band``, and more than one stream apart),
  and at most once per ``settle_s`` per worker, so the counts a decision reads have been renewed since the
  last one moved streams.
- *Shares*: the total over the workers counted, in whole streams; the busiest keep the remainder, one each
  (ties by worker id, so every worker reading the same counts computes the same shares).
- *Who gives what to whom*: the workers above their share, in id order, fill the deficits of the workers
  below theirs, in id order, stream by stream.  Every giver computes the same matching, so the gifts add
  up to the deficits, and streams flow only from the busiest to the idlest.
- *How*: the giver stops consuming the stream (its final writes), then *transfers* the lease: its release
  (a handoff: held by it at its epoch, STARTED, checkpointed) that names the recipient's incarnation as the
  owner, at the next epoch, instead of nobody (``transfer``).  No moment exists where the stream is free, so
  no other worker's sweep can take it on the way.  Then it adds ``<pk>@<epoch>`` to the recipient's worker
  item (``gifts``, ``give``).  The recipient reads its gifts with its next renewal, as it reads its STOP
  mailbox, takes each up after a consistent read shows it its own (as it adopts a stream a listing shows
  its own), and deletes them with the renewal after; a gift it never reads is adopted by its next sweep.
  A recipient that died owns the stream as it owns its others: taken over when its incarnation expires.
  Not a queue message: a broadcast offer would be received, and refused, by every worker not meant to
  take it, and SQS moves a message received that often to the dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from fleet.expr import Eq, Gt, Update, Write, all_of
from fleet.lease import Lease, WorkerRecord

# A worker first seen more than a settle time after this worker's first look has joined; it draws streams
# for this many settle times (then it is one of the fleet, whose imbalance after a takeover moves nothing).
JOIN_WINDOW_SETTLES = 4
GIFTS = "gifts"  # the worker item's string set of streams transferred to it: ``<pk>@<epoch>``


@dataclass(frozen=True)
class Gift:
    """Give ``count`` streams to ``recipient`` (the incarnation counted)."""

    recipient: WorkerRecord
    count: int


@dataclass
class Balancer:
    band: float                 # max / min streams per worker the fleet may keep without moving any
    settle_s: float             # a worker counts once seen alive this long; and at most one gift this often
    # (worker, gen) -> (monotonic s, its count) when this worker first saw it
    first_seen: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    last_gift_s: float = float("-inf")
    started_s: float | None = None  # this worker's first look

    def consider(self, me: str, mine: int, workers: Mapping[str, WorkerRecord], now_ms: int,
                 now_s: float) -> list[Gift]:
        """What this worker (``me``, holding ``mine``) should give away now, to whom (none: nothing).
        ``workers``: the workers table as just read; ``now_ms`` the lease clock, ``now_s`` the monotonic one."""
        alive = {w.worker_id: w for w in workers.values()
                 if w.expires_at_ms > now_ms and w.held is not None and w.worker_id != me}
        for key in [k for k in self.first_seen if alive.get(k[0]) is None or alive[k[0]].gen != k[1]]:
            del self.first_seen[key]
        if self.started_s is None:
            self.started_s = now_s
        counts, joiners = {me: mine}, set()
        for worker in alive.values():
            # what it was given and has not counted yet is its own already (a recipient read before its
            # renewal would look short, and every giver would fill it)
            count = (worker.held or 0) + len(worker.gifts)
            seen, count_then = self.first_seen.setdefault((worker.worker_id, worker.gen), (now_s, count))
            if now_s - seen >= self.settle_s:
                counts[worker.worker_id] = count
                # looks are paced, so a worker that started with the fleet may be first seen a look late:
                # only one seen late *holding nothing* joined
                if (seen - self.started_s > self.settle_s and count_then == 0
                        and now_s - seen <= JOIN_WINDOW_SETTLES * self.settle_s):
                    joiners.add(worker.worker_id)
        if not joiners or now_s - self.last_gift_s < self.settle_s or balanced(counts.values(), self.band):
            return []
        shares = fair_shares(counts)
        gifts = [Gift(alive[to], n) for giver, to, n in matching(counts, shares, joiners) if giver == me]
        if gifts:
            self.last_gift_s = now_s
        return gifts


def fair_shares(counts: Mapping[str, int]) -> dict[str, int]:
    base, extra = divmod(sum(counts.values()), len(counts))
    ranked = sorted(counts, key=lambda worker_id: (-counts[worker_id], worker_id))
    return {worker_id: base + (1 if rank < extra else 0) for rank, worker_id in enumerate(ranked)}


def matching(counts: Mapping[str, int], shares: Mapping[str, int],
             joiners: Collection[str]) -> list[tuple[str, str, int]]:
    """(giver, recipient, streams): the surpluses, givers in id order, fill the joiners' deficits, in id
    order."""
    recipients = [w for w in sorted(counts) if counts[w] < shares[w] and w in joiners]
    wanted = [shares[w] - counts[w] for w in recipients]
    moves, next_recipient = [], 0
    for giver in sorted(w for w in counts if counts[w] > shares[w]):
        surplus = counts[giver] - shares[giver]
        while surplus and next_recipient < len(recipients):
            n = min(surplus, wanted[next_recipient])
            moves.append((giver, recipients[next_recipient], n))
            surplus -= n
            wanted[next_recipient] -= n
            next_recipient += not wanted[next_recipient]
    return moves


def balanced(counts: Iterable[int], band: float) -> bool:
    """Within the band: max / min at most ``band``, or no more than one stream apart (the best whole
    streams allow)."""
    values = list(counts)
    high, low = max(values), min(values)
    return high - low <= 1 or (low > 0 and high / low <= band)


def gift_entry(pk: str, epoch: int) -> str:
    return f"{pk}@{epoch}"


def parse_gift(entry: str) -> tuple[str, int] | None:
    pk, _, epoch = entry.rpartition("@")
    return (pk, int(epoch)) if pk and epoch.isdigit() else None


def transfer(release: Write, lease: Lease, to: WorkerRecord, now_ms: int, lease_ms: float) -> Write:
    """The handoff ``release`` of ``lease`` (``fleet.lease.HardenedRules.release``: same condition, same
    checkpoint), naming ``to``'s incarnation the owner at the next epoch, as its acquire would."""
    owner = {"lease_owner": to.worker_id, "owner_gen": to.gen, "epoch": lease.epoch + 1,
             "lease_expires_at_ms": now_ms + int(lease_ms)}
    return replace(release, update=replace(release.update, set={**release.update.set, **owner}))


def give(recipient: WorkerRecord, entries: frozenset[str], now_ms: int) -> Write:
    """Add streams transferred to ``recipient`` to its gifts, while it is that incarnation and alive."""
    return Write(key={"pk": recipient.worker_id}, update=Update(add_to_set={GIFTS: entries}),
                 condition=all_of(Eq("gen", recipient.gen), Gt("expires_at_ms", now_ms)))
