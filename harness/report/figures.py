"""The report's figures, each a function returning a matplotlib ``Figure`` (built without pyplot, rendered
by Agg), so tests can inspect the axes and artists a figure holds; ``png`` renders one.

- ``ownership_timeline(run)``: one row per connection; consuming intervals coloured by worker, lease beliefs
  as a thin line under them, zombie time hatched, duplicate claims in red, fault periods shaded (instant
  faults as a dashed line), STARTED time in light grey so a gap shows as grey without colour.
- ``recovery_cdf(runs)``: the recovery-time CDF per profile (one panel per scenario), with the published
  bound (lease + reconcile from the config) and each profile's own bound.
- ``phase_bars(runs)``: per profile, p50 and max of the time from the fault to each phase, stacked.
- ``handshake_rate(runs)``: per run that met a new-connection quota, the handshakes the simulator accepted
  and refused (429) in each one-second window (scaled), against the quota line.
- ``sequence_progress(run)``: persisted sequence against time for a readable subset of the connections
  (each write a dot at its ``seq_to`` and, for a batch, a vertical bar down to its ``seq_from``), lost
  sequences and duplicates marked.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

from harness.checkers.events import select
from harness.checkers.recovery import PHASES
from harness.report.bounds import bounds_of, published_at_scale_one, published_bound_ms
from harness.report.compare import groups, pooled_phases
from harness.report.headline import judged_rows
from harness.report.model import RunData
from harness.report.text import natural

OVERLAP_COLOUR = "#d62728"
FAULT_COLOUR = "#f2b705"
STARTED_COLOUR = "#e8e8e8"
LOST_COLOUR = "#d62728"
DUPLICATE_COLOUR = "#ff7f0e"
WORKER_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f", "#bcbd22",
                  "#aec7e8", "#98df8a", "#c5b0d5", "#c49c94", "#9edae5", "#f7b6d2", "#c7c7c7", "#dbdb8d")
PROFILE_COLOURS = {"blog": "#ff7f0e", "hardened": "#1f77b4", "unsafe": "#7f7f7f"}
PHASE_COLOURS = dict(zip(PHASES, ("#cfcfcf", "#fdd49e", "#a1d99b", "#9ecae1", "#bcbddc"), strict=True))
MAX_TIMELINE_ROWS = 150
MAX_STREAMS = 12
MAX_POINTS = 3000
ZOOM_SHARE = 0.4
WIDTH_IN = 12.0


def png(figure: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _margins(figure: Figure, left: float, right: float, top: float, bottom: float, **space: float) -> None:
    """Fixed margins in inches: cheaper than a layout engine on figures with many axes or tick labels."""
    width, height = figure.get_size_inches()
    figure.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height,
                           bottom=bottom / height, **space)


def _legend_height(entries: int, columns: int) -> float:
    return 0.25 * math.ceil(entries / columns) + 0.1


def worker_colours(runs: Sequence[RunData]) -> dict[str, str]:
    """One colour per worker id (never the overlap red), stable across a report's figures."""
    names: set[str] = set()
    for run in runs:
        names.update(str(r["worker"]) for r in run.analysis.claims if r["worker"] is not None)
        names.update(str(r["new_worker"]) for r in run.analysis.phases if r["new_worker"] is not None)
    ordered = sorted(names, key=natural)
    return {name: WORKER_COLOURS[i % len(WORKER_COLOURS)] for i, name in enumerate(ordered)}


def _profile_colour(profile: str, index: int) -> str:
    return PROFILE_COLOURS.get(profile, WORKER_COLOURS[(index + 3) % len(WORKER_COLOURS)])


def _short_pk(pk: str) -> str:
    return pk.removeprefix("CONN#")


def _draw_faults(ax: Axes, run: RunData, label: bool) -> None:
    """Shade each fault period; an instant fault (or one that never stopped) is a dashed line."""
    span = max((run.info.end_t - run.origin_t) / 1000.0, 1e-9)
    along_top = blended_transform_factory(ax.transData, ax.transAxes)
    for fault in run.faults:
        start = float(run.seconds(fault.start_t))
        stop = float(run.seconds(fault.stop_t)) if fault.stop_t is not None else None
        if stop is None or stop - start < 0.005 * span:
            ax.axvline(start, color=FAULT_COLOUR, linestyle="--", linewidth=1.8, zorder=4)
        else:
            ax.axvspan(start, stop, color=FAULT_COLOUR, alpha=0.25, linewidth=0, zorder=0)
        if label:
            ax.text(start, 1.0, f" {fault.kind} {fault.target}", transform=along_top, fontsize=8,
                    va="bottom", ha="left", color="#7a5c00", clip_on=False)


