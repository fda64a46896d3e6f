"""``h200_timing.summarize``: the figures timing.json holds, computed from gradings and independent runs."""

from __future__ import annotations

import pytest

from benchmarks.h200_timing import summarize

INDS = [{"kernel_ms": 0.100, "eager_ms": 1.0, "speedup": 10.0}, {"kernel_ms": 0.120, "eager_ms": 1.0, "speedup": 8.0},
        {"kernel_ms": 0.110, "eager_ms": 1.0, "speedup": 9.0}]


def grades(*kernel_ms: float) -> list[dict]:
    return [{"status": "PASSED", "kernel_ms": k, "speedup": 1.0 / k} for k in kernel_ms]


def test_the_ratio_is_the_median_grade_over_the_median_independent_run():
    entry = summarize("t", "mkb_grade", INDS, grades(0.2, 0.22), [10.0, 12.0])
    assert entry["independent_kernel_ms"] == pytest.approx(0.110)
    assert entry["ratio_to_independent"] == pytest.approx(0.21 / 0.110)
    assert entry["within"] is False
    assert entry["grading_s_median"] == 11.0
    assert entry["independent_after_kernel_ms"] == 0.110


def test_within_means_five_percent_or_ten_microseconds():
    assert summarize("t", "judge", INDS, grades(0.1155), [1.0])["within"] is True  # 5 % above
    assert summarize("t", "judge", INDS, grades(0.119), [1.0])["within"] is True  # 9 us above
    assert summarize("t", "judge", INDS, grades(0.1225), [1.0])["within"] is False


def test_interleaved_gradings_are_held_against_their_neighbours():
    entry = summarize("t", "mkb_grade", INDS, grades(0.11, 0.115), [1.0, 1.0], interleaved=True)
    assert entry["ratio_to_adjacent_independent"] == pytest.approx([0.11 / 0.110, 0.115 / 0.115])


def test_the_speedup_spread_is_its_coefficient_of_variation():
    entry = summarize("t", "mkb_grade", INDS, [{"kernel_ms": 0.1, "speedup": 9.0}, {"kernel_ms": 0.1, "speedup": 11.0}],
                      [1.0, 1.0])
    assert entry["speedup_cv"] == pytest.approx(0.1)


def test_failed_gradings_leave_the_ratio_to_the_ones_that_timed():
    entry = summarize("t", "judge", INDS, [{"status": "TIMEOUT"}, *grades(0.11)], [1.0, 1.0])
    assert entry["statuses"] == ["TIMEOUT", "PASSED"]
    assert entry["kernel_ms_median"] == pytest.approx(0.11)
