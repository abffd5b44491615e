"""The Toxiproxy v2 HTTP API (aiohttp) over a ``ProxyCollection``: routes, status codes and JSON shapes.

Routes as Toxiproxy's api.go: proxy and toxic updates take POST or PATCH; creating a proxy answers 201,
creating a toxic 200, deletions and ``/reset`` 204; errors are ``{"error": ..., "status": ...}``.  As the
real server, requests from browsers (User-Agent ``Mozilla/...``) are refused with 403.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from harness.faults.toxiproxy.collection import ProxyCollection, decode_json
from harness.faults.toxiproxy.proxy import ApiError

# The Toxiproxy release whose API this server follows (GET /version).
TOXIPROXY_API_VERSION = "2.12.0"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


@web.middleware
async def _errors_and_browsers(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.headers.get("User-Agent", "").startswith("Mozilla/"):
        return web.Response(text="User agent not allowed\n", status=403)
    try:
        return await handler(request)
    except ApiError as exc:
        return json_response(exc.to_json(), exc.status)


def build_app(proxies: ProxyCollection) -> web.Application:
    """The API application serving ``proxies``."""

    async def body(request: web.Request) -> Any:
        return decode_json(await request.read())

    async def version(request: web.Request) -> web.Response:
        response = web.Response(text=json.dumps({"version": TOXIPROXY_API_VERSION}) + "\n")
        response.headers["Content-Type"] = "application/json;charset=utf-8"
        return response

    async def proxy_index(request: web.Request) -> web.Response:
        return json_response({name: proxy.to_json() for name, proxy in proxies.proxies.items()})

    async def proxy_create(request: web.Request) -> web.Response:
        proxy = await proxies.create_proxy(await body(request))
        return json_response(proxy.to_json(), 201)

    async def populate(request: web.Request) -> web.Response:
        try:
            result = await proxies.populate(await body(request))
        except ApiError as exc:
            return json_response({**exc.to_json(), "proxies": None}, exc.status)
        return json_response({"proxies": [proxy.to_json() for proxy in result]}, 201)

    async def proxy_show(request: web.Request) -> web.Response:
        return json_response(proxies.get(request.match_info["proxy"]).to_json())

    async def proxy_update(request: web.Request) -> web.Response:
        proxy = await proxies.update_proxy(request.match_info["proxy"], await body(request))
        return json_response(proxy.to_json())

    async def proxy_delete(request: web.Request) -> web.Response:
        await proxies.delete_proxy(request.match_info["proxy"])
        return web.Response(status=204)

    async def toxic_index(request: web.Request) -> web.Response:
        proxy = proxies.get(request.match_info["proxy"])
        return json_response([toxic.to_json() for toxic in proxy.ordered_toxics()])

    async def toxic_create(request: web.Request) -> web.Response:
        toxic = await proxies.add_toxic(request.match_info["proxy"], await body(request))
        return json_response(toxic.to_json())

    async def toxic_show(request: web.Request) -> web.Response:
        toxic = proxies.get_toxic(request.match_info["proxy"], request.match_info["toxic"])
        return json_response(toxic.to_json())

    async def toxic_update(request: web.Request) -> web.Response:
        names = request.match_info
        toxic = await proxies.update_toxic(names["proxy"], names["toxic"], await body(request))
        return json_response(toxic.to_json())

    async def toxic_delete(request: web.Request) -> web.Response:
        await proxies.remove_toxic(request.match_info["proxy"], request.match_info["toxic"])
        return web.Response(status=204)

    async def reset(request: web.Request) -> web.Response:
        await proxies.reset()
        return web.Response(status=204)

    app = web.Application(middlewares=[_errors_and_browsers])
    app.router.add_post("/reset", reset)
    app.router.add_get("/proxies", proxy_index)
    app.router.add_post("/proxies", proxy_create)
    app.router.add_post("/populate", populate)
    app.router.add_get("/proxies/{proxy}", proxy_show)
    app.router.add_post("/proxies/{proxy}", proxy_update)
    app.router.add_patch("/proxies/{proxy}", proxy_update)
    app.router.add_delete("/proxies/{proxy}", proxy_delete)
    app.router.add_get("/proxies/{proxy}/toxics", toxic_index)
    app.router.add_post("/proxies/{proxy}/toxics", toxic_create)
    app.router.add_get("/proxies/{proxy}/toxics/{toxic}", toxic_show)
    app.router.add_post("/proxies/{proxy}/toxics/{toxic}", toxic_update)
    app.router.add_patch("/proxies/{proxy}/toxics/{toxic}", toxic_update)
    app.router.add_delete("/proxies/{proxy}/toxics/{toxic}", toxic_delete)
    app.router.add_get("/version", version)
    return app
