"""HTTP/1.1 request framing for the HTTP-aware toxics: cuts a client's byte stream into whole requests.

``RequestFramer.feed`` takes the bytes of one link as they arrive and returns, in order, complete requests
(``HttpRequest``: the raw bytes to forward, the method, path, lower-cased headers and the body with any
chunked transfer coding removed) and raw ``bytes`` it could not frame, which a toxic must pass on
untouched.  Bodies are delimited by ``Content-Length`` or ``Transfer-Encoding: chunked``; requests on a
keep-alive connection follow each other.

The framer never breaks a stream it does not understand.  It starts framing only at bytes that begin with
an HTTP method (a toxic added in the middle of a request sees the rest of that request first, and lets it
through); a malformed head, or one longer than ``MAX_HEAD``, is passed on as is and framing waits for the
next chunk that starts a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD = 64 * 1024
METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"PATCH ", b"OPTIONS ")
REQUEST_LINE = re.compile(r"([A-Z]+) (\S+) HTTP/1\.[01]")


@dataclass(frozen=True)
class HttpRequest:
    raw: bytes
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    body: bytes

    @property
    def closes(self) -> bool:
        """The client asked to close the connection after the answer."""
        return self.headers.get("connection", "").lower() == "close"


class Malformed(ValueError):
    """The buffered bytes are not an HTTP/1.1 request this framer understands."""


class RequestFramer:
    """Frames one link's bytes into requests; keeps an incomplete request until its end arrives."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    @property
    def holding(self) -> bool:
        """Part of a request is buffered (dropping it would corrupt the stream)."""
        return bool(self.buffer)

    def feed(self, data: bytes) -> list[HttpRequest | bytes]:
        if not self.buffer and not _may_start_request(data):
            return [data] if data else []
        self.buffer += data
        items: list[HttpRequest | bytes] = []
        while self.buffer:
            try:
                request = self._next_request()
            except Malformed:
                items.append(bytes(self.buffer))
                self.buffer.clear()
                break
            if request is None:
                break
            items.append(request)
            if self.buffer and not _may_start_request(bytes(self.buffer)):
                items.append(bytes(self.buffer))
                self.buffer.clear()
        return items

    def _next_request(self) -> HttpRequest | None:
        """The first complete request in the buffer (removed from it), or None until more bytes come."""
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise Malformed("request head too long")
            return None
        method, path, headers = _parse_head(bytes(self.buffer[:head_end]))
        body_start = head_end + 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            framed = _dechunk(self.buffer, body_start)
            if framed is None:
                return None
            body, end = framed
        else:
            length_text = headers.get("content-length", "0").strip()
            if not length_text.isdigit():
                raise Malformed(f"bad Content-Length {length_text!r}")
            end = body_start + int(length_text)
            if len(self.buffer) < end:
                return None
            body = bytes(self.buffer[body_start:end])
        raw = bytes(self.buffer[:end])
        del self.buffer[:end]
        return HttpRequest(raw, method, path, headers, body)


def _may_start_request(data: bytes) -> bool:
    """``data`` begins with an HTTP method (or is a prefix of one, a request cut very early)."""
    return any(data.startswith(method) or method.startswith(data) for method in METHODS)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    request_line = REQUEST_LINE.fullmatch(lines[0])
    if request_line is None:
        raise Malformed(f"bad request line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise Malformed(f"bad header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    return request_line.group(1), request_line.group(2), headers


def _dechunk(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """The decoded body of a chunked message starting at ``start`` and the offset after it, or None
    while incomplete."""
    body = bytearray()
    offset = start
    while True:
        line_end = buffer.find(b"\r\n", offset)
        if line_end < 0:
            return None
        size_text = bytes(buffer[offset:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise Malformed(f"bad chunk size {size_text[:20]!r}") from None
        offset = line_end + 2
        if size == 0:
            trailers_end = buffer.find(b"\r\n\r\n", offset - 2)
            return None if trailers_end < 0 else (bytes(body), trailers_end + 4)
        if len(buffer) < offset + size + 2:
            return None
        body += buffer[offset : offset + size]
        offset += size + 2
