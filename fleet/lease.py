"""Pure lease rules: given records and a clock reading, which conditional write to send.

No I/O here (the sans-I/O core): ``fleet.store`` executes the ``Write`` values these rules return, tests run
them against a model store and ``fleet.memstore``.  One ``Rules`` class per profile (DESIGN §3) says what
is written, including the router's START / STOP; the decisions around the writes (when, and what to do with
the answers) are the profile's strategy object in ``fleet.profiles``.

``blog`` (the published design, flaws kept): a lease per connection, acquired when
``attribute_not_exists(lease_expires_at_ms) OR lease_expires_at_ms < :now`` and renewed by its owner every
heartbeat; release sets owner "" and expiry 0; ``last_seq`` is never advanced; messages keyed by the wall
clock in ms; START overwrites the item.  Its clients keep the SDK's defaults (retries, 60 s timeouts, a pool
of 10, eventually consistent reads; ``BlogProfile.client_settings``).  What it shares with ``hardened``,
and why that does not flatter it: the lease, heartbeat, reconcile and desired-state intervals are the
published values; the ``gen`` and ``sent_ms`` attributes only label items for the checkers (no condition
reads them); the message-write semaphore (``fleet.connection``) bounds concurrency the published design
leaves unbounded, which can only delay blog's writes, never make a takeover safer.

``hardened`` (ours):

* **Liveness per worker, not per connection.**  Each worker incarnation (``worker_id``, ``gen``) keeps one
  item in the workers table and renews only that: ``expires_at_ms = now + lease`` on condition that the
  generation is still its own, the item has not expired, and the new expiry is not below the stored one
  (a renewal delivered late, after a later one, is refused: an expiry never moves backwards).
  Registering is a conditional update too (over a missing or dead item, or its own retry moving forward).
  An expired incarnation can never come back; the process re-registers under a new generation.
  Connections record ``lease_owner`` + ``owner_gen``.  Heartbeats never touch the connections table.
* **Takeover only past expiry plus tolerance.**  A connection owned by (w, g) is claimable when w's worker
  item is gone, carries another generation, or ``expires_at_ms + clock_tolerance < now``.  A renewal must
  be sent at least one request timeout before expiry, and the client counts it only if answered within
  that timeout.  So with any two clocks at most the tolerance apart, every renewal the old owner counts
  was applied before a taker can see the item expired, and the old owner's fence (below) closes first.
  Skew beyond the tolerance is detected, not assumed away: the profile self-fences when the estimate from
  DynamoDB's ``Date`` headers shows more than 0.8 × the tolerance.
* **Fencing epoch.**  Every acquire increments ``epoch`` on condition it is unchanged since it was read;
  checkpoints and release require ``lease_owner = me AND owner_gen = mine AND epoch = mine`` (``held``),
  checkpoints also ``desired_state = STARTED``, and both record their writer (``ckpt_worker``, ``ckpt_gen``,
  ``ckpt_epoch``).
* **Self-fencing.**  The holder stops reading and writing at ``renew sent + lease − margin − request
  timeout`` on ``CLOCK_BOOTTIME`` unless a renewal sent later has been accepted, so even a write still in
  flight lands before anyone could take over (``HardenedProfile.fence_deadline``).
* **Sequences.**  Messages are stored as each stream's fenced log of batches (``fleet.batch_log``: one
  conditional PutItem per batch, a takeover mark at every take-up), each naming its ``worker``, ``gen``,
  ``epoch`` and take-up.  ``last_seq`` is checkpointed with the epoch.
* **START never clobbers** (``if_not_exists`` on the lease fields) and **STOP reaches the owner's
  mailbox**, read with the renewal.  A mailbox entry names the lease it stops and the STOP,
  ``<pk>@<epoch>:<stopped_at_ms>`` (what the STOP's own write found), so a STOP of a later lease is a
  different entry, which deleting an earlier STOP's entry cannot take with it (``StopRequest``).
* **A release for a STOP is a release for that STOP.**  It requires the item still STOPPED at the same
  ``stopped_at_ms``; refused, the stream was STARTED since (and maybe STOPPED again), which nobody else
  would consume: the holder acquires it again (epoch + 1) and consumes it, or drains it up to the newer
  STOP (``fleet.stream_machine.HeldStream``).  A finished drain releases the same way.
* **A STOPPED stream whose owner died is drained.**  STOP records when the stream stopped
  (``stopped_at_ms``, kept by a repeated STOP, removed by START).  While its owner is an incarnation that can
  never renew again (the test ``claimable`` uses) and it has not been drained at its current epoch, the item
  is ``drainable``: a worker acquires it (fenced as any acquire, on condition it is still STOPPED at that
  same ``stopped_at_ms``), resumes at the first missing sequence, persists every message the upstream
  emitted before ``stopped_at_ms`` plus the clock tolerance (``drain_until_ms``), stops at the first one
  emitted later (``drain_ends``) and releases with ``drained_epoch`` set, so it is never drained twice.
  Without this nobody would persist what the stream emitted between its owner's last write and the STOP
  (DESIGN I2).  So is a stream a STOP found STARTED and held by nobody (never acquired yet, or released
  by a shutdown or a give-up and not yet taken over): the router marks it (``mark_undrained``), and so
  does a repeat of that STOP (its first answer lost before the mark was written) while nothing records the
  epoch drained: a release for a STOP records it (``drained_epoch``) as a finished drain does, unless the
  holder could not read or store up to the STOP (then it leaves the mark itself).  START removes the stop
  time and the drain marks.

``unsafe`` (tests only): acquires without any condition and treats every STARTED connection as claimable,
so checkers can be shown to catch double ownership.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleet.config import FleetConfig
from fleet.expr import Condition, Eq, Exists, Gt, Le, Lt, NotExists, Update, Write, all_of, any_of

STARTED = "STARTED"
STOPPED = "STOPPED"


def _int(value: Any, default: int = 0) -> int:
    return default if value is None else int(value)


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ConnectionRecord:
    """A connections-table item, as read."""

    pk: str
    desired_state: str
    ws_url: str
    lease_owner: str = ""
    lease_expires_at_ms: int = 0
    last_seq: int = 0
    epoch: int | None = None
    owner_gen: str = ""
    stopped_at_ms: int | None = None
    drained_epoch: int | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> ConnectionRecord:
        return cls(
            pk=str(item["pk"]),
            desired_state=str(item.get("desired_state", "")),
            ws_url=str(item.get("ws_url", "")),
            lease_owner=str(item.get("lease_owner", "")),
            lease_expires_at_ms=_int(item.get("lease_expires_at_ms")),
            last_seq=_int(item.get("last_seq")),
            epoch=optional_int(item.get("epoch")),
            owner_gen=str(item.get("owner_gen", "")),
            stopped_at_ms=optional_int(item.get("stopped_at_ms")),
            drained_epoch=optional_int(item.get("drained_epoch")),
        )


@dataclass(frozen=True)
class WorkerRecord:
    """A workers-table item (hardened): one incarnation's liveness and its STOP mailbox."""

    worker_id: str
    gen: str
    expires_at_ms: int
    stop_requests: frozenset[str] = frozenset()
    task_arn: str = ""  # the ECS task (or the harness's stand-in) running it, named by death notices
    held: int | None = None  # streams it held at its last renewal (``fleet.balance``); None: never said
    gifts: frozenset[str] = frozenset()  # streams transferred to it to balance the fleet: ``<pk>@<epoch>``

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> WorkerRecord:
        return cls(
            worker_id=str(item["pk"]), gen=str(item.get("gen", "")), expires_at_ms=_int(item.get("expires_at_ms")),
            stop_requests=frozenset(str(s) for s in item.get("stop_requests", set()) or ()),
            task_arn=str(item.get("task_arn", "")), held=None if item.get("held") is None else _int(item["held"]),
            gifts=frozenset(str(g) for g in item.get("gifts", set()) or ()),
        )


