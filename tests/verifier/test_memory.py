"""The grade's memory plan (``verifier.memory``): the stage model, the placement chosen for a budget,
and the planner the grader and the oracle check follow."""

from __future__ import annotations

import random

import pytest
import torch

from metakernelbench.problems import find_problem
from metakernelbench.verifier import memory
from metakernelbench.verifier.memory import ALL_ON_DEVICE, LEAST, Overheads, Placement, Sizes

NONE = Overheads(0, 0)
# a draw of 10, outputs of 1, a float64 anchor of 40 + 10: small numbers whose stages are easy to add
SIZES = Sizes(draw=10, outputs=1, inplace=0, reference_work=5, anchor_inputs=40, anchor_work=10, anchor_outputs=4,
              compare_items=((1, 1, 4, 36),), timed=50)


def test_each_stage_adds_what_the_grade_holds_at_that_moment():
    stages = memory.stage_peaks(SIZES, ALL_ON_DEVICE, NONE)
    assert stages == {
        "correctness call": 10 + 10 + 1,  # the candidate's buffers, the draw written into them, its outputs
        "correctness check": 10 + 1 + 40 + 10,  # the buffers held; the reference's values beside the anchor
        "eager call": 3 * 10 + 5,  # both workers' buffers, the draw, the reference's working memory
        "timed call": 10 + 10 + 10 + 1 + 50 * 1,  # both buffers, the draw, the outputs, 50 kept outputs
        "recheck": 10 + 10 + 50 + 1 + 40 + 10,
    }
    least = memory.stage_peaks(SIZES, LEAST, NONE)
    assert least["recheck"] == 20 + max(10 + 5, 10, 1 + 1 + 4 + 36 - 36)  # only the reference on a fresh draw
    assert memory.peak(SIZES, LEAST, NONE) == 35  # the eager stage: what the problem itself needs


def test_everything_stays_on_the_device_when_it_fits():
    chosen = memory.plan(SIZES, 200, NONE, reserve=0.0, kernel_room=0)
    assert chosen.placement == ALL_ON_DEVICE and chosen.peak == 121 and chosen.fits


def test_the_cheapest_placement_that_fits_is_chosen():
    # 100: the 50 kept outputs leaving the GPU are enough
    assert memory.plan(SIZES, 100, NONE, reserve=0.0, kernel_room=0).placement == Placement(keep_on_device=False)
    # 60: the anchor, the comparison and the kept outputs must all leave (nothing cheaper fits)
    chosen = memory.plan(SIZES, 60, NONE, reserve=0.0, kernel_room=0)
    assert chosen.placement == Placement(keep_on_device=False, compare_on_device=False, anchor_on_device=False)
    assert chosen.peak == 35 and chosen.fits


def test_a_budget_nothing_fits_gets_the_lowest_peak_and_says_so():
    chosen = memory.plan(SIZES, 30, NONE, reserve=0.0, kernel_room=0)
    assert chosen.peak == memory.peak(SIZES, LEAST, NONE) == 35 and not chosen.fits
    # the cheapest of the placements with that peak: the expected values may stay where they are
    assert chosen.placement == Placement(keep_on_device=False, compare_on_device=False, anchor_on_device=False)


def test_room_for_the_kernel_is_kept_in_its_calls():
    chosen = memory.plan(SIZES, 100, NONE, reserve=0.0, kernel_room=50)
    assert chosen.fits and chosen.stages["timed call"] + 50 <= 100
    assert chosen.left_for_kernel == 100 - chosen.stages["timed call"]
    # by default the room is the eager reference's own working memory
    assert memory.plan(SIZES, 100, NONE, reserve=0.0).kernel_room == SIZES.reference_work


def test_a_larger_budget_never_moves_more_off_the_device():
    rng = random.Random(1)
    for _ in range(200):
        s = Sizes(draw=rng.randint(1, 20), outputs=rng.randint(0, 8), inplace=rng.randint(0, 3),
                  reference_work=rng.randint(0, 20), anchor_inputs=rng.randint(0, 80), anchor_work=rng.randint(0, 40),
                  anchor_outputs=rng.randint(0, 30), compare_items=((2, 2, 8, rng.randint(0, 80)),), timed=50)
        costs = [memory.cost(memory.plan(s, budget, NONE, reserve=0.0).placement) for budget in range(10, 600, 10)]
        assert all(a >= b for a, b in zip(costs, costs[1:], strict=False)), costs


def test_an_anchor_not_run_yet_counts_as_no_working_memory():
    unknown = Sizes(**{**SIZES.__dict__, "anchor_work": None})
    assert memory.check_peak(unknown, ALL_ON_DEVICE, 0) == 1 + 10 + 40  # the promotion: draw and copies


def test_the_planner_plans_nothing_without_a_budget():
    planner = memory.Planner(torch.device("cpu"), None)
    assert planner.placement == ALL_ON_DEVICE and planner.chosen is None
    assert planner.compare_device == torch.device("cpu") and planner.values_device == torch.device("cpu")


def _planner_after_one_draw(budget: int) -> memory.Planner:
    problem = find_problem("28")
    planner = memory.Planner(torch.device("cpu"), budget)
    draw = problem.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(1), **problem.spec.small_workload)
    planner.saw_draw(draw, problem.spec)
    out = problem.reference(*draw)
    planner.saw_reference({"output": out} if not isinstance(out, tuple) else dict(zip(problem.spec.outputs, out,
                                                                                       strict=True)),
                          problem.spec, 1000)
    planner.saw_anchor(2000)
    return planner


def test_the_planner_follows_the_sizes_it_saw():
    roomy = _planner_after_one_draw(1 << 40)
    assert roomy.placement == ALL_ON_DEVICE and roomy.sizes.reference_work == 1000
    assert roomy.sizes.anchor_work == 2000 and roomy.sizes.draw > 0 and roomy.sizes.outputs > 0
    tight = _planner_after_one_draw(1)
    assert tight.chosen.peak == memory.peak(tight.sizes, LEAST, tight.overheads) and not tight.chosen.fits
    p = tight.placement
    assert not (p.keep_on_device or p.compare_on_device or p.anchor_on_device)
    assert tight.compare_device == torch.device("cpu") and tight.values_device is None
    assert "does not fit" in tight.describe()


def test_an_anchor_that_ran_out_of_memory_moves_every_later_one_off_the_device():
    planner = _planner_after_one_draw(1 << 40)
    assert planner.placement.anchor_on_device
    planner.anchor_ran_out()
    assert not planner.placement.anchor_on_device


def test_shared_storages_count_once_and_promotion_counts_float64_copies():
    base = torch.zeros(4, 8, dtype=torch.bfloat16)
    draw = (base, base[1:], torch.arange(3, dtype=torch.int32), 2.0)
    assert memory.storage_bytes(draw) == 4 * 8 * 2 + 3 * 4
    assert memory.promoted_bytes(draw) == 32 * 8 + 24 * 8 + 3 * 4  # per tensor: views are copied apart


@pytest.mark.parametrize("items, streamed", [(((2, 2, 8, 36),), 36 + 12), (((2, 2, 8, 36), (4, 4, 16, 100)), 124)])
def test_the_comparison_peaks_at_its_largest_output(items, streamed):
    s = Sizes(**{**SIZES.__dict__, "compare_items": items})
    assert s.compare_peak(True, True) == streamed
