"""The report's "Load (Locust)" section: what a Locust run of ``harness/load/locustfile.py`` against the fleet
measured, from two sources.

- Locust's CSVs (``--csv PREFIX``): ``PREFIX_stats.csv`` (the per-request table), ``PREFIX_stats_history.csv``
  (requests/s, failures/s and p95 over time, ``Aggregated`` rows) and ``PREFIX_failures.csv``.  They are the
  ones named by ``--locust-csv PREFIX`` (``find_csvs``), else any ``*_stats.csv`` in the run folder whose
  header is Locust's (a file of that name with another header is not Locust's and is left alone).  A CSV
  that is not what Locust writes is a ``ReportError`` naming the file and what is wrong.
- The history's ``load.*`` events (the locustfile writes them into ``history/locust-<pid>.jsonl``, src
  ``locust``), read through the run's already-loaded events: the CDF of time-to-owned and time-to-recovered
  with p50/p99, the storms (``load.storm``) marked, and the streams lost and never recovered.

``sections(run, csv_prefix, prefix)`` gives the section, or nothing when the run has neither source, so a run
without Locust data renders as before.  With several runs each detailed run gets its own section from the
CSVs in its folder (``--locust-csv`` names the CSVs of one run only)."""

from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from harness.checkers.events import select
from harness.report import figures
from harness.report.model import ReportError, RunData
from harness.report.render import Block, Image, Paragraph, Section, Table
from harness.report.text import ms_text

STATS_COLUMNS = ("Type", "Name", "Request Count", "Failure Count", "Median Response Time",
                 "Max Response Time", "Requests/s", "95%", "99%")
HISTORY_COLUMNS = ("Timestamp", "Type", "Name", "Requests/s", "Failures/s", "95%")
FAILURES_COLUMNS = ("Method", "Name", "Error", "Occurrences")
MISSING = ("", "N/A")  # Locust writes N/A for a percentile of no requests
LOAD_TYPES = ("load.start", "load.owned", "load.lost", "load.recovered", "load.unrecovered", "load.storm")
STORM_COLOUR = figures.FAULT_COLOUR


@dataclass(frozen=True)
class LocustCsv:
    """One Locust run's CSV files (``history`` and ``failures`` when Locust wrote them)."""

    stats: Path
    history: Path | None
    failures: Path | None
    others: tuple[Path, ...] = ()   # further Locust ``*_stats.csv`` in the run folder, not shown