@dataclass(frozen=True)
class StopRequest:
    """One STOP mailbox entry: ``<pk>@<epoch>``, the lease the STOP found (stored as ``entry``).

    It stops a lease held at that epoch or an earlier one, never a later one: a lease acquired after the STOP
    needed a START in between (an acquire requires STARTED), or is a drain (which ends at the STOP's cutoff by
    itself).  An entry without a decimal epoch (a bare pk, as routers before this format posted) stops the
    stream at any epoch, as those routers meant.
    """

    entry: str
    pk: str
    epoch: int | None
    stopped_at_ms: int | None = None  # the STOP's time as its write stored it (None: not said)

    @classmethod
    def of_lease(cls, pk: str, epoch: int | None, stopped_at_ms: int | None = None) -> StopRequest:
        """The entry a STOP posts for ``pk`` found at ``epoch`` (None: an item without one, any epoch) and
        ``stopped_at_ms``: ``<pk>@<epoch>:<stopped_at_ms>``."""
        if epoch is None:
            return cls(pk, pk, None)
        if stopped_at_ms is None:
            return cls(f"{pk}@{epoch}", pk, epoch)
        return cls(f"{pk}@{epoch}:{stopped_at_ms}", pk, epoch, stopped_at_ms)

    @classmethod
    def parse(cls, entry: str) -> StopRequest:
        """An entry of any format posted so far: ``<pk>``, ``<pk>@<epoch>``, ``<pk>@<epoch>:<stopped_at_ms>``."""
        pk, at, tail = entry.rpartition("@")
        epoch, colon, stopped = tail.partition(":")
        if not (at and pk and _decimal(epoch)) or (colon and not _decimal(stopped)):
            return cls(entry, entry, None)
        return cls(entry, pk, int(epoch), int(stopped) if colon else None)

    def stops(self, epoch: int) -> bool:
        """Whether this STOP applies to a lease at ``epoch``."""
        return self.epoch is None or epoch <= self.epoch


