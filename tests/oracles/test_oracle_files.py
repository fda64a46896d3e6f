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



def exports_its_keys(source: str) -> bool:
    """Every ``tvm.IRModule`` of a TIRx oracle is a single ``{"main": ...}`` (found under "main"), or its
    functions are re-exported under their keys with ``with_attr("global_symbol", key)``."""
    import ast

    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "IRModule"):
            continue
        arg = node.args[0] if node.args else None
        only_main = isinstance(arg, ast.Dict) and all(isinstance(k, ast.Constant) and k.value == "main"
                                                     for k in arg.keys)
        value = arg.value if isinstance(arg, ast.DictComp) else None
        re_exported = (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                       and value.func.attr == "with_attr" and bool(value.args)
                       and isinstance(value.args[0], ast.Constant) and value.args[0].value == "global_symbol"
                       and isinstance(arg.key, ast.Name) and len(value.args) > 1
                       and isinstance(value.args[1], ast.Name) and value.args[1].id == arg.key.id)
        if not (only_main or re_exported):
            return False
    return True


@pytest.mark.parametrize("path", [p for p in oracle_files() if p.stem.endswith("_tirx")], ids=lambda p: p.stem)
def test_tirx_kernels_looked_up_by_name_are_exported_under_that_name(path):
    """tvm.compile exports a prim_func under its own global_symbol, not its IRModule key: a lookup by
    key then fails on the GPU ("Module has no function"), which no CPU compile shows."""
    assert exports_its_keys(path.read_text())


def test_the_export_check_can_fail():
    unexported = 'funcs = {"router": a(), "gate": b()}\nexe = tvm.compile(tvm.IRModule(funcs))\n'
    assert not exports_its_keys(unexported)
    assert not exports_its_keys('exe = tvm.compile(tvm.IRModule({"router": a(), "main": b()}))\n')
    assert exports_its_keys('exe = tvm.compile(tvm.IRModule({"main": a()}))\n')
    fixed = 'tvm.IRModule({k: f.with_attr("global_symbol", k) for k, f in funcs.items()})'
    assert exports_its_keys(unexported.replace("tvm.IRModule(funcs)", fixed))


def swizzles_split_vectors(source: str) -> list[str]:
    """The ``make_swizzle(B, M, S)`` calls whose M is below 4. A CuTe DSL pointer swizzle (the one
    ``SmemAllocator.allocate_tensor(..., swizzle=...)`` takes) acts on byte addresses, xor-ing bits
    [M + S, M + S + B) into [M, M + B): with M = 3 it moves 8-byte halves of a 16-byte ``cp.async`` or
    ``ldmatrix`` row, and the GPU stops on a misaligned address (CUTLASS's element-index <3, 3, 3> for
    bf16 is <3, 4, 3> on bytes)."""
    import ast

    bad = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "make_swizzle"
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) and node.args[1].value < 4):
            bad.append(ast.unparse(node))
    return bad


@pytest.mark.parametrize("path", [p for p in oracle_files() if p.stem.endswith("_cutedsl")], ids=lambda p: p.stem)
def test_cutedsl_swizzles_keep_16_byte_vectors_whole(path):
    """benchmarks/h200_cute_swizzle.py shows the fault on the GPU (results/h200/cute-swizzle.json)."""
    assert swizzles_split_vectors(path.read_text()) == []


def test_the_swizzle_check_can_fail():
    assert swizzles_split_vectors("s = cute.make_swizzle(3, 3, 3)\n") == ["cute.make_swizzle(3, 3, 3)"]
    assert swizzles_split_vectors("s = cute.make_swizzle(3, 4, 3)\n") == []
