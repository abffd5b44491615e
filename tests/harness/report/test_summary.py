"""The report's wording: bounds stated with the time scale they imply, seeds, verdict words."""

from __future__ import annotations

import pytest

from harness.report.summary import scaled_text, seconds_text, seed_text, verdict_word


@pytest.mark.parametrize("ms, scale, text", [
    (2200.0, 0.1, "2.2 s at time scale 0.1 = 22 s at scale 1"),
    (8000.0, 0.1, "8 s at time scale 0.1 = 80 s at scale 1"),
    (80000.0, 1.0, "80 s at time scale 1"),
    (1000.0, None, "1 s"),
    (550.0, 0.05, "0.55 s at time scale 0.05 = 11 s at scale 1"),
])
def test_scaled_text(ms: float, scale: float | None, text: str) -> None:
    assert scaled_text(ms, scale) == text


def test_small_words() -> None:
    words = [verdict_word(v) for v in (True, False, "unknown", None)]
    assert words == ["valid", "INVALID", "unknown", "unknown"]
    assert [seed_text(s) for s in (1.0, 7, "abc", None)] == ["1", "7", "abc", "?"]
    assert [seconds_text(v) for v in (2400.0, None, float("nan"), 250_000.0)] == ["2.40 s", "–", "–", "250 s"]
