"""Generated region schedules (``harness.region.schedules``) run on two regions, one variant at a time, each
judged from what the run left: its history and both regions' tables.  A batch (``run_batch``) keeps the
regions' backends, Global Tables, routing controls and simulator up (``RegionsPool``), gives each run
fresh state and its own fleets, routers and folder, and does not run again what its folder holds judged.

One run: ``streams`` streams STARTed in the primary and replicated; the schedule's steps applied at their
(scaled) times, each fault undone after its duration; every fault healed at the end; then, once the region
active at the end consumes every stream (with the gate: after the automation's failback) or the patience
ran out, and replication delivered what it could:

- ``split_brain``: streams some east session and some west session consumed at once, over the whole run;
- ``lost_messages``: sequences from 1 to each stream's head (when the run settled) that neither region's
  messages table holds once the consumers had the patience's time to store them;
- ``lost_control_writes``: STARTs acknowledged during the run that no worker of either region acquired
  afterwards (``harness.region.checks.lost_starts``);
- ``control_at_cut``: ``LATE_STREAMS`` STARTs (the last STOPped again) acknowledged just before the first
  region fault: how many the standby lacked when its control turned On (``starts``, ``stops``), how many
  of those were acknowledged before the replication's ``behind_ms`` at the cut (``beyond_lag``: the bound,
  must be 0), and how many the primary's table still lacks or reverts at the end (``reverted_at_end``);
- ``failover_starts``: the STARTs aimed at the failover window (``Step.when``): how many, how many were
  first sent while no region was active (``in_failover``), how many a router acknowledged in the end;
- ``failover_pauses``: the replication pauses aimed at the failover (begun when it begins, so its
  replication wait has the primary's last writes to wait for): how many, how many were applied (a failover
  began while the schedule ran);
- ``activation``: the activation's checkers over the history (``failover.activation_checks``);
- ``activation_gaps``: what each activated region lacked of the other's writes, by kind
  (``harness.region.checks.gap_totals``);
- ``reached``: the fault kinds, transitions and interleavings the run reached (``harness.region.reached``).

A step that could not happen (a region that would not start, a stream not consumed in time) makes the run
unjudged: ``error`` says why, and the summary counts it apart.
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet.region_gate import ON
from harness.cluster import ClusterError
from harness.history import read_history
from harness.processes import start_thread
from harness.region.checks import lost_starts
from harness.region.failover import (
    LATE_STREAMS,
    FailoverError,
    Variant,
    _desired_states,
    _replicated_to_standby,
    _stored,
    _wait,
    activation_checks,
    activation_gap_totals,
    cross_region_overlaps,
    router_events,
)
from harness.region.reached import reached
from harness.region.regions import AWS_REGIONS, RegionsPool, RegionsSpec, TwoRegions
from harness.region.routing_control import HOLD
from harness.region.rpo import lost_control_writes
from harness.region.schedules import REGION_FAULTS, RegionSchedule, Step

Progress = Callable[[str], None]
RUN_FILE = "batch-run.json"
Action = tuple[float, str, Step]  # (seconds after the streams are consumed, "start" | "stop" | "flip", step)


def timeline(schedule: RegionSchedule, timescale: float) -> list[Action]:
    """The schedule's steps as timed actions, in order (pure): each fault's start and stop, a flapping
    check's flips (then its stop), each STARTed stream; a step aimed at the failover (``Step.when``) once,
    when it is armed."""
    actions: list[Action] = []
    for step in schedule.steps:
        at, end = step.at_s * timescale, (step.at_s + step.duration_s) * timescale
        actions.append((at, "start", step))
        if step.kind == "start" or step.when:  # an aimed step: the runner times the rest
            continue
        for flip in range(1, 2 * step.flaps):
            actions.append((at + flip * step.period_s * timescale, "flip", step))
        actions.append((max(end, at + 2 * step.flaps * step.period_s * timescale), "stop", step))
    return sorted(actions, key=lambda action: action[0])


def run_schedule(schedule: RegionSchedule, variant: Variant, run_dir: Path, pool: RegionsPool,
                 streams: int = 4, workers: int = 2, progress: Progress = lambda line: None) -> dict[str, Any]:
    """One schedule on ``pool`` (fresh state for it), judged; the result is also ``RUN_FILE`` in ``run_dir``.
    Its streams are named after the variant and seed (``gate-7-c000``), so no two runs of a batch share one."""
    spec = RegionsSpec(workers=workers, profile=variant.profile, timescale=pool.spec.timescale, run_dir=run_dir,
                       seed=schedule.seed, gate=variant.gate, automate=variant.gate,
                       clock_offsets_ms=schedule.clock_offsets_ms, lag_ms=variant.lag()[0],
                       lag_p99_ms=variant.lag()[1], activation_wait_s=variant.activation_wait_s,
                       replication_wait_s=variant.replication_wait_s)
    result: dict[str, Any] = {"variant": variant.name, "seed": schedule.seed, "schedule": schedule.describe(),
                              "run_dir": str(run_dir)}
    prefix = f"{variant.name}-{schedule.seed}-"
    began, cpu = time.monotonic(), _cpu_s()
    try:
        with TwoRegions(spec, pool) as regions:
            result.update(_run(regions, schedule, prefix, streams, progress))
    except (FailoverError, ClusterError) as exc:
        result["error"] = str(exc)
    result.update(wall_s=round(time.monotonic() - began, 1), cpu_s=round(_cpu_s() - cpu, 1))
    (run_dir / RUN_FILE).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (a run's workers and routers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def judged(run_dir: Path) -> dict[str, Any] | None:
    """The result an earlier batch left in ``run_dir`` if that run was judged; None if it was not, or never
    ran (that run is run again)."""
    try:
        result: dict[str, Any] = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return None if result.get("error") else result


def verdict(result: dict[str, Any]) -> str:
    """One run's outcome in words (the progress line)."""
    if result.get("error"):
        return f"unjudged ({result['error']})"
    found = [f"{count} {what}" for count, what in (
        (result["split_brain"]["streams"], "streams in both regions"), (result["lost_messages"], "lost messages"),
        (result["lost_control_writes"], "lost control writes"),
        (sum(result["activation"].values()), "activation findings"),
        *_control_counts(result.get("control_at_cut"))) if count]
    return ", ".join(found) or "nothing found"


