"""Synthetic run folders for the report tests: a small history with known numbers, and a large one (10 minutes
of 100 streams) for the performance test.  Both follow the event contract of ``harness.history``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

T0 = 1_800_000_000_000.0
CONFIG = {"lease_ms": 2000.0, "heartbeat_ms": 500.0, "reconcile_ms": 6000.0, "desired_check_ms": 1000.0,
          "clock_tolerance_ms": 100.0}


def write_history(run_dir: Path, events: Iterable[Mapping[str, Any]]) -> int:
    """Write events into ``run_dir/history/<src>.jsonl`` (one file per source, in the given order)."""
    by_source: dict[str, list[str]] = {}
    count = 0
    for event in events:
        by_source.setdefault(str(event["src"]), []).append(json.dumps(event))
        count += 1
    folder = run_dir / "history"
    folder.mkdir(parents=True, exist_ok=True)
    for source, lines in by_source.items():
        (folder / f"{source}.jsonl").write_text("\n".join(lines) + "\n")
    return count


@dataclass(frozen=True)
class SmallRun:
    """What the small history holds, in numbers a report must show."""

    pks: tuple[str, ...] = ("CONN#a", "CONN#b", "CONN#c")
    recovery_ms: float = 2400.0          # CONN#a: caught up 2.4 s after the crash
    claim_ms: float = 2100.0
    overlap_ms: float = 700.0            # CONN#b: worker-2 and worker-3 both consuming for 0.7 s
    lost_range: str = "25-27"            # CONN#c: seqs 25..27 never persisted
    lost: int = 3
    bound_ms: float = 2200.0
    emitted_per_pk: int = 60


def small_run(run_dir: Path, profile: str = "hardened", seed: int = 1, recovery_ms: float = 2400.0,
              scenario: str = "crash", bound_ms: float = 2200.0,
              bound_scale1_ms: float | None = None, fault_model: str | None = None) -> SmallRun:
    """Three streams, three workers, a crash of worker-1 at 5 s.

    - CONN#a: worker-1 consumes from 0.1 s; killed at 5 s; worker-2 claims at 7.1 s, opens at 7.2 s, resumes
      at 7.3 s and is caught up at 5 s + ``recovery_ms``.
    - CONN#b: worker-2 from 0.1 s to the end; worker-3 also consumes it from 3.0 s to 3.7 s (a duplicate
      claim of 700 ms).
    - CONN#c: worker-3 from 0.1 s; seqs 25, 26, 27 are never persisted (lost).
    One seq per stream every 100 ms, 60 of them; the run stops at 8 s (every seq settles before 6 s)."""
    spec = SmallRun(recovery_ms=recovery_ms, bound_ms=bound_ms)
    ms = T0
    events: list[dict[str, Any]] = [
        {"t": ms, "src": "harness", "type": "run.start", "scenario": scenario, "profile": profile,
         "timescale": 0.1, "config": CONFIG, "connections": 3, "workers": 3, "bound_ms": spec.bound_ms,
         "seed": seed, **({"bound_scale1_ms": bound_scale1_ms} if bound_scale1_ms is not None else {}),
         **({"fault_model": fault_model} if fault_model is not None else {})},
    ]
    owners = {"CONN#a": "worker-1", "CONN#b": "worker-2", "CONN#c": "worker-3"}
    for number, worker in enumerate(("worker-1", "worker-2", "worker-3")):
        events.append({"t": ms + 1 + number, "src": worker, "type": "worker.start", "worker": worker,
                       "profile": profile, "pid": 100 + number})
    for pk, worker in owners.items():
        events.append({"t": ms + 10, "src": "harness", "type": "conn.started", "pk": pk})
        events.append({"t": ms + 50, "src": worker, "type": "lease.acquire", "pk": pk, "worker": worker,
                       "epoch": 1, "outcome": "ok", "expires_ms": ms + 2050, "via": "notify"})
        events.append({"t": ms + 100, "src": "upstream", "type": "sub.open", "pk": pk,
                       "session": f"s-{pk[-1]}", "worker": worker, "from_seq": 1})
    # worker-level renewals every 500 ms; worker-1's last promise expires at 4.9 + 2 s
    for worker, until in (("worker-1", 4900.0), ("worker-2", 8000.0), ("worker-3", 8000.0)):
        t = 400.0
        while t <= until:
            events.append({"t": ms + t, "src": worker, "type": "lease.renew", "worker": worker,
                           "outcome": "ok", "expires_ms": ms + t + 2000})
            t += 500.0
    kill_t, claim_t = 5000.0, 5000.0 + spec.claim_ms
    caught_up_t = kill_t + recovery_ms
    for seq in range(1, spec.emitted_per_pk + 1):
        emit_t = 100.0 * seq
        for pk, worker in owners.items():
            events.append({"t": ms + emit_t, "src": "upstream", "type": "emit", "pk": pk, "seq": seq})
            if pk == "CONN#c" and seq in (25, 26, 27):
                continue
            persist_t = emit_t + 5
            if pk == "CONN#a" and persist_t >= kill_t:
                continue  # worker-1 is dead: the new owner persists these below
            events.append({"t": ms + persist_t, "src": worker, "type": "msg.persist", "pk": pk,
                           "worker": worker, "epoch": 1, "seq_from": seq, "seq_to": seq, "outcome": "ok"})
    events += [
        {"t": ms + kill_t, "src": "nemesis", "type": "fault.start", "kind": "kill", "target": "worker-1",
         "params": {}},
        {"t": ms + kill_t + 10, "src": "nemesis", "type": "fault.stop", "kind": "kill", "target": "worker-1",
         "params": {}},
        {"t": ms + kill_t + 1, "src": "upstream", "type": "sub.close", "pk": "CONN#a", "session": "s-a",
         "worker": "worker-1", "reason": "error", "last_pong_t": ms + kill_t, "last_seq_sent": 49},
        {"t": ms + claim_t, "src": "worker-2", "type": "lease.acquire", "pk": "CONN#a", "worker": "worker-2",
         "epoch": 2, "outcome": "ok", "expires_ms": ms + claim_t + 2000, "via": "reconcile"},
        {"t": ms + 7200, "src": "upstream", "type": "sub.open", "pk": "CONN#a", "session": "s-a2",
         "worker": "worker-2", "from_seq": 50},
        {"t": ms + 7300, "src": "worker-2", "type": "msg.persist", "pk": "CONN#a", "worker": "worker-2",
         "epoch": 2, "seq_from": 50, "seq_to": 60, "outcome": "ok"},
        {"t": ms + caught_up_t, "src": "worker-2", "type": "msg.persist", "pk": "CONN#a",
         "worker": "worker-2", "epoch": 2, "seq_from": 61, "seq_to": 72, "outcome": "ok"},
        {"t": ms + 3000, "src": "upstream", "type": "sub.open", "pk": "CONN#b", "session": "s-b2",
         "worker": "worker-3", "from_seq": 30},
        {"t": ms + 3700, "src": "upstream", "type": "sub.close", "pk": "CONN#b", "session": "s-b2",
         "worker": "worker-3", "reason": "client_close", "last_pong_t": ms + 3650, "last_seq_sent": 37},
    ]
    # CONN#a keeps emitting until the new owner is caught up (seq 72 at 7.2 s)
    events += [{"t": ms + 100.0 * seq, "src": "upstream", "type": "emit", "pk": "CONN#a", "seq": seq}
               for seq in range(spec.emitted_per_pk + 1, 73)]
    end = max(8000.0, caught_up_t + 3000)
    events.append({"t": ms + end, "src": "harness", "type": "run.stop"})
    events.sort(key=lambda event: event["t"])
    write_history(run_dir, events)
    return spec


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted((run_dir / "history").glob("*.jsonl"))
            for line in path.read_text().splitlines() if line]


def add_zombie_writes(run_dir: Path, count: int = 1) -> list[int]:
    """Give a small run the table's final contents (``final.persisted`` with each item's writer, epoch and
    ``sent_ms``, one item per seq its ``ok`` writes covered), except that the first ``count`` seqs worker-2
    wrote on CONN#a under epoch 2 hold worker-1's epoch-1 items (built before the crash, stored over the new
    owner's): that many zombie overwrites.  Returns those seqs."""
    events = read_events(run_dir)
    items: dict[str, dict[int, dict[str, Any]]] = {}
    for event in sorted(events, key=lambda e: e["t"]):
        if event["type"] == "msg.persist" and event["outcome"] == "ok":
            for seq in range(event["seq_from"], event["seq_to"] + 1):
                items.setdefault(event["pk"], {})[seq] = {"seq": seq, "worker": event["worker"],
                                                          "epoch": event["epoch"], "sent_ms": event["t"] - 5}
    taken = sorted(seq for seq, item in items["CONN#a"].items() if item["epoch"] == 2)[:count]
    for seq in taken:
        items["CONN#a"][seq] = {"seq": seq, "worker": "worker-1", "epoch": 1, "sent_ms": T0 + 4950}
    end = max(event["t"] for event in events)
    with (run_dir / "history" / "harness.jsonl").open("a") as handle:
        for pk, stored in items.items():
            rows = [stored[seq] for seq in sorted(stored)]
            handle.write(json.dumps({"t": end + 100, "src": "harness", "type": "final.persisted", "pk": pk,
                                     "seqs": [row["seq"] for row in rows], "items": rows}) + "\n")
    return taken


