"""A socketserver-style server (``socketserver`` or ``http.server``) served from a thread for one test."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[str]:
    """``host:port`` of ``server`` while it serves in a daemon thread; shut down and closed after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