def _control_counts(control: dict[str, Any] | None) -> list[tuple[int, str]]:
    if not control:
        return []
    return [(control.get("starts", 0) + control.get("stops", 0), "control writes missing in the standby at the cut"),
            (control.get("beyond_lag", 0), "of them beyond the lag at the cut"),
            (control["reverted_at_end"], "control writes reverted at the end")]


def run_batch(schedules: list[RegionSchedule], variants: list[Variant], run_dir: Path, timescale: float,
              streams: int = 4, say: Progress = lambda line: None) -> list[dict[str, Any]]:
    """Each schedule on each variant, in ``run_dir/seed-N/<variant>``, on one ``RegionsPool`` per profile
    (started once, in ``run_dir/pool-<profile>``); a run an earlier batch judged there is not run again.
    ``say``: one line when resuming, then one per run (its verdict, wall and CPU seconds, what is left)."""
    plan = [(schedule, variant, run_dir / f"seed-{schedule.seed}" / variant.name)
            for schedule in schedules for variant in variants]
    done = {folder: result for _, _, folder in plan if (result := judged(folder)) is not None}
    if done:
        say(f"resuming {run_dir}: {len(done)} of {len(plan)} runs already judged there, not run again")
    results, walls = [], []
    with contextlib.ExitStack() as stack:
        pools: dict[str, RegionsPool] = {}
        for index, (schedule, variant, folder) in enumerate(plan, start=1):
            if folder in done:
                results.append(done[folder])
                continue
            if variant.profile not in pools:
                pool_spec = RegionsSpec(profile=variant.profile, timescale=timescale,
                                        run_dir=run_dir / f"pool-{variant.profile}")
                pools[variant.profile] = stack.enter_context(RegionsPool(pool_spec))
            shutil.rmtree(folder, ignore_errors=True)  # what an unjudged attempt left
            folder.mkdir(parents=True)
            result = run_schedule(schedule, variant, folder, pools[variant.profile], streams)
            results.append(result)
            walls.append(result["wall_s"])
            left = sum(1 for _, _, f in plan[index:] if f not in done)
            say(f"[{index}/{len(plan)}] {variant.name} seed {schedule.seed}: {verdict(result)}; "
                f"{result['wall_s']:.0f} s wall, {result['cpu_s']:.0f} s CPU; "
                f"about {left * sum(walls) / len(walls) / 60:.0f} min left")
    return results


