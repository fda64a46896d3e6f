"""Every oracle kernel under ``oracles/<family>/``: where it lives, the rules it obeys, what tests it.

Generic over the files, so an oracle added later is checked without editing this file: it sits in
its problem's family folder and is named after a task, passes the judge's static rules, its
``solve`` takes the problem's inputs in order, any ``WORKLOAD`` it compiles for is the graded one,
and some test under ``tests/oracles/`` names it (its compile checks live there).
"""

from __future__ import annotations

import inspect

import pytest
from oracle_support import ORACLES, load

from metakernelbench.problems import find_problem, oracle_file, oracle_files
from metakernelbench.verifier.rules import scan_source

FILES = oracle_files(ORACLES)
TESTS = "\n".join(p.read_text() for p in ORACLES.parent.joinpath("tests", "oracles").rglob("test_*.py")
                  if p.name != "test_oracle_files.py")


def _stem_dsl(path):
    stem, _, dsl = path.stem.rpartition("_")
    return stem, dsl


def test_there_are_oracles():
    assert FILES and all(_stem_dsl(p)[1] in ("cutedsl", "tirx") for p in FILES)


def test_nothing_else_in_the_family_folders():
    strays = [p for p in ORACLES.glob("*/*") if p not in FILES and p.name != "__pycache__"]
    assert not strays, strays


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_oracle_sits_where_its_task_expects_it(path):
    stem, dsl = _stem_dsl(path)
    assert oracle_file(find_problem(stem), dsl, ORACLES) == path


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_oracle_passes_the_static_rules(path):
    assert scan_source(path.read_text(), _stem_dsl(path)[1]) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_oracle_is_named_by_a_compile_test(path):
    stem, dsl = _stem_dsl(path)
    assert stem in TESTS, f"no test under tests/oracles names {stem}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_solve_takes_the_problem_inputs(path):
    stem, dsl = _stem_dsl(path)
    pytest.importorskip("cutlass.cute" if dsl == "cutedsl" else "tvm")
    module, spec = load(stem, dsl), find_problem(stem).spec
    assert tuple(inspect.signature(module.solve).parameters) == spec.inputs
    workload = getattr(module, "WORKLOAD", {})
    assert workload == {k: spec.workload[k] for k in workload}
