"""The typed verdict (``verifier.result``): invariants that make inconsistent results unconstructible,
and the Harbor files written from it (``grade.json``, ``reward.json``).
"""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from metakernelbench.verifier.result import SPEEDUP_CAP, GradeResult, Mismatch, Status, Timing, failure

REWARD_KEYS = {"reward", "passed", "speedup", "kernel_ms", "eager_ms", "infra_error"}


def passed(speedup: float = 2.0, **extra) -> GradeResult:
    return GradeResult(status=Status.PASSED, passed=True, problem="28_x", dsl="tirx", kernel_ms=1.0,
                       eager_ms=speedup, speedup=speedup, score_speedup=min(speedup, SPEEDUP_CAP), **extra)


# ---- invariants -----------------------------------------------------------------------------

def test_a_consistent_pass_is_accepted():
    result = passed(3.0)
    assert result.passed and result.score_speedup == 3.0


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.PASSED])
def test_passed_flag_must_match_the_status(status):
    with pytest.raises(ValidationError, match="passed must be true exactly"):
        GradeResult(status=status, passed=True, problem="p", dsl="tirx", kernel_ms=1.0, eager_ms=1.0,
                    speedup=1.0, score_speedup=1.0)
    with pytest.raises(ValidationError, match="passed must be true exactly"):
        GradeResult(status=Status.PASSED, passed=False, problem="p", dsl="tirx")


@pytest.mark.parametrize("missing", ["kernel_ms", "eager_ms", "speedup"])
def test_a_pass_needs_its_timings(missing):
    fields = dict(status=Status.PASSED, passed=True, problem="p", dsl="tirx", kernel_ms=1.0, eager_ms=2.0,
                  speedup=2.0, score_speedup=2.0)
    fields[missing] = None
    with pytest.raises(ValidationError):
        GradeResult(**fields)


@pytest.mark.parametrize(("speedup", "score"), [(2.0, 1.0), (150.0, 150.0), (150.0, None)])
def test_score_is_the_speedup_capped_at_100(speedup, score):
    with pytest.raises(ValidationError, match="capped"):
        GradeResult(status=Status.PASSED, passed=True, problem="p", dsl="tirx", kernel_ms=1.0,
                    eager_ms=speedup, speedup=speedup, score_speedup=score)


def test_speedup_above_the_cap_is_kept_uncapped():
    result = passed(250.0)
    assert result.speedup == 250.0 and result.score_speedup == SPEEDUP_CAP


@pytest.mark.parametrize("field", ["speedup", "score_speedup"])
def test_only_a_pass_carries_a_speedup(field):
    with pytest.raises(ValidationError, match="only a PASSED result"):
        GradeResult(status=Status.INCORRECT, passed=False, problem="p", dsl="tirx", **{field: 2.0})


def test_failure_helper_refuses_passed():
    with pytest.raises(ValueError):
        failure(Status.PASSED, "p", "tirx", "no")


def test_failure_helper_builds_a_non_passing_result():
    result = failure(Status.TIMEOUT, "p", "tirx", "no reply", kernel_ms=None)
    assert result.status is Status.TIMEOUT and not result.passed and result.speedup is None


def test_unknown_fields_are_refused():
    with pytest.raises(ValidationError):
        GradeResult(status=Status.INCORRECT, passed=False, problem="p", dsl="tirx", verdict="fine")


def test_unknown_status_is_refused():
    with pytest.raises(ValidationError):
        GradeResult(status="MOSTLY_PASSED", passed=False, problem="p", dsl="tirx")


# ---- reward.json ----------------------------------------------------------------------------

def test_reward_of_a_pass():
    reward = passed(4.0).reward()
    assert reward == {"reward": 4.0, "passed": 1.0, "speedup": 4.0, "kernel_ms": 1.0, "eager_ms": 4.0,
                      "infra_error": 0.0}


def test_reward_of_a_capped_pass_is_the_cap():
    reward = passed(400.0).reward()
    assert reward["reward"] == SPEEDUP_CAP and reward["speedup"] == SPEEDUP_CAP