def _run(regions: TwoRegions, schedule: RegionSchedule, prefix: str, streams: int,
         progress: Progress) -> dict[str, Any]:
    spec, tables = regions.spec, regions.tables
    assert tables is not None
    config = regions.clusters["west"].config
    patience_s = 10 * spec.health.request_interval_s * spec.timescale + 4 * spec.ttl_s * spec.timescale \
        + 3 * config.lease_s + config.reconcile_s
    ids = [f"{prefix}c{i:03d}" for i in range(streams)]
    for connection_id in ids:
        regions.start_stream(connection_id)
    _wait(lambda: regions.consumed_by("east", ids), patience_s, "the primary consumes every stream")
    _wait(lambda: _replicated_to_standby(regions, len(ids)), patience_s, "the leases replicated to the standby")
    began_ms, began = time.time() * 1000.0, time.monotonic()
    progress(f"seed {schedule.seed}: {schedule.describe()}")
    started = list(ids)
    cut: dict[str, Any] = {}
    aims: list[dict[str, Any]] = []
    sending: list[threading.Thread] = []
    pauses: list[threading.Thread] = []
    paused: list[bool] = []
    ended = threading.Event()  # the schedule's steps are done: an aimed pause not begun by then never is
    for at, action, step in timeline(schedule, spec.timescale):
        while time.monotonic() < began + at:  # the schedule's times: durations, not synchronisation
            _standby_at_takeover(regions, cut)
            time.sleep(min(0.05, max(0.0, began + at - time.monotonic())))
        if action == "start" and step.kind in REGION_FAULTS and not step.when and not cut:
            started += _late_writes(regions, prefix, cut)
        if step.when == "failover" and step.kind == "replication_pause":
            pauses.append(start_thread(threading.Thread(target=_aimed_pause, name=f"aim-pause-{len(pauses)}",
                                                        daemon=True, args=(regions, step, ended, paused))))
            continue
        if step.when == "failover":
            name, until = f"{prefix}f{len(sending)}", began + at + step.duration_s * spec.timescale
            sending.append(start_thread(threading.Thread(target=_aimed_start, name=f"aim-{name}", daemon=True,
                                                        args=(regions, name, until, patience_s, aims))))
            continue
        if step.kind == "start":
            sending.append(send_start(regions, f"{prefix}s{len(sending)}", started))
            continue
        _act(regions, action, step)
    ended.set()
    for thread in pauses:  # before the heal, which would end the pause early
        while thread.is_alive():
            _standby_at_takeover(regions, cut)
            thread.join(timeout=0.05)
    _standby_at_takeover(regions, cut)
    _heal(regions)
    for thread in sending:
        while thread.is_alive():
            _standby_at_takeover(regions, cut)
            thread.join(timeout=0.05)
    started += [aim["name"] for aim in aims if aim["acknowledged"]]
    active = "east" if spec.gate else None
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline and not (
            regions.consumed_by(active, started) if active else
            all(regions.consumed_by("east", [i]) or regions.consumed_by("west", [i]) for i in started)):
        _standby_at_takeover(regions, cut)  # a takeover that began just before the heal ends after it
        time.sleep(0.05)
    heads = {i: s.get("head_seq") or 0 for i, s in regions.clusters["east"].streams().items() if i in started}
    # the consumer resumes behind the head: what it has not stored yet is not lost until it had the time to
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline and _missing(regions, heads):
        time.sleep(0.1)
    reached_ms = time.time() * 1000.0
    _wait(lambda: tables.delivered_before(reached_ms), patience_s, "replication delivered what it could")
    lost = _missing(regions, heads)
    history = read_history(spec.run_dir)
    overlaps = cross_region_overlaps(regions, since_ms=0.0, ids=started)
    dropped = [{start["pk"] for start in lost_starts(history, began_ms, region)} for region in AWS_REGIONS]
    gaps = activation_gap_totals(history)
    return {"split_brain": {"streams": len(overlaps), "overlap_ms": round(sum(overlaps.values()), 1)},
            "lost_messages": lost, "lost_control_writes": len(set.intersection(*dropped)),
            "control_at_cut": _control_at_cut(regions, cut),
            "failover_starts": {"aimed": len(aims), "in_failover": sum(aim["in_failover"] for aim in aims),
                                "acknowledged": sum(aim["acknowledged"] for aim in aims)},
            "failover_pauses": {"aimed": len(pauses), "applied": sum(paused)},
            "activation": activation_checks(history, spec, gaps), "activation_gaps": gaps, "streams": len(started),
            "reached": reached(history, AWS_REGIONS["east"], AWS_REGIONS["west"])}