def _rectangles(ax: Axes, spans: Sequence[tuple[float, float, float]], height: float, offset: float = 0.0,
                **style: Any) -> None:
    """Many bars at once: (row, start, end) spans as one collection."""
    if not spans:
        return
    half = height / 2
    verts = [[(a, row + offset - half), (a, row + offset + half), (b, row + offset + half),
              (b, row + offset - half)] for row, a, b in spans]
    ax.add_collection(PolyCollection(verts, **style), autolim=True)


def timeline_rows(run: RunData, limit: int = MAX_TIMELINE_ROWS) -> list[str]:
    """The connections the timeline shows: all of them, or when there are more than ``limit``, the
    affected, overlapping and lossy ones first, then the rest, up to ``limit`` (sorted)."""
    every = run.connections
    if len(every) <= limit:
        return every
    first = [r["pk"] for r in run.analysis.phases] + [r["pk"] for r in run.analysis.table("episodes")]
    first += [r["pk"] for r in run.analysis.sequences if r["lost"] or r["duplicated"]]
    chosen = list(dict.fromkeys([*first, *every]))[:limit]
    return sorted(chosen)


def fault_window(run: RunData) -> tuple[float, float] | None:
    """Seconds around the faults and the recoveries they caused (two leases either side), when that is
    less than ``ZOOM_SHARE`` of the run: a gap of a few seconds is invisible on a ten-minute axis."""
    if not run.faults:
        return None
    margin = 2 * (run.info.duration("lease_ms") or 1000.0)
    ends = [f.stop_t if f.stop_t is not None else f.start_t for f in run.faults]
    ends += [r["caught_up_t"] for r in run.analysis.phases if r["caught_up_t"] is not None]
    start = float(run.seconds(min(f.start_t for f in run.faults) - margin))
    end = float(run.seconds(max(ends) + margin))
    span = (run.info.end_t - run.origin_t) / 1000.0
    return (max(start, 0.0), min(end, span)) if end - start < ZOOM_SHARE * span else None