@dataclass(frozen=True)
class Holder:
    """The asking worker: its id and this process's generation."""

    worker_id: str
    gen: str


@dataclass(frozen=True)
class Lease:
    """A connection this worker holds: what it needs to renew, checkpoint, write and release."""

    pk: str
    ws_url: str
    epoch: int
    resume_seq: int

    @classmethod
    def granted(cls, item: Mapping[str, Any]) -> Lease:
        """The lease described by the item an accepted acquire returned."""
        record = ConnectionRecord.from_item(item)
        return cls(pk=record.pk, ws_url=record.ws_url, epoch=record.epoch or 0, resume_seq=record.last_seq)


class Rules:
    """The published design (``blog``): the writes it sends.  Subclasses override what they change.

    ``resumes`` and ``idempotent_messages`` say how ``fleet.connection`` consumes a held stream (resume from
    a sequence; batch writes keyed by sequence); every other decision is a ``fleet.profiles.Profile``'s.
    """

    name = "blog"
    resumes = False
    idempotent_messages = False

    def __init__(self, config: FleetConfig) -> None:
        self.lease_ms = config.scaled_ms(config.lease_ms)
        self.tolerance_ms = config.scaled_ms(config.clock_tolerance_ms)
        self.timeout_ms = config.scaled_ms(config.aws_timeout_ms)
        self.fence_ms = self.lease_ms - config.scaled_ms(config.fence_margin_ms) - self.timeout_ms
        self.connections_table = config.connections_table
        self.messages_table = config.messages_table

    # -- desired state (the router) ------------------------------------------------------------------
    def start_connection(self, pk: str, ws_url: str, now_ms: int) -> Write:
        """The published START: a whole-item put that frees whatever lease the item held."""
        return Write(
            key={"pk": pk},
            update=Update(set={
                "desired_state": STARTED,
                "ws_url": ws_url,
                "lease_owner": "",
                "lease_expires_at_ms": 0,
                "last_seq": 0,
                "updated_at_ms": now_ms,
            }),
            replace=True,
        )

    def stop_connection(self, pk: str, now_ms: int) -> Write:
        """STOP: STOPPED on an existing item (refused when there is none), recording when the stream stopped
        (``stopped_at_ms``: a repeated STOP keeps the first; START removes it)."""
        return Write(
            key={"pk": pk},
            update=Update(set={"desired_state": STOPPED, "updated_at_ms": now_ms},
                          set_if_absent={"stopped_at_ms": now_ms}),
            condition=Exists("pk"),
        )

    def post_stop(self, owner: str, pk: str, epoch: int | None, stopped_at_ms: int | None) -> Write:
        """Put a STOP (at ``stopped_at_ms``) of ``pk``'s lease at ``epoch`` in its owner's mailbox (workers
        table; refused when the owner has no item)."""
        entry = StopRequest.of_lease(pk, epoch, stopped_at_ms).entry
        return Write(key={"pk": owner}, update=Update(add_to_set={"stop_requests": frozenset({entry})}),
                     condition=Exists("pk"))

    def mark_undrained(self, pk: str, stopped_at_ms: int) -> Write | None:
        """After a STOP that ended a STARTED period with nobody holding the stream: what makes it drained
        (the published design: nothing)."""
        return None

    # -- connections ---------------------------------------------------------------------------------
    def acquire(self, pk: str, me: Holder, now_ms: int, seen: ConnectionRecord | None = None) -> Write:
        return Write(
            key={"pk": pk},
            update=Update(set={
                "lease_owner": me.worker_id,
                "lease_expires_at_ms": now_ms + int(self.lease_ms),
                "updated_at_ms": now_ms,
            }),
            condition=any_of(NotExists("lease_expires_at_ms"), Lt("lease_expires_at_ms", now_ms)),
        )

    def claimable(
        self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]
    ) -> bool:
        """Whether a reconcile should try to acquire ``seen`` now."""
        return seen.desired_state == STARTED and seen.lease_expires_at_ms < now_ms

    def drainable(
        self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]
    ) -> bool:
        """Whether a reconcile should acquire the STOPPED ``seen`` to persist its backlog (the published design
        never does: what a dead owner left unpersisted before the STOP is lost)."""
        return False

    def drain_until_ms(self, seen: ConnectionRecord) -> int | None:
        """For a held item that is STOPPED and not drained yet: persist what the upstream emitted before this
        time (its ``ts``, upstream clock), nothing later.  None: the item is not to be drained."""
        return None

    def stop_reach_ms(self, stopped_at_ms: int) -> int:
        """For the STOP at ``stopped_at_ms``: what the upstream emitted before this time (its clock) is owed to
        the store.  The stop time plus the clock tolerance (the router's and the upstream's clocks may differ
        by that much) plus the request timeout (the router reads the stop time before its write goes out,
        and an accepted STOP's write was answered, so applied, within the timeout)."""
        return stopped_at_ms + int(self.tolerance_ms + self.timeout_ms)

    def drain_ends(self, until_ms: int, message_ts_ms: float | None, now_ms: int) -> bool:
        """Whether a drain is over: at the first message emitted at or after ``until_ms`` (not persisted), or,
        with no message arriving (``message_ts_ms`` None), once this worker's clock is past ``until_ms`` by
        the tolerance (whatever the upstream emitted before it would have been sent by then)."""
        if message_ts_ms is not None:
            return message_ts_ms >= until_ms
        return now_ms >= until_ms + int(self.tolerance_ms)

    def renew(self, lease: Lease, me: Holder, now_ms: int) -> Write:
        return Write(
            key={"pk": lease.pk},
            update=Update(set={"lease_expires_at_ms": now_ms + int(self.lease_ms)}),
            condition=Eq("lease_owner", me.worker_id),
        )

    def release(self, lease: Lease, me: Holder, now_ms: int, last_seq: int, drained: bool = False,
                stopped_at_ms: int | None = None, behind: bool = False) -> Write:
        """Give the lease back (``stopped_at_ms``, ``behind``: for that STOP, unread; the published design
        does not say)."""
        return Write(
            key={"pk": lease.pk},
            update=Update(set={"lease_owner": "", "lease_expires_at_ms": 0, "updated_at_ms": now_ms}),
            condition=Eq("lease_owner", me.worker_id),
        )

    def checkpoint(self, lease: Lease, me: Holder, now_ms: int, last_seq: int) -> Write | None:
        return None  # the published design reads last_seq but never advances it

    def message(self, lease: Lease, me: Holder, seq: int, data: str, now_ms: int) -> Write:
        """The published item (keyed by the clock, overwriting) plus the writer's ``gen`` (``fleet.store``
        adds ``sent_ms`` as it builds the request)."""
        return Write(
            key={"pk": lease.pk, "sk": now_ms},
            update=Update(set={"message_data": data, "timestamp_ms": now_ms, "worker_id": me.worker_id,
                               "gen": me.gen}),
            replace=True,
        )

    def held(self, lease: Lease, me: Holder) -> Condition | None:
        """The condition on the connection item under which ``me`` still holds ``lease`` (what fences
        message writes server-side), or None when the profile has no such fence."""
        return None

    # -- workers (profiles with worker liveness) -----------------------------------------------------
    def register(self, me: Holder, now_ms: int, task_arn: str = "") -> Write | None:
        return None

    def renew_worker(self, me: Holder, now_ms: int, handled_stops: frozenset[str]) -> Write | None:
        return None

    def retire(self, me: Holder) -> Write | None:
        return None

    def bury(self, dead: WorkerRecord, stopped_at_ms: int) -> Write | None:
        """After a death notice for ``dead``'s task, stopped at ``stopped_at_ms`` (liveness profiles only)."""
        return None

    def dead(self, owner: WorkerRecord, now_ms: int) -> bool:
        """Whether a worker incarnation can never renew again (only profiles with worker liveness)."""
        return False


