"""A change feed for a DynamoDB endpoint that has no Streams (dynalite): an HTTP proxy the region's fleet talks
to instead, which forwards every request and, after each write the endpoint accepted, reports the items it
wrote with the time the answer passed.  The fleet's code is unchanged, as it is under real Global Tables.

What a write reports, per item (table, key, image; an image of ``None`` is a deletion):
- ``PutItem``: the item sent;
- ``DeleteItem``: the deletion;
- ``UpdateItem``: the item read back from the endpoint (a consistent ``GetItem``).  A later write may land
  first; the image is then that write's, which reports itself too, so the feed stays in order per item.
- ``BatchWriteItem``: each put or delete, except what the answer lists as unprocessed;
- ``TransactWriteItems``: each put, update or delete (where the endpoint has transactions).

A refused write (any answer but 200) reports nothing.  Keys are read from each table's key schema
(``DescribeTable``, once per table).  Each request, from its forwarding to its report, runs inside
``guard(items)`` (the (table, key) pairs it writes; by default nothing): Global Tables holds an item
exclusively while it applies a replicated write of it, so no write of that item the endpoint has committed
is still unreported then (last-writer-wins is decided on what the table holds).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from harness import http_client
from harness.quiet_http import QuietHTTPServer

TARGET_PREFIX = "DynamoDB_20120810."
FORWARDED_HEADERS = ("Content-Type", "X-Amz-Target", "X-Amz-Date", "Authorization", "X-Amz-Security-Token")
Change = Callable[[str, dict[str, Any], "dict[str, Any] | None", float], None]  # table, key, image, written_ms


class ChangeFeedProxy:
    """Serves on ``url`` (after ``start``), forwarding to ``upstream_url`` and calling ``on_change``."""

    def __init__(self, upstream_url: str, on_change: Change) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.on_change = on_change
        self.session = http_client.Session(timeout_s=30)  # connections kept open: no connect per request
        self.key_names: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.down = False  # the region's DynamoDB is out (a fault): every request answered 503
        self.guard: Callable[[list[tuple[str, dict[str, Any]]]], contextlib.AbstractContextManager[object]] = \
            lambda items: contextlib.nullcontext()
        self.server = QuietHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ChangeFeedProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        self.session.close()

    def call(self, target: str, body: dict[str, Any] | bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """One request to the endpoint, with the client's headers (dynalite checks their form, not their
        signature)."""
        answer = self.session.request("POST", "http://{}:{}/".format(*self.upstream),
                                      body=body if isinstance(body, bytes) else json.dumps(body).encode(),
                                      headers={**headers, "X-Amz-Target": TARGET_PREFIX + target})
        return answer.status, answer.body

    def report(self, target: str, request: dict[str, Any], answer: dict[str, Any], headers: dict[str, str]) -> None:
        written_ms = time.time() * 1000.0
        for table, key, image in self._written(target, request, answer, headers):
            self.on_change(table, key, image, written_ms)

    def _written(self, target: str, request: dict[str, Any], answer: dict[str, Any],
                 headers: dict[str, str]) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        if target == "PutItem":
            return [(request["TableName"], self._key(request["TableName"], request["Item"], headers),
                     request["Item"])]
        if target in ("DeleteItem", "UpdateItem"):
            table, key = request["TableName"], request["Key"]
            return [(table, key, None if target == "DeleteItem" else self._read(table, key, headers))]
        if target == "BatchWriteItem":
            unprocessed = answer.get("UnprocessedItems") or {}
            return [(table, self._key(table, r["PutRequest"]["Item"], headers), r["PutRequest"]["Item"])
                    if "PutRequest" in r else (table, r["DeleteRequest"]["Key"], None)
                    for table, requests in request["RequestItems"].items() for r in requests
                    if r not in unprocessed.get(table, [])]
        if target == "TransactWriteItems":
            operations = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem"}
            return [entry for item in request["TransactItems"] for kind, part in item.items() if kind in operations
                    for entry in self._written(operations[kind], part, {}, headers)]
        return []

    def targets(self, target: str, request: dict[str, Any],
                headers: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
        """The (table, key) pairs a request would write (none for a read)."""
        if target == "PutItem":
            return [(request["TableName"], self._key(request["TableName"], request["Item"], headers))]
        if target in ("DeleteItem", "UpdateItem"):
            return [(request["TableName"], request["Key"])]
        if target == "BatchWriteItem":
            return [(table, self._key(table, r["PutRequest"]["Item"], headers) if "PutRequest" in r
                     else r["DeleteRequest"]["Key"])
                    for table, requests in request["RequestItems"].items() for r in requests]
        if target == "TransactWriteItems":
            operations = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem"}
            return [pair for item in request["TransactItems"] for kind, part in item.items() if kind in operations
                    for pair in self.targets(operations[kind], part, headers)]
        return []

    def _key(self, table: str, item: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            names = self.key_names.get(table)
        if names is None:
            status, body = self.call("DescribeTable", {"TableName": table}, headers)
            names = [k["AttributeName"] for k in json.loads(body)["Table"]["KeySchema"]] if status == 200 else []
            with self.lock:
                self.key_names[table] = names
        return {name: item[name] for name in names if name in item}

    def _read(self, table: str, key: dict[str, Any], headers: dict[str, str]) -> dict[str, Any] | None:
        status, body = self.call("GetItem", {"TableName": table, "Key": key, "ConsistentRead": True}, headers)
        item: dict[str, Any] | None = json.loads(body).get("Item") if status == 200 else None
        return item

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # the body goes out at once, not after the headers' ACK (40 ms)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name: self.headers[name] for name in FORWARDED_HEADERS if self.headers.get(name)}
                target = headers.get("X-Amz-Target", "").removeprefix(TARGET_PREFIX)
                try:
                    items = proxy.targets(target, json.loads(raw or b"{}"), headers)
                except (ValueError, KeyError, TypeError, AttributeError):
                    items = []  # malformed: the endpoint refuses it, nothing is written
                with proxy.guard(items):
                    self._forward(target, raw, headers)

            def _forward(self, target: str, raw: bytes, headers: dict[str, str]) -> None:
                try:
                    if proxy.down:
                        raise OSError("the region's DynamoDB is down (fault)")
                    status, body = proxy.call(target, raw, headers)
                except OSError as exc:  # the endpoint is down: what a client of DynamoDB sees then
                    status, body = 503, json.dumps({"__type": "ServiceUnavailable", "message": str(exc)}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                finally:  # after the answer (the feed never slows the write down), even to a client gone
                    if status == 200:
                        proxy.report(target, json.loads(raw or b"{}"), json.loads(body or b"{}"), headers)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
