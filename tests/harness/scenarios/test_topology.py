"""The local topology's view of drains in progress (``Drains``), from the workers' events as written."""

from __future__ import annotations

from harness.scenarios.topology import Drains

GEN = "4ee80936efff"


def _event(type: str, worker: str = "worker-1", gen: str = GEN, epoch: int = 4, **fields: object) -> dict[str, object]:
    return {"type": type, "pk": "CONN#c005", "worker": worker, "gen": gen, "epoch": epoch, **fields}


def test_a_drain_is_in_progress_from_its_acquire_until_its_done() -> None:
    # explore seed 7104's stream c005: the drain stored seqs 112-125 after the final scan had read the stream
    drains = Drains()
    drains.follow([_event("lease.lost", worker="worker-2", gen="7234a7e015b9", epoch=3,
                          reason="self-fenced: no renewal before the fencing deadline"),
                   _event("lease.acquire", outcome="ok", via="drain")])
    assert drains.of({"worker-1", "worker-2"}) == {"c005"}
    drains.follow([_event("msg.persist", outcome="ok", seq_from=112, seq_to=125)])
    assert drains.of({"worker-1"}) == {"c005"}
    drains.follow([_event("drain.done", seq=125), _event("lease.release", outcome="ok", reason="drained")])
    assert drains.of({"worker-1"}) == set()


def test_a_drain_ends_with_its_own_incarnations_release_or_loss_at_its_epoch() -> None:
    drains = Drains()
    drains.follow([_event("lease.acquire", outcome="ok", via="drain")])
    drains.follow([_event("lease.lost", gen="another"), _event("lease.release", epoch=3)])
    assert drains.of({"worker-1"}) == {"c005"}
    drains.follow([_event("lease.lost", reason="fenced before release")])
    assert drains.of({"worker-1"}) == set()


def test_only_an_acquire_via_drain_that_succeeded_opens_a_drain() -> None:
    drains = Drains()
    drains.follow([_event("lease.acquire", outcome="ok", via="adopted"),
                   _event("lease.acquire", outcome="fail", via="drain", worker="worker-2")])
    assert drains.of({"worker-1", "worker-2"}) == set()


def test_a_drain_of_a_worker_whose_process_ended_is_not_waited_for() -> None:
    drains = Drains()
    drains.follow([_event("lease.acquire", outcome="ok", via="drain")])
    assert drains.of({"worker-2"}) == set()
    drains.follow([{"type": "worker.start", "worker": "worker-1", "pid": 7}])  # killed, then started again
    assert drains.of({"worker-1"}) == set()
