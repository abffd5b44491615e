"""report.html as a browser shows it: rendered by headless Chromium at a 1,300 px wide window, nothing runs
off the page sideways (no element, no table needing its scroll container) and every figure loads.

A probe script is added to a copy of the report (the report itself has no script); it writes what it
measured into the DOM, which ``--dump-dom`` prints.  Skipped, with the reason, where Chromium is absent
(``make test`` installs the Debian package ``chromium`` when it runs as root with apt-get).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.report import build_report
from tests.harness.report.histories import add_zombie_writes, small_run

CHROMIUM = Path("/usr/bin/chromium")
PAGE_WIDTH = 1300

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} not found: install the Debian package chromium (make test does, as root with apt-get)")

PROBE = """<script>
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const overflowing = [];
  for (const element of document.body.querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    const clipped = !element.closest(".table-wrap") && element.scrollWidth > element.clientWidth + 1
      && getComputedStyle(element).display === "block";
    if (box.right > width + 0.5 || clipped) {
      overflowing.push(`${element.tagName.toLowerCase()} ${(element.textContent || "").slice(0, 40)}`);
    }
  }
  const scrolled = [...document.querySelectorAll(".table-wrap")]
    .filter((wrap) => wrap.scrollWidth > wrap.clientWidth)
    .map((wrap) => (wrap.previousElementSibling || wrap).textContent.slice(0, 60));
  const images = [...document.images].map((image) => ({
    alt: image.alt.slice(0, 40), loaded: image.complete && image.naturalWidth > 0}));
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({width, pageWidth: document.documentElement.scrollWidth, overflowing,
                                      scrolled, images});
  document.body.appendChild(probe);
});
</script>"""


def render(report: Path) -> dict[str, Any]:
    """What the probe measured in ``report`` at a PAGE_WIDTH wide window."""
    probed = report.with_name("probed.html")
    probed.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    result = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={PAGE_WIDTH},1000", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=180, check=False)
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found is not None, f"Chromium printed no probe result (exit {result.returncode}): {result.stderr[-2000:]}"
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured


def lose_many_ranges(run_dir: Path) -> None:
    """Make CONN#c's lost ranges long: drop every other persisted seq from 3 to 23."""
    path = run_dir / "history" / "worker-3.jsonl"
    kept = [line for line in path.read_text().splitlines()
            if not (json.loads(line).get("pk") == "CONN#c" and json.loads(line).get("seq_from") in range(3, 24, 2))]
    path.write_text("\n".join(kept) + "\n")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("browser")
    runs = []
    for profile in ("blog", "hardened"):
        run_dir = root / f"crash-{profile}-{'x' * 150}"  # a long path without a break opportunity
        small_run(run_dir, profile=profile, fault_model="outside: clock skew 500 ms > tolerance 10 ms")
        lose_many_ranges(run_dir)
        add_zombie_writes(run_dir, count=5)  # a table of long evidence sentences
        runs.append(run_dir)
    single = build_report([runs[1]], None, lambda _: None)
    several = build_report(runs, root / "comparison", lambda _: None)
    return {"single": single, "several": several}


@pytest.mark.parametrize("which", ["single", "several"])
def test_the_report_fits_a_1300_px_page_and_every_image_loads(reports: dict[str, Path], which: str) -> None:
    measured = render(reports[which])
    assert measured["width"] == PAGE_WIDTH
    assert measured["overflowing"] == []
    assert measured["scrolled"] == []
    assert measured["pageWidth"] <= PAGE_WIDTH
    assert measured["images"], "the report has figures"
    assert [image for image in measured["images"] if not image["loaded"]] == []


def test_the_probe_sees_an_overflow_and_a_broken_image(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text('<!DOCTYPE html><html><body><div style="width:2000px">wide</div>'
                    '<img alt="broken" src="data:image/png;base64,AAAA"></body></html>')
    measured = render(page)
    assert measured["overflowing"] == ["div wide"]
    assert measured["images"] == [{"alt": "broken", "loaded": False}]
