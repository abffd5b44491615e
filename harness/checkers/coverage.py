"""Coverage (DESIGN §12): which transitions of a held stream a run reached, counted from its history alone,
so a benchmark can say what it exercised, not only what it found.

``coverage(history)`` counts each transition of ``TRANSITIONS`` (every name is listed, reached or not):

- ``acquire:<path>``: a ``lease.acquire`` ok by the path it took (its ``via``): ``notification`` (notify: a
  START's), ``handoff`` (the notification of a release, naming the released epoch), ``sweep`` (reconcile),
  ``death notice`` (a sweep or notification right after the previous holder's burial: the history's ``via``
  does not say it, so the acquire is attributed to the burial that preceded it,
  ``harness.checkers.events.handovers``), ``transfer`` (balance: the recipient takes a transferred lease up),
  ``restart`` (restarted: taken again after a release for a STOP was refused because the stream was STARTED
  again), ``adoption`` (adopted: a lease the store says is ours though we hold nothing), ``drain``
  (a STOPPED stream whose owner died), ``unknown outcome settled`` (resolved: an acquire whose answer was lost,
  settled by a read); ``acquire refused`` and ``acquire unknown`` (outcome fail / info);
- ``takeover at expiry``: an acquire of a lease its previous holder neither released nor transferred, nor
  lost to a burial: it lapsed;
- ``release:<reason>``: a ``lease.release`` ok by its reason (``STOP``, ``shutdown``, ``drained``,
  ``rebalance``, ``upstream unreachable past budget`` ...; the text before the first ``:``); ``release
  refused`` (outcome fail);
- ``transfer``: a release ok naming a recipient (``to``); ``burial``: a ``death.notice`` that buried an
  incarnation; ``notice refuted``: one whose task was still running;
- ``drain done``, ``fenced write`` (a ``msg.persist`` the fenced log refused: a later take-up's item holds
  its number, ``FENCED_NOTE``),
  ``self-fence`` (``lease.lost`` on the fencing deadline), ``lease lost:<cause>`` (any other ``lease.lost``,
  by its cause, ``LOST_CAUSES``),
  ``skew detected`` (``clock.skew``), ``reconnect in place`` (a ``ws.open`` after a ``ws.close`` of the same
  incarnation and pk with no acquire between);
- ``STOP honoured while draining``: a STOP whose desired-state write landed while the stream was held by
  a drain (acquired via drain, not yet ``drain.done`` or released), and the drain's lease was then released;
- ``zombie thawed after takeover``: an aimed zombie's ``fault.stop`` saying so (``ZOMBIE_MISSED`` counts
  the others).

What the rarest take (``harness.explore.generator.AIMED`` aims at each).  A ``fenced write`` and a ``lease
lost:renewal refused`` need a holder that writes and renews after its streams were taken while its own fence
is still open (renewal sent + lease - margin - timeout).  A takeover at expiry comes after that fence has
closed (the holder self-fences first: ``self-fence``), so only a burial can: ECS reports the holder's task
stopped while its process, frozen, still runs (a zombie, ``harness.faults.plane.Zombie``); the others bury it
and take its streams at epoch + 1; thawed before its fence closes, its renewal is refused by the burial
(``lease lost:renewal refused``) and its next batch by the log (``fenced write``).  The batch's refusal takes
two round trips (the put, then the read of what took its number), the renewal's one: when the renewal is
overdue at the thaw (frozen longer than a heartbeat) both go out at once, it is abandoned first and the
refused batch is never logged; so the zombie is thawed at once when taken over, and half the time its
renewal's answer is lost at the thaw (it writes on until its fence closes).  A write held on its way past
a takeover at expiry (the aimed ``fenced-write``) cannot: its writer thaws after its fence closed, and then
sends nothing more, not even the read that would tell it the write was refused.
``acquire unknown``, ``acquire:unknown outcome settled`` and ``acquire:adoption`` need an acquire that
landed but whose answer was lost: answers held past the client's timeout while a worker takes many streams.
A worker whose every answer is held sends no acquire from a sweep (the sweep's read is held too) and loses
most races to a clean one; a handoff is acquired without a read, so the aim holds answers from a term on.
(The moto benchmark, 2 to 10 streams: of 172 runs with lost answers, 8 had an acquire of unknown outcome;
after a kill the held worker mostly took the dead one's streams once the hold had ended, and after a term
without death notices the hold began 0.7 leases late, after the handoff.)  ``lease lost:shutdown budget
spent`` needs a shutdown whose drops are not over within the budget (2 s at 0.1): a slow store alone cannot
do it, every request being abandoned after the client's timeout (0.3 s) and a drop sending one release;
``lease lost:fenced before release`` needs the fence to close between a drop's start and its release (a
heartbeat or two: the consume task waited for).
The aimed ``slow-store-term`` freezes a worker terminated under a slow store right after the term, past its
fence: thawed past its budget, its pending drops are cut; thawed within it, those that had not reached their
release find the fence closed.  ``lease lost:incarnation ended during the acquire`` needs an acquire sent while the
fence was open and answered (or settled by a read) once the incarnation was abandoned: a handoff acquired
while the taker's answers are held and its fence about to close, answered when the hold ends
(``fenced-mid-acquire``).
``STOP honoured while draining`` needs a second STOP to land in the few hundred ms a drain holds a stream
that was STOPPED while its owner was dead.

Nothing here judges validity: it is what explore prints per run, totals in ``summary.json`` and what the
HTML report's coverage table shows (a transition no run reached is listed as not covered)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pandas as pd

from harness.checkers.events import (
    STOPPED,
    Events,
    consumer_of,
    desired_states,
    handovers,
    same_consumer,
    select,
)

ACQUIRE_PATHS = {"notify": "notification", "handoff": "handoff", "reconcile": "sweep", "balance": "transfer",
                 "restarted": "restart", "adopted": "adoption", "drain": "drain", "resolved": "unknown outcome settled"}
RELEASE_REASONS = ("STOP", "shutdown", "drained", "rebalance", "upstream unreachable past budget")
# A ``lease.lost`` by its cause (the reason's start, as ``fleet`` writes it): the incarnation's renewal refused
# (``fleet.incarnation``: the worker item's, after a burial, or a stream's), the shutdown's budget spent
# (``fleet.release``), fenced before the release could go out, and the incarnation ended while the acquire was
# in flight (``fleet.stream_driver``).  Any other reason counts as ``lease lost:<its last clause>``.
LOST_CAUSES = {"worker lease expired": "renewal refused", "renew refused": "renewal refused",
               "shutdown budget spent": "shutdown budget spent", "fenced before release": "fenced before release",
               "incarnation ended during the acquire": "incarnation ended during the acquire"}
TRANSITIONS = (
    *(f"acquire:{path}" for path in (*ACQUIRE_PATHS.values(), "death notice")),
    "acquire refused", "acquire unknown", "takeover at expiry",
    *(f"release:{reason}" for reason in RELEASE_REASONS), "release refused",
    "transfer", "burial", "notice refuted", "drain done", "fenced write", "self-fence",
    *(f"lease lost:{cause}" for cause in dict.fromkeys(LOST_CAUSES.values())),
    "skew detected", "reconnect in place", "STOP honoured while draining", "zombie thawed after takeover",
)
# The note of a batch the fenced log refused (``fleet.connection``: the put's number was taken by a later
# take-up's item, ``fleet.batch_log.Superseded``).  Before the batch log (issue 26) the note was "refused by
# the store", which the fleet no longer writes: counted by that, ``fenced write`` could never be reached.
FENCED_NOTE = "superseded"
# The aimed zombie (``harness.faults.plane.Zombie``) says in its ``fault.stop`` how it was thawed: after the
# others buried it and took a stream it held (``zombie thawed after takeover``), or, not taken over by then,
# just before its own fence closed: a miss of the aim, counted but no transition (never "not covered").
ZOMBIE_MISSED = "zombie thawed at its fence"


def coverage(history: Events) -> Counter[str]:
    """How often the run reached each transition (see the module docstring); every name of ``TRANSITIONS``
    and ``ZOMBIE_MISSED`` is a key, reached or not, and a release reason not in ``RELEASE_REASONS`` or a
    lost lease's cause not in ``LOST_CAUSES`` adds its own."""
    counts: Counter[str] = Counter(dict.fromkeys((*TRANSITIONS, ZOMBIE_MISSED), 0))
    acquires = select(history, "lease.acquire", ["t", "src", "pk", "worker", "gen", "epoch", "outcome", "via"])
    acquires = acquires.loc[acquires["pk"].notna()]
    counts["acquire refused"] += int((acquires["outcome"] == "fail").sum())
    counts["acquire unknown"] += int((acquires["outcome"] == "info").sum())
    handed = handovers(history)
    after_burial, lapsed = _acquires_after(handed, _releases(history))
    ok = acquires.loc[acquires["outcome"] == "ok"]
    for t, pk, via in zip(ok["t"], ok["pk"], ok["via"], strict=True):
        buried = (pk, t) in after_burial
        counts[f"acquire:{'death notice' if buried else ACQUIRE_PATHS.get(str(via), str(via))}"] += 1
        counts["takeover at expiry"] += (pk, t) in lapsed
    releases = select(history, "lease.release", ["outcome", "reason", "to"])
    for reason, to in zip(releases.loc[releases["outcome"] == "ok", "reason"],
                          releases.loc[releases["outcome"] == "ok", "to"], strict=True):
        counts[f"release:{str(reason).split(':', 1)[0]}"] += 1
        counts["transfer"] += isinstance(to, str)
    counts["release refused"] += int((releases["outcome"] == "fail").sum())
    notices = select(history, "death.notice", ["outcome", "buried"], raw=["buried"])
    counts["burial"] += sum(1 for b in notices["buried"] if isinstance(b, list) and b)
    counts["notice refuted"] += int((notices["outcome"] == "refuted").sum())
    counts["drain done"] += len(select(history, "drain.done", ["t"]))
    persists = select(history, "msg.persist", ["outcome", "note"])
    notes = persists["note"].astype(object).fillna("").astype(str)  # all-empty notes read as float NaN
    counts["fenced write"] += int(((persists["outcome"] == "fail") & notes.str.startswith(FENCED_NOTE)).sum())
    for reason in select(history, "lease.lost", ["reason"])["reason"].fillna(""):
        counts["self-fence" if reason.startswith("self-fenced") else f"lease lost:{_lost_cause(reason)}"] += 1
    stops = select(history, "fault.stop", ["kind", "params"], raw=["params"])
    for params in stops.loc[stops["kind"] == "zombie", "params"]:
        thawed = params.get("thawed") if isinstance(params, dict) else None
        counts["zombie thawed after takeover"] += thawed == "after takeover"
        counts[ZOMBIE_MISSED] += thawed == "at its fence"
    counts["skew detected"] += len(select(history, "clock.skew", ["t"]))
    counts["reconnect in place"] += _reconnects(history)
    counts["STOP honoured while draining"] += _stops_while_draining(history, ok)
    return counts


