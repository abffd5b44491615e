"""The region failover report: the variants of one ``region_failover`` run (``harness.region.failover``)
side by side, in the report's two renderings (``report.html``, ``report.md``).

- the headline: whether the gated variant held (no split brain, nothing lost, RTO within the bound the
  time scale implies), and the scale with its bound;
- split brain under the replication pause, per variant (with the gate, without it, the published design),
  and the conflicts last-writer-wins resolved;
- per gated variant, the recovery from the primary's outage phase by phase, with a figure, its failback,
  and the data: the RPO (writes in flight at the cut; sequences re-delivered) and the sequences lost;
- what each activated region lacked of the other's writes at its activation, by kind, per variant
  (``harness.region.checks.gap_totals``): with the other region's DynamoDB answering (a write that matters
  there is a finding), after the automation's replication wait reached its bound (RPO by choice) and with
  it out (a failover's RPO).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from harness.region.failover import UNSCALED_WORK_S
from harness.report.build import write_document
from harness.report.figures import png
from harness.report.render import Document, Headline, Image, Paragraph, Section, Table

PHASE_MEANING = {
    "detected": "the primary's health check turns unhealthy",
    "answer": "the zone answers the standby",
    "activated": "the standby's routing control turns On",
    "claimed": "the standby acquires the stream",
    "connected": "its upstream session opens",
    "resumed": "its first message is stored (the RTO)",
    "caught_up": "its stored messages reach the stream's head at the takeover",
    "client": "a client resolving the name reaches the standby (its cached answer expired)",
}


def gated_holds(result: dict[str, Any]) -> bool:
    """The gated variant's claims: no split brain (in the pause, the outage and the failback), nothing lost
    (no acknowledged message either), recovery within the bound, and the activation's checkers
    (``harness.region.checks``: never two regions On, no failback before replication caught up, no region
    activated while its check failed, no flapping) finding nothing."""
    if any((result.get("activation") or {}).values()):
        return False
    outage = result.get("outage") or {}
    bound, failback = outage.get("rto_bound_s"), outage.get("failback") or {}
    acknowledged_lost = ((outage.get("rpo") or {}).get("messages") or {}).get("lost", 0)
    return (result["split_brain"]["streams"] == 0 and outage.get("lost") == 0 and acknowledged_lost == 0
            and (outage.get("split_brain") or {}).get("streams", 0) == 0
            and outage.get("rto_s") is not None and (bound is None or outage["rto_s"] <= bound)
            and failback.get("split_brain", 0) == 0 and failback.get("lost_in_primary", 0) == 0)


def rto_text(outage: dict[str, Any]) -> str:
    """``6.50 s (bound 8.7 s)``, or for an outage nothing fails over from by itself, how long of it was the
    operator's wait."""
    bound = (f"bound {outage['rto_bound_s']:.1f} s" if outage["rto_bound_s"] is not None
             else f"{outage['operator_s']:.1f} s of it waiting for the operator")
    return f"{outage['rto_s']:.2f} s ({bound})"


def region_document(results: list[dict[str, Any]]) -> Document:
    gated = [r for r in results if r["gate"] and r.get("outage")]
    scale = results[0]["timescale"]
    status = "unknown" if not gated else ("pass" if all(gated_holds(r) for r in gated) else "fail")
    record = (results[0].get("route53") or [None])[0]  # the primary's, as created from terraform's definitions
    timing = "" if record is None else (f" (health checks every {record['check_interval_s'] * scale:g} s x "
                                        f"{record['failure_threshold']}, TTL {record['ttl_s'] * scale:g} s)")
    lines = [("time scale", f"{scale:g}{timing}"),
             ("variants", ", ".join(f"{r['variant']} ({r['description']})" for r in results))]
    for r in gated:
        outage = r["outage"]
        why = ((f"the {outage['target_rto_s_at_scale_1']:.0f} s target at scale 1: its timers scaled, "
                f"{UNSCALED_WORK_S:g} s of claims, handshakes and writes not") if outage["rto_bound_s"] is not None
               else "nothing fails over by itself")
        lines.append((f"RTO ({r['variant']})", f"{rto_text(outage)}; {why}"))
        budget = outage.get("rto_budget_s_at_scale_1")
        if budget:
            lines.append((f"RTO budget at scale 1 ({r['variant']})",
                          "with the timings terraform deploys, each phase's end: " + ", ".join(
                              f"{phase.replace('_', ' ')} {seconds:g} s" for phase, seconds in budget.items())))
        lines.append((f"data ({r['variant']})",
                      f"{outage['lost']} sequences lost; {outage['redelivered']} re-delivered"))
    sections = [
        Section("Region failover", [Headline("region_failover", status, lines)]),
        Section("Split brain under a replication pause", [
            Paragraph("Both regions up, replication paused for 3 leases plus a reconcile (what the standby "
                      "needs to take the primary's streams over, had nothing stopped it).  A stream counts when "
                      "a primary session and a standby session consumed it at the same time, as the upstream "
                      "simulator saw them."),
            Table("split brain", _split_brain(results))]),
        Section("Route 53", [
            Paragraph("The failover records and health checks as created in Route 53 (moto) from terraform's "
                      "definitions, at scale 1; the harness probes and judges them at the run's time scale."),
            Table("records", pd.DataFrame(results[0].get("route53", [])))]),
    ]
    for r in gated:
        sections += _outage_sections(r)
    gaps = [r for r in results if r.get("activation_gaps")]
    if gaps:
        sections.append(Section("What the activated region lacked", [
            Paragraph("At each activation (a region's routing control turned On), the writes of the other region "
                      "still on their way to it, by kind.  With the other region's DynamoDB answering, the "
                      "activation wait should have let them arrive: a lease of a higher epoch, a desired state, a "
                      "checkpoint, a log item or a journal item lacked then is a finding; a write of the same lease "
                      "or a worker's liveness is a superseded heartbeat.  With the other region out, what it had "
                      "not replicated could not arrive: a failover's RPO, counted apart; so is what an activation "
                      "lacked once the automation's wait for replication reached its bound (RPO by choice)."),
            Table("missing at activation", _gaps(gaps))]))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Document("wsfleet region failover", sections, [],
                    f"Generated by wsfleet from {len(results)} region run(s) at {stamp}.")


