"""The region activation gate's authority, locally: a stand-in of Route 53 Application Recovery Controller's
data plane, one routing control per region (On / Off) served by a cluster of endpoints that each answer
``GetRoutingControlState`` (the JSON protocol of botocore's ``route53-recovery-cluster`` client, requests
signed with SigV4 and checked against the local credentials), so the workers' and routers' gates
(``fleet.region_gate``) run the code they run on AWS.  ``endpoints`` is what they are given
(``region_gate_endpoints``), ``control_arn(region)`` each region's control; ``down(index)`` takes one
endpoint out (it answers 503), as a cluster endpoint can be.

As terraform/modules/region_gate deploys it, there is one more control, the hold (``HOLD``: a failover is
in progress, no region is active), and ARC's assertion rule over all of them: at least one On.  ``set``
changes several controls at once, as ``UpdateRoutingControlStates`` does, and refuses a change that would
break the rule (``SafetyRuleViolation``).

``fail_over`` is the failover procedure that keeps the two regions' consumers apart: the old region Off and
the hold On, a wait that outlasts the old region's gate (``fleet.region_gate.activation_wait_s``: every
worker and router there has then stopped, whether it read the Off or could not read at all, and its last
write has landed), then the new region On and the hold Off.  Failovers are serialised: each takes the next
generation when it turns the old region Off, and turns the new one On only if no later failover has begun
meanwhile (a later change supersedes one still waiting), so two that overlap (a flapping health check, both
regions unhealthy, an operator racing the automation) never leave two regions On; and only once the new
region, read again after the wait (``ready``, asked every ``READY_EVERY_S`` while it says not yet: the
automation's wait for replication, ``harness.region.automation.after_wait``), can take the activation
(if it no longer can, the failover gives up, the hold On).  Each change goes to the history
(``gate.state`` {region, state, generation}, src ``route53``).  It stands outside every region: a region's
outage does not reach it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from fleet.region_gate import OFF, ON
from harness.processes import start_thread
from harness.quiet_http import QuietHTTPServer

Emit = Callable[..., Any]
SERVICE = "route53-recovery-cluster"
TARGET = "ToggleCustomerAPI.GetRoutingControlState"
# An ARC cluster has five endpoints, each in its own region.
CLUSTER_REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", "ap-southeast-2")
CONTROL_PANEL = "arn:aws:route53-recovery-control::000000000000:controlpanel/wsfleet"
HOLD = "failover-hold"  # the control On while a failover is in progress
READY_EVERY_S = 0.05  # a failover's polling of its target after the wait (replication has no signal to wait on)


class SafetyRuleViolation(ValueError):
    """A change the assertion rule refuses: it would leave no control On (ARC: ConflictException)."""


def control_arn(region: str) -> str:
    """The stand-in routing control of ``region`` (an AWS region name, or ``HOLD``)."""
    return f"{CONTROL_PANEL}/routingcontrol/{region}"


def signature_problem(method: str, url: str, headers: Mapping[str, str], body: bytes,
                      secrets: Mapping[str, str]) -> str | None:
    """Why a request's SigV4 signature for ``SERVICE`` does not hold (``secrets``: access key -> secret
    key), or None when it does: the signature is recomputed over the headers it names."""
    fields = dict(part.strip().split("=", 1) for part in
                  headers.get("Authorization", "").removeprefix("AWS4-HMAC-SHA256 ").split(",") if "=" in part)
    scope = fields.get("Credential", "").split("/")
    if len(scope) != 5 or scope[3] != SERVICE or "X-Amz-Date" not in headers:
        return "the request is not signed with SigV4 for " + SERVICE
    if scope[0] not in secrets:
        return f"unknown access key {scope[0]!r}"
    signed = {name: headers[name] for name in headers if name.lower() in fields.get("SignedHeaders", "").split(";")}
    request = AWSRequest(method=method, url=url, data=body, headers=signed)
    request.context["timestamp"] = headers["X-Amz-Date"]
    auth = SigV4Auth(Credentials(scope[0], secrets[scope[0]]), SERVICE, scope[2])
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    return None if expected == fields.get("Signature") else "the signature does not match"


class RoutingControls:
    """The routing controls of ``regions`` (AWS region names), ``active`` On and the rest Off, and the hold
    Off, served on ``cluster`` endpoints; requests must be signed with a key of ``secrets``."""

    def __init__(self, regions: list[str], active: str, emit: Emit, secrets: Mapping[str, str],
                 cluster: int = len(CLUSTER_REGIONS)) -> None:
        self.states = {control: ON if control == active else OFF for control in [*regions, HOLD]}
        self.emit = emit
        self.lock = threading.Lock()
        self.generation = 0  # of the latest failover begun
        self.out: set[int] = set()  # endpoints taken out
        self.servers = [QuietHTTPServer(("127.0.0.1", 0), self._handler(index, dict(secrets)))
                        for index in range(cluster)]
        for region, state in self.states.items():
            emit("gate.state", region=region, state=state, generation=self.generation)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The cluster's endpoints as the gates are given them (``region=url``)."""
        return tuple(f"{CLUSTER_REGIONS[i % len(CLUSTER_REGIONS)]}=http://127.0.0.1:{server.server_address[1]}/"
                     for i, server in enumerate(self.servers))

    def start(self) -> RoutingControls:
        for index, server in enumerate(self.servers):
            start_thread(threading.Thread(target=server.serve_forever, name=f"routing-controls-{index}",
                                          daemon=True))
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def fresh(self, active: str, emit: Emit) -> None:
        """Fresh state for the next run of a batch: ``active`` On, the rest and the hold Off, every endpoint
        in, events to ``emit`` (the states written there); a failover of the last run still waiting is
        superseded (it will not turn its region On)."""
        with self.lock:
            self.generation += 1
            self.out.clear()
            self.emit = emit
            self.states = {control: ON if control == active else OFF for control in self.states}
            for control, state in self.states.items():
                emit("gate.state", region=control, state=state, generation=self.generation)

    def down(self, index: int, out: bool = True) -> None:
        """Take cluster endpoint ``index`` out (it answers 503) or bring it back."""
        with self.lock:
            (self.out.add if out else self.out.discard)(index)

    def set(self, changes: Mapping[str, str]) -> None:
        """An operator's change of some controls at once, outside any failover."""
        with self.lock:
            self._set(changes)

    def _set(self, changes: Mapping[str, str]) -> None:
        after = {**self.states, **changes}
        if ON not in after.values():
            raise SafetyRuleViolation(f"{dict(changes)} would leave no control On (the assertion rule)")
        self.states = after
        for control, state in changes.items():
            self.emit("gate.state", region=control, state=state, generation=self.generation)

    def fail_over(self, old: str, new: str, wait_s: float, ready: Callable[[], bool | None] = lambda: True,
                  activated: Callable[[int], object] = lambda generation: None) -> str:
        """``old`` Off and the hold On; ``wait_s`` later (``activation_wait_s`` of ``old``'s settings: nothing
        of ``old`` consumes or writes any more), ``new`` On and the hold Off once ``new``, read again
        (``ready``: None is not yet, asked again ``READY_EVERY_S`` later), can take the activation, unless a
        later failover began meanwhile (``"superseded"``) or it no longer can (``ready`` False:
        ``"abandoned"``: it stays Off, the hold On, and ``failover.abandoned`` {region, generation} goes to
        the history).  ``"activated"`` when this one turned ``new`` On; ``activated`` is called with its
        generation at that instant, before any other change or read of the controls (what the new region
        holds then is what it starts from)."""
        with self.lock:
            self.generation += 1
            mine = self.generation
            self._set({old: OFF, HOLD: ON})
        time.sleep(wait_s)  # the old region's gate must run out: a duration, not a synchronisation
        while (fit := ready()) is None:  # outside the lock: it may ask the regions over the network
            with self.lock:
                if self.generation != mine:
                    return "superseded"
            time.sleep(READY_EVERY_S)
        with self.lock:
            if self.generation != mine:
                return "superseded"  # the later failover decides
            if not fit:
                self.emit("failover.abandoned", region=new, generation=mine)
                return "abandoned"
            self._set({new: ON, HOLD: OFF})
            activated(mine)
        return "activated"

    def _answer(self, index: int, target: str, request: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The answer of endpoint ``index`` to a signed request: the control's state, or an error."""
        arn = request.get("RoutingControlArn")
        with self.lock:
            if index in self.out:
                return 503, {"__type": "ServiceUnavailableException", "message": "endpoint out (fault)"}
            states = {control_arn(region): (region, state) for region, state in self.states.items()}
        if target != TARGET:
            return 400, {"__type": "ValidationException", "message": f"unknown operation {target!r}"}
        if arn not in states:
            return 404, {"__type": "ResourceNotFoundException", "message": f"no routing control {arn!r}"}
        region, state = states[arn]
        return 200, {"RoutingControlArn": arn, "RoutingControlName": region, "RoutingControlState": state}

    def _handler(self, index: int, secrets: dict[str, str]) -> type[BaseHTTPRequestHandler]:
        controls = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # the body goes out at once, not after the headers' ACK (40 ms)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name: value for name, value in self.headers.items()}
                problem = signature_problem("POST", f"http://{self.headers.get('Host', '')}{self.path}", headers,
                                            body, secrets)
                if problem is not None:
                    status, answer = 403, {"__type": "AccessDeniedException", "message": problem}
                else:
                    try:
                        request = json.loads(body or b"{}")
                    except ValueError:
                        request = {}
                    status, answer = controls._answer(index, headers.get("X-Amz-Target", ""), request)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