def _in_failover(regions: TwoRegions) -> bool:
    """No region active now: with the gate, the hold is On (a failover waits out the old region's gate);
    without it, Route 53 answers the standby."""
    if regions.controls is not None:
        return regions.controls.states[HOLD] == ON
    return regions.zone.answer() != next(iter(AWS_REGIONS))


def _aimed_start(regions: TwoRegions, name: str, until: float, patience_s: float,
                 aims: list[dict[str, Any]]) -> None:
    """A START aimed at the failover window: sent once no region is active (``_in_failover``; polled, the
    controls have no signal to wait on), or at ``until`` (monotonic) if no failover began by then; sent again
    while it is refused or unanswered, for ``patience_s``.  Its first send is in the history
    (``workload.start``, ``in_failover``); its outcome is added to ``aims``."""
    while time.monotonic() < until and not _in_failover(regions):
        time.sleep(0.01)
    in_failover = _in_failover(regions)
    regions.harness.emit("workload.start", pk=f"CONN#{name}", in_failover=in_failover)
    deadline, acknowledged = time.monotonic() + patience_s, False
    while not acknowledged and time.monotonic() < deadline:
        try:
            regions.start_stream(name)
            acknowledged = True
        except ClusterError:
            time.sleep(0.1)  # refused (no region active yet) or unanswered (the old region cut): a client retries
    aims.append({"name": name, "in_failover": in_failover, "acknowledged": acknowledged})


def _failed_over(regions: TwoRegions) -> bool:
    """A failover has begun: with the gate, the primary's control is Off; without it, Route 53 answers the
    standby."""
    if regions.controls is not None:
        return regions.controls.states[AWS_REGIONS["east"]] != ON
    return regions.zone.answer() != next(iter(AWS_REGIONS))


def _aimed_pause(regions: TwoRegions, step: Step, ended: threading.Event, paused: list[bool]) -> None:
    """A replication pause aimed at the failover: begun once a failover has begun (``_failed_over``; polled,
    the controls have no signal to wait on), for ``step.duration_s`` (scaled), then replication resumed; not
    begun if none began before ``ended`` is set.  Whether it was applied is added to ``paused``."""
    scale = regions.spec.timescale
    while not ended.is_set() and not _failed_over(regions):
        ended.wait(0.01)
    if not _failed_over(regions):
        paused.append(False)
        return
    _act(regions, "start", step)
    time.sleep(step.duration_s * scale)  # the fault's duration, drawn against the failover's waits
    _act(regions, "stop", step)
    paused.append(True)


def send_start(regions: TwoRegions, name: str, acknowledged: list[str]) -> threading.Thread:
    """A START step of the schedule, sent once in its own thread so the schedule's next steps keep their
    times (an unanswered START, through a region that is cut, waits for its HTTP timeout); ``name`` is added
    to ``acknowledged`` if a router acknowledged it.  Refused or unanswered, it was never acknowledged, so
    nothing of it can be lost."""

    def send() -> None:
        try:
            regions.start_stream(name)
        except ClusterError:
            return
        acknowledged.append(name)

    return start_thread(threading.Thread(target=send, name=f"start-{name}", daemon=True))