def _split_brain(results: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{
        "variant": r["variant"], "profile": r["profile"], "gate": r["gate"], "streams": r["streams"],
        "pause_s": round(r["pause_s"], 2), "streams_in_both_regions": r["split_brain"]["streams"],
        "overlap_ms": r["split_brain"]["overlap_ms"], "conflicts_resolved": r["conflicts"],
    } for r in results])


def _gaps(results: list[dict[str, Any]]) -> pd.DataFrame:
    def kinds(counts: dict[str, int]) -> str:
        return ", ".join(f"{kind} {count}" for kind, count in counts.items()) or "none"

    return pd.DataFrame([{"variant": r["variant"], "activations": r["activation_gaps"]["activations"],
                          "findings": r["activation_gaps"]["findings"],
                          "lacked_other_answering": kinds(r["activation_gaps"]["answering"]),
                          "lacked_unreplicated": kinds(r["activation_gaps"].get("unreplicated", {})),
                          "lacked_other_out": kinds(r["activation_gaps"]["other_out"])} for r in results])


def _outage_sections(result: dict[str, Any]) -> list[Section]:
    outage = result["outage"]
    phases = _phase_table(outage["phases"])
    if outage["kind"] == "dynamodb":
        client = (f"Only the primary's DynamoDB went out.  Its router kept answering the (shallow) health check, "
                  f"so {outage['operator_s']:.1f} s later the zone still answered {outage['zone_answer']}, the "
                  f"activation had not moved, and {outage['consumed_at_operator']} of {result['streams']} streams "
                  "were consumed anywhere (the primary's workers fence when their renewals fail; the standby's "
                  "are gated).  The operator then moved the activation.  A health check that reads DynamoDB "
                  "would fail over by itself, at the risk of failing over on a passing error.")
    else:
        client = f"A client resolving the name reached the standby {outage['client_s']:.2f} s after the cut."
    rpo = outage.get("rpo") or {}
    data = pd.DataFrame([{"acknowledged_sequences_lost": rpo.get("messages", {}).get("lost"),
                          "acknowledged_starts_lost_or_reverted": rpo.get("control", {}).get("starts"),
                          "acknowledged_stops_lost_or_reverted": rpo.get("control", {}).get("stops"),
                          "replication_backlog_at_cut_writes": outage["replication_backlog_at_cut"],
                          "sequences_redelivered": outage["redelivered"], "sequences_lost": outage["lost"]}])
    return [
        Section(f"Recovery from the primary's outage ({result['variant']})", [
            Paragraph(f"Seconds after the cut at time scale {result['timescale']:g}; per-stream phases over "
                      f"{result['streams']} streams.  {client}  The zone's phases scale with the time scale; "
                      "the standby's claims, handshakes and writes do not (a scale-1 run: "
                      "wsfleet region --timescale 1 --variants gate)."),
            Table("phases", phases),
            Image(f"region_phases_{result['variant']}", "Phases of the standby's takeover, seconds after the cut",
                  png(_figure(outage))),
        ]),
        *_failback_sections(result),
        Section(f"Data: RPO and loss ({result['variant']})", [
            Paragraph("Writes the primary made that had not replicated at the cut stay behind with it.  The "
                      "standby resumes each stream from its own checkpoint, so the upstream re-delivers those "
                      "sequences: re-delivered, not lost.  Lost counts what the standby's table lacks from 1 "
                      "to each stream's head."),
            Table("data", data)]),
    ]


def _phase_table(phases: dict[str, dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{"phase": name, "p50_s": p["p50_s"], "last_stream_s": p["last_s"],
                          "what": PHASE_MEANING[name]} for name, p in phases.items()])


def _failback_sections(result: dict[str, Any]) -> list[Section]:
    failback = result["outage"].get("failback")
    if not failback:
        return []
    return [Section(f"Failback ({result['variant']})", [
        Paragraph(f"Seconds after the primary came back: its health check passes again, the zone answers it, the "
                  f"activation moves back and its workers take the streams over.  {failback['split_brain']} "
                  f"stream(s) consumed in both regions meanwhile; the primary's tables, replicated from the "
                  f"standby's, lack {failback['lost_in_primary']} sequence(s)."),
        Table("failback phases", _phase_table(failback["phases"]),
              note="detected: here the primary's health check turns healthy again; answer, activated and the "
                   "rest: the primary's")])]


def _figure(outage: dict[str, Any]) -> Figure:
    figure = Figure(figsize=(9.0, 2.8))
    ax = figure.add_subplot()
    names = [n for n, p in outage["phases"].items() if p["last_s"] is not None]
    ax.barh(names, [outage["phases"][n]["last_s"] for n in names], color="#4c72b0")
    if outage["rto_bound_s"] is not None:
        ax.axvline(outage["rto_bound_s"], color="#c62828", linestyle="--", label="RTO bound")
        ax.legend(loc="lower right")
    ax.invert_yaxis()
    ax.set_xlabel("seconds after the cut (last stream)")
    figure.subplots_adjust(left=0.14, right=0.98, top=0.95, bottom=0.2)
    return figure


def write_region_report(results: list[dict[str, Any]], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return write_document(region_document(results), out)
