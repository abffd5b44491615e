"""Coverage: each transition counted from a literal history, and what no run reached listed as not covered."""

from __future__ import annotations

from harness.checkers.coverage import TRANSITIONS, ZOMBIE_MISSED, coverage, not_covered

A, B = "CONN#a", "CONN#b"


def test_each_transition_is_counted_by_the_path_the_history_shows(build) -> None:
    build.run_start(profile="hardened")
    build.acquire(0, A, "worker-1", 2000, epoch=1, gen="g1", via="notify")
    build.acquire(0, B, "worker-2", 2000, epoch=1, gen="g2", via="notify")
    build.at(100, "ws.open", "worker-1", pk=A, worker="worker-1", gen="g1")
    build.at(200, "ws.close", "worker-1", pk=A, worker="worker-1", gen="g1", reason="upstream dropped")
    build.at(300, "ws.open", "worker-1", pk=A, worker="worker-1", gen="g1")  # reconnect in place
    # worker-1 is buried by a death notice; worker-2 takes its stream on the sweep that follows
    build.at(1000, "death.notice", "worker-2", worker="worker-2", gen="g2", task="t1", outcome="confirmed",
             buried=["worker-1@g1"])
    build.acquire(1100, A, "worker-2", 3100, epoch=2, gen="g2", via="reconcile")
    build.at(1200, "death.notice", "worker-3", worker="worker-3", gen="g3", task="t2", outcome="refuted", buried=[])
    # worker-2 transfers A to worker-4, which takes it up
    build.at(1500, "lease.release", "worker-2", pk=A, worker="worker-2", gen="g2", epoch=2, outcome="ok",
             reason="rebalance", to="worker-4")
    build.acquire(1700, A, "worker-4", 3700, epoch=3, gen="g4", via="balance")
    # worker-2's lease of B lapses (self-fenced); worker-3 takes it at expiry; B is STOPPED, so a drain
    build.at(2100, "lease.lost", "worker-2", pk=B, worker="worker-2", gen="g2", epoch=1,
             reason="self-fenced: no renewal before the fencing deadline")
    build.acquire(4000, B, "worker-3", 6000, epoch=2, gen="g3", via="drain")
    build.at(4100, "event", "router", pk=B, kind="STOP", status=200, written_ms=4100)
    build.at(4500, "drain.done", "worker-3", pk=B, worker="worker-3", gen="g3", epoch=2)
    build.at(4600, "lease.release", "worker-3", pk=B, worker="worker-3", gen="g3", epoch=2, outcome="ok",
             reason="drained")
    # worker-1, buried while its process still ran (a zombie), sends its next batch: the log refuses it, as
    # ``fleet.connection`` writes it (a batch of unknown outcome, retried, is not a refusal: not counted)
    build.persist(4650, A, "worker-1", 9, epoch=1, gen="g1", outcome="info", note="timed out")
    build.persist(4700, A, "worker-1", 9, epoch=1, gen="g1", outcome="fail",
                  note="superseded: CONN#a item 4 was taken by mark of Writer(worker='worker-4', gen='g4', "
                       "epoch=3, take=1)")
    build.acquire(4800, A, "worker-1", 6800, epoch=None, gen="g5", outcome="fail", via="notify")
    # worker-4 cannot reach A's upstream past the budget: it lets A go for a worker that can
    build.at(4900, "lease.release", "worker-4", pk=A, worker="worker-4", gen="g4", epoch=3, outcome="ok",
             reason="upstream unreachable past budget")

    counts = coverage(build.frame())

    reached = {name: count for name, count in counts.items() if count}
    assert reached == {"acquire:notification": 2, "acquire:death notice": 1, "acquire:transfer": 1,
                       "acquire:drain": 1, "acquire refused": 1, "takeover at expiry": 1, "release:rebalance": 1,
                       "release:drained": 1, "transfer": 1, "burial": 1, "notice refuted": 1, "drain done": 1,
                       "fenced write": 1, "self-fence": 1, "reconnect in place": 1,
                       "STOP honoured while draining": 1, "release:upstream unreachable past budget": 1}
    assert set(not_covered(counts)) == set(TRANSITIONS) - set(reached)
    assert "acquire:sweep" in not_covered(counts)  # the sweep after the burial counts as the notice's


def test_an_empty_history_covers_nothing(build) -> None:
    counts = coverage(build.run_start().frame())
    assert not_covered(counts) == list(TRANSITIONS) and sum(counts.values()) == 0
    # a release the fleet writes when a stream's upstream stays unreachable past its budget is listed too
    assert "release:upstream unreachable past budget" in not_covered(counts)


def test_a_lost_lease_is_counted_by_its_cause(build) -> None:
    build.run_start(profile="hardened")
    causes = ["worker lease expired", "renew refused", "shutdown budget spent: left to lapse",
              "fenced before release", "incarnation ended during the acquire", "rebalance: its writes did not end",
              "self-fenced: no renewal before the fencing deadline"]
    for t, reason in enumerate(causes):
        build.at(100 * t, "lease.lost", "worker-1", pk=A, worker="worker-1", gen="g1", epoch=1, reason=reason)

    counts = coverage(build.frame())

    assert {name: count for name, count in counts.items() if count} == {
        "lease lost:renewal refused": 2, "lease lost:shutdown budget spent": 1, "lease lost:fenced before release": 1,
        "lease lost:incarnation ended during the acquire": 1, "lease lost:its writes did not end": 1,
        "self-fence": 1}
    assert "lease lost:its writes did not end" not in TRANSITIONS  # a cause of its own, shown when reached


def test_a_zombie_is_counted_by_whether_it_was_thawed_after_its_takeover_or_at_its_fence(build) -> None:
    build.run_start(profile="hardened")
    for t, thawed in ((1000, "after takeover"), (5000, "at its fence"), (9000, "after takeover")):
        build.at(t, "fault.start", "nemesis", kind="zombie", target="worker-1", params={})
        build.at(t + 900, "fault.stop", "nemesis", kind="zombie", target="worker-1", params={"thawed": thawed})
    build.fault(12000, "pause", "worker-2", stop_t=13000)

    counts = coverage(build.frame())

    assert counts["zombie thawed after takeover"] == 2 and counts[ZOMBIE_MISSED] == 1
    assert "zombie thawed after takeover" in TRANSITIONS and ZOMBIE_MISSED not in TRANSITIONS
    assert ZOMBIE_MISSED not in not_covered(coverage(build.run_start().frame()))  # a miss is no transition