def is_locust_stats(path: Path) -> bool:
    """Whether the file's header is the one Locust writes into ``*_stats.csv``."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return header[:4] == list(STATS_COLUMNS[:4]) and set(STATS_COLUMNS) <= set(header)


def find_csvs(run_dir: Path, csv_prefix: Path | None) -> LocustCsv | None:
    """The Locust CSVs of the run: those of ``csv_prefix`` (as given, else inside the run folder), else the
    newest Locust ``*_stats.csv`` in the run folder; None when there are none."""
    if csv_prefix is not None:
        candidates = [Path(f"{csv_prefix}_stats.csv"), run_dir / f"{csv_prefix}_stats.csv"]
        stats = next((path for path in candidates if path.is_file()), None)
        if stats is None:
            raise ReportError(f"--locust-csv {csv_prefix}: there is no {candidates[0]} (Locust's --csv "
                              f"{csv_prefix} writes it)")
        found = [stats]
    else:
        found = sorted((path for path in run_dir.glob("*_stats.csv") if is_locust_stats(path)),
                       key=lambda path: (path.stat().st_mtime, path.name), reverse=True)
        if not found:
            return None
    stem = str(found[0])[:-len("_stats.csv")]
    history, failures = Path(f"{stem}_stats_history.csv"), Path(f"{stem}_failures.csv")
    return LocustCsv(found[0], history if history.is_file() else None,
                     failures if failures.is_file() else None, tuple(found[1:]))


def read_csv(path: Path, required: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    """A Locust CSV with at least ``required`` columns, ``numeric`` ones as float64 (``N/A`` or empty:
    NaN); any other shape is a ``ReportError`` naming the file."""
    try:
        with warnings.catch_warnings():  # a first line longer than the header: pandas warns, and drops data
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8", index_col=False)
    except pd.errors.ParserWarning:
        raise ReportError(f"{path}: not a readable CSV: line 2 has more fields than the header") from None
    except pd.errors.EmptyDataError:
        raise ReportError(f"{path}: empty file, not a Locust CSV (no header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not a readable CSV: {str(exc).strip().splitlines()[-1]}") from None
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from None
    missing = [name for name in required if name not in frame.columns]
    if missing:
        raise ReportError(f"{path}: not a Locust CSV: missing column(s) {', '.join(missing)} "
                          f"(header: {', '.join(map(str, frame.columns))})")
    for name in numeric:
        text = frame[name].str.strip()
        values = pd.to_numeric(text.where(~text.isin(MISSING)), errors="coerce")
        bad = values.isna() & ~text.isin(MISSING)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ReportError(f"{path}: line {row + 2}: column {name!r} holds {text.iloc[row]!r}, not a number")
        frame[name] = values.astype("float64")
    return frame


def stats_table(path: Path) -> pd.DataFrame:
    """Per Type/Name: requests, failures, median, p95, p99, max (ms) and requests/s, from ``_stats.csv``."""
    numeric = STATS_COLUMNS[2:]
    frame = read_csv(path, STATS_COLUMNS, numeric)
    for name in ("Request Count", "Failure Count"):
        if frame[name].isna().any():
            raise ReportError(f"{path}: column {name!r} has an empty value")
    return pd.DataFrame({
        "type": frame["Type"], "name": frame["Name"],
        "requests": frame["Request Count"].astype("int64"), "failures": frame["Failure Count"].astype("int64"),
        "median_ms": frame["Median Response Time"].map(ms_text), "p95_ms": frame["95%"].map(ms_text),
        "p99_ms": frame["99%"].map(ms_text), "max_ms": frame["Max Response Time"].map(ms_text),
        "rps": frame["Requests/s"].map(lambda v: "" if v != v else f"{v:.2f}"),
    })


def load_events(run: RunData) -> dict[str, pd.DataFrame]:
    """The run's ``load.*`` events by type (t, pk, ms, closed_ms and the storm's fields; numbers as
    float64)."""
    columns = ["t", "pk", "ms", "closed_ms", "kind", "fraction", "dropped", "workers"]
    frame = select(run.events, list(LOAD_TYPES), ["type", *columns], raw=("workers",))
    for name in ("ms", "closed_ms"):
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    return {kind: frame.loc[frame["type"] == kind].reset_index(drop=True) for kind in LOAD_TYPES}


def _percentiles(values: np.ndarray, reached_of: int, metric: str, source: str) -> dict[str, object]:
    found = values.size > 0
    return {"metric": metric, "streams": reached_of, "reached": int(values.size),
            "never": max(reached_of - int(values.size), 0),
            "p50_ms": ms_text(float(np.percentile(values, 50))) if found else "",
            "p99_ms": ms_text(float(np.percentile(values, 99))) if found else "",
            "max_ms": ms_text(float(values.max())) if found else "", "from": source}


def latency_rows(events: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, dict[str, tuple[np.ndarray, int]]]:
    """The p50/p99 table of time-to-owned and time-to-recovered, and per metric (sorted values, total)."""
    owned = np.sort(events["load.owned"]["ms"].dropna().to_numpy(dtype="float64"))
    recovered = np.sort(events["load.recovered"]["ms"].dropna().to_numpy(dtype="float64"))
    series = {"owned": (owned, max(len(events["load.start"]), owned.size)),
              "recovered": (recovered, recovered.size + len(events["load.unrecovered"]))}
    rows = [_percentiles(series["owned"][0], series["owned"][1], "time to owned (START to first session)",
                         "load.owned"),
            _percentiles(series["recovered"][0], series["recovered"][1],
                         "time to recovered (close to next session)", "load.recovered, load.unrecovered")]
    return pd.DataFrame(rows), series


def storms_table(run: RunData, storms: pd.DataFrame) -> pd.DataFrame:
    def detail(row: pd.Series) -> str:
        if row["kind"] == "kill":
            return "workers " + ", ".join(map(str, row["workers"] if isinstance(row["workers"], list) else []))
        return f"fraction {row['fraction']}, dropped {row['dropped']}"

    return pd.DataFrame({"at_s": [f"{float(run.seconds(t)):.2f}" for t in storms["t"]],
                         "kind": storms["kind"].tolist(),
                         "detail": [detail(row) for _, row in storms.iterrows()]},
                        columns=["at_s", "kind", "detail"])


def _mark_storms(ax: Axes, at: list[float], label: bool) -> None:
    for number, x in enumerate(at):
        ax.axvline(x, color=STORM_COLOUR, linestyle="--", linewidth=1.6,
                   label="storm (load.storm)" if label and number == 0 else None)


def events_figure(run: RunData, events: dict[str, pd.DataFrame],
                  series: dict[str, tuple[np.ndarray, int]]) -> Figure:
    """Left: the CDF of time-to-owned and time-to-recovered (a curve short of 1: streams that never got
    there).  Right: each of those times against when it began, the storms marked."""
    figure = Figure(figsize=(figures.WIDTH_IN, 4.2), layout="constrained")
    cdf, over_time = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    colours = {"owned": "#1f77b4", "recovered": "#2ca02c"}
    for metric, (values, total) in series.items():
        if total:
            cdf.step(np.r_[0.0, values], np.r_[0.0, np.arange(1, values.size + 1) / total], where="post",
                     color=colours[metric], linewidth=2,
                     label=f"time to {metric} (n={total}, {total - values.size} never)")
    cdf.set(ylim=(0, 1.02), xlabel="ms", ylabel="fraction of streams")
    cdf.set_xlim(left=0)
    cdf.set_title("Time to owned / recovered: CDF", loc="left")
    owned, recovered = events["load.owned"], events["load.recovered"]
    # the START, about (load.owned follows its session's opening by one look); the session's close
    began = {"owned": run.seconds(owned["t"] - owned["ms"]), "recovered": run.seconds(recovered["closed_ms"])}
    for metric, frame in (("owned", owned), ("recovered", recovered)):
        over_time.scatter(began[metric], frame["ms"], s=12, color=colours[metric], label=f"time to {metric}")
    _mark_storms(over_time, [float(run.seconds(t)) for t in events["load.storm"]["t"]], label=True)
    over_time.set(xlabel="seconds since run start (START, or the session's close)", ylabel="ms")
    over_time.set_title("Each stream's time against when it began", loc="left")
    for ax in (cdf, over_time):
        ax.grid(color="#dddddd", linewidth=0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right" if ax is cdf else "upper right")
    return figure


def history_figure(run: RunData, path: Path, storms_at: list[float]) -> Figure | None:
    """Requests/s and failures/s (top) and p95 (bottom) over time from ``_stats_history.csv``'s Aggregated
    rows; None when it has none."""
    frame = read_csv(path, HISTORY_COLUMNS, ("Timestamp", "Requests/s", "Failures/s", "95%"))
    frame = frame.loc[frame["Name"] == "Aggregated"].dropna(subset=["Timestamp"])
    if frame.empty:
        return None
    x = run.seconds(frame["Timestamp"].to_numpy() * 1000.0)
    figure = Figure(figsize=(figures.WIDTH_IN, 5.0), layout="constrained")
    rate = figure.add_subplot(2, 1, 1)
    p95 = figure.add_subplot(2, 1, 2, sharex=rate)
    rate.plot(x, frame["Requests/s"], color="#1f77b4", linewidth=1.6, label="requests/s")
    rate.plot(x, frame["Failures/s"], color="#d62728", linewidth=1.6, label="failures/s")
    p95.plot(x, frame["95%"], color="#9467bd", linewidth=1.6, label="p95 (ms)")
    rate.set(ylabel="per second")
    rate.set_title(f"Locust over time (Aggregated): {path.name}", loc="left")
    p95.set(ylabel="p95 response time (ms)", xlabel="seconds since run start")
    for ax in (rate, p95):
        _mark_storms(ax, storms_at, label=ax is rate)
        ax.grid(color="#dddddd", linewidth=0.5)
        ax.legend(fontsize=8, loc="upper left")
    return figure


def sections(run: RunData, csv_prefix: Path | None = None, prefix: str = "") -> list[Section]:
    """The "Load (Locust)" section of a run (image names and anchor start with ``prefix``), or none."""
    found = find_csvs(run.run_dir, csv_prefix)
    events = load_events(run)
    if found is None and not any(len(frame) for frame in events.values()):
        return []
    blocks: list[Block] = []
    storms_at = [float(run.seconds(t)) for t in events["load.storm"]["t"]]
    if found is not None:
        also = f"; also found, not shown: {', '.join(map(str, found.others))} (choose with --locust-csv)" \
            if found.others else ""
        blocks += [Paragraph(f"Locust's CSVs: {found.stats}{also}."),
                   Table(f"Requests (from {found.stats.name}; times in ms)", stats_table(found.stats),
                         empty="Locust recorded no requests")]
        if found.history is not None:
            figure = history_figure(run, found.history, storms_at)
            if figure is not None:
                blocks.append(Image(f"{prefix}locust_history", f"From {found.history}: requests/s and "
                                    "failures/s (top) and p95 (bottom) of all requests, the storms (load.storm) "
                                    "dashed.", figures.png(figure)))
        if found.failures is not None:
            failures = read_csv(found.failures, FAILURES_COLUMNS, ("Occurrences",))
            failures["Occurrences"] = failures["Occurrences"].map(lambda v: "" if v != v else str(int(v)))
            blocks.append(Table(f"Failures (from {found.failures.name})",
                                failures[list(FAILURES_COLUMNS)], empty="no failures"))
    loaded = {kind: len(frame) for kind, frame in events.items()}
    if any(loaded.values()):
        table, series = latency_rows(events)
        source = "the history's load.* events (history/locust-<pid>.jsonl, src locust)"
        blocks += [
            Image(f"{prefix}locust_times", f"From {source}: the CDF of time to owned and time to recovered, "
                  "and each against when it began, the storms dashed.",
                  figures.png(events_figure(run, events, series))),
            Table(f"Time to owned and to recovered (ms, from {source})", table),
            Table("Storms (load.storm)", storms_table(run, events["load.storm"]), empty="no storm"),
            Table("Load events (counts)", pd.DataFrame([{"event": kind, "count": count}
                                                        for kind, count in loaded.items()]),
                  "load.lost: a stream's session closed; load.unrecovered: not owned again within "
                  "--recover-timeout-s."),
        ]
    else:
        blocks.append(Paragraph("The history holds no load.* events (the locustfile writes them into "
                                "history/locust-<pid>.jsonl of the run folder it found)."))
    return [Section("Load (Locust)", blocks, f"{prefix}load")]
