"""The region activation gate's authority, locally: one routing control per region (On / Off), in the spirit
of Route 53 Application Recovery Controller, served over HTTP to the workers' gates (``fleet.region_gate``:
``GET /controls/<region>`` answers ``{"state": "On" | "Off"}``), and the failover procedure that keeps the
two regions' consumers apart (``fail_over``): the old region Off, a wait longer than a gate's lease (every
worker there has then fenced, whether it read the Off or could not read at all), then the new region On.
Each change goes to the history (``gate.state`` {region, state}, src ``route53``).  It stands outside every
region: a region's outage does not reach it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from fleet.region_gate import OFF, ON
from harness.processes import start_thread
from harness.quiet_http import QuietHTTPServer

Emit = Callable[..., Any]


class RoutingControls:
    """Serves the controls of ``regions`` (AWS region names), ``active`` On and the rest Off."""

    def __init__(self, regions: list[str], active: str, emit: Emit) -> None:
        self.states = {region: ON if region == active else OFF for region in regions}
        self.emit = emit
        self.lock = threading.Lock()
        self.generation = 0  # of the latest failover begun
        controls = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                region = self.path.removeprefix("/controls/")
                with controls.lock:
                    state = controls.states.get(region)
                status, body = ((404, {"error": f"no control for {region!r}"}) if state is None
                                else (200, {"state": state}))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        for region, state in self.states.items():
            emit("gate.state", region=region, state=state, generation=self.generation)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/controls"

    def start(self) -> RoutingControls:
        start_thread(threading.Thread(target=self.server.serve_forever, name="routing-controls", daemon=True))
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def set(self, region: str, state: str) -> None:
        """An operator's change of one control, outside any failover."""
        with self.lock:
            self._set(region, state)

    def _set(self, region: str, state: str) -> None:
        self.states[region] = state
        self.emit("gate.state", region=region, state=state, generation=self.generation)

    def fail_over(self, old: str, new: str, wait_s: float) -> bool:
        """``old`` Off; ``wait_s`` later (``activation_wait_s`` of ``old``'s settings: nothing of ``old``
        consumes or writes any more), ``new`` On, unless a later failover began meanwhile.  Whether this one
        turned ``new`` On."""
        with self.lock:
            self.generation += 1
            mine = self.generation
            self._set(old, OFF)
        time.sleep(wait_s)  # the old region's gate must run out: a duration, not a synchronisation
        with self.lock:
            if self.generation != mine:
                return False  # superseded: the later failover decides
            self._set(new, ON)
        return True
