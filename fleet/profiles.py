"""Profiles as strategy objects: every decision a worker takes, as pure methods over records and clocks.

A ``Profile`` owns its ``fleet.lease.Rules`` (the writes) and answers the worker's questions: what to renew
and when, where the self-fencing deadline lies, whether the clock skew seen leaves the fault model, when to
look for claimable streams and how much to read, what to do with a notification, a connection read, a STOP
mailbox, an acquire whose outcome is unknown, a granted lease at take-up, and which reconnect policy
(``fleet.backoff``) a dropped upstream session waits by.  No I/O here: ``fleet.worker``
executes the answers, and tests drive these same objects.

``BlogProfile`` is the published design, ``HardenedProfile`` ours, ``UnsafeProfile`` a test-only profile
that claims live leases (see ``fleet.lease`` for what each writes and why).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from fleet.aws import ClientSettings
from fleet.balance import GIFTS, Balancer
from fleet.config import PROFILE_POLICY, FleetConfig
from fleet.expr import Write
from fleet.lease import (
    STARTED,
    ConnectionRecord,
    HardenedRules,
    Holder,
    Lease,
    Rules,
    StopRequest,
    UnsafeRules,
    WorkerRecord,
)

# Skew whose smallest possible magnitude exceeds this share of the clock tolerance leaves the fault model
# (the worker fences itself); another's lease is judged only while its greatest possible magnitude is within it.
SKEW_FENCE_SHARE = 0.8
# A skew estimate is reported again when a bound moved by more than this share of the tolerance.
SKEW_REPORT_SHARE = 0.1


@dataclass(frozen=True)
class Renewal:
    """One heartbeat write: ``pk`` None renews the incarnation itself in the workers table (refusal ends
    it), else the lease of one connection in the connections table."""

    write: Write
    pk: str | None = None


@dataclass(frozen=True)
class Sweep:
    """Read the state index (``expired_before_ms``: only leases expired by then; ``max_pages`` None: all)."""

    expired_before_ms: int | None
    max_pages: int | None
    dead: tuple[str, ...] = ()


@dataclass(frozen=True)
class Look:
    """What the reconcile loop does now (``sweep`` None: nothing) and how long it then waits."""

    sweep: Sweep | None
    wait_s: float


class NoteAction(enum.Enum):
    IGNORE = "ignore"
    ACQUIRE = "acquire"  # acquire without reading first (the published design)
    ACQUIRE_RELEASED = "acquire-released"  # a handoff naming the epoch it released: acquire at that epoch
    READ = "read"  # read the connection (and its owner) consistently, then ``on_seen``


class SeenAction(enum.Enum):
    IGNORE = "ignore"
    DROP = "drop"  # held, no longer STARTED: stop consuming and release
    STOP_PENDING = "stop-pending"  # an acquire in flight for a stream no longer STARTED: release at take-up
    CLAIM = "claim"
    DRAIN = "drain"  # STOPPED, its owner gone, not drained: acquire it to persist its backlog


@dataclass(frozen=True)
class StopPlan:
    """How a STOP mailbox is settled: drop the leases ``drop`` stops (each entry handled once dropped), keep
    ``pending`` (an acquire is in flight: honoured at take-up if it stops the lease granted), and delete the
    entries ``handled`` with the next renewal."""

    drop: frozenset[StopRequest]
    pending: frozenset[StopRequest]
    handled: frozenset[str]


class Pacer:
    """When the reconcile loop looks next (pure: it is handed the clocks and the worker items read)."""

    def __init__(self, profile: Profile, rng: random.Random) -> None:
        self.profile = profile
        self.rng = rng
        self.next_sweep_s: float | None = None
        self.seen_state: dict[str, tuple[str, bool]] = {}

    def look(self, now_ms: int, now_s: float, me: Holder, workers: Mapping[str, WorkerRecord],
             requested: bool) -> Look:
        p = self.profile
        if self.next_sweep_s is None:
            self.next_sweep_s = now_s + p.first_sweep_after_s
        others = [w for w in workers.values() if w.worker_id != me.worker_id]
        # an incarnation is gone when its item expired (or was retired), or a new one of the same worker
        # replaced it; each such change triggers one sweep
        state = {w.worker_id: (w.gen, p.rules.dead(w, now_ms)) for w in others}
        died = [w.worker_id for w in others if state[w.worker_id] != self.seen_state.get(w.worker_id, (w.gen, False))]
        self.seen_state = state
        sweep = None
        if died or requested or now_s >= self.next_sweep_s:
            sweep = p.sweep(now_ms, tuple(died))
            self.next_sweep_s = now_s + p.sweep_every_s * self.rng.uniform(*p.sweep_spread)
        wait = self.next_sweep_s - now_s
        tolerance_s = p.rules.tolerance_ms / 1000.0
        live = [w.expires_at_ms for w in others if not p.rules.dead(w, now_ms)]
        if live:
            wait = min(wait, (min(live) - now_ms) / 1000.0 + tolerance_s)
        return Look(sweep, max(0.01, wait + self.rng.uniform(0.0, p.look_jitter_s)))


@dataclass(frozen=True)
class Strategy:
    """A profile's capabilities, as data the machines and loops read (``fleet.stream_machine``)."""

    drains: bool = False  # STOPPED streams whose owner died are drained (their listing is read with each sweep)
    buries: bool = False  # a confirmed death notice expires the dead incarnation (``fleet.deathnotice``)
    settles_unknown_acquire: bool = False  # an acquire of unknown outcome is settled by a read (else it lapses)
    reads_workers: bool = False  # a look reads every worker item first (to see who died)


