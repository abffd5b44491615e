"""build_report on synthetic histories with known numbers: the CSVs, the Markdown and the HTML carry exactly
those numbers; the HTML is self-contained; several runs are compared and aggregated."""

from __future__ import annotations

import base64
import csv
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.report import ReportError, build_report
from tests.harness.report.histories import SmallRun, add_storm, add_zombie_writes, small_run, write_history

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Report:
    def __init__(self, folder: Path, spec: SmallRun, messages: list[str]) -> None:
        self.folder = folder
        self.spec = spec
        self.messages = messages
        self.html = (folder / "report.html").read_text()
        self.markdown = (folder / "report.md").read_text()

    def csv(self, name: str) -> list[dict[str, str]]:
        with (self.folder / name).open(newline="") as handle:
            return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    run_dir = tmp_path_factory.mktemp("run")
    spec = small_run(run_dir)
    messages: list[str] = []
    path = build_report([run_dir], None, messages.append)
    assert path == run_dir / "report.html"
    return Report(run_dir, spec, messages)


class Links(HTMLParser):
    """Every src / href value, every <script> tag's attributes, every <img> src."""

    def __init__(self) -> None:
        super().__init__()
        self.references: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.images: list[str] = []
        self.tables: list[list[str]] = []
        self._in_header = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.references += [value or "" for name, value in attrs if name in ("src", "href")]
        if tag == "script":
            self.scripts.append(found)
        if tag == "img":
            self.images.append(found.get("src") or "")
        if tag == "thead":
            self.tables.append([])
        if tag == "th" and self.tables:
            self.tables[-1].append("")  # one name per header cell, however many text pieces (<wbr>)
        self._in_header = tag == "th" or (self._in_header and tag != "td")

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self._in_header = False

    def handle_data(self, data: str) -> None:
        if self._in_header and self.tables:
            self.tables[-1][-1] += data


def test_phases_csv_has_the_known_recovery(report: Report) -> None:
    rows = report.csv("phases.csv")
    assert len(rows) == 1
    row = rows[0]
    assert (row["pk"], row["old_worker"], row["new_worker"]) == ("CONN#a", "worker-1", "worker-2")
    assert float(row["recovery_ms"]) == report.spec.recovery_ms
    assert float(row["claim_ms"]) == report.spec.claim_ms
    assert float(row["detect_ms"]) == 2000.0  # worker-1's last renewal (4.9 s) + 2 s lease + 0.1 s tolerance
    assert row["within_bound"] == "False"
    assert list(rows[0])[:2] == ["run", "fault"]


def test_claims_csv_flags_the_known_overlap(report: Report) -> None:
    rows = report.csv("claims.csv")
    sessions = [r for r in rows if r["source"] == "upstream" and r["overlap"] == "True"]
    assert {(r["pk"], r["worker"]) for r in sessions} == {("CONN#b", "worker-2"), ("CONN#b", "worker-3")}
    second = [float(r["duration_ms"]) for r in sessions if r["worker"] == "worker-3"]
    assert second == [report.spec.overlap_ms]
    assert {r["source"] for r in rows} == {"upstream", "lease", "write"}
    assert all(r["overlap"] == "False" for r in rows if r["pk"] != "CONN#b")


def test_sequences_csv_has_the_known_lost_range(report: Report) -> None:
    rows = {r["pk"]: r for r in report.csv("sequences.csv")}
    assert set(rows) == set(report.spec.pks)
    assert rows["CONN#c"]["lost"] == str(report.spec.lost)
    assert rows["CONN#c"]["lost_ranges"] == report.spec.lost_range
    assert rows["CONN#c"]["emitted"] == "60" and rows["CONN#c"]["persisted"] == "57"
    assert all(rows[pk]["lost"] == "0" for pk in ("CONN#a", "CONN#b"))


