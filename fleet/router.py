"""The router: turns START and STOP events into desired state (DESIGN §1, §2a, §3).

``handler`` is the AWS Lambda entry point (API Gateway proxy event in, proxy response out; REST v1 and
HTTP API v2 payloads).  ``handle_event`` is the logic under it, shared with the local HTTP adapter
(``fleet.router_http``) and the tests: it validates one event body, writes the connections table (and,
``hardened``, the owner's STOP mailbox in the workers table: an entry naming the lease the STOP found and
when it stopped; or, when the STOP ended a STARTED period and nobody held the stream, a mark that has what
it emitted in that period drained),
sends the SQS notification ``{"pk": ...}`` (after every START; after a STOP only in ``hardened``: the
published design notifies STOP not at all; the notifications of events handled at once go together,
``Notifier``), records one history event ``event`` {kind, pk, status} and
prints one small JSON log line.

Input ``{"event_type": "START" | "STOP", "connection_id": ..., "ws_url": ...}`` (``ws_url`` with START only).
Anything else answers 400 and changes nothing: a body over ``MAX_BODY_BYTES``, bytes that are not UTF-8
JSON, duplicate or unknown keys, a field of the wrong type, an unknown ``event_type``, a ``connection_id``
outside ``CONNECTION_ID``, a ``ws_url`` that is malformed, not ``ws://`` / ``wss://``, carries
credentials or a fragment, or names a host and port outside ``FleetConfig.allowed_ws_hosts`` (rules in
``fleet.allowlist``; an empty allowlist admits no host).

Writes are the profile's rules (``fleet.lease``: ``start_connection``, ``stop_connection``, ``post_stop``,
``mark_undrained``):
``blog`` / ``unsafe`` START overwrites the item (the published flaw, kept on purpose); ``hardened`` START
updates desired state and URL and initialises the lease fields only where absent, so a repeated START never
clobbers a live lease.  STOP (every profile) sets STOPPED and, unless already stopped, ``stopped_at_ms`` on an
existing item (404 otherwise).  Errors: backend unavailable -> 503, any other store error -> 502.  When the
table write succeeded but the notification (or the hardened STOP mailbox post) did not, the event is accepted,
not failed: 202 with ``notified: false`` and a note saying the desired state *was* recorded, which the fleet's
reconcile and its owners' desired-state checks find within their interval, so nothing needs repeating
(repeating is still safe: START and STOP are idempotent).  A 5xx would tell a client its event may not have
happened, and in a storm its repeats would add load to a backend that is already behind.  With a region gate
(``region_gate_url``), a router whose region is not the active one (its routing control Off, or unreadable for
longer than the gate's lease: ``fleet.region_gate``) writes nothing and answers 503 naming its region: its
table is a replica the active region's conditions cannot see, so a write there could be reverted by
replication or revert a newer one.

Control journal (``control_journal`` on: deployments with a standby region; ``fleet.control_journal``): each
START and STOP is first put in its stream's journal item, which no worker writes, then its desired-state write
is dated as the entry.  When a region is activated, the authority's automation asks that region's router to
``reapply_journal`` (Lambda: a direct invocation ``{"wsfleet": "reapply-control"}``; locally ``POST
/reapply-control``): behind an open gate, it scans the connections table and handles again, as an event, each
entry its connection item disagrees with and predates, recording ``control.reapply``.  Both dates are
routers' clocks: two routers' control writes of one stream are ordered by the gate (a region writes only
while On, and the activation wait parts two regions' writes), so the dates order them, and the journal
item's last-writer-wins keeps the later, as long as the regions' clocks differ by less than the fencing
margin (a write of the old region lands by its gate's lease plus a request's timeout; the new one writes a
margin later).

Warm Lambda invocations reuse one event loop and one ``AwsClients`` (opened on the first call), so a warm
request pays no SDK start-up.  A pooled connection that went stale while the sandbox was frozen can fail its
request, which answers 503 like any unavailable backend (the client repeats; the events are idempotent).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import re
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Literal

from fleet.allowlist import Allowlist, show
from fleet.aws import AwsClients, aws_errors, consistent_scan, send_messages
from fleet.config import ENV_VARS, FleetConfig
from fleet.control_journal import Entry, dated, journal_item, to_reapply
from fleet.errors import ConditionFailed, ConfigError, StoreError, StoreUnavailable, ValidationError
from fleet.expr import Write
from fleet.history import HistoryWriter
from fleet.lease import rules_for
from fleet.region_gate import RegionGate, gate_for
from fleet.schema import conn_pk
from fleet.typed import from_typed, to_typed, typed_request

MAX_BODY_BYTES = 16 * 1024
CONNECTION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
EVENT_FIELDS = ("event_type", "connection_id", "ws_url")
# Notifications (``Notifier``): SendMessageBatch requests one router process keeps in flight, and its limit of
# messages a request.  Eight in flight, as the worker's announcements (``fleet.store``): under a burst the
# requests fill up while the others are answered, and a slow queue still has eight to answer at once.
NOTIFY_SENDS_IN_FLIGHT = 8
NOTIFY_BATCH = 10

Kind = Literal["START", "STOP"]
Response = tuple[int, dict[str, Any]]


@dataclass(frozen=True)
class RouterEvent:
    """A validated event: ``ws_url`` is set exactly when ``kind`` is START."""

    kind: Kind
    connection_id: str
    ws_url: str | None

    @property
    def pk(self) -> str:
        return conn_pk(self.connection_id)


class InvalidEvent(ValidationError):
    """A rejected event; ``kind`` and ``pk`` are what could be read of it, for the history."""

    def __init__(self, message: str, kind: str = "INVALID", pk: str | None = None, status: int = 400) -> None:
        super().__init__(message, status)
        self.kind = kind
        self.pk = pk


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise InvalidEvent(f"duplicate key {show(key)} in the body")
        result[key] = value
    return result


def _decode_object(body: bytes | str) -> dict[str, Any]:
    # surrogatepass: a str with lone surrogates becomes bytes that fail the UTF-8 decode below.
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidEvent(f"body is larger than {MAX_BODY_BYTES} bytes")
    try:
        decoded = json.loads(raw.decode("utf-8"), object_pairs_hook=_object_without_duplicates)
    except UnicodeDecodeError:
        raise InvalidEvent("body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise InvalidEvent(f"body is not valid JSON: {exc.msg} at {where}") from None
    except RecursionError:
        raise InvalidEvent("body is nested too deeply") from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise InvalidEvent(f"body is not valid JSON: {str(exc).split(';')[0]}") from None
    if not isinstance(decoded, dict):
        raise InvalidEvent(f"body must be a JSON object, not {type(decoded).__name__}")
    return decoded


def _string_field(fields: dict[str, Any], name: str, kind: str, pk: str | None) -> str:
    if name not in fields:
        raise InvalidEvent(f"{name} is missing", kind, pk)
    value = fields[name]
    if not isinstance(value, str):
        raise InvalidEvent(f"{name} must be a string, not {type(value).__name__}", kind, pk)
    return value


def parse_event(body: bytes | str, allowlist: Allowlist) -> RouterEvent:
    """Validate one event body; raises InvalidEvent (status 400) with a precise message."""
    fields = _decode_object(body)
    event_type = fields.get("event_type")
    kind = event_type if event_type in ("START", "STOP") else "INVALID"
    connection_id = fields.get("connection_id")
    pk = (
        conn_pk(connection_id)
        if isinstance(connection_id, str) and CONNECTION_ID.fullmatch(connection_id)
        else None
    )

    _string_field(fields, "event_type", kind, pk)
    if kind == "INVALID":
        raise InvalidEvent(f"event_type must be START or STOP, not {show(event_type)}", pk=pk)
    connection_id = _string_field(fields, "connection_id", kind, pk)
    if pk is None:
        pattern = CONNECTION_ID.pattern
        raise InvalidEvent(f"connection_id must match {pattern}, not {show(connection_id)}", kind)
    unknown = sorted(set(fields) - set(EVENT_FIELDS))
    if unknown:
        listed = ", ".join(map(show, unknown))
        raise InvalidEvent(f"unexpected field(s) {listed}; allowed: {', '.join(EVENT_FIELDS)}", kind, pk)
    if kind == "STOP":
        if "ws_url" in fields:
            raise InvalidEvent("ws_url is only accepted with START", kind, pk)
        return RouterEvent("STOP", connection_id, None)
    ws_url = _string_field(fields, "ws_url", kind, pk)
    refusal = allowlist.refusal(ws_url)
    if refusal:
        raise InvalidEvent(refusal, kind, pk)
    return RouterEvent("START", connection_id, ws_url)


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _write_start(pk: str, ws_url: str, clients: AwsClients, config: FleetConfig,
                       desired_at_ms: int | None = None) -> None:
    """The profile's START write (``fleet.lease``): ``blog`` / ``unsafe`` a whole-item put, ``hardened`` an
    update that never clobbers a live lease.  Applied once it returns."""
    write = dated(rules_for(config).start_connection(pk, ws_url, _now_ms()), desired_at_ms)
    request = typed_request(write.render())
    clients.requests["coordination"] += 1
    async with aws_errors("START put" if write.replace else "START update"):
        if write.replace:
            await clients.ddb.put_item(TableName=config.connections_table, **request)
        else:
            await clients.ddb.update_item(TableName=config.connections_table, **request)


@dataclass(frozen=True)
class StopFound:
    """What the STOP write found: the lease (owner, epoch: None when the item has none), the stop time stored
    (a repeated STOP keeps the first one's) and whether what the stream emitted before it may be stored by
    nobody: no owner, and not drained (nor released for a STOP, which says the same) at its epoch.  True of
    a STOP ending a STARTED period nobody held, and still true of that STOP repeated after an answer that
    was lost before its mark was written."""

    owner: str
    epoch: int | None
    stopped_at_ms: int | None
    undrained: bool


async def _write_stop(pk: str, clients: AwsClients, config: FleetConfig,
                      desired_at_ms: int | None = None) -> StopFound:
    """The STOP write: STOPPED on an existing item, with its stop time (ConditionFailed when there is no
    item)."""
    now = _now_ms()
    request = typed_request(dated(rules_for(config).stop_connection(pk, now), desired_at_ms).render())
    clients.requests["coordination"] += 1
    async with aws_errors("STOP update"):
        result = await clients.ddb.update_item(TableName=config.connections_table, ReturnValues="ALL_NEW",
                                               **request)
    found = from_typed(result.get("Attributes", {}))
    epoch, stopped_at = found.get("epoch"), found.get("stopped_at_ms")
    owner, drained = str(found.get("lease_owner", "")), found.get("drained_epoch")
    return StopFound(owner, None if epoch is None else int(epoch), None if stopped_at is None else int(stopped_at),
                     undrained=not owner and (drained is None or drained != epoch))


async def _mark_undrained(pk: str, stopped_at_ms: int, clients: AwsClients, config: FleetConfig) -> None:
    """Nobody holds the stream and nobody stored what it emitted before the STOP: mark it for a drain (where
    the profile drains; ``fleet.lease.HardenedRules.mark_undrained``).  Refused: somebody took it
    meanwhile."""
    write = rules_for(config).mark_undrained(pk, stopped_at_ms)
    if write is not None:
        await _update_unless_refused(config.connections_table, write, "STOP drain mark", clients)


async def _post_stop_to_owner(pk: str, owner: str, epoch: int | None, stopped_at_ms: int | None,
                              clients: AwsClients, config: FleetConfig) -> None:
    """hardened: add a STOP (at ``stopped_at_ms``) of ``pk``'s lease at ``epoch`` (``fleet.lease.StopRequest``)
    to the owner's mailbox, read with its every heartbeat.  An owner whose worker item is gone is fine: its
    lease lapses and its writes are fenced anyway (and once it can never renew, a worker drains what it left
    unpersisted before the STOP)."""
    write = rules_for(config).post_stop(owner, pk, epoch, stopped_at_ms)
    await _update_unless_refused(config.workers_table, write, "STOP mailbox", clients)


async def _update_unless_refused(table: str, write: Write, what: str, clients: AwsClients) -> None:
    """Send a conditional update after the STOP write; a refused condition is an answer, not an error."""
    clients.requests["coordination"] += 1
    try:
        async with aws_errors(what):
            await clients.ddb.update_item(TableName=table, **typed_request(write.render()))
    except ConditionFailed:
        return


class Notifier:
    """The notifications of the events one router process handles at once, sent together (a group commit):
    an event's notification goes out at once while fewer than ``NOTIFY_SENDS_IN_FLIGHT`` requests are in
    flight, else it waits for one of them to be answered and goes in the next request with up to nine others
    (``fleet.aws.send_messages``: one SendMessageBatch).  So a single event waits for nothing, and a burst of STARTs
    (300 users spawned at 50 a second, beside a fleet's own queue traffic on the embedded backend) costs the
    queue a tenth of the requests instead of one each.  Each event still answers only once its own message
    was accepted, and a refused request (or a refused message in it) fails only the events whose notifications
    it carried."""

    def __init__(self, clients: AwsClients, queue_url: str) -> None:
        self.clients, self.queue_url = clients, queue_url
        self.waiting: list[tuple[str, asyncio.Future[None]]] = []
        self.in_flight = 0
        self.requests = 0  # SendMessageBatch requests sent (tests and logs)
        self._tasks: set[asyncio.Task[None]] = set()

    async def notify(self, pk: str) -> None:
        """``{"pk": pk}`` on the queue; raises what failed the request carrying it (a ``StoreError``, or a
        bug's exception)."""
        accepted = asyncio.get_running_loop().create_future()
        self.waiting.append((pk, accepted))
        self._send_what_waits()
        await accepted

    def _send_what_waits(self) -> None:
        while self.waiting and self.in_flight < NOTIFY_SENDS_IN_FLIGHT:
            batch, self.waiting = self.waiting[:NOTIFY_BATCH], self.waiting[NOTIFY_BATCH:]
            self.in_flight += 1
            self.requests += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[str, asyncio.Future[None]]]) -> None:
        failure: Exception | None = None
        try:
            await send_messages(self.clients, self.queue_url, [{"pk": pk} for pk, _ in batch])
        except Exception as exc:  # a StoreError, or a bug's: either reaches the events, none waits for ever
            failure = exc
        finally:
            self.in_flight -= 1
        for _, accepted in batch:
            if accepted.done():  # its event was cancelled (the client went away)
                continue
            if failure is None:
                accepted.set_result(None)
            else:
                accepted.set_exception(failure)
        self._send_what_waits()


@functools.cache
def _notifier(clients: AwsClients, queue_url: str) -> Notifier:
    """One notifier per clients (so per event loop) and queue: the group commit spans every event they serve."""
    return Notifier(clients, queue_url)


def _store_failure(exc: StoreError) -> Response:
    if isinstance(exc, StoreUnavailable):
        return 503, {"error": f"backend unavailable, outcome unknown (the event is safe to repeat): {exc}"}
    return 502, {"error": f"backend refused the request: {exc}"}


async def _journal(event: RouterEvent, journal_ms: int, clients: AwsClients, config: FleetConfig) -> None:
    """With ``control_journal`` on: the event in its stream's journal item (a put: only routers write it),
    dated ``journal_ms``, the date its desired-state write then gives the connection item."""
    if config.control_journal != "on":
        return
    clients.requests["coordination"] += 1
    async with aws_errors("control journal put"):
        item = journal_item(Entry(event.kind, event.connection_id, event.ws_url, journal_ms))
        await clients.ddb.put_item(TableName=config.connections_table, Item=to_typed(item))


async def reapply_journal(clients: AwsClients, config: FleetConfig, history: HistoryWriter) -> Response:
    """Handle again each journalled START or STOP the connections table disagrees with and that it predates
    (``fleet.control_journal.to_reapply``), as of its date, when
    this region's gate admits writes; each one's outcome in the history (``control.reapply``)."""
    if config.control_journal != "on":
        return 409, {"error": f"{ENV_VARS['control_journal']} is off: there is no journal to re-apply"}
    if not await _region_gate(config, clients).admits():
        return 503, {"error": f"region {config.region} is not the active region: nothing re-applied"}
    try:
        items = [item async for item in consistent_scan(clients, config.connections_table, "control journal scan")]
    except StoreError as exc:
        return _store_failure(exc)
    statuses = []
    for entry in to_reapply(items):
        event = RouterEvent("START" if entry.kind == "START" else "STOP", entry.connection_id, entry.ws_url)
        (status, _), _ = await _apply(event, clients, config, entry.journal_ms)
        history.emit("control.reapply", kind=event.kind, pk=event.pk, status=status)
        statuses.append(status)
    failed = sum(not 200 <= s < 300 for s in statuses)
    return (503 if failed else 200), {"reapplied": len(statuses), "failed": failed}


async def _apply(event: RouterEvent, clients: AwsClients, config: FleetConfig,
                 journalled_ms: int | None = None) -> tuple[Response, float | None]:
    """The event's writes (with ``control_journal``, its journal entry first) and notification; the answer,
    and when the desired-state write was answered (by then it was applied; None when it failed).
    ``journalled_ms``: a re-application of the journal entry of that date, which keeps its date and does not
    write the journal again (a new journal write would win last-writer-wins over a later event's entry still
    on its way from the other region, and a new date over that event's desired state)."""
    journal_ms = _now_ms() if journalled_ms is None else journalled_ms
    try:
        if journalled_ms is None:
            await _journal(event, journal_ms, clients, config)
        desired_at = journal_ms if config.control_journal == "on" else None
        if event.ws_url is not None:
            await _write_start(event.pk, event.ws_url, clients, config, desired_at)
            found = StopFound("", None, None, undrained=False)
        else:
            found = await _write_stop(event.pk, clients, config, desired_at)
    except ConditionFailed:
        cid = event.connection_id
        return (404, {"error": f"unknown connection {cid}: nothing to stop", "connection_id": cid}), None
    except StoreError as exc:
        return _store_failure(exc), None
    written_ms = time.time() * 1000.0
    return await _announce(event, found, clients, config), written_ms


async def _announce(event: RouterEvent, found: StopFound, clients: AwsClients, config: FleetConfig) -> Response:
    """After the desired-state write: the STOP mailbox or drain mark, and the notification."""
    desired = "STARTED" if event.kind == "START" else "STOPPED"
    recorded = {"connection_id": event.connection_id, "desired_state": desired}
    try:
        if found.owner and config.profile == "hardened":
            await _post_stop_to_owner(event.pk, found.owner, found.epoch, found.stopped_at_ms, clients, config)
        elif found.undrained and found.stopped_at_ms is not None:
            await _mark_undrained(event.pk, found.stopped_at_ms, clients, config)
        if event.kind == "START" or config.profile == "hardened":
            await _notifier(clients, config.queue_url).notify(event.pk)
    except StoreError as exc:
        within_s = max(config.reconcile_s, config.desired_check_s)
        note = (
            f"desired state {desired} was recorded, but the fleet was not told ({exc}); "
            f"the fleet's reconcile and desired-state checks find it within {within_s:g} s, and repeating "
            "the event is safe"
        )
        return 202, {"ok": True, "notified": False, "note": note, **recorded}
    return 200, {"ok": True, **recorded}


async def handle_event(
    body: bytes | str, clients: AwsClients, config: FleetConfig, history: HistoryWriter
) -> Response:
    """Validate and apply one event body; returns (HTTP status, JSON payload).  Never raises for bad input
    or backend failures; records the history event and prints one log line."""
    started = time.monotonic()
    kind, pk, written_ms, sent_ms = "INVALID", None, None, None
    try:
        if not config.queue_url:
            raise ConfigError(f"{ENV_VARS['queue_url']} is not set")
        event = parse_event(body, Allowlist.parse(config.allowed_ws_hosts))
        kind, pk = event.kind, event.pk
        if await _region_gate(config, clients).admits():
            sent_ms = time.time() * 1000.0
            (status, payload), written_ms = await _apply(event, clients, config)
        else:
            status, payload = 503, {"error": f"region {config.region} is not the active region (its routing "
                                             "control is Off or unreadable): nothing was written; send the "
                                             "event to the active region (repeating it is safe)"}
    except InvalidEvent as exc:
        kind, pk = exc.kind, exc.pk
        status, payload = exc.status, {"error": str(exc)}
    except ConfigError as exc:
        status, payload = 500, {"error": f"router misconfigured: {exc}"}
    _record(history, kind, pk, status, started, written_ms, sent_ms)
    return status, payload


@functools.cache
def _region_gate(config: FleetConfig, clients: AwsClients) -> RegionGate:
    """One gate per settings and clients: its lease outlives a request."""
    return gate_for(config, clients.gate_clients)


def _record(history: HistoryWriter, kind: str, pk: str | None, status: int, started: float,
            written_ms: float | None = None, sent_ms: float | None = None) -> None:
    """The history event and the one small JSON log line of a handled request (``started``: monotonic;
    ``written_ms``: when its desired-state write was answered, which the mailbox post and the notification
    can precede the event by a good while; ``sent_ms``: when that write was about to be sent, the earliest it
    can have landed, which matters when its outcome is unknown (a 503 without ``written_ms``))."""
    history.emit("event", kind=kind, pk=pk, status=status, written_ms=written_ms, sent_ms=sent_ms)
    ms = round((time.monotonic() - started) * 1000, 1)
    fields = {"src": "router", "kind": kind, "pk": pk, "status": status, "ms": ms}
    print(json.dumps({k: v for k, v in fields.items() if v is not None}), flush=True)


def proxy_response(status: int, payload: dict[str, Any]) -> dict[str, Any]:
    """An API Gateway proxy response."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(payload),
        "isBase64Encoded": False,
    }


def health(config: FleetConfig) -> dict[str, Any]:
    """The health answer (shallow: the router runs and its settings parse; no backend request)."""
    return {"ok": True, "profile": config.profile}


def proxy_method(event: dict[str, Any]) -> str:
    """The HTTP method of an API Gateway proxy event (REST v1 ``httpMethod``, HTTP API v2
    ``requestContext.http.method``); POST when the event names none."""
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, dict) else None
    method = http.get("method") if isinstance(http, dict) else event.get("httpMethod")
    return method if isinstance(method, str) else "POST"


def proxy_body(event: dict[str, Any]) -> bytes | str:
    """The body of an API Gateway proxy event, base64-decoded when flagged; InvalidEvent (400) when it is
    not a string or its base64 is broken."""
    body = event.get("body")
    if body is None:
        return b""
    if not isinstance(body, str):
        raise InvalidEvent("the proxy event's body is not a string")
    if event.get("isBase64Encoded"):
        if len(body) > (MAX_BODY_BYTES + 2) // 3 * 4:
            raise InvalidEvent(f"body is larger than {MAX_BODY_BYTES} bytes")
        try:
            return base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error, or a str that is not ASCII
            raise InvalidEvent("body is flagged isBase64Encoded but is not valid base64") from None
    return body


class LambdaRouter:
    """The Lambda entry point's state: one event loop, one ``AwsClients`` and one history writer, opened
    on the first invocation from ``FleetConfig.from_env()`` and reused while the sandbox stays warm.

    API Gateway sends it two routes: ``POST /events`` and the GET health route Route 53 probes (its path
    is a terraform variable), so any GET answers the health check and any method but GET and POST 405.
    """

    def __init__(self) -> None:
        self._opened: tuple[asyncio.AbstractEventLoop, AwsClients, FleetConfig, HistoryWriter] | None = None

    def __call__(self, event: object, context: object) -> dict[str, Any]:
        started = time.monotonic()
        try:
            loop, clients, config, history = self._open()
        except ConfigError as exc:
            return proxy_response(500, {"error": f"router misconfigured: {exc}"})
        try:
            if not isinstance(event, dict):
                raise InvalidEvent("the Lambda event is not an API Gateway proxy event")
            method = proxy_method(event)
            if event.get("wsfleet") == "reapply-control":  # the automation's direct invocation, not API Gateway
                return proxy_response(*loop.run_until_complete(reapply_journal(clients, config, history)))
            if method == "GET":
                return proxy_response(200, health(config))
            if method != "POST":
                raise InvalidEvent(f"method {show(method)} not allowed; use POST", status=405)
            body = proxy_body(event)
        except InvalidEvent as exc:
            _record(history, exc.kind, exc.pk, exc.status, started)
            return proxy_response(exc.status, {"error": str(exc)})
        try:
            status, payload = loop.run_until_complete(handle_event(body, clients, config, history))
        except Exception:
            traceback.print_exc(file=sys.stderr)
            status, payload = 500, {"error": "internal error in the router"}
        return proxy_response(status, payload)

    def _open(self) -> tuple[asyncio.AbstractEventLoop, AwsClients, FleetConfig, HistoryWriter]:
        if self._opened is None:
            config = FleetConfig.from_env()
            loop = asyncio.new_event_loop()
            try:
                clients = loop.run_until_complete(AwsClients(config).__aenter__())
            except BaseException:
                loop.close()
                raise
            self._opened = (loop, clients, config, HistoryWriter(config.history_path, "router"))
        return self._opened

    def close(self) -> None:
        """Close the clients, the loop and the history; the next invocation opens them again."""
        if self._opened is not None:
            loop, clients, _, history = self._opened
            self._opened = None
            loop.run_until_complete(clients.__aexit__(None, None, None))
            loop.close()
            history.close()


_lambda_router = LambdaRouter()


def handler(event: object, context: object) -> dict[str, Any]:
    """AWS Lambda entry point (API Gateway proxy integration, payload format 1.0 or 2.0)."""
    return _lambda_router(event, context)