def _lost_cause(reason: str) -> str:
    return next((cause for start, cause in LOST_CAUSES.items() if reason.startswith(start)),
                reason.rsplit(": ", 1)[-1])


def not_covered(counts: Counter[str]) -> list[str]:
    """The transitions of ``TRANSITIONS`` no run reached."""
    return [name for name in TRANSITIONS if not counts.get(name)]


def _releases(history: Events) -> pd.DataFrame:
    releases = select(history, "lease.release", ["t", "src", "pk", "worker", "gen", "outcome"])
    releases = releases.loc[releases["pk"].notna() & (releases["outcome"] == "ok")]
    return releases.assign(consumer=consumer_of(releases))


def _acquires_after(handed: pd.DataFrame, releases: pd.DataFrame) -> tuple[set[tuple[str, float]],
                                                                             set[tuple[str, float]]]:
    """The acquires (pk, t) whose previous handover of the pk was a burial; and those whose previous holder
    (an acquire) neither released nor was buried before it: a takeover at expiry."""
    after_burial: set[tuple[str, float]] = set()
    lapsed: set[tuple[str, float]] = set()
    released = {pk: group for pk, group in releases.groupby("pk", sort=False)}
    for pk, group in handed.groupby("pk", sort=False):
        rows = list(group.itertuples(index=False))
        for before, row in itertools.pairwise(rows):
            if row.kind != "acquire":
                continue
            if before.kind == "burial":
                after_burial.add((str(pk), float(row.t)))
            elif before.kind == "acquire" and not same_consumer(str(before.to), str(row.to)):
                own = released.get(pk)
                gave_up = own is not None and bool(((own["t"] >= before.t) & (own["t"] <= row.t) & np.array(
                    [same_consumer(str(c), str(before.to)) for c in own["consumer"]], dtype=bool)).any())
                if not gave_up:
                    lapsed.add((str(pk), float(row.t)))
    return after_burial, lapsed


