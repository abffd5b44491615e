"""The figures show what they claim, checked on the matplotlib objects built from the small synthetic run:
rows, colours, the overlap in red at the right place, the fault, the bounds, the lost sequences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from harness.report import figures
from harness.report.model import RunData, load_run
from tests.harness.report.histories import T0, small_run, write_large_history


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    folder = tmp_path_factory.mktemp("run")
    small_run(folder)
    return load_run(folder, lambda _: None)


def red_patches(ax: Axes) -> list[Rectangle]:
    red = to_rgba(figures.OVERLAP_COLOUR)
    return [p for p in ax.patches if isinstance(p, Rectangle) and np.allclose(p.get_facecolor()[:3], red[:3])]


def vertical_lines(ax: Axes) -> list[float]:
    return [first_x(line) for line in ax.lines if np.ptp(np.asarray(line.get_xdata(), dtype=float)) == 0]


def first_x(line: Line2D) -> float:
    return float(np.asarray(line.get_xdata(), dtype=float)[0])


def test_timeline_has_one_row_per_connection(run: RunData) -> None:
    ax = figures.ownership_timeline(run).axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["a", "b", "c"]


def test_timeline_draws_the_overlap_in_red_where_it_was(run: RunData) -> None:
    ax = figures.ownership_timeline(run).axes[0]
    [overlap] = red_patches(ax)
    assert overlap.get_y() + overlap.get_height() / 2 == pytest.approx(1)          # row "b"
    assert overlap.get_x() == pytest.approx(3.0)
    assert overlap.get_x() + overlap.get_width() == pytest.approx(3.7)


def test_timeline_colours_bars_by_worker_and_marks_the_crash(run: RunData) -> None:
    figure = figures.ownership_timeline(run)
    ax = figure.axes[0]
    colours = figures.worker_colours([run])
    bar_colours = {tuple(np.round(c, 3)) for coll in ax.collections if isinstance(coll, PolyCollection)
                   for c in np.asarray(coll.get_facecolor(), dtype=float)}
    for worker in ("worker-1", "worker-2", "worker-3"):
        assert tuple(np.round(to_rgba(colours[worker]), 3)) in bar_colours
    assert figures.OVERLAP_COLOUR not in colours.values()
    assert 5.0 in vertical_lines(ax)                                                  # the kill, an instant
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert {"worker-1", "worker-2", "worker-3", "duplicate claim"} <= set(legend)


def test_zoomed_timeline_shows_the_connections_involved(run: RunData) -> None:
    zoomed = figures.ownership_timeline(run, window=(5.0, 8.0)).axes[0]
    assert [t.get_text() for t in zoomed.get_yticklabels()] == ["a", "b"]     # the crash's and the claim's
    assert zoomed.get_xlim() == (5.0, 8.0)


def test_fault_window_only_when_the_faults_are_a_small_part_of_the_run(run: RunData, tmp_path: Path) -> None:
    assert figures.fault_window(run) is None          # a 9 s run: the whole run is the window
    long_run = tmp_path / "long"
    write_large_history(long_run, connections=4, seconds=120, rate=2.0)
    start, end = figures.fault_window(load_run(long_run, lambda _: None)) or (0.0, 0.0)
    assert start == pytest.approx(60.0 - 4.0) and 62.2 < end < 70.0


def test_recovery_cdf_draws_the_run_and_both_bounds(run: RunData) -> None:
    ax = figures.recovery_cdf([run]).axes[0]
    [curve] = [line for line in ax.lines if str(line.get_label()).startswith("hardened (n=1")]
    assert np.asarray(curve.get_xdata(), dtype=float).tolist() == [0.0, 2.4]
    lines = {str(line.get_label()): first_x(line) for line in ax.lines}
    assert lines["hardened bound 2.2 s"] == pytest.approx(2.2)
    assert lines["published lease+reconcile 8 s (80 s at scale 1)"] == pytest.approx(8.0)


def test_phase_bars_stack_to_the_recovery(run: RunData) -> None:
    ax = figures.phase_bars([run]).axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    p50 = [bar for bar in bars if abs(bar.get_x() + bar.get_width() / 2) < 1e-9]
    assert sum(bar.get_height() for bar in p50) == pytest.approx(2.4)
    assert [bar.get_height() for bar in p50] == pytest.approx([2.0, 0.1, 0.1, 0.1, 0.1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["hardened\np50", "hardened\nmax"]


def test_sequence_progress_marks_the_lost_range(run: RunData) -> None:
    figure = figures.sequence_progress(run)
    titles = {ax.get_title(loc="left"): ax for ax in figure.axes}
    assert set(titles) == {"a: recovered in 2.40 s", "b", "c: lost 3"}
    red = to_rgba(figures.LOST_COLOUR)
    lost = [line for line in titles["c: lost 3"].lines if line.get_marker() == "x"
            and np.allclose(to_rgba(line.get_color())[:3], red[:3])]
    assert [np.asarray(line.get_ydata(), dtype=float).tolist() for line in lost] == [[25.0, 26.0, 27.0]]
    assert np.asarray(lost[0].get_xdata(), dtype=float) == pytest.approx([2.5, 2.6, 2.7])


def test_sequence_progress_marks_duplicates(tmp_path: Path) -> None:
    small_run(tmp_path)
    with (tmp_path / "history" / "worker-2.jsonl").open("a") as handle:
        handle.write(json.dumps({"t": T0 + 1500, "src": "worker-2", "type": "msg.persist", "pk": "CONN#b",
                                 "worker": "worker-2", "epoch": 1, "seq_from": 9, "seq_to": 11,
                                 "outcome": "ok"}) + "\n")
    figure = figures.sequence_progress(load_run(tmp_path, lambda _: None))
    [ax] = [ax for ax in figure.axes if ax.get_title(loc="left").startswith("b")]
    assert ax.get_title(loc="left") == "b: duplicated 3"
    [marks] = [line for line in ax.lines if line.get_marker() == "D"]
    points = sorted(zip(np.asarray(marks.get_xdata(), dtype=float).round(3).tolist(),
                        np.asarray(marks.get_ydata(), dtype=float).tolist(), strict=True))
    assert points == [(0.905, 9.0), (1.005, 10.0), (1.105, 11.0), (1.5, 9.0), (1.5, 10.0), (1.5, 11.0)]


def test_sequence_progress_keeps_a_readable_subset(tmp_path: Path) -> None:
    write_large_history(tmp_path, connections=20, seconds=20, rate=2.0)
    run = load_run(tmp_path, lambda _: None)
    figure = figures.sequence_progress(run)
    shown = {ax.get_title(loc="left").split(":")[0] for ax in figure.axes}
    assert len(figure.axes) == figures.MAX_STREAMS
    affected = {row["pk"].removeprefix("CONN#") for row in run.analysis.phases}
    assert len(affected) == 5 and affected <= shown


def test_parse_ranges() -> None:
    assert figures.parse_ranges("3,7-9").tolist() == [3, 7, 8, 9]
    assert figures.parse_ranges("").tolist() == []
    assert figures.parse_ranges(None).tolist() == []


def test_png_is_a_png(run: RunData) -> None:
    assert figures.png(figures.recovery_cdf([run])).startswith(b"\x89PNG")


def test_sequence_progress_draws_each_batch_as_its_range(run: RunData) -> None:
    [ax] = [ax for ax in figures.sequence_progress(run).axes if ax.get_title(loc="left").startswith("a")]
    [bars] = [c for c in ax.collections if isinstance(c, LineCollection)]
    ranges = sorted((round(float(s[0][0]), 3), float(s[0][1]), float(s[1][1])) for s in bars.get_segments())
    assert ranges == [(7.3, 50.0, 60.0), (7.4, 61.0, 72.0)]  # the new owner's replay and catch-up batches
    dots = {float(y) for line in ax.lines if line.get_marker() == "." for y in np.asarray(line.get_ydata())}
    covered = dots | {float(seq) for _, low, high in ranges for seq in range(int(low), int(high) + 1)}
    assert covered == set(map(float, range(1, 73)))  # nothing persisted looks like a hole
