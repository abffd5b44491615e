"""The "Load (Locust)" section (harness.report.load): Locust's CSVs (headers as Locust 2.47 writes them) and
hand-made ``load.*`` events give tables with exactly their numbers; a CSV that is not Locust's is a
ReportError naming the file; a run without Locust data has no such section."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.report import ReportError, build_report
from harness.report.__main__ import main
from harness.report.load import find_csvs, sections
from harness.report.model import RunData, load_run
from harness.report.render import Image, Section, Table
from tests.harness.report.histories import T0, small_run

STATS_HEADER = ("Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,"
                "Min Response Time,Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,"
                "80%,90%,95%,98%,99%,99.9%,99.99%,100%")
STATS = [
    "POST,START,5,0,170,160.7,122.8,182.3,72.0,0.5,0.0,170,170,180,180,180,180,180,180,180,180,180",
    "STREAM,owned,5,1,370,374.2,319.9,60012.5,0.0,0.5,0.1,370,370,440,440,440,440,60000,60000,60000,60000,60000",
    "STREAM,recovered,2,1,84,74.9,56.7,120004.0,0.0,0.2,0.1,84,84,96,96,96,120000,120000,120000,120000,120000,"
    "120000",
    "POST,STOP,0,0,0,0.0,0,0,0,0.0,0.0,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A",
    ",Aggregated,12,2,170,200.1,56.7,120004.0,36.0,1.2,0.2,170,180,370,370,440,60000,120000,120000,120000,"
    "120000,120000",
]
HISTORY_HEADER = ("Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
                  "99.99%,100%,Total Request Count,Total Failure Count,Total Median Response Time,"
                  "Total Average Response Time,Total Min Response Time,Total Max Response Time,"
                  "Total Average Content Size")
FAILURES_HEADER = "Method,Name,Error,Occurrences,First Seen,Last Seen"
EXCEPTIONS_HEADER = "Count,Message,Traceback,Nodes"


def write_csvs(prefix: Path, stats: list[str] | None = None, history: bool = True) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}_stats.csv").write_text("\n".join([STATS_HEADER, *(STATS if stats is None else stats)]) + "\n")
    if history:
        start = int(T0 / 1000)
        rows = [f"{start + i},5,,Aggregated,{rate:.6f},0.000000,{'N/A' if i == 0 else 170},"
                + ",".join(["N/A" if i == 0 else "440"] * 10) + f",{i * 4},0,170,200.0,56,440,36.0"
                for i, rate in enumerate((0.0, 4.0, 4.0, 1.5))]
        Path(f"{prefix}_stats_history.csv").write_text("\n".join([HISTORY_HEADER, *rows]) + "\n")
    Path(f"{prefix}_failures.csv").write_text(
        f"{FAILURES_HEADER}\nSTREAM,owned,RuntimeError('not owned within 60.0 s'),1,1800000003.1,1800000003.1\n"
        "STREAM,recovered,RuntimeError('not owned again within 120.0 s'),1,1800000007.2,1800000007.2\n")
    Path(f"{prefix}_exceptions.csv").write_text(EXCEPTIONS_HEADER + "\n")


def write_load_events(run_dir: Path) -> None:
    """Five STARTs, four owned (100..400 ms), three sessions lost at 5 s (a storm), two recovered (50 and
    150 ms), one unrecovered."""
    t = T0 + 1000.0
    events: list[dict[str, Any]] = [{"type": "load.start", "t": t + i, "pk": f"CONN#load-{i}", "status": 200}
                                    for i in range(5)]
    events += [{"type": "load.owned", "t": t + 500 + i, "pk": f"CONN#load-{i}", "ms": 100.0 * (i + 1)}
               for i in range(4)]
    storm, closed = T0 + 5000.0, T0 + 5010.0
    events.append({"type": "load.storm", "t": storm, "kind": "disconnect", "fraction": 1.0, "status": 200,
                   "dropped": 3})
    events += [{"type": "load.lost", "t": closed + 20, "pk": f"CONN#load-{i}", "closed_ms": closed,
                "reason": "server_reset"} for i in range(3)]
    events += [{"type": "load.recovered", "t": closed + 300, "pk": f"CONN#load-{i}", "ms": ms,
                "closed_ms": closed, "opened_ms": closed + ms} for i, ms in ((0, 50.0), (1, 150.0))]
    events.append({"type": "load.unrecovered", "t": closed + 12_000, "pk": "CONN#load-2", "closed_ms": closed})
    lines = [json.dumps({"src": "locust", **event}) for event in events]
    (run_dir / "history" / "locust-4242.jsonl").write_text("\n".join(lines) + "\n")


def the_run(run_dir: Path) -> RunData:
    return load_run(run_dir, lambda _: None)


def table(found: list[Section], starts: str) -> pd.DataFrame:
    [block] = [b for s in found for b in s.blocks if isinstance(b, Table) and b.title.startswith(starts)]
    return block.frame


def rows_of(frame: pd.DataFrame, *keys: str) -> dict[tuple[str, ...], dict[str, Any]]:
    return {tuple(str(row[k]) for k in keys): row for row in frame.to_dict("records")}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    small_run(folder)
    return folder


def test_stats_table_has_locusts_numbers(run_dir: Path, tmp_path: Path) -> None:
    write_csvs(tmp_path / "locust")
    found = sections(the_run(run_dir), tmp_path / "locust")
    assert [s.title for s in found] == ["Load (Locust)"]
    stats = rows_of(table(found, "Requests (from locust_stats.csv"), "type", "name")
    owned = stats[("STREAM", "owned")]
    assert (owned["requests"], owned["failures"]) == (5, 1)
    assert (owned["median_ms"], owned["p95_ms"], owned["p99_ms"], owned["max_ms"], owned["rps"]) == (
        "370.0", "440.0", "60000.0", "60012.5", "0.50")
    assert stats[("", "Aggregated")]["requests"] == 12 and stats[("", "Aggregated")]["failures"] == 2
    assert stats[("POST", "STOP")]["p95_ms"] == ""       # Locust's N/A: no requests
    failures = rows_of(table(found, "Failures (from locust_failures.csv"), "Name")
    assert failures[("recovered",)]["Occurrences"] == "1"


def test_history_figure_says_which_file_it_came_from(run_dir: Path, tmp_path: Path) -> None:
    write_csvs(tmp_path / "locust")
    images = {b.name: b for s in sections(the_run(run_dir), tmp_path / "locust", "run1-") for b in s.blocks
              if isinstance(b, Image)}
    assert str(tmp_path / "locust_stats_history.csv") in images["run1-locust_history"].caption
    assert images["run1-locust_history"].png.startswith(b"\x89PNG")


def test_load_events_give_time_to_owned_and_recovered(run_dir: Path) -> None:
    write_load_events(run_dir)
    found = sections(the_run(run_dir))
    times = rows_of(table(found, "Time to owned and to recovered"), "from")
    owned, recovered = times[("load.owned",)], times[("load.recovered, load.unrecovered",)]
    assert (owned["streams"], owned["reached"], owned["never"]) == (5, 4, 1)
    assert (owned["p50_ms"], owned["p99_ms"], owned["max_ms"]) == ("250.0", "397.0", "400.0")
    assert (recovered["streams"], recovered["reached"], recovered["never"]) == (3, 2, 1)
    assert (recovered["p50_ms"], recovered["p99_ms"], recovered["max_ms"]) == ("100.0", "149.0", "150.0")
    storms = table(found, "Storms").to_dict("records")
    assert storms == [{"at_s": "5.00", "kind": "disconnect", "detail": "fraction 1, dropped 3"}]
    counts = dict(table(found, "Load events").itertuples(index=False, name=None))
    assert (counts["load.lost"], counts["load.unrecovered"], counts["load.storm"]) == (3, 1, 1)
    images = [b for s in found for b in s.blocks if isinstance(b, Image)]
    assert [i.name for i in images] == ["locust_times"] and "load.* events" in images[0].caption


def test_csvs_in_the_run_folder_are_found_by_their_header(run_dir: Path) -> None:
    (run_dir / "other_stats.csv").write_text("Type,Name,Count\nx,y,1\n")  # not Locust's: left alone
    assert find_csvs(run_dir, None) is None
    assert sections(the_run(run_dir)) == []
    write_csvs(run_dir / "storm")
    found = find_csvs(run_dir, None)
    assert found is not None and found.stats == run_dir / "storm_stats.csv"
    assert found.history == run_dir / "storm_stats_history.csv"
    assert rows_of(table(sections(the_run(run_dir)), "Requests"), "name")[("owned",)]["requests"] == 5


def test_the_report_shows_the_section_from_the_command_line(run_dir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    write_csvs(tmp_path / "csv" / "locust")
    write_load_events(run_dir)
    assert main([str(run_dir), "--quiet", "--locust-csv", str(tmp_path / "csv" / "locust")]) == 0
    html = (run_dir / "report.html").read_text()
    assert '<h2 id="load">Load (Locust)</h2>' in html
    assert "<td>STREAM</td><td>owned</td><td>5</td><td>1</td>" in html
    assert (run_dir / "figures" / "locust_history.png").is_file()
    assert "## Load (Locust)" in (run_dir / "report.md").read_text()


def test_a_run_without_locust_data_has_no_load_section(run_dir: Path) -> None:
    assert sections(the_run(run_dir)) == []
    build_report([run_dir], None, lambda _: None)
    assert "Load (Locust)" not in (run_dir / "report.html").read_text()
    assert not any(p.name.startswith("locust") for p in (run_dir / "figures").iterdir())


BAD = [
    (["Type,Name,Request Count,Failure Count,Median Response Time", "POST,START,1,0,12"],
     "not a Locust CSV: missing column(s) Max Response Time, Requests/s, 95%, 99% (header: Type, Name, "),
    ([STATS_HEADER, "STREAM,owned,many,0,1,1,1,1,0,0,0,1,1,1,1,1,1,1,1,1,1,1"],
     "line 2: column 'Request Count' holds 'many', not a number"),
    ([STATS_HEADER, STATS[0] + ",extra,fields"], "not a readable CSV: line 2 has more fields than the header"),
    ([STATS_HEADER, STATS[0], STATS[1] + ",extra"], "not a readable CSV: Error tokenizing data. C error: "
                                                    "Expected 22 fields in line 3, saw 23"),
]


@pytest.mark.parametrize(("lines", "message"), BAD, ids=["missing-column", "not-a-number", "long-first-line", "ragged"])
def test_a_malformed_csv_is_a_report_error_naming_the_file(run_dir: Path, tmp_path: Path, lines: list[str],
                                                          message: str) -> None:
    write_csvs(tmp_path / "locust", history=False)
    (tmp_path / "locust_stats.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ReportError) as error:
        build_report([run_dir], None, lambda _: None, locust_csv=tmp_path / "locust")
    assert str(error.value).startswith(f"{tmp_path / 'locust_stats.csv'}: ")
    assert message in str(error.value)


def test_a_malformed_history_csv_and_missing_files(run_dir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write_csvs(tmp_path / "locust")
    (tmp_path / "locust_stats_history.csv").write_text("")
    with pytest.raises(ReportError, match="^" + re.escape(f"{tmp_path / 'locust_stats_history.csv'}: empty file")):
        sections(the_run(run_dir), tmp_path / "locust")
    assert main([str(run_dir), "--quiet", "--locust-csv", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"wsfleet report: error: --locust-csv {tmp_path / 'nothing'}: there is no "
                           f"{tmp_path / 'nothing_stats.csv'} (Locust's --csv {tmp_path / 'nothing'} writes it)")
    with pytest.raises(ReportError, match="--locust-csv names the CSVs of one run"):
        build_report([run_dir, run_dir], tmp_path / "out", lambda _: None, locust_csv=tmp_path / "locust")


def test_several_runs_show_each_runs_own_locust_csvs(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    small_run(first, seed=1)
    small_run(second, seed=2)
    write_csvs(second / "locust")
    build_report([first, second], tmp_path / "out", lambda _: None)
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count("Load (Locust)") == 1 and "second: Load (Locust)" in html
    assert (tmp_path / "out" / "figures" / "run2-locust_history.png").is_file()