def _reconnects(history: Events) -> int:
    """``ws.open`` events that follow a ``ws.close`` of the same consumer and pk with no acquire between."""
    frame = select(history, ["ws.open", "ws.close", "lease.acquire"], ["t", "src", "type", "pk", "worker", "gen"])
    frame = frame.loc[frame["pk"].notna()].assign(consumer=lambda f: consumer_of(f))
    count = 0
    for _, group in frame.groupby(["pk", "consumer"], sort=False):
        types = group.sort_values("t", kind="stable")["type"].tolist()
        count += sum(1 for a, b in itertools.pairwise(types) if a == "ws.close" and b == "ws.open")
    return count


def _stops_while_draining(history: Events, acquires: pd.DataFrame) -> int:
    """STOPs written while a drain held the stream, whose drain lease was then released."""
    drains = acquires.loc[acquires["via"] == "drain"]
    if drains.empty:
        return 0
    ends = select(history, ["drain.done", "lease.release", "lease.lost"], ["t", "type", "pk", "outcome"])
    ends = ends.loc[ends["pk"].notna()]
    stops = desired_states(history)
    stops = stops.loc[stops["type"] == STOPPED]
    count = 0
    for t, pk in zip(drains["t"], drains["pk"], strict=True):
        after = ends.loc[(ends["pk"] == pk) & (ends["t"] > t)].sort_values("t", kind="stable")
        end = float(after["t"].iloc[0]) if len(after) else float("inf")
        released = bool(((after["type"] == "lease.release") & (after["outcome"] == "ok")).any())
        count += released and bool(((stops["pk"] == pk) & (stops["t"] > t) & (stops["t"] < end)).any())
    return count
