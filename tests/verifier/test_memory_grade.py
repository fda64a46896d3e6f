"""The grader follows its memory plan (``verifier.memory``) and gives the same verdicts under it.

Graded on the CPU at problem 28's small workload. ``GradeConfig.memory_budget_bytes`` makes the grade
plan for a device of that size: one byte, and nothing fits, so every part that may leave the device
does (the anchor computed on the host, the comparison on the host, the timed calls' outputs sent to
the grader); on the CPU the host is the device, so the verdicts must not move, and the requests and
stages show which way the grade went.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from metakernelbench.problems import find_problem
from metakernelbench.verifier import expected, memory
from metakernelbench.verifier.evaluation import Evaluation
from metakernelbench.verifier.grader import GradeConfig, grade
from metakernelbench.verifier.result import Status

REPO = Path(__file__).resolve().parents[2]
HONEST = REPO / "tests" / "exploits" / "control_honest_28.py"
REPLAY = REPO / "tests" / "exploits" / "phase_replay.py"  # honest but in timed calls: caught by the rechecks
REDUCED = dict(correctness_draws=2, warmup=2, timed=5, rechecks=2, pin_cores=False)


@pytest.fixture(scope="module")
def problem():
    loaded = find_problem("28")
    loaded.spec = loaded.spec.model_copy(update={"workload": {**loaded.spec.workload,
                                                              **loaded.spec.small_workload}})
    return loaded


@pytest.fixture
def seen(monkeypatch):
    """What the grade did: each candidate call's flags, and the device each anchor's inputs went to."""
    record = {"calls": [], "anchor_to": [], "plans": []}
    call, promote = Evaluation.call, expected.promote_floats

    def spy_call(self, handle, draw, snapshot=False, **flags):
        if handle is self.candidate:
            record["calls"].append(flags)
            record["plans"].append(self.memory.placement)
        return call(self, handle, draw, snapshot, **flags)

    def spy_promote(values, device=None):
        record["anchor_to"].append(device)
        return promote(values, device)

    monkeypatch.setattr(Evaluation, "call", spy_call)
    monkeypatch.setattr(expected, "promote_floats", spy_promote)
    return record


def _timed(record: dict) -> list[dict]:
    return [f for f in record["calls"] if f.get("light_checks")]


def test_with_room_everything_stays_on_the_device_as_before(problem, seen):
    result = grade(problem, HONEST, "tirx", device="cpu", config=GradeConfig(**REDUCED, memory_budget_bytes=1 << 40))
    assert result.status is Status.PASSED, result.message
    assert set(seen["anchor_to"]) == {None}  # promoted where the draw is
    timed = _timed(seen)
    assert len(timed) == 2 + 5 and all(not f.get("send_outputs") for f in timed)
    assert [f["keep_outputs"] for f in timed] == [False, False] + [True] * 5  # the worker keeps timed outputs
    plan = result.details["memory_plan"]
    assert "everything" not in plan and "kept by the candidate" in plan and "does not fit" not in plan


def test_with_no_room_the_grade_moves_everything_off_the_device_and_still_passes(problem, seen):
    result = grade(problem, HONEST, "tirx", device="cpu", config=GradeConfig(**REDUCED, memory_budget_bytes=1))
    assert result.status is Status.PASSED, result.message
    # planned from the draw and the reference before the first anchor: every anchor on the host
    assert seen["anchor_to"] and set(seen["anchor_to"]) == {torch.device("cpu")}
    timed = _timed(seen)
    # every timed call sends its outputs back, none is kept by the worker: it cannot tell the rechecked ones
    assert [f["send_outputs"] for f in timed] == [False, False] + [True] * 5
    assert not any(f["keep_outputs"] for f in timed)
    assert all(not p.keep_on_device and not p.anchor_on_device for p in seen["plans"][2:])
    assert "does not fit" in result.details["memory_plan"]
    assert result.rechecked_calls and len(result.rechecked_calls) == 2


def test_the_rechecks_catch_the_same_kernel_when_the_grader_holds_the_outputs(problem):
    """phase_replay computes honestly except during the 50 timed calls (the real counts): the outputs
    the grader held of the secretly chosen calls are as wrong as the ones the worker would have kept."""
    for budget in (None, 1):
        result = grade(problem, REPLAY, "tirx", device="cpu", config=GradeConfig(memory_budget_bytes=budget))
        assert result.status is Status.INCORRECT, (budget, result.message)
        assert "rechecked after timing" in result.message


def test_the_oracle_check_follows_the_same_plan(problem):
    from metakernelbench.testing.selfcheck import draw_mismatch
    from tests.testing.test_selfcheck import KERNEL, _load

    solve = _load(KERNEL, "mkb_memory_selfcheck").solve
    for budget in (1 << 40, 1):
        planner = memory.Planner(torch.device("cpu"), budget)
        for seed in (1, 2):
            assert draw_mismatch(problem, solve, problem.spec.workload, seed, torch.device("cpu"), planner) is None
        assert planner.placement.anchor_on_device is (budget > 1)
