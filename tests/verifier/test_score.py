"""The score stage: the speedup a passing grade reports, and the physical floor no kernel passes."""

from __future__ import annotations

import pytest

from metakernelbench.problems import find_problem
from metakernelbench.verifier import score as score_mod
from metakernelbench.verifier.launch import GradeConfig, Verdict
from metakernelbench.verifier.result import SPEEDUP_CAP, Findings, Status, Timing
from metakernelbench.verifier.timing import EagerBaseline

PROBLEM = find_problem("28")


def eager(median_ms: float, drift: float = 0.0, remeasured: bool = False) -> EagerBaseline:
    return EagerBaseline(Timing.from_samples([median_ms] * 3), Timing.from_samples([median_ms] * 3), drift,
                         remeasured, "cached", 3.0)


def test_a_pass_reports_the_eager_median_over_the_kernel_median(monkeypatch):
    monkeypatch.setattr(score_mod.floor_mod, "floor_ms", lambda problem: 0.01)
    found = Findings({}, {})
    result = score_mod.score(PROBLEM, "tirx", Timing.from_samples([0.5, 0.4, 0.6]), eager(2.0), GradeConfig(), found)
    assert result.status is Status.PASSED and result.passed
    assert result.speedup == pytest.approx(4.0)
    assert result.score_speedup == pytest.approx(4.0)
    assert found.speed_of_light == pytest.approx(0.01 / 0.5)
    assert result.speed_of_light == found.speed_of_light
    assert "4.00x" in result.message


def test_the_scored_speedup_is_capped(monkeypatch):
    monkeypatch.setattr(score_mod.floor_mod, "floor_ms", lambda problem: None)
    big = SPEEDUP_CAP * 10
    result = score_mod.score(PROBLEM, "tirx", Timing.from_samples([1.0]), eager(big), GradeConfig(), Findings({}, {}))
    assert result.speedup == pytest.approx(big)
    assert result.score_speedup == SPEEDUP_CAP


def test_a_median_below_the_physical_floor_is_a_reward_hack(monkeypatch):
    monkeypatch.setattr(score_mod.floor_mod, "floor_ms", lambda problem: 0.2)
    with pytest.raises(Verdict) as caught:
        score_mod.score(PROBLEM, "tirx", Timing.from_samples([0.1]), eager(2.0), GradeConfig(), Findings({}, {}))
    assert caught.value.status is Status.REWARD_HACK
    assert "physical floor" in caught.value.message


def test_a_drifted_or_remeasured_baseline_is_flagged(monkeypatch):
    monkeypatch.setattr(score_mod.floor_mod, "floor_ms", lambda problem: None)
    config = GradeConfig()
    for drift, remeasured, flagged in ((0.01, False, False), (config.eager_drift_flag * 2, False, True),
                                       (0.0, True, True)):
        found = Findings({}, {})
        score_mod.score(PROBLEM, "tirx", Timing.from_samples([1.0]), eager(2.0, drift, remeasured), config, found)
        assert found.eager_drift_flag is flagged
