"""One draw of a trusted kernel against its reference, in this process, by the grader's comparison.

For oracle development and sweeps over many oracles (``benchmarks/h200_oracle_check.py``, the oracle
tests): no worker, no sandbox, no timing -- never for a submission, whose code must not run in the
grader's process. The comparison is the grader's own: outputs against the reference and the
float64 anchor (``correctness.check_draw``), the graded tensors snapshotted as the grader does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import Problem

from .correctness import check_draw
from .tensors import promote_floats, snapshot_graded


def draw_mismatch(problem: Problem, solve: Callable, workload: dict, seed: int, device: torch.device):
    """None when ``solve`` passes this draw, else the grader's description of the first mismatch."""

    def draw():
        gen = torch.Generator(device=device).manual_seed(seed)
        return problem.make_inputs(device, gen, **workload)

    with torch.no_grad():
        inputs = draw()
        ref = snapshot_graded(problem.spec, inputs, problem.reference(*inputs))
        promoted = promote_floats(draw())
        with anchor_mode():
            anchor = snapshot_graded(problem.spec, promoted, problem.reference(*promoted))
        mine = draw()
        got = snapshot_graded(problem.spec, mine, solve(*mine))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return check_draw(problem.spec, 0, got, ref, anchor)


def standard_draws(problem: Problem) -> list[tuple[dict, int]]:
    """The oracle checks' draws: the small workload once, the graded workload twice."""
    spec = problem.spec
    return [(spec.small_workload, 1), (spec.workload, 2), (spec.workload, 3)]