@pytest.mark.parametrize("status", [s for s in Status if s is not Status.PASSED])
def test_reward_of_a_failure_is_zero(status):
    reward = failure(status, "p", "tirx", "m").reward()
    assert set(reward) == REWARD_KEYS
    assert reward["reward"] == reward["passed"] == reward["speedup"] == 0.0
    assert reward["infra_error"] == (1.0 if status is Status.INFRA_ERROR else 0.0)


def test_reward_of_a_failure_keeps_measured_times():
    reward = failure(Status.REWARD_HACK, "p", "tirx", "below the floor", kernel_ms=0.01, eager_ms=1.0).reward()
    assert reward["reward"] == 0.0 and reward["kernel_ms"] == 0.01 and reward["eager_ms"] == 1.0


@pytest.mark.parametrize("result", [passed(3.0), failure(Status.INFRA_ERROR, "p", "tirx", "boom")])
def test_reward_values_are_flat_finite_floats(result):
    for key, value in result.reward().items():
        assert type(value) is float and math.isfinite(value), key


def test_write_produces_grade_and_reward_files(tmp_path):
    result = passed(2.5, mismatch=None, launch_sites=["tirx:main@abc"], bypass={"tirx:main@abc": "outputs broken"},
                    kernel_timing=Timing.from_samples([1.0, 1.2, 0.9]))
    result.write(tmp_path / "verifier")
    grade = json.loads((tmp_path / "verifier" / "grade.json").read_text())
    assert GradeResult.model_validate(grade) == result
    for key in ("status", "passed", "problem", "dsl", "kernel_ms", "eager_ms", "speedup", "score_speedup",
                "message"):
        assert key in grade
    reward = json.loads((tmp_path / "verifier" / "reward.json").read_text())
    assert reward == result.reward() and set(reward) == REWARD_KEYS


# ---- timing and mismatch summaries --------------------------------------------------------------

def test_timing_summary_of_an_odd_count():
    timing = Timing.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert timing.median_ms == 3.0 and timing.min_ms == 1.0
    assert timing.samples_ms == [5.0, 1.0, 3.0, 2.0, 4.0], "raw samples kept in call order"
    assert timing.p10_ms == 1.0 and timing.p90_ms == 4.0
    assert timing.cv == pytest.approx(math.sqrt(2.0) / 3.0)


def test_timing_median_of_an_even_count():
    assert Timing.from_samples([4.0, 1.0, 3.0, 2.0]).median_ms == 2.5


def test_timing_of_constant_samples_has_no_spread():
    timing = Timing.from_samples([2.0] * 50)
    assert timing.cv == 0.0 and timing.p10_ms == timing.p90_ms == 2.0


def test_mismatch_excess():
    assert Mismatch(output="o", draw=0, check="max_abs", detail="", error=6.0, allowance=2.0).excess == 3.0
    assert Mismatch(output="o", draw=0, check="structure", detail="").excess is None


def test_findings_report_what_was_found_and_the_defaults_for_the_rest():
    from metakernelbench.verifier.result import Findings

    found = Findings({"start": 1.0}, {"cores": "0"})
    found.launch_sites, found.floor_ms = ["k"], None
    mismatch = Mismatch(output="out", draw=0, check="max_abs", detail="off")
    found.take({"mismatch": mismatch, "details": {"traceback": "t"}, "speedup": 2.0})
    result = found.failed(Status.INCORRECT, "p", "tirx", "wrong")
    assert result.mismatch == mismatch and result.details == {"traceback": "t"} and result.speedup is None
    assert result.launch_sites == ["k"] and result.bypass == {} and result.eager_drift_flag is False
    assert result.stages_s == {"start": 1.0} and result.floor_ms is None
    with pytest.raises(TypeError):
        found.take({"not_a_field": 1})
    passed_result = Findings({}, {}, kernel_ms=1.0, eager_ms=300.0).passed("p", "tirx", "ok", 300.0)
    assert passed_result.passed and passed_result.score_speedup == SPEEDUP_CAP