class UnsafeRules(Rules):
    """Acquires without a condition and claims every STARTED connection it does not hold (tests only)."""

    name = "unsafe"

    def acquire(self, pk: str, me: Holder, now_ms: int, seen: ConnectionRecord | None = None) -> Write:
        return replace(super().acquire(pk, me, now_ms, seen), condition=None)

    def claimable(
        self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]
    ) -> bool:
        return seen.desired_state == STARTED and seen.lease_owner != me.worker_id


class HardenedRules(Rules):
    """Our design: see the module docstring."""

    name = "hardened"
    resumes = True
    idempotent_messages = True

    def start_connection(self, pk: str, ws_url: str, now_ms: int) -> Write:
        """START never clobbers: desired state and URL, lease fields only where the item has none; the
        previous STOP's time and drain go (a later STOP records its own)."""
        return Write(
            key={"pk": pk},
            update=Update(
                set={"desired_state": STARTED, "ws_url": ws_url, "updated_at_ms": now_ms},
                set_if_absent={"lease_owner": "", "lease_expires_at_ms": 0, "last_seq": 0, "epoch": 0},
                remove=frozenset({"stopped_at_ms", "drained_epoch"}),
            ),
        )

    def mark_undrained(self, pk: str, stopped_at_ms: int) -> Write:
        """A STOP ended a STARTED period while nobody held the stream (never acquired yet, or released by a
        shutdown, a give-up, or for an earlier STOP): what it emitted in that period is drained as an
        orphan's would be.  An expiry of 1 (a release zeroes it) lists it with the unreleased STOPPED
        streams, on condition it is still this STOP and still nobody's."""
        return Write(
            key={"pk": pk},
            update=Update(set={"lease_expires_at_ms": 1}),
            condition=all_of(Eq("desired_state", STOPPED), Eq("stopped_at_ms", stopped_at_ms),
                             any_of(NotExists("lease_owner"), Eq("lease_owner", ""))),
        )

    def claimable(
        self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]
    ) -> bool:
        """``workers`` must have been read after ``seen``: then an owner item with another generation
        means the owning incarnation was replaced (it can never renew again), not a stale read."""
        if seen.desired_state != STARTED:
            return False
        return not seen.lease_owner or self._owner_gone(seen, me, now_ms, workers)

    def _owner_gone(
        self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]
    ) -> bool:
        """The incarnation owning ``seen`` can never renew again (never true of ``me``)."""
        if seen.lease_owner == me.worker_id and seen.owner_gen == me.gen:
            return False
        owner = workers.get(seen.lease_owner)
        return owner is None or owner.gen != seen.owner_gen or self.dead(owner, now_ms)

    def drainable(
        self, seen: ConnectionRecord, me: Holder, now_ms: int, workers: Mapping[str, WorkerRecord]
    ) -> bool:
        """STOPPED with a recorded stop time, not drained at its epoch, and owned by an incarnation that can
        never renew again (``workers`` read after ``seen``, as for ``claimable``), or owned by nobody and
        marked by its STOP (``mark_undrained``).  Any other stream nobody owns was released by its last
        owner for this STOP, after consuming it, which leaves nothing to drain."""
        if seen.desired_state != STOPPED or seen.stopped_at_ms is None or self._drained(seen):
            return False
        if not seen.lease_owner:
            return seen.lease_expires_at_ms > 0
        return self._owner_gone(seen, me, now_ms, workers)

    @staticmethod
    def _drained(seen: ConnectionRecord) -> bool:
        return seen.drained_epoch is not None and seen.drained_epoch == seen.epoch

    def drain_until_ms(self, seen: ConnectionRecord) -> int | None:
        """The STOP's reach (``stop_reach_ms``): everything emitted before the STOP took effect is persisted, at
        most that much more."""
        if seen.desired_state != STOPPED or seen.stopped_at_ms is None or self._drained(seen):
            return None
        return self.stop_reach_ms(seen.stopped_at_ms)

    def dead(self, owner: WorkerRecord, now_ms: int) -> bool:
        """Past its expiry by more than the clock tolerance: it can never renew again."""
        return owner.expires_at_ms + self.tolerance_ms < now_ms

    def acquire(self, pk: str, me: Holder, now_ms: int, seen: ConnectionRecord | None = None) -> Write:
        if seen is None:
            raise ValueError("hardened acquire needs the record it decided on")
        unchanged_epoch = Eq("epoch", seen.epoch) if seen.epoch is not None else NotExists("epoch")
        # a drain acquires a STOPPED item as it was seen: stopped at the same time (no START and STOP since)
        state = (all_of(Eq("desired_state", STOPPED), Eq("stopped_at_ms", seen.stopped_at_ms))
                 if seen.desired_state == STOPPED and seen.stopped_at_ms is not None else Eq("desired_state", STARTED))
        if seen.lease_owner:
            unchanged_owner = all_of(Eq("lease_owner", seen.lease_owner), Eq("owner_gen", seen.owner_gen))
        else:
            unchanged_owner = any_of(NotExists("lease_owner"), Eq("lease_owner", ""))
        return Write(
            key={"pk": pk},
            update=Update(set={
                "lease_owner": me.worker_id,
                "owner_gen": me.gen,
                "epoch": (seen.epoch or 0) + 1,
                "lease_expires_at_ms": now_ms + int(self.lease_ms),
                "updated_at_ms": now_ms,
            }),
            condition=all_of(state, unchanged_owner, unchanged_epoch),
        )

    def held(self, lease: Lease, me: Holder) -> Condition:
        return all_of(Eq("lease_owner", me.worker_id), Eq("owner_gen", me.gen), Eq("epoch", lease.epoch))

    def _checkpointed(self, lease: Lease, me: Holder, last_seq: int) -> dict[str, Any]:
        return {"last_seq": last_seq, "ckpt_worker": me.worker_id, "ckpt_gen": me.gen, "ckpt_epoch": lease.epoch}

    def renew(self, lease: Lease, me: Holder, now_ms: int) -> Write:
        raise NotImplementedError("hardened renews the worker, not each connection")

    def release(self, lease: Lease, me: Holder, now_ms: int, last_seq: int, drained: bool = False,
                stopped_at_ms: int | None = None, behind: bool = False) -> Write:
        """Owner cleared and the expiry zeroed (off the listing of STOPPED streams to drain).  With
        ``stopped_at_ms`` (a release for the STOP at that time, a drain's included) only while STOPPED at
        that same time: no START since; and what the stream emitted before the STOP is stored, so the epoch
        is recorded as drained (``drained_epoch``: a repeated STOP does not mark it for a drain again), as a
        finished drain records it.  ``behind``: the holder could not read or store what the stream emitted
        before the STOP (its session was down, or its writes did not finish), so the expiry is 1, the drain
        mark (``mark_undrained``), and a worker drains it.  Any other release (a handoff: a shutdown, a
        give-up) only while STARTED: a STOP its holder has not seen yet must not lose its drain (the holder
        repeats the release for that STOP)."""
        held = self.held(lease, me)
        if stopped_at_ms is not None:
            held = all_of(held, Eq("desired_state", STOPPED), Eq("stopped_at_ms", stopped_at_ms))
        elif not drained:
            held = all_of(held, Eq("desired_state", STARTED))
        return Write(
            key={"pk": lease.pk},
            update=Update(set={
                "lease_owner": "",
                "owner_gen": "",
                "lease_expires_at_ms": 1 if behind else 0,
                "updated_at_ms": now_ms,
                **self._checkpointed(lease, me, last_seq),
                **({"drained_epoch": lease.epoch} if drained or (stopped_at_ms is not None and not behind) else {}),
            }),
            condition=held,
        )

    def checkpoint(self, lease: Lease, me: Holder, now_ms: int, last_seq: int) -> Write | None:
        """Only while held by this incarnation at this epoch and still STARTED (a STOPped stream's
        checkpoint is refused, and its refusal drops the stream)."""
        return Write(
            key={"pk": lease.pk},
            update=Update(set={"updated_at_ms": now_ms, **self._checkpointed(lease, me, last_seq)}),
            condition=all_of(self.held(lease, me), Eq("desired_state", STARTED)),
        )

    def message(self, lease: Lease, me: Holder, seq: int, data: str, now_ms: int) -> Write:
        return Write(
            key={"pk": lease.pk, "sk": seq},
            update=Update(set={
                "message_data": data,
                "timestamp_ms": now_ms,
                "worker_id": me.worker_id,
                "gen": me.gen,
                "epoch": lease.epoch,
            }),
            replace=True,
        )

    def register(self, me: Holder, now_ms: int, task_arn: str = "") -> Write:
        """A conditional update, never a blind put: a new incarnation only over a missing or dead item; a
        retry of this incarnation's own registration only if it moves the expiry forward.  The STOP mailbox
        of the replaced incarnation (whose streams are all abandoned) is emptied, and its task replaced by
        this one's (none: removed, so a late death notice for the old task never names this one)."""
        expires = now_ms + int(self.lease_ms)
        task = {"task_arn": task_arn} if task_arn else {}
        return Write(
            key={"pk": me.worker_id},
            update=Update(set={"gen": me.gen, "expires_at_ms": expires, **task},
                          remove=frozenset({"stop_requests", *(() if task_arn else ("task_arn",))})),
            condition=any_of(
                NotExists("pk"),
                Lt("expires_at_ms", now_ms - int(self.tolerance_ms)),
                all_of(Eq("gen", me.gen), Le("expires_at_ms", expires)),
            ),
        )

    def renew_worker(self, me: Holder, now_ms: int, handled_stops: frozenset[str]) -> Write:
        expires = now_ms + int(self.lease_ms)
        return Write(
            key={"pk": me.worker_id},
            update=Update(
                set={"expires_at_ms": expires},
                delete_from_set={"stop_requests": handled_stops} if handled_stops else {},
            ),
            # Sent at least one request timeout before expiry: a renewal the client still counts lands before
            # any taker could read the item as expired, however long it was in flight.  And an expiry never
            # moves backwards: a renewal delivered after a later one is refused, not applied.
            condition=all_of(
                Exists("pk"), Eq("gen", me.gen), Gt("expires_at_ms", now_ms + int(self.timeout_ms)),
                Le("expires_at_ms", expires),
            ),
        )

    def retire(self, me: Holder) -> Write:
        """A clean exit: the incarnation expires now, so a restart under the same id registers at once."""
        return Write(
            key={"pk": me.worker_id},
            update=Update(set={"expires_at_ms": 0}),
            condition=Eq("gen", me.gen),
        )

    def bury(self, dead: WorkerRecord, stopped_at_ms: int) -> Write:
        """ECS says ``dead``'s task stopped at ``stopped_at_ms``: the incarnation expires now, so its streams are
        claimable at once (``_owner_gone``) and any renewal of it is refused.  Only that generation on that task,
        only once, and only if it has not renewed since the stop (a renewal sets the expiry a lease past its
        sending): one still renewing is alive, whatever ECS says (issue 25 hole 1)."""
        return Write(
            key={"pk": dead.worker_id},
            update=Update(set={"expires_at_ms": 0}),
            condition=all_of(Eq("gen", dead.gen), Eq("task_arn", dead.task_arn), Gt("expires_at_ms", 0),
                             Le("expires_at_ms", stopped_at_ms + int(self.lease_ms))),
        )


def rules_for(config: FleetConfig) -> Rules:
    return {"blog": Rules, "hardened": HardenedRules, "unsafe": UnsafeRules}[config.profile](config)
