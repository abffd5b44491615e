"""The worker process's front door: configuration errors, a backend that is down, ``--help``."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from fleet import worker
from fleet.config import FleetConfig


def test_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert worker.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "WSFLEET_LEASE_MS" in out and "WSFLEET_PROFILE" in out


@pytest.mark.parametrize(("env", "message"), [
    ({"WSFLEET_PROFILE": "fast"}, "WSFLEET_PROFILE must be one of"),
    ({"WSFLEET_LEASE_MS": "soon"}, "WSFLEET_LEASE_MS must be a number"),
    ({"WSFLEET_QUEUE_URL": ""}, "WSFLEET_QUEUE_URL is not set"),
])
def test_bad_configuration_exits_2_with_the_reason(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                    env: dict[str, str], message: str) -> None:
    monkeypatch.setenv("WSFLEET_QUEUE_URL", "http://127.0.0.1:9/q")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert worker.main([]) == 2
    assert message in capsys.readouterr().err


def test_a_backend_that_is_down_exits_1_with_the_reason(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(worker, "STARTUP_PATIENCE_S", 0.5)
    down = {"WSFLEET_QUEUE_URL": "http://127.0.0.1:9/q", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
    for name, value in down.items():
        monkeypatch.setenv(name, value)
    assert worker.main([]) == 1
    err = capsys.readouterr().err
    assert "cannot start: DynamoDB did not answer" in err and "Traceback" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "fast"], "WSFLEET_PROFILE must be one of"),
    (["--verbose"], "unknown argument '--verbose'"),
    (["--profile"], "--profile needs a value"),
    (["hardened"], "unknown argument 'hardened'"),
])
def test_bad_arguments_exit_2_with_the_reason(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                              args: list[str], message: str) -> None:
    monkeypatch.setenv("WSFLEET_QUEUE_URL", "http://127.0.0.1:9/q")
    assert worker.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "usage: python -m fleet.worker" in err and "Traceback" not in err


def test_profile_and_worker_id_arguments_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[FleetConfig] = []

    async def fake_serve(config: FleetConfig) -> None:
        served.append(config)

    monkeypatch.setenv("WSFLEET_QUEUE_URL", "http://127.0.0.1:9/q")
    monkeypatch.setenv("WSFLEET_PROFILE", "blog")
    monkeypatch.setattr(worker, "serve", fake_serve)
    assert worker.main(["--profile", "hardened", "--worker-id=w7"]) == 0
    assert [(c.profile, c.worker_id) for c in served] == [("hardened", "w7")]


FULL_COLLECTIONS = """
import collections, gc, sys
thresholds, requests = tuple(map(int, sys.argv[1:4])), int(sys.argv[4])
gc.collect()
gc.set_threshold(*thresholds)
held = [{"stream": [i]} for i in range(20_000)]
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
in_flight = collections.deque(maxlen=2_000)
for i in range(requests):
    request = [i]
    request.append(request)
    in_flight.append(request)
print(len(full))
"""


def full_collections(thresholds: tuple[int, int, int], requests: int) -> int:
    """Full collections run under ``thresholds`` while a heap is held (the held streams' objects) and
    ``requests`` churn: each leaves a cycle that stays referenced while 2,000 later ones are in flight.
    Counted in a fresh interpreter: the collector's rule for a full collection weighs the whole heap, so the
    test process's own objects (other tests' modules) would change the answer."""
    answer = subprocess.run([sys.executable, "-c", FULL_COLLECTIONS, *map(str, thresholds), str(requests)],
                            capture_output=True, text=True, check=True)
    return int(answer.stdout)


def test_a_worker_runs_no_full_collection_for_its_requests_short_lived_cycles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU per held stream (issue 26): the worker sets the collector's thresholds (``GC_THRESHOLDS``) before
    it serves.  Under them 100,000 requests' short-lived cycles trigger no walk of every held object, where
    CPython's defaults do; the old generation is still walked, ten times less often, so what dies there (a
    dropped stream's session) is freed."""
    set_when_serving: list[tuple[int, int, int]] = []

    async def fake_serve(config: FleetConfig) -> None:
        set_when_serving.append(gc.get_threshold())

    previous = gc.get_threshold()
    monkeypatch.setattr(worker, "serve", fake_serve)
    monkeypatch.setenv("WSFLEET_QUEUE_URL", "http://127.0.0.1:9/q")
    try:
        assert worker.main([]) == 0
    finally:
        gc.set_threshold(*previous)
    assert set_when_serving == [worker.GC_THRESHOLDS]
    assert full_collections(worker.GC_THRESHOLDS, 100_000) == 0
    assert full_collections((700, 10, 10), 100_000) > 0  # CPython's defaults
    assert full_collections(worker.GC_THRESHOLDS, 1_000_000) > 0
