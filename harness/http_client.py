"""The harness's one HTTP client (httpx): every call has a timeout, and no call follows a redirect.

A 3xx answer is an error (``Redirected``) naming where it pointed.  A signed router call carries its
``Authorization``, ``X-Amz-Date`` and ``X-Amz-Security-Token`` headers; sent on to whatever ``Location``
names, they would reach a host the caller never chose, and a 200 from there is no answer from the endpoint
that was called.  No answer at all (refused, reset, timed out, not HTTP) is ``NoAnswer``.  Any other status,
4xx and 5xx included, is an ``Answer`` for the caller to judge.

``request`` makes one call on a fresh connection; a ``Session`` keeps connections to one server open for
many calls (it is safe to share between threads); ``request_async`` is ``request`` for asyncio code.
"""

from __future__ import annotations

import functools
import json
import ssl
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx

Headers = dict[str, str]
Params = dict[str, str | int | float]


class HttpError(OSError):
    """A call that got no usable answer; the message names the method, the URL and why.  An ``OSError``, as
    every failure to talk to another process is."""


class NoAnswer(HttpError):
    """The server did not answer: no connection, a reset, a timeout, or something that is not HTTP."""


class Redirected(HttpError):
    """The server answered 3xx: the call is not followed anywhere else."""

    def __init__(self, method: str, url: str, status: int, location: str) -> None:
        super().__init__(f"{method} {url} answered {status}, a redirect to {location or '(no Location)'}; "
                         "redirects are never followed")
        self.status = status
        self.location = location


@dataclass(frozen=True)
class Answer:
    """A non-redirect answer: its status, headers (lower-case names) and raw body."""

    status: int
    body: bytes
    headers: Headers

    def json(self) -> Any:
        """The body as JSON (an empty body is None); ``ValueError`` if it is not JSON."""
        return json.loads(self.body or b"null")

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def timeout(timeout_s: float, connect_s: float | None = None) -> httpx.Timeout:
    """``timeout_s`` for every phase of a call (connect, write, read, pool), ``connect_s`` for connecting."""
    return httpx.Timeout(timeout_s, connect=timeout_s if connect_s is None else connect_s)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: building one reads the CA bundle, which costs more than a call."""
    return httpx.create_ssl_context()


def _no_answer(method: str, url: str, exc: Exception) -> NoAnswer:
    return NoAnswer(f"{method} {url}: no answer: {str(exc) or type(exc).__name__}")


def _answer(method: str, url: str, response: httpx.Response) -> Answer:
    if 300 <= response.status_code < 400:
        raise Redirected(method, url, response.status_code, response.headers.get("location", ""))
    return Answer(response.status_code, response.content, dict(response.headers))


class Session:
    """Calls to one server over kept-open connections, each with ``timeout_s`` unless a call gives its own."""

    def __init__(self, timeout_s: float, connect_s: float | None = None) -> None:
        self._client = httpx.Client(timeout=timeout(timeout_s, connect_s), follow_redirects=False, verify=_tls())

    def request(self, method: str, url: str, *, body: bytes | None = None, headers: Headers | None = None,
                params: Params | None = None, timeout_s: float | None = None) -> Answer:
        """One call; ``NoAnswer`` or ``Redirected`` when it got no usable answer."""
        chosen = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout(timeout_s)
        try:
            response = self._client.request(method, url, content=body, headers=headers, params=params,
                                            timeout=chosen, follow_redirects=False)
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            raise _no_answer(method, url, exc) from exc
        return _answer(method, url, response)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def request(method: str, url: str, *, timeout_s: float, connect_s: float | None = None, body: bytes | None = None,
            headers: Headers | None = None, params: Params | None = None) -> Answer:
    """One call on a fresh connection (see ``Session.request``)."""
    with Session(timeout_s, connect_s) as session:
        return session.request(method, url, body=body, headers=headers, params=params)


async def request_async(method: str, url: str, *, timeout_s: float, body: bytes | None = None,
                        headers: Headers | None = None, params: Params | None = None) -> Answer:
    """``request`` for asyncio code."""
    try:
        async with httpx.AsyncClient(timeout=timeout(timeout_s), follow_redirects=False, verify=_tls()) as client:
            response = await client.request(method, url, content=body, headers=headers, params=params)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        raise _no_answer(method, url, exc) from exc
    return _answer(method, url, response)
