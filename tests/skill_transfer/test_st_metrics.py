"""The design.md §6 metrics, one rule per test, with numbers small enough to check on paper."""

import math

import numpy as np
import pytest

from metakernelbench.skill_transfer import metrics


@pytest.mark.parametrize(
    ("solo", "solo_ms", "transfer", "transfer_ms", "skipped", "r", "outcome"),
    [
        (True, 2.0, True, 1.0, False, 2.0, "both_pass"),  # transfer twice as fast
        (True, 1.0, True, 2.0, False, 0.5, "both_pass"),
        (True, 10.0, True, 1.0, False, 4.0, "both_pass"),  # clipped at 4
        (True, 1.0, True, 10.0, False, 0.25, "both_pass"),  # clipped at 1/4
        (False, None, True, 3.0, False, 4.0, "rescue"),
        (True, 3.0, False, None, False, 0.25, "break"),
        (False, None, False, None, False, 1.0, "joint_fail"),
        (True, 1.0, False, None, True, 1.0, "skipped"),  # skipped counts 1 even if the solo passed
        (False, None, False, None, True, 1.0, "skipped"),
    ],
)
def test_paired_ratio(solo, solo_ms, transfer, transfer_ms, skipped, r, outcome):
    assert metrics.paired_ratio(solo, solo_ms, transfer, transfer_ms, skipped) == (r, outcome)


def test_both_pass_needs_times():
    with pytest.raises(ValueError):
        metrics.paired_ratio(True, None, True, 1.0)


def test_thresholds_are_inclusive_and_forgive_float_noise():
    assert 0.35 / 0.28 < 1.25  # 1.2499999999999998: 5/4 on paper
    assert metrics.helped(0.35 / 0.28)
    assert metrics.helped(1.25)
    assert not metrics.helped(1.2499)
    assert metrics.harmed(0.8)
    assert 0.28 / 0.35 > 0.8  # 0.8000000000000002: 4/5 on paper
    assert metrics.harmed(0.28 / 0.35)
    assert not metrics.harmed(0.8001)
    assert not metrics.helped(1.0) and not metrics.harmed(1.0)


def test_lift_is_geometric_mean_minus_one():
    assert metrics.lift([]) is None
    assert metrics.lift([4.0, 0.25]) == pytest.approx(0.0)
    assert metrics.lift([2.0, 2.0]) == pytest.approx(1.0)
    assert metrics.lift([4.0, 1.0, 1.0, 1.0]) == pytest.approx(math.sqrt(2) - 1)


def test_rates():
    ratios = [4.0, 1.25, 1.0, 0.8, 0.25]
    assert metrics.help_rate(ratios) == pytest.approx(2 / 5)
    assert metrics.harm_rate(ratios) == pytest.approx(2 / 5)
    assert metrics.help_rate([]) is None and metrics.harm_rate([]) is None


@pytest.mark.parametrize(
    ("source", "source_speedup", "solo", "solo_speedup", "expected"),
    [
        (True, 2.0, False, None, "above"),
        (False, None, True, 2.0, "below"),
        (False, None, False, None, "same"),
        (True, 2.5, True, 2.0, "above"),  # exactly 5/4 of the solo's speedup
        (True, 2.0, True, 2.5, "below"),
        (True, 2.49, True, 2.0, "same"),
        (True, 0.35 / 0.28, True, 1.0, "above"),  # 5/4 on paper, a hair below in floating point
        (True, 2.0, True, 2.0, "same"),
    ],
)
def test_standing(source, source_speedup, solo, solo_speedup, expected):
    assert metrics.standing(source, source_speedup, solo, solo_speedup) == expected


def test_bootstrap_of_constant_cell_is_a_point():
    rng = metrics.cell_rng(0, "m", "cutedsl2tirx", "*")
    assert metrics.bootstrap_lift_ci([2.0, 2.0, 2.0], rng, 500) == pytest.approx((1.0, 1.0))
    assert metrics.bootstrap_lift_ci([], rng, 500) is None


def test_bootstrap_of_two_extremes_spans_the_clip_range():
    # Resampled pairs average to 1/4, 1 or 4 with probabilities 1/4, 1/2, 1/4, so the 2.5 and 97.5
    # percentiles are the extremes: lift -75 % and +300 %.
    rng = metrics.cell_rng(3, "any")
    lo, hi = metrics.bootstrap_lift_ci([4.0, 0.25], rng, 2000)
    assert lo == pytest.approx(-0.75)
    assert hi == pytest.approx(3.0)


def test_bootstrap_is_seeded_per_cell():
    ratios = [4.0, 1.0, 0.5, 2.0, 1.25, 0.8, 1.0]
    a = metrics.bootstrap_lift_ci(ratios, metrics.cell_rng(1, "m", "d", "f"), 400)
    b = metrics.bootstrap_lift_ci(ratios, metrics.cell_rng(1, "m", "d", "f"), 400)
    c = metrics.bootstrap_lift_ci(ratios, metrics.cell_rng(2, "m", "d", "f"), 400)
    assert a == b
    assert a != c
    point = metrics.lift(ratios)
    assert a[0] <= point <= a[1]
    assert -0.75 <= a[0] and a[1] <= 3.0


def test_cell_rng_depends_on_name_not_call_order():
    first = metrics.cell_rng(0, "x").integers(0, 1 << 30, 4)
    metrics.cell_rng(0, "y").integers(0, 1 << 30, 4)
    assert np.array_equal(first, metrics.cell_rng(0, "x").integers(0, 1 << 30, 4))