def test_zombie_writes_csv_and_table_are_empty_without_any(report: Report) -> None:
    assert report.csv("zombie_writes.csv") == []
    assert "### Zombie writes (I6)" in report.markdown and "_no zombie writes_" in report.markdown
    assert "### Outcomes per event type" in report.markdown


def test_zombie_writes_csv_and_table_list_each_finding(tmp_path: Path) -> None:
    small_run(tmp_path)
    seqs = add_zombie_writes(tmp_path, count=2)
    build_report([tmp_path], None, lambda _: None)
    rows = list(csv.DictReader((tmp_path / "zombie_writes.csv").open()))
    assert [(r["run"], r["pk"], r["seq_from"], r["writer"], r["rule"]) for r in rows] == [
        (tmp_path.name, "CONN#a", str(seq), "worker-1", "overwrite") for seq in seqs]
    markdown = (tmp_path / "report.md").read_text()
    assert "- **Zombie writes**: 2 (overwrite 2)" in markdown
    assert f"| CONN#a | message | {seqs[0]} | worker-1 | 1 | overwrite | yes |" in markdown


@pytest.mark.parametrize("text", [
    "crash / hardened",
    "p50 2.40 s · p95 2.40 s · max 2.40 s against bound 2.2 s at time scale 0.1: 1 of 1 over the bound",
    "1 of 1 over the bound",
    "lease + reconcile = 8 s at time scale 0.1 (80 s at scale 1)",
    "INVALID (duplicate_claims: INVALID, sequences: INVALID, bounds: INVALID)",
    "1 (700.0 ms overlap",
    "3 (duplicate deliveries 0",
])
def test_headline_in_markdown_and_html(report: Report, text: str) -> None:
    assert text in report.markdown
    assert text.replace("&", "&amp;") in report.html


def test_tables_carry_the_numbers(report: Report) -> None:
    phase_row = next(line for line in report.markdown.splitlines() if line.startswith("| 0 kill | CONN#a"))
    cells = [cell.strip() for cell in phase_row.strip("|").split("|")]
    assert cells[4:9] == ["2000.0", "2100.0", "2200.0", "2300.0", "2400.0"]   # detect .. caught_up, ms
    assert "| CONN#b | worker-2 + worker-3 | 3.000 | 3.700 | 700.0 |" in report.markdown
    lines = report.markdown.splitlines()
    lost_row = next(line for line in lines if line.startswith("| CONN#c | 60 | 57 | 3 |"))
    assert "| 25-27 |" in lost_row
    for cell in ("<td>2400.0</td>", "<td>700.0</td>", "<td>25-27</td>", "<td>3.700</td>"):
        assert cell in report.html


def test_html_and_markdown_have_the_same_tables(report: Report) -> None:
    links = Links()
    links.feed(report.html)
    assert len(links.tables) >= 5
    for header in links.tables:
        assert "| " + " | ".join(header) + " |" in report.markdown


def test_html_is_self_contained(report: Report) -> None:
    links = Links()
    links.feed(report.html)
    assert not [ref for ref in links.references if re.match(r"\s*(https?:)?//", ref, re.IGNORECASE)]
    assert not [s for s in links.scripts if "src" in s]
    assert "<link" not in report.html.lower() and "@import" not in report.html and "url(" not in report.html
    assert len(links.images) == 4
    for src in links.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_figures_are_written_for_markdown(report: Report) -> None:
    names = sorted(path.name for path in (report.folder / "figures").iterdir())
    assert names == ["phases.png", "recovery_cdf.png", "sequences.png", "timeline.png"]
    for name in names:
        assert f"(figures/{name})" in report.markdown
        assert (report.folder / "figures" / name).read_bytes().startswith(PNG_SIGNATURE)


def test_progress_is_reported(report: Report) -> None:
    text = "\n".join(report.messages)
    assert "reading the history" in text and "checked in" in text and "wrote" in text


