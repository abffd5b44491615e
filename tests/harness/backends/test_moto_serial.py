"""The serialising middleware: DynamoDB requests never overlap, other requests do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from harness.backends.moto_serial import SerialisedDynamoDB


class _CountingApp:
    """A WSGI app that records the most requests it ever had in flight at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.guard = threading.Lock()
        self.all_inside = threading.Barrier(4, timeout=5)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with self.guard:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        if environ.get("wait_for_all"):
            self.all_inside.wait()  # only returns when the four requests are inside together
        else:
            time.sleep(0.02)
        with self.guard:
            self.in_flight -= 1
        start_response("200 OK", [])
        return [b"ok"]


def _run_together(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> list[bytes]:
    bodies: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: bodies.extend(app(dict(environ), lambda *a: None))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return bodies


def test_dynamodb_requests_run_one_at_a_time() -> None:
    inner = _CountingApp()
    bodies = _run_together(SerialisedDynamoDB(inner), {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.UpdateItem"})
    assert bodies == [b"ok"] * 4
    assert inner.most == 1


def test_streams_requests_are_serialised_too() -> None:
    inner = _CountingApp()
    _run_together(SerialisedDynamoDB(inner), {"HTTP_X_AMZ_TARGET": "DynamoDBStreams_20120810.GetRecords"})
    assert inner.most == 1


def test_other_services_run_concurrently() -> None:
    inner = _CountingApp()
    bodies = _run_together(SerialisedDynamoDB(inner), {"wait_for_all": True})  # an SQS query request
    assert bodies == [b"ok"] * 4
    assert inner.most == 4
