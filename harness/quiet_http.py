"""``QuietHTTPServer``: the harness's small HTTP servers (the change feed, the routing controls, the API
Gateway stand-in) take a client that goes away mid-answer (its request timed out, its process stopped) as
the end of that request, not as an error to print with a traceback."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)
