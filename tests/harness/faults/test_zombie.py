"""The zombie's thaw decision: read from literal events, as the workers write them."""

from __future__ import annotations

from typing import Any

from harness.faults.zombie import AFTER_TAKEOVER, AT_FENCE, ZombieWatch

A, B, C = "CONN#a", "CONN#b", "CONN#c"


def event(t: float, type: str, worker: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "src": worker, "type": type, "worker": worker, "outcome": "ok", **fields}


def frozen_worker_1(marks: bool = True) -> ZombieWatch:
    """worker-1 (incarnation g1) took A and B at epoch 1 and C at epoch 3, gave C back, and renewed: sent at
    1000 (its lease clock 50 ms behind), answered at 1020."""
    watch = ZombieWatch("worker-1", fence_ms=900.0, lease_ms=2000.0, offset_ms=-50.0, marks=marks)
    for e in (event(0, "lease.renew", "worker-1", gen="g0"),
              event(10, "lease.acquire", "worker-1", gen="g1", pk=A, epoch=1),
              event(20, "lease.acquire", "worker-1", gen="g1", pk=B, epoch=1),
              event(30, "lease.acquire", "worker-1", gen="g1", pk=C, epoch=3),
              event(500, "lease.renew", "worker-1", gen="g1"),
              event(600, "lease.release", "worker-1", gen="g1", pk=C, epoch=3, reason="rebalance", to="worker-2"),
              event(1020, "lease.renew", "worker-1", gen="g1", expires_ms=2950.0),
              event(1020, "lease.renew", "worker-1", gen="g1", pk=A, outcome="fail")):
        watch.see(e)
    return watch


def test_a_zombie_is_thawed_once_buried_and_a_stream_it_held_is_taken_up_by_another() -> None:
    watch = frozen_worker_1()
    assert watch.thaw(1100) is None
    watch.see(event(1200, "log.mark", "worker-2", gen="g2", pk=C, epoch=4))  # C: given back before the freeze
    watch.see(event(1200, "log.mark", "worker-2", gen="g2", pk=A, epoch=1))  # A's earlier take-up, not a takeover
    watch.see(event(1250, "lease.acquire", "worker-2", gen="g2", pk=B, epoch=2))  # acquired, its mark not yet put
    watch.see(event(1300, "death.notice", "worker-3", gen="g3", buried=["worker-1@g0"]))  # an older incarnation
    assert watch.thaw(1400) is None
    watch.see(event(1450, "death.notice", "worker-3", gen="g3", buried=["worker-1@g1"]))
    assert watch.thaw(1500) is None  # buried, no stream taken up yet
    watch.see(event(1600, "log.mark", "worker-2", gen="g2", pk=B, epoch=2))
    assert watch.thaw(1650) == AFTER_TAKEOVER and watch.taken == B


def test_the_takeover_may_be_seen_before_the_burial_from_another_file() -> None:
    watch = frozen_worker_1()
    watch.see(event(1600, "log.mark", "worker-2", gen="g2", pk=A, epoch=2))
    assert watch.thaw(1610) is None
    watch.see(event(1450, "death.notice", "worker-3", gen="g3", buried=["worker-1@g1"]))
    assert watch.thaw(1620) == AFTER_TAKEOVER and watch.taken == A


def test_without_a_takeover_it_is_thawed_at_its_fence_counted_from_its_last_renewal() -> None:
    watch = frozen_worker_1()
    watch.see(event(1450, "death.notice", "worker-3", gen="g3", buried=["worker-1@g1"]))
    assert watch.thaw(1899) is None
    assert watch.thaw(1900) == AT_FENCE and watch.taken is None
    watch.see(event(1300, "lease.renew", "worker-1", gen="g1", outcome="info", expires_ms=3200.0,
                    note="answered late"))
    assert watch.thaw(1900) == AT_FENCE  # a late answer does not move the fence


def test_where_the_log_is_not_marked_the_takers_acquire_is_the_takeover() -> None:
    watch = frozen_worker_1(marks=False)
    watch.see(event(1450, "death.notice", "worker-3", gen="g3", buried=["worker-1@g1"]))
    watch.see(event(1500, "lease.acquire", "worker-2", gen="g2", pk=B, epoch=2))
    assert watch.thaw(1510) == AFTER_TAKEOVER and watch.taken == B


def test_a_worker_never_seen_renewing_has_no_fence_to_wait_for() -> None:
    assert ZombieWatch("worker-1", fence_ms=900.0, lease_ms=2000.0).thaw(0) == AT_FENCE


def test_it_may_be_thawed_until_fence_ms_after_its_last_renewal_was_sent_by_its_expiry_or_answered() -> None:
    assert frozen_worker_1().closes_ms == 1900.0
    watch = frozen_worker_1()
    watch.see(event(1520, "lease.renew", "worker-1", gen="g1", expires_ms=9999.0))  # a clock stepped since
    assert watch.closes_ms == 1520.0 + 900.0  # never later than from its answer
