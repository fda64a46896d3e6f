"""A final grade's GPU memory estimated from a problem's shapes (``adapters.memory_estimates``): the
shapes-only run counts what a real run holds, the committed record and the README's table follow
from the code, and the first cases fit an 80 GB card."""

from __future__ import annotations

import json

import pytest
import torch

from metakernelbench.adapters import memory_estimates as me
from metakernelbench.problems import find_problem
from metakernelbench.verifier import memory

ALL_REAL = (1 << 62, 1e30)  # no tensor and no product is held as shapes only
FIRST_CASES = ("06", "33", "34", "45", "47")


def _small(problem_id: str):
    problem = find_problem(problem_id)
    return problem, problem.spec.small_workload


@pytest.mark.parametrize("problem_id", ["28", "33", "34"])
def test_shapes_only_counts_what_a_real_run_holds(problem_id):
    """At the small workload with every tensor held as shapes (no values), the draw, the outputs,
    the float64 copies and both peaks are those of the same run on real tensors."""
    problem, workload = _small(problem_id)
    real = me._footprint(problem, workload, 0, me._Shadow(*ALL_REAL))
    shapes = me._footprint(problem, workload, 0, me._Shadow(0, 0.0))
    assert shapes == real
    assert real.draw > 0 and real.reference_work >= real.outputs > 0 and real.anchor_work >= real.anchor_outputs


@pytest.mark.parametrize("problem_id, shapes_above", [("06", 4096), ("45", 2000), ("47", 4000)])
def test_references_that_branch_on_small_tensors_run_with_the_large_ones_as_shapes(problem_id, shapes_above):
    """Page tables, routing and counts stay real while the caches and weights (above ``shapes_above``
    bytes at the small workload) are shapes only: the sizes that follow from shapes alone equal the
    real run's."""
    problem, workload = _small(problem_id)
    real = me._footprint(problem, workload, 0, me._Shadow(*ALL_REAL))
    counter = me._Shadow(shapes_above, 1e30)
    shapes = me._footprint(problem, workload, 0, counter)
    assert counter.shapes_only > 0
    for field in ("draw", "outputs", "inplace", "anchor_inputs", "anchor_outputs", "compare_items"):
        assert getattr(shapes, field) == getattr(real, field), field


def test_a_mask_over_a_shapes_only_tensor_selects_its_real_count():
    big = torch.zeros(10, 4, device="meta")
    mask = torch.tensor([True, False] * 5)
    counter = me._Shadow()
    with counter:
        picked = big[mask]
    assert picked.shape == (5, 4)


def test_the_comparison_needs_no_more_than_its_stated_working_memory():
    """``_float_check`` on a float output of n elements, its live bytes counted: at most
    ``COMPARE_WORK_PER_ELEMENT`` bytes an element beyond its three inputs, passing or failing."""
    from metakernelbench.verifier.correctness import _float_check

    n = 1 << 16
    ref = torch.randn(256, n // 256).to(torch.bfloat16)
    anchor = ref.double() + 1e-3 * torch.randn(256, n // 256, dtype=torch.float64)
    for got in (ref.clone(), torch.zeros_like(ref)):
        counter = me._Shadow(*ALL_REAL)
        with counter:
            _float_check("y", 0, got, ref, anchor, 3.0)
        assert counter.high <= memory.COMPARE_WORK_PER_ELEMENT * n, counter.high / n


@pytest.fixture(scope="module")
def record():
    return json.loads(me.RECORD.read_text())


@pytest.mark.parametrize("problem_id", ["06", "34", "45"])
def test_the_committed_record_is_what_the_code_estimates(record, problem_id):
    rows = {r["problem"][:2]: r for r in record["problems"]}
    fresh = me.estimate(find_problem(problem_id), int(record["card_gb"] * memory.GB))
    for key in ("sizes_gb", "all_on_gpu_gb", "least_gb", "planned_gb", "placement", "fits", "stages_gb"):
        assert fresh[key] == rows[problem_id][key], key


def test_the_readme_table_is_generated_from_the_records(record):
    text = me.README.read_text()
    block = text.split(me.START, 1)[1].split(me.END, 1)[0].strip()
    assert block == me.readme_block(record, me.measured_peaks()).strip()


def test_the_first_cases_fit_an_80_gb_card_only_with_their_planned_placement(record):
    rows = {r["problem"][:2]: r for r in record["problems"]}
    assert record["card_gb"] == 80
    usable = record["card_gb"] * record["usable_fraction"]
    for problem_id in FIRST_CASES:
        row = rows[problem_id]
        assert row["fits"] and row["planned_gb"] <= usable, row
    assert all(rows[p]["all_on_gpu_gb"] > usable for p in ("34", "45", "47"))
    assert not rows["34"]["placement"]["keep_on_device"]  # 50 timed calls' outputs: 275 GB
    assert not rows["45"]["placement"]["anchor_on_device"]  # its float64 inputs alone: 61 GB
