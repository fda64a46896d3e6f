"""The generated negative controls are rejected by the full grader on CPU (TIRx llvm copies).

Problem 28 (returned bf16 output) and problem 25 (in-place uint8 caches) cover both output kinds;
each control must get its expected status, which also proves the grader reaches the right check
(correctness for value controls, the launch count and the audit for the two DSL-free ones).
"""

import pytest

from metakernelbench.problems import find_problem
from metakernelbench.testing.controls import CONTROLS, EXPECTED, applies, control_source
from metakernelbench.verifier.grader import GradeConfig, grade

FAST = GradeConfig(correctness_draws=2, warmup=2, timed=4, rechecks=2)
CASES = [(pid, kind) for pid in ("28", "25") for kind in CONTROLS]


def _small(pid):
    problem = find_problem(pid)
    problem.spec = problem.spec.model_copy(
        update={"workload": {**problem.spec.workload, **problem.spec.small_workload}})
    return problem


@pytest.mark.parametrize(("pid", "kind"), CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_control_is_rejected_with_its_expected_status(tmp_path, pid, kind):
    problem = _small(pid)
    if not applies(problem, kind):
        pytest.skip(f"{kind} does not apply to problem {pid}")
    path = tmp_path / f"{pid}_{kind}.py"
    path.write_text(control_source(problem, kind, "tirx", "cpu"))
    result = grade(problem, path, "tirx", device="cpu", config=FAST)
    assert result.status.value == EXPECTED.get(kind, "INCORRECT"), result.message


def test_low_precision_applies_only_to_floating_problems():
    assert applies(_small("28"), "low_precision")
    assert not applies(_small("25"), "low_precision")
