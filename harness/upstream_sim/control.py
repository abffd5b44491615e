"""The plain-HTTP side of the simulated upstream's one port: request parsing, routing and JSON answers.

WebSocket handshakes (requests with ``Upgrade: websocket``) go to ``/streams/{id}?from_seq=N``; every other
request is the control API:

- ``GET /health`` -> ``{"ok": true}``
- ``GET /stats`` -> ``{"handshakes": {attempted, accepted, rejected}, "live_sessions": N}``: the running totals
  of subscription handshakes (see ``harness.upstream_sim.handshakes``) and the sessions open now
- ``GET /streams`` -> ``{"streams": [stream, ...]}``
- ``GET /streams/{id}`` -> stream: ``{id, head_seq, oldest_seq, rate, created, sessions: [session, ...]}``
- ``POST /streams/{id}[?rate=R]`` -> create the stream, emission starting now (201; 200 if it existed;
  409 if it exists with another rate)
- ``POST /streams/{id}/disconnect`` -> drop its live sessions (reason ``server_reset``):
  ``{id, disconnected}``
- ``POST /disconnect[?fraction=F]`` -> the same for every stream, or for a share F in (0, 1] of the live
  sessions, chosen at random with the simulator's seed (a mass disconnect): ``{disconnected}``
- ``GET /redirect?location=URL`` (plain or WebSocket handshake) -> ``302 Found`` with ``Location: URL``, so a
  client's handling of redirects can be tested (an http, https, ws or wss URL of at most 2,048 characters)

Errors are ``{"error": "..."}`` with status 400 (bad id or parameter), 403 (a browser), 404 (unknown stream
or path), 405 (method), 409 (rate conflict), 429 (a handshake over the new-connection quota, with a
``Retry-After`` header in whole seconds at time scale 1, at least 1) or 503 (shutting down).  Requests with a
body are refused by the WebSocket library itself, so every parameter travels in the query string.

Browsers must not be able to drive the simulator (a page the operator visits could otherwise start streams
or reset sessions), so, like Toxiproxy, every request (control, redirect or subscription) whose
``User-Agent`` starts with ``Mozilla/``, that carries an ``Origin`` header, or whose ``Sec-Fetch-Site`` is
other than ``same-origin`` or ``none`` is refused with 403.  Every parameter is bounded: ``rate`` in
(0, ``MAX_RATE``], ``from_seq`` in [1, ``MAX_SEQ``], ``fraction`` in (0, 1].
"""

from __future__ import annotations

import http
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from harness.upstream_sim.streams import Stream, is_valid_connection_id

if TYPE_CHECKING:
    from harness.upstream_sim.server import UpstreamSimulator

STREAMS_PREFIX = "/streams/"
REDIRECT_PATH = "/redirect"
MAX_RATE = 10_000.0  # messages per second per stream
MAX_SEQ = 2**31 - 1
MAX_LOCATION_CHARS = 2048
REDIRECT_SCHEMES = frozenset({"http", "https", "ws", "wss"})
SAFE_FETCH_SITES = frozenset({"same-origin", "none"})


class RequestError(Exception):
    """A request the simulator refuses; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Subscription:
    """What a WebSocket handshake asks for."""

    connection_id: str
    from_seq: int | None


def json_response(status: int, payload: dict[str, Any], extra_headers: Iterable[tuple[str, str]] = ()) -> Response:
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = Headers(
        [
            *extra_headers,
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


def error_response(status: int, message: str) -> Response:
    return json_response(status, {"error": message})


def throttled_response(retry_after: int) -> Response:
    """The new-connection quota's answer to a handshake over it: 429 with ``Retry-After`` in whole seconds."""
    return json_response(
        429,
        {"error": f"new-connection quota exceeded: retry after {retry_after} s"},
        [("Retry-After", str(retry_after))],
    )


def is_websocket_upgrade(request: Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


def refuse_browser(request: Request) -> None:
    """Raise RequestError(403) for a request a browser made (see the module docstring)."""
    headers = request.headers
    if headers.get("User-Agent", "").startswith("Mozilla/"):
        raise RequestError(403, "browsers may not use the simulator (User-Agent Mozilla/...)")
    if "Origin" in headers:
        raise RequestError(403, "cross-origin requests are refused (the request has an Origin header)")
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site.lower() not in SAFE_FETCH_SITES:
        raise RequestError(403, f"cross-origin requests are refused (Sec-Fetch-Site: {fetch_site})")


def redirect_response(target: str) -> Response | None:
    """The 302 answer to ``/redirect?location=URL`` (None for any other path); raises RequestError for a
    missing or unacceptable location."""
    url = urlsplit(target)
    if url.path != REDIRECT_PATH:
        return None
    locations = parse_qs(url.query, keep_blank_values=True).get("location")
    if not locations:
        raise RequestError(400, "redirect needs a location: /redirect?location=URL")
    location = locations[-1]
    if len(location) > MAX_LOCATION_CHARS:
        raise RequestError(400, f"location must be at most {MAX_LOCATION_CHARS} characters, got {len(location)}")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in location):
        raise RequestError(400, "location must not contain spaces or control characters")
    parts = urlsplit(location)
    if parts.scheme.lower() not in REDIRECT_SCHEMES or not parts.netloc:
        raise RequestError(400, f"location must be an absolute http, https, ws or wss URL, got {location!r}")
    return json_response(302, {"location": location}, [("Location", location)])


