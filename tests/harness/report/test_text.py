"""The report's words for numbers and verdicts: a bound as a sentence with its time scale, seeds, seconds and
verdict words."""

from __future__ import annotations

import pytest

from harness.report.text import bound_text, seconds_text, seed_text, verdict_word


@pytest.mark.parametrize("ms, scale, scale_one, text", [
    (2700.0, 0.1, 22500.0, "2.7 s at time scale 0.1 (22.5 s at scale 1)"),
    (2700.0, 0.1, None, "2.7 s at time scale 0.1"),
    (80000.0, 1.0, 80000.0, "80 s at time scale 1"),
    (1000.0, None, None, "1 s"),
])
def test_bound_text(ms: float, scale: float | None, scale_one: float | None, text: str) -> None:
    assert bound_text(ms, scale, scale_one) == text


def test_small_words() -> None:
    words = [verdict_word(v) for v in (True, False, "unknown", None)]
    assert words == ["valid", "INVALID", "unknown", "unknown"]
    assert [seed_text(s) for s in (1.0, 7, "abc", None)] == ["1", "7", "abc", "?"]
    assert [seconds_text(v) for v in (2400.0, None, float("nan"), 250_000.0)] == ["2.40 s", "–", "–", "250 s"]
