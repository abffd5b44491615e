"""One proxy of the embedded Toxiproxy-compatible server: a listener, its live connections, its toxics.

``start`` binds ``listen`` (port 0 picks a free port; ``listen`` then shows the bound address, and a later
restart binds that same address again); ``stop`` closes the listener and every live connection, as
Toxiproxy's ``enabled: false`` does.  Toxic changes reach every live connection at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from typing import Any

from harness.faults.toxiproxy.link import Connection
from harness.faults.toxiproxy.toxics import STREAMS, ProxyToxic

log = logging.getLogger("toxiproxy")

UPSTREAM_CONNECT_TIMEOUT_S = 30.0


class ApiError(Exception):
    """An error the API answers as ``{"error": message, "status": status}``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); raises ValueError."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"address {address!r} has a port above 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"address {address!r}: an IPv6 host must be in brackets")
    return host, port


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Randomness:
    """Random draws keyed by what they decide, so a given -seed reproduces them whatever the timing."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def rng(self, *key: object) -> random.Random:
        return random.Random("/".join(map(str, (self.seed, *key))))  # str seeds are hashed with SHA-512


class Proxy:
    """A named TCP proxy from ``listen`` to ``upstream``."""

    def __init__(self, name: str, listen: str, upstream: str, randomness: Randomness) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, ProxyToxic] = {}
        self._randomness = randomness
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._serial = 0
        self._run = 0  # bumped by every start and stop: a connection accepted in an older run is dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [toxic.to_json() for toxic in self.ordered_toxics()],
        }

    def ordered_toxics(self) -> list[ProxyToxic]:
        """Upstream toxics, then downstream ones, each in the order added (as Toxiproxy lists them)."""
        return [toxic for stream in STREAMS for toxic in self.toxics.values() if toxic.stream == stream]

    # -- listener ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on ``listen``; raises ApiError(500) when it cannot be bound."""
        if self.enabled:
            return
        host, port = split_host_port(self.listen)
        try:
            bind_host = await _resolve(host or "0.0.0.0", port)
            server = await asyncio.start_server(self._accept, bind_host, port, reuse_address=True)
        except OSError as exc:
            raise ApiError(f"listen tcp {self.listen}: {exc.strerror or exc}", 500) from exc
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        self.listen = join_host_port(bound_host, bound_port)
        self._server = server
        self._run += 1
        self.enabled = True
        log.info("proxy %s listening on %s, upstream %s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        """Stop listening and drop every live connection."""
        if not self.enabled:
            return
        self.enabled = False
        self._run += 1
        if self._server is not None:
            self._server.close()  # closes the listening socket now; wait_closed() would wait for clients
            self._server = None
        for connection in list(self._connections):
            connection.abort()
        log.info("proxy %s stopped", self.name)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        run = self._run
        try:
            host, port = split_host_port(self.upstream)
            upstream = await asyncio.wait_for(asyncio.open_connection(host, port), UPSTREAM_CONNECT_TIMEOUT_S)
        except (OSError, ValueError, TimeoutError) as exc:
            log.warning("proxy %s: cannot connect to upstream %s: %s", self.name, self.upstream, exc)
            writer.transport.abort()
            return
        if run != self._run:  # stopped (and maybe restarted) while we were connecting
            writer.transport.abort()
            upstream[1].transport.abort()
            return
        self._serial += 1
        connection = Connection(self._serial, (reader, writer), upstream)
        for toxic in self.toxics.values():
            connection.links[toxic.stream].attach(toxic, self._stub_rng(toxic, connection))
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)

    # -- toxics -----------------------------------------------------------------------------------------
    def _stub_rng(self, toxic: ProxyToxic, connection: Connection) -> random.Random:
        return self._randomness.rng(self.name, connection.serial, toxic.name, toxic.generation)

    def add_toxic(self, toxic: ProxyToxic) -> None:
        self.toxics[toxic.name] = toxic
        log.info("proxy %s: toxic %s added on %d connections", self.name, toxic.name, len(self._connections))
        for connection in self._connections:
            connection.links[toxic.stream].attach(toxic, self._stub_rng(toxic, connection))

    def toxic_updated(self, toxic: ProxyToxic) -> None:
        """``toxic`` (already in ``toxics``) got new attributes or toxicity: restart it on every link."""
        toxic.generation += 1
        for connection in self._connections:
            connection.links[toxic.stream].replace(toxic, self._stub_rng(toxic, connection))

    def remove_toxic(self, name: str) -> None:
        toxic = self.toxics.pop(name)
        log.info("proxy %s: toxic %s removed from %d connections", self.name, name, len(self._connections))
        for connection in list(self._connections):
            connection.links[toxic.stream].detach(name)

    def remove_all_toxics(self) -> None:
        for name in list(self.toxics):
            self.remove_toxic(name)


async def _resolve(host: str, port: int) -> str:
    """One address for ``host`` (Go's net.Listen binds one address; asyncio would bind every match)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            socket.inet_pton(family, host)
            return host
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return str(infos[0][4][0])