def parse_subscription(target: str) -> Subscription:
    """Parse a handshake's request target ``/streams/{id}?from_seq=N``; raises RequestError."""
    url = urlsplit(target)
    segments = _stream_segments(url.path)
    if segments is None or len(segments) != 1:
        raise RequestError(404, f"no stream at {url.path!r}: subscribe to /streams/{{connection_id}}")
    connection_id = _connection_id(segments[0])
    query = parse_qs(url.query, keep_blank_values=True)
    from_seq = None
    if "from_seq" in query:
        raw = query["from_seq"][-1]
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_SEQ:
            raise RequestError(400, f"from_seq must be an integer from 1 to {MAX_SEQ}, got {raw[:40]!r}")
        from_seq = int(raw)
    return Subscription(connection_id, from_seq)


def handle_control(simulator: UpstreamSimulator, request: Request) -> Response:
    """Answer one control API request."""
    try:
        return _route(simulator, request)
    except RequestError as exc:
        return error_response(exc.status, str(exc))


def _route(simulator: UpstreamSimulator, request: Request) -> Response:
    url = urlsplit(request.path)
    method = request.method
    if url.path == "/health":
        _require_method(method, "GET")
        return json_response(200, {"ok": True})
    if url.path == "/stats":
        _require_method(method, "GET")
        return json_response(200, simulator.stats())
    if url.path == "/streams":
        _require_method(method, "GET")
        return json_response(200, {"streams": [stream.to_json() for stream in simulator.streams.values()]})
    if url.path == "/disconnect":
        _require_method(method, "POST")
        fraction = _fraction(parse_qs(url.query, keep_blank_values=True))
        return json_response(200, {"disconnected": simulator.disconnect(fraction=fraction)})
    segments = _stream_segments(url.path)
    if segments is None or len(segments) > 2 or (len(segments) == 2 and segments[1] != "disconnect"):
        raise RequestError(404, f"no endpoint at {url.path!r}")
    connection_id = _connection_id(segments[0])
    if len(segments) == 2:
        _require_method(method, "POST")
        _require_stream(simulator, connection_id)
        return json_response(
            200, {"id": connection_id, "disconnected": simulator.disconnect([connection_id])}
        )
    if method == "GET":
        return json_response(200, _require_stream(simulator, connection_id).to_json())
    _require_method(method, "GET", "POST")
    if simulator.stopping:
        raise RequestError(503, "the simulator is shutting down")
    rate = _rate(parse_qs(url.query, keep_blank_values=True))
    existing = simulator.streams.get(connection_id)
    if existing is not None:
        if rate is not None and rate != existing.rate:
            raise RequestError(409, f"stream {connection_id!r} exists with rate {existing.rate}, not {rate}")
        return json_response(200, existing.to_json())
    return json_response(201, simulator.create_stream(connection_id, rate=rate).to_json())


def _stream_segments(path: str) -> list[str] | None:
    if not path.startswith(STREAMS_PREFIX):
        return None
    return path[len(STREAMS_PREFIX) :].split("/")


def _connection_id(segment: str) -> str:
    connection_id = unquote(segment)
    if not is_valid_connection_id(connection_id):
        raise RequestError(
            400, f"invalid connection id {connection_id!r}: expected 1-128 characters of [A-Za-z0-9._:-]"
        )
    return connection_id


def _require_method(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise RequestError(405, f"method {method} not allowed here; use {' or '.join(allowed)}")


def _require_stream(simulator: UpstreamSimulator, connection_id: str) -> Stream:
    stream = simulator.streams.get(connection_id)
    if stream is None:
        raise RequestError(404, f"unknown stream {connection_id!r}")
    return stream


def _number(query: dict[str, list[str]], name: str) -> tuple[float, str] | None:
    """The last value of parameter ``name`` as a number (NaN if it is none) and as given; None when absent."""
    if name not in query:
        return None
    raw = query[name][-1]
    try:
        return float(raw), raw
    except ValueError:
        return math.nan, raw


def _rate(query: dict[str, list[str]]) -> float | None:
    given = _number(query, "rate")
    if given is None:
        return None
    rate, raw = given
    if not (0 < rate <= MAX_RATE):  # NaN fails every comparison
        raise RequestError(
            400, f"rate must be a number of messages per second in (0, {MAX_RATE:g}], got {raw[:40]!r}"
        )
    return rate


def _fraction(query: dict[str, list[str]]) -> float:
    given = _number(query, "fraction")
    if given is None:
        return 1.0
    fraction, raw = given
    if not (0 < fraction <= 1):  # NaN fails every comparison
        raise RequestError(400, f"fraction must be a number in (0, 1], got {raw[:40]!r}")
    return fraction