def ownership_timeline(run: RunData, colours: dict[str, str] | None = None,
                       limit: int = MAX_TIMELINE_ROWS, window: tuple[float, float] | None = None) -> Figure:
    """The ownership timeline; ``window`` (seconds since run start) zooms in on the connections the
    faults affected or that had a duplicate claim."""
    colours = colours if colours is not None else worker_colours([run])
    pks = timeline_rows(run, limit)
    if window is not None:
        involved = {r["pk"] for r in run.analysis.phases} | {r["pk"] for r in run.analysis.table("episodes")}
        pks = [pk for pk in pks if pk in involved] or pks
    row_of = {pk: i for i, pk in enumerate(pks)}
    figure = Figure(figsize=(WIDTH_IN, max(3.0, 0.28 * len(pks) + 1.8)))
    ax = figure.add_subplot()
    started = [(row_of[pk], float(run.seconds(a)), float(run.seconds(b)))
               for pk in pks for a, b in run.started_periods.get(pk, [])]
    _rectangles(ax, started, 0.8, facecolor=STARTED_COLOUR, edgecolor="none", zorder=1)
    claims = pd.DataFrame(run.analysis.claims, columns=["source", "pk", "worker", "start", "end"])
    claims = claims.loc[claims["pk"].isin(row_of)]
    for source, height, offset in (("upstream", 0.55, -0.05), ("lease", 0.12, 0.33)):
        chosen = claims.loc[claims["source"] == source]
        for worker, group in chosen.groupby("worker", sort=False):
            spans = list(zip(group["pk"].map(row_of).tolist(), run.seconds(group["start"]).tolist(),
                             run.seconds(group["end"]).tolist(), strict=True))
            _rectangles(ax, spans, height, offset, facecolor=colours.get(str(worker), "#444444"),
                        edgecolor="none", zorder=2)
    zombies = [r for r in run.analysis.table("zombies") if r["pk"] in row_of]
    for worker in sorted({str(r["worker"]) for r in zombies}):
        spans = [(row_of[r["pk"]], float(run.seconds(r["start"])), float(run.seconds(r["end"])))
                 for r in zombies if str(r["worker"]) == worker]
        _rectangles(ax, spans, 0.55, -0.05, facecolor="none", edgecolor=colours.get(worker, "#444444"),
                    hatch="////", linewidth=0.8, zorder=2)
    span_s = max((run.info.end_t - run.origin_t) / 1000.0, 1e-9)
    left, right = window if window is not None else (min(0.0, float(run.seconds(run.info.first_t))), span_s)
    episodes = [r for r in run.analysis.table("episodes") if r["pk"] in row_of]
    if episodes:
        lefts = np.array([float(run.seconds(r["start"])) for r in episodes])
        widths = np.maximum(np.array([(r["end"] - r["start"]) / 1000.0 for r in episodes]),
                            0.004 * (right - left))
        ax.barh([row_of[r["pk"]] for r in episodes], widths, left=lefts, height=0.9, color=OVERLAP_COLOUR,
                alpha=0.9, zorder=5, label="duplicate claim")
    _draw_faults(ax, run, label=True)
    ax.set_yticks(range(len(pks)), [_short_pk(pk) for pk in pks], fontsize=7 if len(pks) > 40 else 9)
    ax.set_ylim(len(pks) - 0.5, -0.5)
    ax.set_xlim(left, right)
    ax.set_xlabel(f"seconds since run start (time scale {run.info.timescale})")
    ax.grid(axis="x", color="#cccccc", linewidth=0.5)
    shown = f"{len(pks)} of {len(run.connections)} connections" if len(pks) < len(run.connections) else (
        f"{len(pks)} connections")
    zoom = f" involved in a fault or claim, {left:.1f} s to {right:.1f} s" if window is not None else ""
    ax.set_title(f"Ownership: {run.scenario} / {run.profile} ({shown}{zoom})", loc="left", pad=14)
    present = sorted({str(w) for w in claims["worker"].dropna()}, key=natural)
    handles: list[Any] = [Patch(color=colours.get(w, "#444444"), label=w) for w in present]
    handles += [
        Line2D([], [], color="#555555", linewidth=3, label="lease belief (thin)"),
        Patch(facecolor="none", edgecolor="#555555", hatch="////", label="zombie (not consuming)"),
        Patch(color=OVERLAP_COLOUR, label="duplicate claim"),
        Patch(color=FAULT_COLOUR, alpha=0.5, label="fault"),
        Patch(color=STARTED_COLOUR, label="STARTED, nobody consuming (gap)"),
    ]
    figure.legend(handles=handles, loc="lower center", ncols=min(len(handles), 6), fontsize=8, frameon=False)
    label_width = max((len(_short_pk(pk)) for pk in pks), default=4) * (0.06 if len(pks) > 40 else 0.075)
    _margins(figure, left=label_width + 0.3, right=0.25, top=0.55,
             bottom=0.5 + _legend_height(len(handles), 6))
    return figure


def _unit(runs: Sequence[RunData]) -> tuple[dict[str, float], str]:
    """Per run label, the factor turning ms into the plotted seconds, and the axis label: seconds at the
    runs' time scale when they share one, else seconds at scale 1."""
    scales = {run.info.timescale for run in runs}
    if len(scales) <= 1:
        scale = next(iter(scales), None)
        return {run.label: 1 / 1000.0 for run in runs}, f"s, time scale {scale}"
    return ({run.label: 1 / 1000.0 / (run.info.timescale or 1.0) for run in runs},
            "s at time scale 1: the runs differ in scale")


def _panels(count: int, height: float) -> tuple[Figure, list[Axes]]:
    columns = min(count, 2)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(WIDTH_IN, height * rows), layout="constrained")
    axes = [figure.add_subplot(rows, columns, i + 1) for i in range(count)]
    return figure, axes


def _scenarios(runs: Sequence[RunData]) -> list[str]:
    return list(dict.fromkeys(run.scenario for run in runs))


