"""The state behind the Toxiproxy API: every proxy by name, and each request body checked and applied the
way Toxiproxy v2 does (defaults, required fields, error messages and statuses).

Every change runs under one lock, as Toxiproxy's collection mutex, so concurrent API calls apply one at a
time.  Methods take the decoded JSON body and raise ``ApiError`` for anything the API answers 4xx/5xx.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from harness.faults.toxiproxy import aws_toxics  # noqa: F401  (registers the HTTP-aware toxics)
from harness.faults.toxiproxy.proxy import ApiError, Proxy, Randomness, split_host_port
from harness.faults.toxiproxy.toxics import STREAMS, TOXIC_TYPES, ProxyToxic, build_toxic

DEFAULT_LISTEN = "127.0.0.1:0"


def bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing_field(detail: str) -> ApiError:
    return ApiError(f"missing required field: {detail}", 400)


def proxy_not_found() -> ApiError:
    return ApiError("proxy not found", 404)


def toxic_not_found() -> ApiError:
    return ApiError("toxic not found", 404)


def decode_json(raw: bytes) -> Any:
    if not raw.strip():
        raise bad_body("EOF")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_body(str(exc)) from exc


def _typed(body: dict[str, Any], field: str, kind: type, default: Any) -> Any:
    value = body.get(field, default)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise bad_body(f"{field} must be a {kind.__name__}, got {value!r}")
    return value


def _address(field: str, value: str) -> str:
    try:
        split_host_port(value)
    except ValueError as exc:
        raise bad_body(f"{field}: {exc}") from exc
    return value


class ProxyCollection:
    """All proxies of one server."""

    def __init__(self, seed: int) -> None:
        self.randomness = Randomness(seed)
        self.proxies: dict[str, Proxy] = {}
        self.lock = asyncio.Lock()

    def get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise proxy_not_found()
        return proxy

    # -- proxies ----------------------------------------------------------------------------------------
    def _parse_proxy(self, body: Any, where: str = "") -> tuple[str, str, str, bool | None]:
        if not isinstance(body, dict):
            raise bad_body(f"expected a JSON object{where}, got {body!r}")
        name = _typed(body, "name", str, "")
        upstream = _typed(body, "upstream", str, "")
        listen = _typed(body, "listen", str, "") or DEFAULT_LISTEN
        enabled = _typed(body, "enabled", bool, None)
        if not name:
            raise missing_field(f"name{where}")
        if not upstream:
            raise missing_field(f"upstream{where}")
        return name, _address("listen", listen), _address("upstream", upstream), enabled

    async def create_proxy(self, body: Any) -> Proxy:
        name, listen, upstream, enabled = self._parse_proxy(body)
        async with self.lock:
            if name in self.proxies:
                raise ApiError("proxy already exists", 409)
            proxy = Proxy(name, listen, upstream, self.randomness)
            if enabled is not False:
                await proxy.start()
            self.proxies[name] = proxy
            return proxy

    async def populate(self, body: Any) -> list[Proxy]:
        """Create or replace each proxy; one that exists with the same listen and upstream is kept as is."""
        if not isinstance(body, list):
            raise bad_body(f"expected a JSON array of proxies, got {body!r}")
        wanted = [self._parse_proxy(item, f" at proxy {i + 1}") for i, item in enumerate(body)]
        names = [name for name, *_ in wanted]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise bad_body(f"duplicate proxy name {duplicates[0]!r}")
        result: list[Proxy] = []
        async with self.lock:
            for name, listen, upstream, enabled in wanted:
                existing = self.proxies.get(name)
                if existing is not None and _same_addresses(existing, listen, upstream):
                    result.append(existing)
                    continue
                if existing is not None:
                    await existing.stop()
                    existing.remove_all_toxics()
                    del self.proxies[name]
                proxy = Proxy(name, listen, upstream, self.randomness)
                if enabled is not False:
                    await proxy.start()
                self.proxies[name] = proxy
                result.append(proxy)
        return result

    async def update_proxy(self, name: str, body: Any) -> Proxy:
        async with self.lock:
            proxy = self.get(name)
            if not isinstance(body, dict):
                raise bad_body(f"expected a JSON object, got {body!r}")
            listen = _address("listen", _typed(body, "listen", str, proxy.listen) or proxy.listen)
            upstream = _address("upstream", _typed(body, "upstream", str, proxy.upstream) or proxy.upstream)
            enabled = _typed(body, "enabled", bool, proxy.enabled)
            if listen != proxy.listen or upstream != proxy.upstream:
                await proxy.stop()  # a new address drops every connection, as Toxiproxy does
                proxy.listen, proxy.upstream = listen, upstream
            if enabled:
                await proxy.start()
            else:
                await proxy.stop()
            return proxy

    async def delete_proxy(self, name: str) -> None:
        async with self.lock:
            proxy = self.get(name)
            await proxy.stop()
            proxy.remove_all_toxics()
            del self.proxies[name]

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        async with self.lock:
            for proxy in self.proxies.values():
                await proxy.start()
                proxy.remove_all_toxics()

    async def close(self) -> None:
        async with self.lock:
            for proxy in self.proxies.values():
                await proxy.stop()

    # -- toxics -----------------------------------------------------------------------------------------
    async def add_toxic(self, proxy_name: str, body: Any) -> ProxyToxic:
        async with self.lock:
            proxy = self.get(proxy_name)
            if not isinstance(body, dict):
                raise bad_body(f"expected a JSON object, got {body!r}")
            type_name = _typed(body, "type", str, "")
            stream = _typed(body, "stream", str, "downstream")
            toxicity = _toxicity(body, 1.0)
            name = _typed(body, "name", str, "")
            if stream.lower() not in STREAMS:
                raise ApiError("stream was invalid, can be either upstream or downstream", 400)
            stream = stream.lower()
            name = name or f"{type_name}_{stream}"
            if type_name not in TOXIC_TYPES:
                raise ApiError("invalid toxic type", 400)
            if name in proxy.toxics:
                raise ApiError("toxic already exists", 409)
            try:
                toxic = build_toxic(type_name, body.get("attributes"))
            except ValueError as exc:
                raise bad_body(str(exc)) from exc
            if stream not in toxic.streams:
                raise bad_body(f"a {type_name} toxic works on the {' or '.join(toxic.streams)} stream only")
            entry = ProxyToxic(name=name, type=type_name, stream=stream, toxicity=toxicity, toxic=toxic)
            proxy.add_toxic(entry)
            return entry

    async def update_toxic(self, proxy_name: str, toxic_name: str, body: Any) -> ProxyToxic:
        """New attributes (merged over the current ones) and/or toxicity; name, type and stream stay."""
        async with self.lock:
            proxy = self.get(proxy_name)
            entry = proxy.toxics.get(toxic_name)
            if entry is None:
                raise toxic_not_found()
            if not isinstance(body, dict):
                raise bad_body(f"expected a JSON object, got {body!r}")
            toxicity = _toxicity(body, entry.toxicity)
            try:
                entry.toxic = build_toxic(entry.type, body.get("attributes"), base=entry.toxic)
            except ValueError as exc:
                raise bad_body(str(exc)) from exc
            entry.toxicity = toxicity
            proxy.toxic_updated(entry)
            return entry

    async def remove_toxic(self, proxy_name: str, toxic_name: str) -> None:
        async with self.lock:
            proxy = self.get(proxy_name)
            if toxic_name not in proxy.toxics:
                raise toxic_not_found()
            proxy.remove_toxic(toxic_name)

    def get_toxic(self, proxy_name: str, toxic_name: str) -> ProxyToxic:
        entry = self.get(proxy_name).toxics.get(toxic_name)
        if entry is None:
            raise toxic_not_found()
        return entry


def _toxicity(body: dict[str, Any], default: float) -> float:
    value = body.get("toxicity", default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise bad_body(f"toxicity must be a number from 0 to 1, got {value!r}")
    return float(value)


def _same_addresses(proxy: Proxy, listen: str, upstream: str) -> bool:
    """Whether populate may keep ``proxy``: same upstream, and same listen address (port 0 matches the
    port it was given)."""
    if proxy.upstream != upstream:
        return False
    if proxy.listen == listen:
        return True
    wanted_host, wanted_port = split_host_port(listen)
    bound_host, _ = split_host_port(proxy.listen)
    return wanted_port == 0 and wanted_host == bound_host
