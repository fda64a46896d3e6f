"""One draw's expected values, the reference's and the float64 anchor's, in stages placed by a plan.

The grader (``Evaluation.expected``) and the oracle check (``testing.selfcheck.draw_mismatch``) compute them
the same way: the reference on a fresh draw, on the grading device; that draw's tensors freed except
the graded in-place ones; then the draw made again, promoted to float64 (on the device, or straight
into host memory when the plan puts the anchor on the CPU: the values are the device's draw either
way) and the anchor computed from it. Each stage's working memory is measured (``memory.Measured``)
and told to the planner, and each stage gives its cached device memory back before the next, so the
next stage, or another process, has it. A device anchor that runs out of memory is computed again on
the CPU, and so is every later one (``memory.Planner.anchor_ran_out``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import Problem

from . import memory
from .tensors import promote_floats, snapshot_graded

__all__ = ["anchor_values", "reference_values"]


def reference_values(problem: Problem, draw: Callable[[], tuple], planner: memory.Planner) -> dict[str, torch.Tensor]:
    """The reference's graded values of a fresh draw (in host memory when the plan says so)."""
    spec = problem.spec
    with torch.no_grad():
        inputs = draw()
        planner.saw_draw(inputs, spec)
        with memory.Measured(planner.device) as used:
            ref = snapshot_graded(spec, inputs, problem.reference(*inputs))
        del inputs  # the graded in-place inputs stay alive through ``ref``
        planner.saw_reference(ref, spec, used.bytes)
        if planner.placement.expected_on_host:
            ref = memory.to_host(ref)
    memory.release(planner.device)
    return ref


def anchor_values(problem: Problem, draw: Callable[[], tuple], planner: memory.Planner) -> dict[str, torch.Tensor]:
    """The float64 anchor's graded values of a fresh draw, on the device or computed on the CPU."""
    spec = problem.spec
    if planner.placement.anchor_on_device:
        try:
            with torch.no_grad():
                promoted = promote_floats(draw())
                with memory.Measured(planner.device) as used, anchor_mode():
                    anchor = snapshot_graded(spec, promoted, problem.reference(*promoted))
                del promoted
                planner.saw_anchor(used.bytes)
                if planner.placement.expected_on_host:
                    anchor = memory.to_host(anchor)
            memory.release(planner.device)
            return anchor
        except torch.cuda.OutOfMemoryError:
            planner.anchor_ran_out()
        memory.release(planner.device)  # what the failed attempt held is gone with its frames
    with torch.no_grad():
        inputs = draw()
        promoted = promote_floats(inputs, planner.host)
        del inputs
        memory.release(planner.device)
        with anchor_mode():
            return snapshot_graded(spec, promoted, problem.reference(*promoted))