def recovery_cdf(runs: Sequence[RunData]) -> Figure:
    factor, unit = _unit(runs)
    by_group = groups(list(runs))
    scenarios = _scenarios(runs)
    figure, axes = _panels(len(scenarios), 4.2)
    profiles = list(dict.fromkeys(run.profile for run in runs))
    for ax, scenario in zip(axes, scenarios, strict=True):
        members = {p: by_group[(scenario, p)] for p in profiles if (scenario, p) in by_group}
        plotted = False
        for index, (profile, group) in enumerate(members.items()):
            colour = _profile_colour(profile, index)
            values = np.sort(np.array([row["recovery_ms"] * factor[run.label] for run in group
                                       for row in judged_rows(run) if row["recovery_ms"] is not None]))
            total = sum(len(judged_rows(run)) for run in group)
            if total:
                plotted = True
                x = np.r_[0.0, values]
                y = np.r_[0.0, np.arange(1, values.size + 1) / total]
                ax.step(x, y, where="post", color=colour, linewidth=2,
                        label=f"{profile} (n={total}, {total - values.size} never recovered)")
            for label, ms in _distinct_bounds(group, factor).items():
                ax.axvline(ms, color=colour, linestyle=":", linewidth=1.6, label=f"{profile} {label}")
        published = _published(list(runs), scenario, factor)
        if published is not None:
            value, text = published
            ax.axvline(value, color="black", linestyle="--", linewidth=1.2, label=text)
        if not plotted:
            ax.text(0.5, 0.5, "no connection was affected by a fault", transform=ax.transAxes, ha="center")
        ax.set_ylim(0, 1.02)
        ax.set_xlim(left=0)
        ax.set_xlabel(f"recovery ({unit})")
        ax.set_ylabel("fraction of affected connections")
        ax.set_title(f"Recovery time CDF: {scenario}", loc="left")
        ax.grid(color="#dddddd", linewidth=0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    return figure


def _distinct_bounds(group: Sequence[RunData], factor: dict[str, float]) -> dict[str, float]:
    found: dict[str, float] = {}
    for run in group:
        for label, ms in bounds_of(run).items():
            found.setdefault(f"{label} {ms * factor[run.label]:.3g} s", ms * factor[run.label])
    return found


def _published(runs: list[RunData], scenario: str, factor: dict[str, float]) -> tuple[float, str] | None:
    """The published bound (lease + reconcile), from a blog run of the scenario if there is one."""
    candidates = sorted((run for run in runs if run.scenario == scenario), key=lambda r: r.profile != "blog")
    for run in candidates:
        ms = published_bound_ms(run)
        if ms is not None:
            scale_one = published_at_scale_one(run)
            at_one = ""
            if scale_one is not None and run.info.timescale != 1:
                at_one = f" ({scale_one / 1000:.3g} s at scale 1)"
            return ms * factor[run.label], f"published lease+reconcile {ms / 1000:.3g} s{at_one}"
    return None


def phase_bars(runs: Sequence[RunData]) -> Figure:
    factor, unit = _unit(runs)
    by_group = groups(list(runs))
    scenarios = _scenarios(runs)
    figure, axes = _panels(len(scenarios), 4.2)
    for ax, scenario in zip(axes, scenarios, strict=True):
        members = [(profile, group) for (s, profile), group in by_group.items() if s == scenario]
        ticks: list[float] = []
        labels: list[str] = []
        for index, (profile, group) in enumerate(members):
            scale = factor[group[0].label]
            stats = pooled_phases(group)
            for offset, statistic in enumerate(("p50", "max")):
                x = index * 3 + offset
                ticks.append(x)
                labels.append(f"{profile}\n{statistic}")
                reached = 0.0
                for phase in PHASES:
                    value = stats[phase][statistic]
                    if value is None:
                        continue
                    height = max(0.0, value * scale - reached)
                    first = index == 0 and offset == 0
                    ax.bar(x, height, bottom=reached, width=0.8, color=PHASE_COLOURS[phase],
                           edgecolor="white", linewidth=0.5, label=phase if first else None)
                    reached = max(reached, value * scale)
                if reached:
                    ax.text(x, reached, f"{reached:.3g} s", ha="center", va="bottom", fontsize=8)
            colour = _profile_colour(profile, index)
            for text, value in _distinct_bounds(group, factor).items():
                ax.hlines(value, index * 3 - 0.5, index * 3 + 1.5, colors=colour, linestyles=":",
                          linewidth=2.2, label=f"{profile} {text}")
        published = _published(list(runs), scenario, factor)
        if published is not None:
            ax.axhline(published[0], color="black", linestyle="--", linewidth=1.2, label=published[1])
        ax.set_xticks(ticks, labels)
        ax.set_ylabel(f"time from the fault ({unit})")
        ax.set_title(f"Recovery phases (p50 and max, stacked): {scenario}", loc="left")
        ax.grid(axis="y", color="#dddddd", linewidth=0.5)
        if not ticks:
            ax.text(0.5, 0.5, "no connection was affected by a fault", transform=ax.transAxes, ha="center")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure


def sequence_streams(run: RunData, limit: int = MAX_STREAMS) -> list[str]:
    """The connections worth a sequence plot: lost or duplicated first, then affected by a fault (slowest
    recovery first), then overlapping, then the rest; at most ``limit``, sorted by name."""
    problems = [r["pk"] for r in run.analysis.sequences
                if r["lost"] or r["duplicated"] or r["possibly_persisted"]]
    affected = [r["pk"] for r in sorted(run.analysis.phases, key=lambda r: -(r["recovery_ms"] or math.inf))]
    overlapping = [r["pk"] for r in run.analysis.table("episodes")]
    chosen = list(dict.fromkeys([*problems, *affected, *overlapping, *run.connections]))[:limit]
    return sorted(chosen)


def parse_ranges(text: Any) -> np.ndarray:
    """The seqs of a checker range list such as ``"3,7-9"``."""
    if not isinstance(text, str) or not text:
        return np.empty(0, dtype="int64")
    parts = []
    for item in text.split(","):
        low, _, high = item.partition("-")
        parts.append(np.arange(int(low), int(high or low) + 1, dtype="int64"))
    return np.concatenate(parts)


def _thin(frame: pd.DataFrame) -> pd.DataFrame:
    """At most ``MAX_POINTS`` evenly spaced rows (the first and last kept)."""
    if len(frame) <= MAX_POINTS:
        return frame
    index = np.unique(np.linspace(0, len(frame) - 1, MAX_POINTS).astype(int))
    return frame.iloc[index]


def sequence_progress(run: RunData, colours: dict[str, str] | None = None,
                      limit: int = MAX_STREAMS) -> Figure:
    colours = colours if colours is not None else worker_colours([run])
    pks = sequence_streams(run, limit)
    columns = 3 if len(pks) > 4 else max(len(pks), 1)
    rows = max(math.ceil(len(pks) / columns), 1)
    figure = Figure(figsize=(WIDTH_IN, 2.7 * rows + 1.0))
    if not pks:
        ax = figure.add_subplot()
        ax.text(0.5, 0.5, "no connections in this history", transform=ax.transAxes, ha="center")
        return figure
    emitted = run.emitted(pks)
    persisted = run.persisted(pks)
    emitted_rows, persisted_rows = (frame.groupby("pk", sort=False).indices for frame in (emitted, persisted))
    sequences = {r["pk"]: r for r in run.analysis.sequences}
    recovery = {r["pk"]: r["recovery_ms"] for r in run.analysis.phases}
    workers: set[str] = set()
    share = None
    for number, pk in enumerate(pks):
        ax = figure.add_subplot(rows, columns, number + 1, sharex=share)
        share = share or ax
        mine = emitted.iloc[emitted_rows.get(pk, [])]
        heads = _thin(mine.assign(seq=mine["seq"].cummax()))
        ax.step(run.seconds(heads["t"]), heads["seq"], where="post", color="#aaaaaa", linewidth=1.0)
        stored = persisted.iloc[persisted_rows.get(pk, [])]
        for worker, group in stored.groupby("worker", sort=False):
            workers.add(str(worker))
            shown = _thin(group)
            colour = colours.get(str(worker), "#444444")
            batches = shown.loc[shown["seq_to"] > shown["seq_from"]]
            if not batches.empty:  # a batch is a range: a replay must not look like a hole
                ax.vlines(run.seconds(batches["t"]), batches["seq_from"], batches["seq_to"], colors=colour,
                          linewidth=1.5)
            ax.plot(run.seconds(shown["t"]), shown["seq_to"], linestyle="none", marker=".", markersize=2.5,
                    color=colour)
        row = sequences.get(pk, {})
        lost = parse_ranges(row.get("lost_ranges"))
        if lost.size:
            hit = mine.loc[mine["seq"].isin(lost)]
            ax.plot(run.seconds(hit["t"]), hit["seq"], linestyle="none", marker="x", markersize=5,
                    color=LOST_COLOUR, zorder=5)
        duplicated = parse_ranges(row.get("duplicated_ranges"))
        if duplicated.size:
            times, seqs = _duplicate_points(stored, mine, duplicated)
            ax.plot(run.seconds(times), seqs, linestyle="none", marker="D", markersize=4,
                    markerfacecolor="none", color=DUPLICATE_COLOUR, zorder=5)
        _draw_faults(ax, run, label=False)
        tags = []
        if recovery.get(pk) is not None:
            tags.append(f"recovered in {recovery[pk] / 1000:.2f} s")
        if row.get("lost"):
            tags.append(f"lost {row['lost']}")
        if row.get("duplicated"):
            tags.append(f"duplicated {row['duplicated']}")
        ax.set_title(_short_pk(pk) + (": " + ", ".join(tags) if tags else ""), fontsize=9, loc="left")
        ax.tick_params(labelsize=8, labelbottom=number >= len(pks) - columns)
        if number >= len(pks) - columns:
            ax.set_xlabel(f"seconds since run start (time scale {run.info.timescale})", fontsize=8)
        if number % columns == 0:
            ax.set_ylabel("sequence", fontsize=8)
        ax.grid(color="#eeeeee", linewidth=0.5)
    handles: list[Any] = [Line2D([], [], color="#aaaaaa", label="emitted (head)")]
    handles += [Line2D([], [], color=colours.get(w, "#444444"), marker=".", linestyle="none", markersize=8,
                       label=f"persisted by {w} (bar: a batch)") for w in sorted(workers, key=natural)]
    handles += [Line2D([], [], color=LOST_COLOUR, marker="x", linestyle="none",
                       label="lost (never persisted)"),
                Line2D([], [], color=DUPLICATE_COLOUR, marker="D", markerfacecolor="none", linestyle="none",
                       label="duplicated"),
                Patch(color=FAULT_COLOUR, alpha=0.5, label="fault")]
    total = len(run.connections)
    figure.suptitle(f"Persisted sequence: {len(pks)} of {total} connections (lost or duplicated first, then "
                    "affected)", fontsize=10, x=0.01, y=1 - 0.12 / figure.get_size_inches()[1], ha="left",
                    va="top")
    figure.legend(handles=handles, loc="lower center", ncols=min(len(handles), 6), fontsize=8, frameon=False)
    _margins(figure, left=0.75, right=0.2, top=0.75, bottom=0.5 + _legend_height(len(handles), 6),
             hspace=0.35, wspace=0.2)
    return figure


def _duplicate_points(stored: pd.DataFrame, emitted: pd.DataFrame,
                      duplicated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t, seq) of every ok write of a duplicated seq; the emit times when no write event covers them (the
    store's final contents told the checker)."""
    first = stored["seq_from"].to_numpy(dtype="float64")
    last = stored["seq_to"].to_numpy(dtype="float64")
    low = np.searchsorted(duplicated, first, side="left")
    high = np.searchsorted(duplicated, last, side="right")
    counts = np.maximum(high - low, 0)
    if counts.sum() == 0:
        hit = emitted.loc[emitted["seq"].isin(duplicated)]
        return hit["t"].to_numpy(dtype="float64"), hit["seq"].to_numpy(dtype="float64")
    times = np.repeat(stored["t"].to_numpy(dtype="float64"), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return times, duplicated[np.repeat(low, counts) + offsets].astype("float64")


def handshake_runs(runs: Sequence[RunData]) -> list[RunData]:
    """The runs whose simulator metered new connections (a quota and ``handshakes`` events)."""
    return [run for run in runs if run.info.upstream.get("handshake_quota") and run.events.tables(["handshakes"])]


def handshake_rate(runs: Sequence[RunData]) -> Figure:
    """One panel per run (``handshake_runs``): accepted and refused handshakes a window, the quota line."""
    figure, axes = _panels(len(runs), 3.0)
    for ax, run in zip(axes, runs, strict=True):
        windows = select(run.events, "handshakes", ["t", "window_ms", "accepted", "rejected"])
        x = run.seconds(windows["t"].to_numpy())
        width = float(windows["window_ms"].median()) / 1000.0 if windows["window_ms"].notna().any() else 0.1
        accepted = windows["accepted"].to_numpy()
        rejected = windows["rejected"].to_numpy()
        ax.bar(x, accepted, width=width * 0.9, align="edge", color="#2ca02c", label="accepted")
        ax.bar(x, rejected, width=width * 0.9, align="edge", bottom=accepted, color=OVERLAP_COLOUR,
               label="refused (429)")
        quota = float(run.info.upstream["handshake_quota"])
        ax.axhline(quota, color="black", linestyle="--", linewidth=1.2, label=f"quota {quota:g}/s (scale 1)")
        _draw_faults(ax, run, label=False)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("handshakes a window")
        ax.set_title(f"Handshakes: {run.label} ({run.profile})", loc="left")
        ax.grid(color="#dddddd", linewidth=0.5)
        ax.legend(fontsize=8, loc="upper right")
    return figure
