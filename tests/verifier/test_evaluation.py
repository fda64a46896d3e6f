"""The grader's time limits (``Evaluation.await_candidate``, ``Evaluation.call``): a kernel that never
returns is TIMEOUT within the compile budget plus the call budget, and the message names the limit hit.

The compile budget runs on the grader's clock from the moment the candidate worker begins importing
the kernel file; the import and the first call (where the DSLs compile) share it, and the first call
also gets the call budget. Each test grades on the CPU at problem 28's small workload with budgets of
a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metakernelbench.problems import find_problem
from metakernelbench.verifier.evaluation import Evaluation
from metakernelbench.verifier.grader import GradeConfig, grade
from metakernelbench.verifier.result import Status

REPO = Path(__file__).resolve().parents[2]
HONEST = REPO / "tests" / "exploits" / "control_honest_28.py"
COMPILE_S, CALL_S = 4.0, 3.0
SLACK_S = 4.0  # the grader's own work around the first call (drawing its inputs) and the worker's end
LIMITS = GradeConfig(correctness_draws=2, warmup=2, timed=5, rechecks=2, compile_timeout_s=COMPILE_S,
                     call_timeout_s=CALL_S, pin_cores=False)
HANG_IN_CALL = "import tvm\n\n\ndef solve(hidden_states, residual, weight):\n    while True:\n        pass\n"
HANG_IN_IMPORT = ("import tvm\n\nwhile True:\n    pass\n\n\n"
                  "def solve(hidden_states, residual, weight):\n    return None\n")
# honest on its first call, then never returns
HANG_LATER = HONEST.read_text() + '''

_honest, _calls = solve, [0]


def solve(hidden_states, residual, weight):
    _calls[0] += 1
    if _calls[0] > 1:
        while True:
            pass
    return _honest(hidden_states, residual, weight)
'''


@pytest.fixture(scope="module")
def problem():
    loaded = find_problem("28")
    loaded.spec = loaded.spec.model_copy(update={"workload": {**loaded.spec.workload,
                                                              **loaded.spec.small_workload}})
    return loaded


def _grade(problem, tmp_path: Path, source: str):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    lines: list[str] = []
    return grade(problem, kernel, "tirx", device="cpu", config=LIMITS, progress=lines.append), lines


def _after_start_s(result) -> float:
    """Seconds of the grading after the candidate had imported the kernel file (the first call, for a
    kernel that hangs there), on the grader's clock."""
    return result.grade_wall_s - sum(result.stages_s.values())


def test_a_first_call_that_never_returns_is_a_timeout_within_both_budgets(problem, tmp_path):
    result, lines = _grade(problem, tmp_path, HANG_IN_CALL)
    assert result.status is Status.TIMEOUT, result.message
    assert "first call" in result.message, result.message
    assert f"call budget of {CALL_S:g} s" in result.message and f"compile budget of {COMPILE_S:g} s" in result.message
    loaded = float(result.details["kernel_load_s"])
    first_call = _after_start_s(result)
    assert CALL_S <= first_call, f"the first call was cut off after {first_call:.1f} s, before its budget"
    assert loaded + first_call <= COMPILE_S + CALL_S + SLACK_S, (loaded, first_call)
    assert any("correctness" in line for line in lines), lines


def test_an_import_that_never_returns_is_a_timeout_at_the_compile_budget(problem, tmp_path):
    result, _ = _grade(problem, tmp_path, HANG_IN_IMPORT)
    assert result.status is Status.TIMEOUT, result.message
    assert f"did not finish loading within the compile budget of {COMPILE_S:g} s" in result.message, result.message


def test_a_later_call_gets_the_call_budget(problem, tmp_path):
    result, _ = _grade(problem, tmp_path, HANG_LATER)
    assert result.status is Status.TIMEOUT, result.message
    assert result.message == f"the call did not return within the call budget of {CALL_S:g} s", result.message


def _limits_after_import(import_s: float) -> Evaluation:
    ev = Evaluation.__new__(Evaluation)  # only the limits' arithmetic: no workers
    ev.config = LIMITS
    ev.compile_left_s = max(COMPILE_S - import_s, 0.0)
    return ev


def test_the_first_call_gets_what_the_import_left_of_the_compile_budget_plus_the_call_budget():
    seconds, message = _limits_after_import(1.5).call_limit(True)
    assert seconds == pytest.approx(COMPILE_S - 1.5 + CALL_S)
    assert "2.5 s left of the compile budget of 4 s" in message and "call budget of 3 s" in message
    assert _limits_after_import(1.5).call_limit(False) == (CALL_S, "the call did not return within the call "
                                                                   "budget of 3 s")
    assert _limits_after_import(10.0).call_limit(True)[0] == pytest.approx(CALL_S)  # never less than a call