class BlogProfile:
    """The published design: per-connection leases renewed every heartbeat, a one-page reconcile of expired
    leases every reconcile interval, a desired-state read per held stream every check interval."""

    rules_class: type[Rules] = Rules
    strategy = Strategy()
    # The reconnect policy taken when the setting leaves it to the profile: a fixed delay, as published.
    own_reconnect_policy = "none"

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.rules = self.rules_class(config)
        self.name = self.rules.name
        self.sweep_every_s = config.reconcile_s
        self.first_sweep_after_s = config.reconcile_s
        self.sweep_spread = (1.0, 1.0)
        self.look_jitter_s = 0.0

    @property
    def client_settings(self) -> ClientSettings:
        """The SDK's defaults: its retries, its timeouts, its pool, eventually consistent reads (the published
        design names none of these)."""
        return ClientSettings.sdk_defaults()

    @property
    def reconnect_policy(self) -> str:
        """The ``fleet.backoff`` policy between upstream sessions: the configured one, else the profile's own."""
        configured = self.config.reconnect_policy
        return self.own_reconnect_policy if configured == PROFILE_POLICY else configured

    # -- liveness and the fence ----------------------------------------------------------------------
    def renewals(self, me: Holder, held: Iterable[Lease], now_ms: int, handled_stops: frozenset[str],
                 taken_gifts: frozenset[str] = frozenset()) -> list[Renewal]:
        return [Renewal(self.rules.renew(lease, me, now_ms), lease.pk) for lease in held]

    def heartbeat_wait_s(self, renewed: bool) -> float:
        return self.config.heartbeat_s

    def fence_deadline(self, renew_sent_s: float) -> float:
        """Fence-clock time after which a holder must stop consuming (inf: the profile does not fence)."""
        return float("inf")

    def on_time(self, answered_after_s: float) -> bool:
        """Whether an answered renewal counts (moves the fence)."""
        return True

    def skew_fences(self, bounds: tuple[float, float] | None) -> bool:
        """Whether the clock skew seen leaves the fault model, so the incarnation must end (blog: never
        looks)."""
        return False

    def skew_worth_reporting(self, reported: tuple[float, float] | None, bounds: tuple[float, float] | None) -> bool:
        return False

    def judges_expiry(self, bounds: tuple[float, float] | None) -> bool:
        """Whether this worker may judge another's lease gone on its own clock now (blog: always)."""
        return True

    def may_judge(self, seen: ConnectionRecord, me: Holder, bounds: tuple[float, float] | None) -> bool:
        """Whether ``seen`` may be judged on this worker's clock now: a stream nobody holds or this worker's
        own always; another's lease only while ``judges_expiry``."""
        return seen.lease_owner in ("", me.worker_id) or self.judges_expiry(bounds)

    # -- finding streams -----------------------------------------------------------------------------
    def pacer(self, rng: random.Random) -> Pacer:
        return Pacer(self, rng)

    def sweep(self, now_ms: int, dead: tuple[str, ...]) -> Sweep:
        return Sweep(expired_before_ms=now_ms, max_pages=1, dead=dead)

    def claimable(self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]) -> bool:
        return self.rules.claimable(seen, me, now_ms, workers)

    def drainable(self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]) -> bool:
        return self.rules.drainable(seen, me, now_ms, workers)

    def drain_until_ms(self, granted: Mapping[str, object]) -> int | None:
        """At take-up: the emission time a drain of the granted item persists up to (None: no drain)."""
        return self.rules.drain_until_ms(ConnectionRecord.from_item(granted))

    def adoptable(self, seen: ConnectionRecord, me: Holder) -> bool:
        """A listed stream whose lease is this incarnation's though it holds nothing (an acquire whose answer
        was lost): worth a consistent read, and taken up only if ``owned`` then."""
        return False

    def owned(self, seen: ConnectionRecord | None, me: Holder) -> bool:
        """A consistent read shows the lease ours and the stream STARTED (only with worker liveness: a lapsed
        per-connection lease is not ours however the item reads)."""
        return False

    def holds(self, seen: ConnectionRecord | None, me: Holder, epoch: int) -> TypeGuard[ConnectionRecord]:
        """Whether a consistent read shows the lease held at ``epoch`` still ``me``'s (not taken, not taken up
        again at another epoch), whatever the stream's desired state."""
        return seen is not None and self.adoptable(seen, me) and seen.epoch == epoch

    # -- notifications and STOP ----------------------------------------------------------------------
    def on_notification(self, released_epoch: int | None, held: bool) -> NoteAction:
        return NoteAction.IGNORE if held else NoteAction.ACQUIRE

    def on_seen(self, seen: ConnectionRecord, held: bool, acquiring: bool, me: Holder, now_ms: int,
                owners: Mapping[str, WorkerRecord]) -> SeenAction:
        if seen.desired_state != STARTED:
            if held or acquiring:
                return SeenAction.DROP if held else SeenAction.STOP_PENDING
            return SeenAction.DRAIN if self.drainable(seen, me, now_ms, owners) else SeenAction.IGNORE
        if not held and not acquiring and self.claimable(seen, me, now_ms, owners):
            return SeenAction.CLAIM
        return SeenAction.IGNORE

    def settle_stops(self, mailbox: frozenset[str], held: Mapping[str, int], acquiring: Iterable[str]) -> StopPlan:
        """``held``: the epoch of each lease held.  An entry stopping the lease held is dropped (of several,
        the latest STOP: its release covers the others); one older than the lease held (a START came after
        it) is handled without dropping; one for a stream being acquired is pending; any other (nothing
        held, or malformed) is handled."""
        in_flight = frozenset(acquiring)
        requests = [StopRequest.parse(entry) for entry in mailbox]
        latest: dict[str, StopRequest] = {}
        for r in sorted(requests, key=lambda r: (r.stopped_at_ms or -1, r.entry)):
            if r.pk in held and r.stops(held[r.pk]):
                latest[r.pk] = r
        drop = frozenset(latest.values())
        pending = frozenset(r for r in requests if r.pk in in_flight and r.pk not in held)
        return StopPlan(drop=drop, pending=pending, handled=mailbox - {r.entry for r in drop | pending})

    def consumes(self, granted: Mapping[str, Any], pending: Iterable[StopRequest]) -> bool:
        """At take-up: consume only a stream the acquire's own answer shows STARTED, with no STOP seen since
        that stops the lease granted."""
        return granted.get("desired_state") == STARTED and not self.stop_seen(Lease.granted(granted), pending)

    def stop_seen(self, lease: Lease, pending: Iterable[StopRequest]) -> bool:
        """Whether a STOP seen while ``lease`` was being acquired stops it (not one older than the lease)."""
        return any(r.pk == lease.pk and r.stops(lease.epoch) for r in pending)

    def desired_check_s(self) -> float | None:
        """How often to read each held stream's desired state (None: STOPs arrive by mailbox)."""
        return self.config.desired_check_s

    def handoffs(self, released: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Released streams to announce (the published design leaves them to the next reconcile)."""
        return []

    def balancer(self) -> Balancer | None:
        """What moves streams to workers that join (``fleet.balance``); the published design moves none."""
        return None

    def checkpoint_every_s(self) -> float | None:
        return None


class UnsafeProfile(BlogProfile):
    """Claims every STARTED stream it does not hold, listing them all (tests only)."""

    rules_class = UnsafeRules

    @property
    def client_settings(self) -> ClientSettings:
        """Bounded like ``hardened``'s, so a run ends in lease time however the faults go."""
        return ClientSettings.bounded(self.config)

    def sweep(self, now_ms: int, dead: tuple[str, ...]) -> Sweep:
        return Sweep(expired_before_ms=None, max_pages=1, dead=dead)


class HardenedProfile(BlogProfile):
    """Ours: see ``fleet.lease``.  Worker liveness, a fence, skew detection, paced looks, handoffs."""

    rules_class = HardenedRules
    strategy = Strategy(drains=True, buries=True, settles_unknown_acquire=True, reads_workers=True)
    own_reconnect_policy = "full"  # reconnect in place with full jitter (DESIGN §3)

    def __init__(self, config: FleetConfig) -> None:
        super().__init__(config)
        self.first_sweep_after_s = 0.0
        self.sweep_spread = (0.8, 1.0)
        self.look_jitter_s = self.rules.tolerance_ms / 4000.0

    @property
    def client_settings(self) -> ClientSettings:
        """One attempt bounded by the request timeout (the fence assumes an answer within it or none),
        consistent reads."""
        return ClientSettings.bounded(self.config)

    def renewals(self, me: Holder, held: Iterable[Lease], now_ms: int, handled_stops: frozenset[str],
                 taken_gifts: frozenset[str] = frozenset()) -> list[Renewal]:
        """The worker item's renewal, which also says how many streams it holds and deletes the gifts it
        has taken (``fleet.balance``)."""
        write = self.rules.renew_worker(me, now_ms, handled_stops)
        if write is None:
            return []
        taken = {GIFTS: taken_gifts} if taken_gifts else {}
        update = replace(write.update, set={**write.update.set, "held": len(list(held))},
                         delete_from_set={**write.update.delete_from_set, **taken})
        return [Renewal(replace(write, update=update))]

    def heartbeat_wait_s(self, renewed: bool) -> float:
        # a missed renewal is retried soon, so a short outage does not reach the fence
        return self.config.heartbeat_s if renewed else self.config.heartbeat_s / 4

    def fence_deadline(self, renew_sent_s: float) -> float:
        return renew_sent_s + self.rules.fence_ms / 1000.0

    def on_time(self, answered_after_s: float) -> bool:
        # answered later than the rules assume: it may have landed after a taker read us as expired
        return answered_after_s <= self.rules.timeout_ms / 1000.0

    def skew_fences(self, bounds: tuple[float, float] | None) -> bool:
        if bounds is None:
            return False
        low, high = bounds
        least = low if low > 0 else -high if high < 0 else 0.0
        return least > SKEW_FENCE_SHARE * self.rules.tolerance_ms

    def judges_expiry(self, bounds: tuple[float, float] | None) -> bool:
        """Only while the newest answers agree on the skew and every skew they allow is within the model
        (both bounds: that the least possible skew is within it says nothing of the greatest).  Explore
        seed 4148 woke from a freeze with its clock 1.9 s ahead and took over a live worker's streams
        before the answers showed the skew."""
        if bounds is None:
            return False
        share = SKEW_FENCE_SHARE * self.rules.tolerance_ms
        return -share <= bounds[0] and bounds[1] <= share

    def skew_worth_reporting(self, reported: tuple[float, float] | None, bounds: tuple[float, float] | None) -> bool:
        if bounds is None:
            return False
        if reported is None or self.skew_fences(reported) != self.skew_fences(bounds):
            return True
        step = SKEW_REPORT_SHARE * self.rules.tolerance_ms
        return abs(bounds[0] - reported[0]) > step or abs(bounds[1] - reported[1]) > step

    def sweep(self, now_ms: int, dead: tuple[str, ...]) -> Sweep:
        return Sweep(expired_before_ms=None, max_pages=None, dead=dead)

    def adoptable(self, seen: ConnectionRecord, me: Holder) -> bool:
        return seen.lease_owner == me.worker_id and seen.owner_gen == me.gen

    def owned(self, seen: ConnectionRecord | None, me: Holder) -> bool:
        """Ours and STARTED, or ours and still to be drained (a drain whose acquire answer was lost, or
        that could not finish)."""
        if seen is None or not self.adoptable(seen, me):
            return False
        return seen.desired_state == STARTED or self.rules.drain_until_ms(seen) is not None

    def on_notification(self, released_epoch: int | None, held: bool) -> NoteAction:
        if released_epoch is not None and not held:
            return NoteAction.ACQUIRE_RELEASED
        return NoteAction.READ

    def desired_check_s(self) -> float | None:
        return None

    def handoffs(self, released: list[tuple[str, int]]) -> list[tuple[str, int]]:
        return released

    def balancer(self) -> Balancer | None:
        """A joiner counts once alive a lease, and a worker gives at most once a lease."""
        if not self.config.balance_band:
            return None
        return Balancer(band=self.config.balance_band, settle_s=self.config.lease_s)

    def checkpoint_every_s(self) -> float | None:
        return self.config.scaled_s(self.config.checkpoint_ms)


Profile = BlogProfile


def profile_for(config: FleetConfig) -> Profile:
    return {"blog": BlogProfile, "hardened": HardenedProfile, "unsafe": UnsafeProfile}[config.profile](config)
