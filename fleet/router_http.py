"""The local HTTP adapter of the router: serves ``fleet.router.handle_event`` at ``POST /events``.

What API Gateway and Lambda do in AWS, this does on a laptop or in the harness: ``POST /events`` takes
the event body (read up to ``MAX_BODY_BYTES`` + 1 bytes and no further, so an oversized body is refused
without reading it all), ``POST /reapply-control`` re-applies the control journal
(``fleet.router.reapply_journal``: what the failover automation invokes the Lambda for), ``GET /health``
answers ``{"ok": true, "profile": ...}``; any other path answers 404 and any other method 405, always as
JSON.  Settings come from ``FleetConfig.from_env()`` (``WSFLEET_*`` and the SDK's
``AWS_ENDPOINT_URL_<SERVICE>`` variables).

Slow and greedy clients (``HttpLimits``): a body not all received within ``body_timeout_s`` of its request's
headers is answered 408 and its connection closed; a connection that sends no complete request for
``idle_timeout_s`` (half-sent headers, or idle between requests) is closed; a connection beyond
``max_connections`` open at once is answered 503 and closed before anything of it is read.

``python -m fleet.router_http --host H --port P`` prints one JSON line ``{"url": ..., "pid": ...}`` when it
is ready (events go to ``url + "/events"``) and serves until SIGTERM or SIGINT, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from fleet.allowlist import Allowlist
from fleet.aws import AwsClients
from fleet.config import FleetConfig
from fleet.errors import ConfigError
from fleet.history import HistoryWriter
from fleet.router import MAX_BODY_BYTES, handle_event, health, reapply_journal

_CLIENTS = web.AppKey("clients", AwsClients)
_CONFIG = web.AppKey("config", FleetConfig)
_HISTORY = web.AppKey("history", HistoryWriter)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BUSY = json.dumps({"error": "the router has too many connections open; try again"}).encode()


@dataclass(frozen=True)
class HttpLimits:
    """How long a client may take to send a request, and how many connections may be open at once."""

    body_timeout_s: float = 10.0
    idle_timeout_s: float = 15.0
    max_connections: int = 1000


_LIMITS = web.AppKey("limits", HttpLimits)


def _json(status: int, payload: dict[str, object]) -> web.Response:
    return web.json_response(payload, status=status)


async def _read_at_most(request: web.Request, limit: int) -> bytes:
    """The body, or its first ``limit`` bytes when it is longer (the rest stays unread)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await request.content.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def _post_event(request: web.Request) -> web.StreamResponse:
    app = request.app
    limit_s = app[_LIMITS].body_timeout_s
    try:
        async with asyncio.timeout(limit_s):
            body = await _read_at_most(request, MAX_BODY_BYTES + 1)
    except TimeoutError:
        response = _json(408, {"error": f"the request body did not arrive within {limit_s:g} s"})
        response.force_close()
        return response
    status, payload = await handle_event(body, app[_CLIENTS], app[_CONFIG], app[_HISTORY])
    response = _json(status, payload)
    if not request.content.at_eof():
        response.force_close()  # the rest of an oversized body is never read
    return response


async def _reapply(request: web.Request) -> web.StreamResponse:
    app = request.app
    return _json(*await reapply_journal(app[_CLIENTS], app[_CONFIG], app[_HISTORY]))


async def _health(request: web.Request) -> web.StreamResponse:
    return _json(200, health(request.app[_CONFIG]))


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths (404), wrong methods (405) and unexpected failures (500) answer JSON too."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        response = _json(exc.status, {"error": f"{exc.reason}: {request.method} {request.path}"})
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return _json(500, {"error": "internal error in the router"})


def make_app(config: FleetConfig, limits: HttpLimits | None = None) -> web.Application:
    """The router application; its AWS clients and history writer open on startup and close on cleanup."""
    Allowlist.parse(config.allowed_ws_hosts)  # a malformed allowlist fails here, before serving
    app = web.Application(middlewares=[_json_errors])
    app[_CONFIG] = config
    app[_LIMITS] = limits or HttpLimits()

    async def resources(app: web.Application) -> AsyncIterator[None]:
        history = HistoryWriter(config.history_path, "router")
        try:
            async with AwsClients(config) as clients:
                app[_CLIENTS] = clients
                app[_HISTORY] = history
                yield
        finally:
            history.close()

    app.cleanup_ctx.append(resources)
    app.router.add_post("/events", _post_event)
    app.router.add_post("/reapply-control", _reapply)
    app.router.add_get("/health", _health)
    return app


class _Busy(asyncio.Protocol):
    """A connection beyond the cap: answered 503 at once and closed, nothing of it read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BUSY), BUSY))
        transport.close()


class _CappedSite(web.BaseSite):
    """A TCP site whose connections beyond ``max_connections`` open at once get ``_Busy``."""

    __slots__ = ("_host", "_max_connections", "_port")

    def __init__(self, runner: web.AppRunner, host: str, port: int, max_connections: int) -> None:
        super().__init__(runner)
        self._host, self._port, self._max_connections = host, port, max_connections

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert isinstance(server, web.Server)

        def protocol() -> asyncio.BaseProtocol:
            return _Busy() if len(server.connections) >= self._max_connections else server()

        self._server = await asyncio.get_running_loop().create_server(protocol, self._host, self._port)


@dataclass
class RouterServer:
    """A running router: its base URL and the runner that stops it."""

    url: str
    runner: web.AppRunner

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_server(config: FleetConfig, host: str, port: int, limits: HttpLimits | None = None) -> RouterServer:
    """Serve the router on ``host:port`` (port 0: a free one) and return once it accepts connections."""
    limits = limits or HttpLimits()
    # lingering_time=0: a request whose body was left unread (too large) closes its connection at once
    # instead of being drained; keepalive_timeout: a connection with no request under way is closed after it.
    runner = web.AppRunner(make_app(config, limits), access_log=None, handle_signals=False, lingering_time=0,
                           keepalive_timeout=limits.idle_timeout_s)
    await runner.setup()
    try:
        site = _CappedSite(runner, host, port, limits.max_connections)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_port = next(iter(runner.addresses))[1]
    shown_host = f"[{host}]" if ":" in host else host
    return RouterServer(f"http://{shown_host}:{bound_port}", runner)


async def _serve(host: str, port: int) -> None:
    server = await start_server(FleetConfig.from_env(), host, port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(json.dumps({"url": server.url, "pid": os.getpid()}), flush=True)
    try:
        await stopping.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleet.router_http",
        description=(
            "Serve the wsfleet router (the Lambda handler's logic) over HTTP: POST /events, GET /health. "
            "Settings come from WSFLEET_* variables; AWS endpoints from AWS_ENDPOINT_URL_<SERVICE>. "
            'Prints {"url": ..., "pid": ...} on one line when ready; SIGTERM or SIGINT stops it cleanly.'
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on; 0 picks a free one (default 0)"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, not {args.port}")
    try:
        asyncio.run(_serve(args.host, args.port))
    except ConfigError as exc:
        print(f"router: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"router: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