def write_large_history(run_dir: Path, connections: int = 100, seconds: int = 600, rate: float = 10.0,
                        workers: int = 4) -> int:
    """A run of ``seconds`` with ``connections`` streams emitting ``rate`` seqs/s, each persisted one by one;
    worker-1 is killed halfway and its streams are taken over 2.2 s later.  Lines are written directly
    (json.dumps per line would take longer than the report).  Returns the number of events."""
    folder = run_dir / "history"
    folder.mkdir(parents=True, exist_ok=True)
    step = 1000.0 / rate
    kill_t = T0 + seconds * 500.0
    files: dict[str, list[str]] = {"harness": [], "upstream": [], "nemesis": []}
    names = [f"worker-{n}" for n in range(1, workers + 1)]
    for name in names:
        files[name] = [json.dumps({"t": T0 - 500, "src": name, "type": "worker.start", "worker": name,
                                   "profile": "hardened", "pid": 1})]
    harness = files["harness"]
    harness.append(json.dumps({"t": T0, "src": "harness", "type": "run.start", "scenario": "crash",
                               "profile": "hardened", "timescale": 0.1, "config": CONFIG,
                               "connections": connections, "workers": workers, "bound_ms": 2200.0,
                               "seed": 1}))
    for name in names:
        lines, t = files[name], T0
        while t < T0 + seconds * 1000.0 and not (name == "worker-1" and t > kill_t):
            lines.append(f'{{"t":{t:.3f},"src":"{name}","type":"lease.renew","worker":"{name}",'
                         f'"outcome":"ok","expires_ms":{t + 2000:.0f}}}')
            t += 500.0
    files["nemesis"] += [
        json.dumps({"t": kill_t, "src": "nemesis", "type": "fault.start", "kind": "kill",
                    "target": "worker-1", "params": {}}),
        json.dumps({"t": kill_t + 15, "src": "nemesis", "type": "fault.stop", "kind": "kill",
                    "target": "worker-1", "params": {}}),
    ]
    upstream = files["upstream"]
    count = 0
    heads: dict[str, int] = {}
    for i in range(connections):
        pk = f"CONN#c{i:03d}"
        owner = names[i % workers]
        heir = names[(i + 1) % workers]
        start = T0 + 10 + i
        harness.append(f'{{"t":{start:.3f},"src":"harness","type":"conn.started","pk":"{pk}"}}')
        files[owner].append(f'{{"t":{start + 5:.3f},"src":"{owner}","type":"lease.acquire","pk":"{pk}",'
                            f'"worker":"{owner}","epoch":1,"outcome":"ok","expires_ms":{start + 2005:.0f},'
                            f'"via":"notify"}}')
        upstream.append(f'{{"t":{start + 10:.3f},"src":"upstream","type":"sub.open","pk":"{pk}",'
                        f'"session":"s-{i}","worker":"{owner}","from_seq":1}}')
        crashed = owner == "worker-1"
        takeover_t = kill_t + 2200 + i
        backlog_done = False
        seq, t = 0, start + 20
        while t < T0 + seconds * 1000.0:
            seq += 1
            upstream.append(f'{{"t":{t:.3f},"src":"upstream","type":"emit","pk":"{pk}","seq":{seq}}}')
            writer = owner
            if crashed and t + 5 >= kill_t:
                writer = heir
                if t + 5 < takeover_t + 50:
                    t += step
                    continue  # the backlog, persisted in one batch at the takeover
                if not backlog_done:
                    backlog_done = True
                    first = 1 + int((kill_t - start - 25) // step) + 1
                    files[heir].append(f'{{"t":{takeover_t + 50:.3f},"src":"{heir}","type":"msg.persist",'
                                       f'"pk":"{pk}","worker":"{heir}","epoch":2,"seq_from":{first},'
                                       f'"seq_to":{seq - 1},"outcome":"ok"}}')
            epoch = 2 if writer != owner else 1
            files[writer].append(f'{{"t":{t + 5:.3f},"src":"{writer}","type":"msg.persist","pk":"{pk}",'
                                 f'"worker":"{writer}","epoch":{epoch},"seq_from":{seq},'
                                 f'"seq_to":{seq},"outcome":"ok"}}')
            t += step
        heads[pk] = seq
        if crashed:
            upstream.append(f'{{"t":{kill_t + 1000:.3f},"src":"upstream","type":"sub.close","pk":"{pk}",'
                            f'"session":"s-{i}","worker":"{owner}","reason":"keepalive_timeout",'
                            f'"last_pong_t":{kill_t:.3f},"last_seq_sent":0}}')
            files[heir].append(f'{{"t":{takeover_t:.3f},"src":"{heir}","type":"lease.acquire","pk":"{pk}",'
                               f'"worker":"{heir}","epoch":2,"outcome":"ok",'
                               f'"expires_ms":{takeover_t + 2000:.0f},"via":"reconcile"}}')
            upstream.append(f'{{"t":{takeover_t + 20:.3f},"src":"upstream","type":"sub.open","pk":"{pk}",'
                            f'"session":"s-{i}b","worker":"{heir}","from_seq":1}}')
    stop_t = T0 + seconds * 1000.0 + 100
    harness.append(f'{{"t":{stop_t:.3f},"src":"harness","type":"run.stop"}}')
    for pk, head in heads.items():
        harness.append(json.dumps({"t": stop_t + 10, "src": "harness", "type": "final.emitted", "pk": pk,
                                   "head_seq": head}))
        harness.append(json.dumps({"t": stop_t + 20, "src": "harness", "type": "final.persisted", "pk": pk,
                                   "seqs": list(range(1, head + 1))}))
    for name, lines in files.items():
        lines.sort(key=lambda line: float(line[5:line.index(",")]))
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        count += len(lines)
    return count


def add_storm(run_dir: Path, policy: str | None = None) -> None:
    """Make a small run a storm against a quota of 10 handshakes a second (scale 1): ``run.start`` names the
    quota (and ``policy`` as a --set reconnect_policy), and the simulator's windows saw 30 refused."""
    events = read_events(run_dir)
    start = next(e for e in events if e["type"] == "run.start")
    start["upstream"] = {"handshake_quota": 10}
    if policy is not None:
        start["settings"] = {"reconnect_policy": policy}
    for i, (accepted, rejected) in enumerate(((18, 22), (10, 8), (9, 0))):
        events.append({"t": start["t"] + 5000 + 100 * (i + 1), "src": "upstream", "type": "handshakes",
                       "attempted": accepted + rejected, "accepted": accepted, "rejected": rejected,
                       "window_start": start["t"] + 5000 + 100 * i, "window_ms": 100})
    for path in (run_dir / "history").glob("*.jsonl"):
        path.unlink()
    write_history(run_dir, events)
