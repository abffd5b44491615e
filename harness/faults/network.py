"""The network fault plane's client side: a typed client of the Toxiproxy v2 HTTP API, and
``ensure_toxiproxy``, which finds or starts the server the harness's proxies live in.

``ensure_toxiproxy`` uses the Toxiproxy named by ``TOXIPROXY_URL`` when that variable is set (a real
``toxiproxy-server`` or ours; it must answer), else starts our embedded server
(``python -m harness.faults.toxiproxy``) on a free loopback port, logging to ``RUN_DIR/logs/toxiproxy.log``.
The client speaks the API subset every 2.x server understands (updates are POSTed, not PATCHed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import http_client
from harness.processes import ProcessError, spawn

TOXIPROXY_URL_ENV = "TOXIPROXY_URL"
SERVER_START_TIMEOUT_S = 15.0
SERVER_STOP_TIMEOUT_S = 5.0


class ToxiproxyError(Exception):
    """A Toxiproxy request failed: ``status`` is the HTTP status, or None when the server did not answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Toxic:
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Toxic:
        return cls(
            name=data["name"],
            type=data["type"],
            stream=data.get("stream", "downstream"),
            toxicity=float(data.get("toxicity", 1.0)),
            attributes=dict(data.get("attributes") or {}),
        )


@dataclass(frozen=True)
class Proxy:
    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[Toxic, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Proxy:
        return cls(
            name=data["name"],
            listen=data["listen"],
            upstream=data["upstream"],
            enabled=bool(data["enabled"]),
            toxics=tuple(Toxic.from_json(toxic) for toxic in data.get("toxics") or ()),
        )

    @property
    def port(self) -> int:
        """The port the proxy listens on (clients connect to ``127.0.0.1:port``)."""
        return int(self.listen.rsplit(":", 1)[1])


class ToxiproxyClient:
    """Typed calls to one Toxiproxy server at ``base_url`` (e.g. ``http://127.0.0.1:8474``)."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._session = http_client.Session(timeout_s)

    def _call(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> Any:
        url = self.base_url + path
        try:
            answer = self._session.request(method, url, body=None if body is None else json.dumps(body).encode(),
                                           headers={"Content-Type": "application/json"}, timeout_s=timeout_s)
        except http_client.HttpError as exc:
            raise ToxiproxyError(f"{method} {url}: no answer from Toxiproxy: {exc}") from exc
        if answer.status >= 400:
            try:
                message = answer.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = answer.text.strip() or str(answer.status)
            raise ToxiproxyError(f"{method} {path}: {answer.status} {message}", answer.status)
        if answer.status == 204 or not answer.body:
            return None
        try:
            return answer.json()
        except ValueError:
            return answer.text

    def version(self, timeout_s: float | None = None) -> str:
        """The server's version (2.x servers before 2.7 answer plain text, later ones JSON)."""
        answer = self._call("GET", "/version", timeout_s=timeout_s)
        if isinstance(answer, dict):
            return str(answer.get("version", ""))
        return str(answer).strip()

    def get_proxies(self) -> dict[str, Proxy]:
        return {name: Proxy.from_json(data) for name, data in self._call("GET", "/proxies").items()}

    def get_proxy(self, name: str) -> Proxy:
        return Proxy.from_json(self._call("GET", f"/proxies/{name}"))

    def create_proxy(
        self, name: str, upstream: str, listen: str = "127.0.0.1:0", enabled: bool = True
    ) -> Proxy:
        body = {"name": name, "upstream": upstream, "listen": listen, "enabled": enabled}
        return Proxy.from_json(self._call("POST", "/proxies", body))

    def populate(self, proxies: list[dict[str, Any]]) -> list[Proxy]:
        """Create or replace proxies (``name``, ``listen``, ``upstream``, optional ``enabled``)."""
        answer = self._call("POST", "/populate", proxies)
        return [Proxy.from_json(data) for data in answer["proxies"]]

    def update_proxy(
        self,
        name: str,
        *,
        enabled: bool | None = None,
        listen: str | None = None,
        upstream: str | None = None,
    ) -> Proxy:
        """Change the given fields; ``enabled=False`` closes the listener and every live connection."""
        body = {
            key: value
            for key, value in (("enabled", enabled), ("listen", listen), ("upstream", upstream))
            if value is not None
        }
        return Proxy.from_json(self._call("POST", f"/proxies/{name}", body))

    def delete_proxy(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def get_toxics(self, proxy: str) -> list[Toxic]:
        return [Toxic.from_json(data) for data in self._call("GET", f"/proxies/{proxy}/toxics")]

    def add_toxic(
        self,
        proxy: str,
        type: str,
        *,
        stream: str = "downstream",
        name: str | None = None,
        toxicity: float = 1.0,
        attributes: dict[str, int] | None = None,
    ) -> Toxic:
        """Add a toxic (default name ``<type>_<stream>``); it applies to live connections at once."""
        body: dict[str, Any] = {
            "type": type,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": attributes or {},
        }
        if name is not None:
            body["name"] = name
        return Toxic.from_json(self._call("POST", f"/proxies/{proxy}/toxics", body))

    def update_toxic(
        self,
        proxy: str,
        name: str,
        *,
        attributes: dict[str, int] | None = None,
        toxicity: float | None = None,
    ) -> Toxic:
        body: dict[str, Any] = {}
        if attributes is not None:
            body["attributes"] = attributes
        if toxicity is not None:
            body["toxicity"] = toxicity
        return Toxic.from_json(self._call("POST", f"/proxies/{proxy}/toxics/{name}", body))

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset")

    def close(self) -> None:
        self._session.close()


def ensure_toxiproxy(
    run_dir: str | Path, seed: int | None = None
) -> tuple[ToxiproxyClient, Callable[[], None] | None]:
    """A client of the Toxiproxy to use, and a callable that stops it if we started it (else None).

    With ``TOXIPROXY_URL`` set, that server must answer ``/version`` (ToxiproxyError otherwise; ``seed``
    does not apply to it).  Without it, our server is started with ``seed`` on a free loopback port.
    """
    url = os.environ.get(TOXIPROXY_URL_ENV, "").strip()
    if url:
        client = ToxiproxyClient(url)
        try:
            client.version(timeout_s=3.0)
        except ToxiproxyError as exc:
            client.close()
            raise ToxiproxyError(
                f"{TOXIPROXY_URL_ENV}={url} is set but no Toxiproxy answers there ({exc})"
            ) from exc
        return client, None
    url, stop = start_embedded_toxiproxy(run_dir, seed)
    client = ToxiproxyClient(url)

    def stop_all() -> None:
        client.close()
        stop()

    return client, stop_all


def start_embedded_toxiproxy(run_dir: str | Path, seed: int | None = None) -> tuple[str, Callable[[], None]]:
    """Start ``python -m harness.faults.toxiproxy`` on a free loopback port; returns (url, stop).

    ``stop`` sends SIGTERM, waits, kills if needed, and reaps the process: nothing is left behind.
    """
    log_path = Path(run_dir) / "logs" / "toxiproxy.log"
    command = ["python", "-m", "harness.faults.toxiproxy", "-host", "127.0.0.1", "-port", "0"]
    if seed is not None:
        command += ["-seed", str(seed)]
    try:
        child = spawn("toxiproxy", command, log_path, timeout_s=SERVER_START_TIMEOUT_S)
        url = str(child.ready["url"])
    except (ProcessError, KeyError) as exc:
        raise ToxiproxyError(f"the embedded Toxiproxy did not start: {exc}") from exc

    def stop() -> None:
        child.stop(grace_s=SERVER_STOP_TIMEOUT_S)

    return url, stop