def test_several_runs_compare_profiles_and_aggregate_seeds(tmp_path: Path) -> None:
    runs = []
    for profile, seed, recovery in (("blog", 1, 9600.0), ("hardened", 1, 2400.0), ("hardened", 2, 2500.0)):
        run_dir = tmp_path / f"crash-{profile}-{seed}"
        small_run(run_dir, profile=profile, seed=seed, recovery_ms=recovery)
        runs.append(run_dir)
    out = tmp_path / "compare"
    path = build_report(runs, out, lambda _: None)
    markdown = (out / "report.md").read_text()
    # pooled p50: blog 9600, hardened 2450 (two runs) -> ratio 3.9
    assert "| crash | p50 | 9600.0 | 2450.0 | 3.9× |" in markdown
    assert "| crash | max | 9600.0 | 2500.0 | 3.8× |" in markdown
    assert "| crash | hardened | 2 | 1,2 | 0/2/0 | 2 | 2450.0 |" in markdown
    assert "lost sequences 6, zombie writes 0" in markdown and "OUTSIDE" not in markdown
    phases = list(csv.DictReader((out / "phases.csv").open()))
    assert sorted(r["run"] for r in phases) == sorted(p.name for p in runs)
    assert "<td>3.9×</td>" in path.read_text()


def test_several_runs_say_which_were_outside_the_fault_model(tmp_path: Path) -> None:
    runs = [tmp_path / "within", tmp_path / "outside"]
    small_run(runs[0], fault_model="within")
    small_run(runs[1], fault_model="outside: clock skew 500 ms > tolerance 10 ms")
    build_report(runs, tmp_path / "compare", lambda _: None)
    markdown = (tmp_path / "compare" / "report.md").read_text()
    assert "(0 valid, 2 invalid)" in markdown and "; 1 of them OUTSIDE the fault model" in markdown
    assert "| fault_model |" in markdown and "| within |" in markdown and "| OUTSIDE |" in markdown


def test_storm_runs_show_their_handshakes_against_the_quota_policy_by_policy(tmp_path: Path) -> None:
    runs = []
    for policy in ("full", "none"):
        run_dir = tmp_path / f"storm-{policy}"
        small_run(run_dir, scenario="reconnect_storm")
        add_storm(run_dir, policy)
        runs.append(run_dir)
    out = tmp_path / "compare"
    build_report(runs, out, lambda _: None)
    markdown = (out / "report.md").read_text()
    assert "(figures/handshakes.png)" in markdown and (out / "figures" / "handshakes.png").exists()
    assert "| storm-full | hardened/full | 10.0 | 18.0 | 37 | 30 | 2 |" in markdown
    assert "| reconnect_storm | hardened/none |" in markdown  # the policies compared side by side
    single = tmp_path / "plain"
    small_run(single)
    build_report([single], None, lambda _: None)
    assert "handshakes.png" not in (single / "report.md").read_text()  # no quota, no figure


def test_several_runs_need_an_output_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    small_run(first)
    small_run(second)
    with pytest.raises(ReportError, match="--out"):
        build_report([first, second], None, lambda _: None)


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "no such folder"),
    (lambda d: d.mkdir(), "no history/ folder"),
    (lambda d: (d / "history").mkdir(parents=True), "holds no"),
    (lambda d: ((d / "history").mkdir(parents=True), (d / "history" / "w.jsonl").write_text("")),
     "no events"),
])
def test_a_folder_that_is_not_a_run(tmp_path: Path, make: Callable[[Path], object], message: str) -> None:
    folder = tmp_path / "run"
    make(folder)
    with pytest.raises(ReportError, match=message):
        build_report([folder], None, lambda _: None)


def test_a_history_with_a_broken_line(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    write_history(folder, [{"t": 1.0, "src": "harness", "type": "run.start"}])
    with (folder / "history" / "harness.jsonl").open("a") as handle:
        handle.write("not json\n{\"t\": 2.0, \"src\": \"harness\", \"type\": \"run.stop\"}\n")
    with pytest.raises(ReportError, match="line 2"):
        build_report([folder], None, lambda _: None)
