"""A description may quote only numbers the graded workload backs; the build refuses any other."""

import pytest

from metakernelbench.adapters.dsl import DSLS
from metakernelbench.adapters.instructions import instruction_md
from metakernelbench.adapters.text_numbers import quoted_numbers, unbacked_numbers
from metakernelbench.problems import ProblemError, load_problem, problem_paths

PATHS = problem_paths()

PROBLEM = '''"""Paged decode, {heads} heads, for {title_batch} sequences.

{body}
"""

import torch

PROVENANCE = dict(source="test", model="none", upstream="none", license="none",
                  notes="the source had 64 sequences; cut to 40")
INPUTS = ("q",)
OUTPUTS = ("out",)
SMALL_WORKLOAD = dict(batch=2, pages=64)
PAGE = 16
{extra}

def make_inputs(device, generator, *, batch=40, heads=32, kv_heads=8, pages=4096):
    return (torch.randn(batch, heads, 128, device=device, generator=generator),)


def reference(q):
    return q * 2
'''


def _problem(tmp_path, body="Each of the sequences decodes one token.", title_batch="40", extra=""):
    path = tmp_path / "attention" / "99_synthetic.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(PROBLEM.format(heads=32, title_batch=title_batch, body=body, extra=extra))
    return load_problem(path)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem[:2] for p in PATHS])
def test_every_description_quotes_only_numbers_its_workload_backs(path):
    assert unbacked_numbers(load_problem(path)) == []


def test_a_stale_workload_number_is_caught(tmp_path):
    """The text says 64 sequences while make_inputs draws 40 (64 exists only in SMALL_WORKLOAD and
    the provenance notes, neither of which is the graded workload)."""
    assert unbacked_numbers(_problem(tmp_path, title_batch="64")) == ["64"]
    assert unbacked_numbers(_problem(tmp_path, title_batch="40")) == []


def test_the_build_refuses_a_stale_description(tmp_path):
    problem = _problem(tmp_path, body="Pages hold 500 tokens.")
    with pytest.raises(ProblemError, match="500"):
        instruction_md(problem, DSLS["tirx"], "metakernelbench/99_synthetic_tirx")


def test_backing_sources(tmp_path):
    body = ("Query head h reads KV head h // 4 (heads / kv_heads); q is [40, 32, 128]; pages of 16 "
            "(a module constant); positions 0..127; scale 128^-0.5; capacity 77.")
    assert unbacked_numbers(_problem(tmp_path, body=body)) == ["77"]
    derived = "def text_values(*, pages, **_):\n    return {'capacity': pages // 53}\n"
    assert unbacked_numbers(_problem(tmp_path, body=body, extra=derived)) == []


def test_digits_inside_names_are_not_numbers():
    text = "bf16, h32_kv8, sm_90a, Qwen3-Coder-480B, Llama-3.1-8B (TP=8), v1.2.3, top-8 and 5 ms"
    assert [literal for literal, _, _ in quoted_numbers(text)] == ["8", "5"]


def test_ranges_are_two_numbers_and_mark_their_end():
    assert quoted_numbers("rows 512..575") == [("512", 512.0, False), ("575", 575.0, True)]