def _late_writes(regions: TwoRegions, prefix: str, cut: dict[str, Any]) -> list[str]:
    """Just before the first region fault (the cut): ``LATE_STREAMS`` STARTs and a STOP of the last, through
    the failover name, then the cut's time and the replication's ``behind_ms`` (how old the oldest write not
    yet delivered is: only writes younger than that can be missing in the standby).  The stream left STARTed."""
    late = [f"{prefix}late{i}" for i in range(LATE_STREAMS)]
    since_ms = time.time() * 1000.0
    for connection_id in late:
        regions.start_stream(connection_id)
    regions.stop_stream(late[-1])
    assert regions.tables is not None
    cut.update(since_ms=since_ms, ms=time.time() * 1000.0, behind_ms=regions.tables.stats()["behind_ms"])
    return late[:-1]


def _standby_at_takeover(regions: TwoRegions, cut: dict[str, Any]) -> None:
    """Once after the cut, when the standby's routing control turns On (with the gate): the desired state of
    each stream its connections table holds then, before anything the primary left can reach it."""
    controls = regions.controls
    if cut and "standby" not in cut and controls is not None and controls.states[AWS_REGIONS["west"]] == ON:
        cut["standby"] = _desired_states(regions, "west")


def _control_at_cut(regions: TwoRegions, cut: dict[str, Any]) -> dict[str, Any] | None:
    """The late STARTs and STOP the primary acknowledged before the cut: missing in the standby when it took
    over (None: it never did), how many of those were acknowledged earlier than the replication's
    ``behind_ms`` at the cut allows (``beyond_lag``: must be 0), and still reverted in the region active at
    the end (the primary, after the failback)."""
    if not cut:
        return None
    events, window_ms = router_events(regions.spec.run_dir), cut["ms"] - cut["since_ms"]
    after = lost_control_writes(events, cut["ms"], "east", window_ms, _desired_states(regions, "east"))
    found: dict[str, Any] = {"bound_ms": round(cut["behind_ms"], 1), "reverted_at_end": len(after["writes"])}
    if "standby" not in cut:
        return {**found, "taken_over": False}
    at_cut = lost_control_writes(events, cut["ms"], "east", window_ms, cut["standby"])
    beyond = [w for w in at_cut["writes"] if w["acknowledged_ms"] < cut["ms"] - cut["behind_ms"]]
    return {**found, "taken_over": True, "starts": at_cut["starts"], "stops": at_cut["stops"],
            "beyond_lag": len(beyond)}


def _missing(regions: TwoRegions, heads: dict[str, int]) -> int:
    """The sequences from 1 to each stream's head (``heads``) that neither region's messages table holds."""
    stored = {region: _stored(regions, region) for region in AWS_REGIONS}
    return sum(len(set(range(1, head + 1)) - set(stored["east"].get(i, [])) - set(stored["west"].get(i, [])))
               for i, head in heads.items())


def _act(regions: TwoRegions, action: str, step: Step) -> None:
    """Start (``start``), undo (``stop``) or toggle (``flip``) one fault."""
    tables, on = regions.tables, action == "start"
    assert tables is not None
    regions.harness.emit(f"fault.{action}", kind=step.kind, target=step.target)
    if step.kind == "replication_pause":
        (tables.pause if on else tables.resume)()
    elif step.kind == "region_cut":
        (regions.outage if on else regions.heal)(step.target)
    elif step.kind == "dynamodb_outage":
        tables.dynamodb_outage(step.target, down=on)
    elif step.kind in ("gray_failure", "flapping"):
        off = on or (action == "flip" and step.target not in regions.unreachable)
        (regions.unreachable.add if off else regions.unreachable.discard)(step.target)
    elif step.kind == "worker_pause":
        region = step.target.split("-", 1)[0]
        handle = regions.clusters[region].workers.get(step.target)
        if handle is None or handle.child is None:
            raise FailoverError(f"no worker {step.target} to pause")
        handle.child.signal(signal.SIGSTOP if on else signal.SIGCONT)
    else:
        raise FailoverError(f"unknown step kind {step.kind!r}")


def _heal(regions: TwoRegions) -> None:
    """Undo every fault a schedule may have left (they are undone at their ends already; this is the floor)."""
    tables = regions.tables
    assert tables is not None
    tables.resume()
    regions.unreachable.clear()
    for region in AWS_REGIONS:
        tables.dynamodb_outage(region, down=False)
        regions.heal(region)
        for handle in regions.clusters[region].workers.values():
            if handle.child is not None and handle.child.paused:
                handle.child.signal(signal.SIGCONT)
