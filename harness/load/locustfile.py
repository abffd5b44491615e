"""Locust users that each own one stream of a running fleet, and measure how long the fleet takes to own it
again after a storm.

Run it against ``wsfleet up`` (started in the same folder: it reads ``.wsfleet/up.json`` for the router, the
simulated upstream and the run folder; ``--wsfleet-state`` names another file)::

    locust -f harness/load/locustfile.py --headless -u 200 -r 50 -t 60s --csv runs/storm/locust \\
        --storm-after 20 --storm disconnect

Each user creates a stream on the simulator and STARTs it through the router (a Locust request ``START``),
then waits until the simulator shows a live session for it: a request ``STREAM owned`` whose response time
is the time from the START to that session.  It then watches the stream (every ``--watch-s``): when its
session has closed, it waits for the next one, and reports ``STREAM recovered`` with the time from the
close to the new session's opening, both read from the simulator's own session records (so the figure does
not depend on how often the user looks).  A stream not owned again within ``--recover-timeout-s`` is a
failure.  On stop, each user STOPs its stream.

The storm (``--storm-after S``, run by the master or a standalone Locust only): ``disconnect`` drops that
share (``--storm-fraction``) of the simulator's live sessions, as a gateway's mass disconnect does; ``kill``
SIGKILLs ``--storm-kill`` of the fleet's worker processes (same machine only).

When the test stops (master or standalone), the run ends as a scenario does (``harness.load.judge``;
``--no-judge`` skips it): a settle, the final scan of the users' streams and every checker, written to the
run folder's ``verdict.json`` and printed; Locust exits 1 when a checker that applies is not valid.

Locust's aggregated statistics are not enough for per-phase analysis, so every user also writes raw events
into the run's history (``RUN_DIR/history/locust-<pid>.jsonl``, src ``locust``): ``load.start`` {pk,
status}, ``load.owned`` {pk, ms}, ``load.lost`` {pk, closed_ms, reason}, ``load.recovered`` {pk, ms,
closed_ms, opened_ms}, ``load.unrecovered`` {pk, closed_ms}, and ``load.storm`` {kind, ...} from whoever
triggered it.  Locust (gevent) runs in its own process; distributed mode (``--processes N``, or
``--master`` / ``--worker``) needs no change: each process writes its own history file.

The router calls (START, STOP) go through Locust's own client, so Locust times, counts and aggregates them
across its processes; they never follow a redirect (a 3xx START is a failure).  Every other call (the
simulator's control API) goes through the harness's client (``harness.http_client``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import gevent
from locust import HttpUser, constant, events, task
from locust.env import Environment
from locust.runners import WorkerRunner

from fleet.history import HistoryWriter
from harness import http_client

DEFAULT_STATE = Path(".wsfleet") / "up.json"
_numbers = itertools.count(1)
_history: HistoryWriter | None = None


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--wsfleet-state", default=str(DEFAULT_STATE),
                        help="the running `wsfleet up`'s state file (default .wsfleet/up.json)")
    parser.add_argument("--watch-s", type=float, default=1.0, help="how often a user looks at its stream")
    parser.add_argument("--own-timeout-s", type=float, default=60.0,
                        help="a stream not owned this long after its START is a failure")
    parser.add_argument("--recover-timeout-s", type=float, default=120.0,
                        help="a stream not owned again this long after its session closed is a failure")
    parser.add_argument("--storm-after", type=float, default=0.0,
                        help="seconds after the start to trigger the storm (0: none)")
    parser.add_argument("--storm", choices=("disconnect", "kill"), default=None,
                        help="disconnect (the default with --storm-after): the simulator drops a share of its "
                        "sessions; kill: SIGKILL workers (needs --storm-after)")
    parser.add_argument("--storm-fraction", type=float, default=1.0,
                        help="share of the live sessions a disconnect storm drops (default all)")
    parser.add_argument("--storm-kill", type=int, default=1, help="workers a kill storm SIGKILLs")
    parser.add_argument("--no-judge", action="store_true",
                        help="end without the final scan and verdict (harness.load.judge)")


def _state(environment: Environment) -> dict[str, Any]:
    path = Path(environment.parsed_options.wsfleet_state).expanduser().resolve()
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"locustfile: no running `wsfleet up` found ({path}: {exc}); start one first, "
                         "or name its state file with --wsfleet-state") from None
    return state


def _history_of(environment: Environment) -> HistoryWriter:
    global _history
    if _history is None:
        run_dir = Path(_state(environment)["run_dir"])
        _history = HistoryWriter(str(run_dir / "history" / f"locust-{os.getpid()}.jsonl"), "locust")
    return _history


@events.init.add_listener
def _init(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    if options.storm is not None and options.storm_after <= 0:
        # a storm named but never triggered would be judged as if it had run
        raise SystemExit(f"locustfile: --storm {options.storm} needs --storm-after S, the seconds after the "
                         "start to trigger it")
    if environment.host is None:
        environment.host = _state(environment)["router_url"]


@events.test_start.add_listener
def _schedule_storm(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    if options is None or options.storm_after <= 0 or isinstance(environment.runner, WorkerRunner):
        return
    gevent.spawn_later(options.storm_after, _storm, environment)


def _storm(environment: Environment) -> None:
    options, state = environment.parsed_options, _state(environment)
    if options.storm in (None, "disconnect"):
        answer = http_client.request("POST", f"{state['upstream_control_url']}/disconnect",
                                     params={"fraction": options.storm_fraction}, timeout_s=30)
        _history_of(environment).emit("load.storm", kind="disconnect", fraction=options.storm_fraction,
                                      status=answer.status, dropped=answer.json().get("disconnected"))
        return
    killed = []
    for worker in state.get("workers", [])[:options.storm_kill]:
        try:
            os.kill(int(worker["pid"]), signal.SIGKILL)
            killed.append(worker["id"])
        except (ProcessLookupError, PermissionError, KeyError, ValueError):
            continue
    _history_of(environment).emit("load.storm", kind="kill", workers=killed)


@events.test_stop.add_listener
def _judge(environment: Environment, **_: Any) -> None:
    """After the users stopped (master or standalone only): settle, the final scan and every checker, as a
    scenario ends (``harness.load.judge``).  Locust exits 1 when a checker that applies is not valid (an
    ``up`` run sets no recovery bound, so the bounds checker does not apply)."""
    options = environment.parsed_options
    if options is None or options.no_judge or isinstance(environment.runner, WorkerRunner):
        return
    from harness.checkers.verdict import verdict_figures
    from harness.load.judge import failing_checkers, judge

    verdict = judge(_state(environment), _history_of(environment), lambda text: print(f"locustfile: {text}"))
    failing = failing_checkers(verdict)
    # the verdict's own headline is not printed: it counts the recovery bound, which an ``up`` run never sets
    judged = f"INVALID: {', '.join(failing)} not valid" if failing else "VALID: every checker that applies"
    print(f"locustfile: {judged}; {verdict_figures(verdict)}; sequences {verdict['checkers']['sequences']['valid']}: "
          f"{verdict.get('lost_sequences')} lost, {verdict.get('duplicate_deliveries')} stored twice")
    if failing:
        environment.process_exit_code = 1


class StreamOwner(HttpUser):
    """Owns one stream: STARTs it, waits until it is consumed, and times every recovery after that."""

    wait_time = constant(0)

    def on_start(self) -> None:
        options, state = self.environment.parsed_options, _state(self.environment)
        self.watch_s = options.watch_s
        self.recover_timeout_s = options.recover_timeout_s
        self.control = state["upstream_control_url"]
        self.connection_id = f"load-{os.getpid()}-{next(_numbers)}"
        self.pk = f"CONN#{self.connection_id}"
        self.history = _history_of(self.environment)
        self.simulator = http_client.Session(timeout_s=30)
        self.simulator.request("POST", f"{self.control}/streams/{self.connection_id}")
        started = time.time() * 1000.0
        body = {"event_type": "START", "connection_id": self.connection_id,
                "ws_url": f"{state['upstream_url']}/streams/{self.connection_id}"}
        with self.client.post("/events", json=body, name="START", catch_response=True,
                              allow_redirects=False) as answer:
            if not 200 <= answer.status_code < 300:
                answer.failure(f"START answered {answer.status_code}: {answer.text[:200]}")
        self.history.emit("load.start", pk=self.pk, status=answer.status_code)
        session = self._live_session(other_than=None, timeout_s=options.own_timeout_s)
        if session is None:
            self._report("owned", started, None, RuntimeError(f"not owned within {options.own_timeout_s} s"))
        else:
            self._report("owned", started, session["opened"], None)
            self.history.emit("load.owned", pk=self.pk, ms=session["opened"] - started)
        self.session = session

    @task
    def watch(self) -> None:
        gevent.sleep(self.watch_s)
        if self.session is None:
            return
        current = self._sessions().get(self.session["session"], self.session)
        if current.get("closed") is None:
            return
        closed = float(current["closed"])
        self.history.emit("load.lost", pk=self.pk, closed_ms=closed, reason=current.get("close_reason"))
        self.session = self._live_session(other_than=current["session"], timeout_s=self.recover_timeout_s)
        if self.session is None:
            self._report("recovered", closed, None,
                         RuntimeError(f"not owned again within {self.recover_timeout_s} s"))
            self.history.emit("load.unrecovered", pk=self.pk, closed_ms=closed)
            return
        opened = max(closed, float(self.session["opened"]))  # a new owner may have opened before the close
        self._report("recovered", closed, opened, None)
        self.history.emit("load.recovered", pk=self.pk, ms=opened - closed, closed_ms=closed, opened_ms=opened)

    def on_stop(self) -> None:
        self.client.post("/events", json={"event_type": "STOP", "connection_id": self.connection_id}, name="STOP",
                         allow_redirects=False)
        self.simulator.close()

    def _sessions(self) -> dict[str, dict[str, Any]]:
        answer = self.simulator.request("GET", f"{self.control}/streams/{self.connection_id}")
        if answer.status != 200:
            return {}
        return {s["session"]: s for s in answer.json().get("sessions", [])}

    def _live_session(self, other_than: str | None, timeout_s: float) -> dict[str, Any] | None:
        """The earliest-opened live session of the stream other than ``other_than``, waiting up to
        ``timeout_s`` for one."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            live = [s for s in self._sessions().values() if s.get("closed") is None and s["session"] != other_than]
            if live:
                return min(live, key=lambda s: s["opened"])
            gevent.sleep(min(0.1, self.watch_s))
        return None

    def _report(self, name: str, since_ms: float, until_ms: float | None, failure: Exception | None) -> None:
        elapsed = (until_ms if until_ms is not None else time.time() * 1000.0) - since_ms
        self.environment.events.request.fire(request_type="STREAM", name=name, response_time=max(0.0, elapsed),
                                             response_length=0, exception=failure, context={"pk": self.pk})
