"""A model of the fleet's coordination, with no network: a model store that applies ``fleet.expr.Write``
values, workers that decide with their ``fleet.profiles`` profile and its rules, skewed clocks, pauses,
requests that arrive late and requests the network delivers twice.  ``Simulation.violations`` lists every
write accepted for a stream after another holding of that stream was granted (two workers' accepted writes
in overlapping intervals); ``Simulation.expiry_regressions`` every worker item whose expiry went down
within one generation."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleet.config import FleetConfig
from fleet.expr import Write
from fleet.lease import STARTED, ConnectionRecord, Holder, Lease, WorkerRecord
from fleet.profiles import Profile
from fleet.schema import conn_pk


@dataclass
class ModelWorker:
    worker_id: str
    offset_ms: int
    gen: str
    registered: bool
    fence_deadline: float = float("inf")  # true time (the monotonic clock runs at true rate)
    held: dict[str, Lease] = field(default_factory=dict)

    @property
    def me(self) -> Holder:
        return Holder(self.worker_id, self.gen)


@dataclass
class Holding:
    worker_id: str
    gen: str
    epoch: int
    granted_at: float
    writes: list[float] = field(default_factory=list)


class Simulation:
    """Discrete events over true time in ms; requests apply ``delay`` ms after they are sent."""

    def __init__(self, profile: Profile, offsets_ms: list[int], streams: int = 2) -> None:
        self.profile = profile
        self.rules = rules = profile.rules
        self.now = 0.0
        self.tables: dict[str, dict[str, dict[str, Any]]] = {"conn": {}, "workers": {}, "msg": {}}
        for i in range(streams):
            pk = conn_pk(f"c{i}")
            self.tables["conn"][pk] = {"pk": pk, "desired_state": STARTED, "ws_url": "ws://u/",
                                       "lease_owner": "", "lease_expires_at_ms": 0, "last_seq": 0, "epoch": 0}
        self.workers = [
            ModelWorker(f"w{i}", off, f"g{i}-0", registered=rules.register(Holder(f"w{i}", ""), 0) is None)
            for i, off in enumerate(offsets_ms)
        ]
        self._gens = itertools.count(1)
        self._order = itertools.count()
        self._pending: list[tuple[float, int, Callable[[], None]]] = []
        self.holdings: dict[str, list[Holding]] = {pk: [] for pk in self.tables["conn"]}
        self._seq = itertools.count(1)
        # every write sent, with what its acceptance proves (a holder's write landed), for duplicates
        self.sent: list[tuple[str, Write, Callable[[float], None] | None]] = []
        self.expiries: dict[tuple[str, str], list[int]] = {}

    # -- time ------------------------------------------------------------------------------------------
    def wall(self, w: ModelWorker) -> int:
        return int(self.now) + w.offset_ms

    def advance(self, dt: float) -> None:
        target = self.now + dt
        while self._pending and self._pending[0][0] <= target:
            at, _, apply = heapq.heappop(self._pending)
            self.now = max(self.now, at)
            apply()
        self.now = target

    def _send(self, table: str, write: Write, delay: float,
              on_result: Callable[[bool, dict[str, Any], float], None] | None,
              witness: Callable[[float], None] | None = None) -> None:
        """Deliver ``write`` after ``delay``; ``on_result`` gets the answer (None: nobody waits for it),
        ``witness`` the time it was accepted."""
        key = str(write.key["pk"]) + ("" if "sk" not in write.key else f"#{write.key['sk']}")
        if on_result is not None:
            self.sent.append((table, write, witness))

        def apply() -> None:
            item = self.tables[table].get(key)
            ok = write.allowed(item)
            if ok:
                self.tables[table][key] = write.apply(item)
                stored = self.tables[table][key]
                if table == "workers":
                    self.expiries.setdefault((key, stored["gen"]), []).append(int(stored["expires_at_ms"]))
                if witness is not None:
                    witness(self.now)
            if on_result is not None:
                on_result(ok, self.tables[table].get(key, {}), self.now)

        heapq.heappush(self._pending, (self.now + delay, next(self._order), apply))

    def duplicate(self, index: int, delay: float) -> None:
        """The network delivers one earlier request again (its answer reaches nobody)."""
        if self.sent:
            table, write, witness = self.sent[index % len(self.sent)]
            self._send(table, write, delay, None, witness)

    def fenced(self, w: ModelWorker) -> bool:
        return self.now >= w.fence_deadline

    # -- worker actions --------------------------------------------------------------------------------
    def heartbeat(self, i: int, delay: float) -> None:
        w = self.workers[i]
        if self.rules.register(w.me, 0) is None:
            return  # no worker liveness: nothing to renew here
        sent = self.now
        answered_in_time = self.profile.on_time(delay / 1000.0)
        gen = w.gen
        if not w.registered:
            write = self.rules.register(w.me, self.wall(w))

            def registered(ok: bool, item: dict[str, Any], at: float) -> None:
                if ok and answered_in_time and w.gen == gen:
                    w.registered = True
                    w.fence_deadline = self.profile.fence_deadline(sent / 1000.0) * 1000.0

            assert write is not None
            self._send("workers", write, delay, registered)
            return
        renew = self.rules.renew_worker(w.me, self.wall(w), frozenset())
        assert renew is not None

        def renewed(ok: bool, item: dict[str, Any], at: float) -> None:
            if w.gen != gen:
                return
            if ok and answered_in_time:
                w.fence_deadline = max(w.fence_deadline, self.profile.fence_deadline(sent / 1000.0) * 1000.0)
            elif not ok:
                w.held.clear()
                w.registered = False
                w.gen = f"g{i}-{next(self._gens)}"
                w.fence_deadline = 0.0

        self._send("workers", renew, delay, renewed)

    def acquire(self, i: int, stream: int, delay: float) -> None:
        w = self.workers[i]
        pk = conn_pk(f"c{stream % len(self.holdings)}")
        if not w.registered or self.fenced(w) or pk in w.held:
            return
        seen = ConnectionRecord.from_item(self.tables["conn"][pk])
        records = {wid: WorkerRecord.from_item(item) for wid, item in self.tables["workers"].items()}
        if not self.rules.claimable(seen, w.me, self.wall(w), records):
            return
        write = self.rules.acquire(pk, w.me, self.wall(w), seen)
        gen = w.gen

        def granted(ok: bool, item: dict[str, Any], at: float) -> None:
            if not ok:
                return
            lease = Lease.granted(item)
            self.holdings[pk].append(Holding(w.worker_id, gen, lease.epoch, at))
            if w.gen == gen:
                w.held[pk] = lease

        self._send("conn", write, delay, granted)

    def _holding(self, pk: str, w: ModelWorker, lease: Lease) -> Holding:
        return next(h for h in reversed(self.holdings[pk])
                    if h.worker_id == w.worker_id and h.epoch == lease.epoch)

    def write_message(self, i: int, stream: int, delay: float) -> None:
        w = self.workers[i]
        pk = conn_pk(f"c{stream % len(self.holdings)}")
        lease = w.held.get(pk)
        if lease is None or self.fenced(w):
            return
        holding = self._holding(pk, w, lease)
        write = self.rules.message(lease, w.me, next(self._seq), "data", self.wall(w))
        self._send("msg", write, delay, lambda ok, item, at: None, holding.writes.append)

    def checkpoint(self, i: int, stream: int, delay: float) -> None:
        w = self.workers[i]
        pk = conn_pk(f"c{stream % len(self.holdings)}")
        lease = w.held.get(pk)
        if lease is None or self.fenced(w):
            return
        write = self.rules.checkpoint(lease, w.me, self.wall(w), 1)
        if write is None:
            return
        holding = self._holding(pk, w, lease)

        def checkpointed(ok: bool, item: dict[str, Any], at: float) -> None:
            if not ok:
                w.held.pop(pk, None)

        self._send("conn", write, delay, checkpointed, holding.writes.append)

    def release(self, i: int, stream: int, delay: float) -> None:
        w = self.workers[i]
        pk = conn_pk(f"c{stream % len(self.holdings)}")
        lease = w.held.pop(pk, None)
        if lease is None or self.fenced(w):
            return
        self._send("conn", self.rules.release(lease, w.me, self.wall(w), 0), delay, lambda ok, item, at: None)

    # -- the properties --------------------------------------------------------------------------------
    def expiry_regressions(self) -> list[str]:
        return [f"{worker}/{gen}: expiry went from {a} to {b}"
                for (worker, gen), seen in self.expiries.items() for a, b in itertools.pairwise(seen) if b < a]

    def violations(self) -> list[str]:
        found = []
        for pk, holdings in self.holdings.items():
            for earlier, later in itertools.combinations(sorted(holdings, key=lambda h: h.granted_at), 2):
                late = [t for t in earlier.writes if t > later.granted_at]
                if late:
                    found.append(f"{pk}: {earlier.worker_id}/{earlier.epoch} wrote at {late[0]:.0f} after "
                                 f"{later.worker_id}/{later.epoch} was granted at {later.granted_at:.0f}")
        return found


def model_config(profile: str) -> FleetConfig:
    return FleetConfig(profile=profile, worker_id="model")  # type: ignore[arg-type]
