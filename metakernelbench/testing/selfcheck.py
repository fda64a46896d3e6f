"""One draw of a trusted kernel against its reference, in this process, by the grader's comparison.

For oracle development and sweeps over many oracles (``benchmarks/h200_oracle_check.py``, the oracle
tests): no worker, no sandbox, no timing -- never for a submission, whose code must not run in the
grader's process. The comparison is the grader's own: outputs against the reference and the
float64 anchor (``correctness.check_draw``), the graded tensors snapshotted as the grader does, and
the expected values computed in the grader's stages and placed by the same memory plan
(``verifier.expected``, ``verifier.memory``), so a check holds no more of the GPU than a final grade
of the same task: the reference, then the anchor, then the kernel, each stage's draw freed before
the next.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from metakernelbench.problems import Problem
from metakernelbench.verifier import memory
from metakernelbench.verifier.correctness import check_draw
from metakernelbench.verifier.expected import anchor_values, reference_values
from metakernelbench.verifier.result import Mismatch
from metakernelbench.verifier.tensors import snapshot_graded

__all__ = ["draw_mismatch", "standard_draws"]


def draw_mismatch(problem: Problem, solve: Callable, workload: dict, seed: int, device: torch.device,
                  planner: memory.Planner | None = None, keep: dict | None = None) -> Mismatch | None:
    """None when ``solve`` passes this draw, else the grader's description of the first mismatch.

    ``planner``: the memory plan to follow (one per problem and device, kept across draws; by
    default the device's whole memory). ``keep``: a dict that receives the draw's ``got``, ``ref``
    and ``anchor`` values (for error statistics).
    """
    if planner is None:
        planner = memory.Planner(device, memory.device_budget(device))

    def draw():
        gen = torch.Generator(device=device).manual_seed(seed)
        return problem.make_inputs(device, gen, **workload)

    ref = reference_values(problem, draw, planner)
    anchor = anchor_values(problem, draw, planner)
    if planner.placement != memory.ALL_ON_DEVICE:
        # a tight device: while the kernel runs, the expected values wait in host memory (a grade's
        # candidate call holds its input buffers and the draw there instead, nothing of the checks)
        ref, anchor = memory.to_host(ref), memory.to_host(anchor)
        memory.release(device)
    with torch.no_grad():
        mine = draw()
        got = snapshot_graded(problem.spec, mine, solve(*mine))
        del mine  # the graded in-place inputs stay alive through ``got``
        if planner.values_device is None:
            got = memory.to_host(got)
    memory.release(device)
    mismatch = check_draw(problem.spec, 0, got, ref, anchor, planner.compare_device)
    if keep is not None:
        keep.update(got=got, ref=ref, anchor=anchor)
    del got, ref, anchor
    memory.release(device)
    return mismatch


def standard_draws(problem: Problem) -> list[tuple[dict, int]]:
    """The oracle checks' draws: the small workload once, the graded workload twice."""
    spec = problem.spec
    return [(spec.small_workload, 1), (spec.workload, 2), (spec.workload, 3)]
