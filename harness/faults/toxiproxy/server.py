"""The embedded Toxiproxy-compatible server as an object: the API listener plus its proxies."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from aiohttp import web

from harness.faults.toxiproxy.api import build_app
from harness.faults.toxiproxy.collection import ProxyCollection
from harness.faults.toxiproxy.proxy import ApiError, join_host_port


class ToxiproxyServer:
    """Serves the Toxiproxy API on ``host:port`` (port 0: a free port); ``seed`` fixes every random draw."""

    def __init__(self, host: str, port: int, seed: int | None = None) -> None:
        self.host = host
        self.port = port
        self.seed = seed if seed is not None else secrets.randbits(63)
        self.proxies = ProxyCollection(self.seed)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        """Listen; returns the API's URL (raises OSError when the address cannot be bound)."""
        runner = web.AppRunner(build_app(self.proxies), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.url = f"http://{join_host_port(host, port)}"
        return self.url

    async def populate_from(self, config: Path) -> int:
        """Create the proxies listed in a JSON file (the real server's -config); returns how many.

        Raises ValueError with a precise message when the file cannot be read or is refused.
        """
        try:
            body = json.loads(config.read_text())
            return len(await self.proxies.populate(body))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read config {config}: {exc}") from exc
        except ApiError as exc:
            raise ValueError(f"config {config}: {exc.message}") from exc

    async def close(self) -> None:
        """Close every proxy (listeners and live connections), then the API."""
        await self.proxies.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
