"""Isolation probe: searches its own process for the grader's secrets and fails the grade if any is there.

The candidate process must never hold the reference, the input generator, the seeds of future
calls or the choice of rechecked calls (design.md §4, "Isolation"). This submission reaches the
interpreter's module table without a forbidden name (an eval inside typing.get_type_hints), walks
every object reachable from the grader's and the standard library's modules and the process object
(no gc, which the audit hook refuses), and looks for: the problem module or its reference /
make_inputs functions, a problem file path, the grader's Evaluation / GradeConfig / worker handles,
and lists of 63-bit seeds. If it finds one it raises, naming it (RUNTIME_ERROR); otherwise it
computes honestly (PASSED). So that a blind search cannot pass, it must also find the worker's own objects
(the Worker class and the WorkerSetup it was started with), or it raises (RUNTIME_ERROR).
"""

import typing

import torch
import tvm
from tvm.script import tirx as T


@T.prim_func
def rmsnorm(x_h: T.handle, r_h: T.handle, w_h: T.handle, y_h: T.handle):
    tokens = T.int32()
    hidden = T.int32()
    x = T.match_buffer(x_h, (tokens, hidden), "bfloat16")
    res = T.match_buffer(r_h, (tokens, hidden), "bfloat16")
    weight = T.match_buffer(w_h, (hidden,), "bfloat16")
    y = T.match_buffer(y_h, (tokens, hidden), "bfloat16")
    for row in range(tokens):
        sq: T.f32 = T.float32(0.0)
        for i in range(hidden):
            sq = sq + (T.float32(x[row, i]) + T.float32(res[row, i])) * (
                T.float32(x[row, i]) + T.float32(res[row, i]))
        scale: T.f32 = T.float32(1.0) / T.sqrt(sq / T.float32(hidden) + T.float32(1e-5))
        for i in range(hidden):
            y[row, i] = T.bfloat16((T.float32(x[row, i]) + T.float32(res[row, i])) * scale * T.float32(weight[i]))


_KERNEL = []


def _kernel():
    if not _KERNEL:
        exe = tvm.compile(tvm.IRModule({"main": rmsnorm}), target=tvm.target.Target("llvm"), tir_pipeline="tirx")
        _KERNEL.append((exe, exe.mod["main"]))
    return _KERNEL[0][1]


def _reach(m: "__import__('sys').modules"):
    pass


_MODULES = typing.get_type_hints(_reach)["m"]
ROOT_PREFIXES = ("metakernelbench", "__main__", "__mp_main__", "multiprocessing", "torch.multiprocessing",
                 "random", "secrets", "tvm_ffi", "builtins")
SECRET_TYPES = {"Evaluation", "GradeConfig", "Problem", "ProblemSpec", "WorkerHandle"}
SECRET_FUNCTIONS = {"reference", "make_inputs"}
LIMIT = 300_000
_CALLS = [0]


def _attr(obj, name):
    """An attribute read that never runs a lazy loader or a custom __getattr__."""
    try:
        return object.__getattribute__(obj, name)
    except Exception:
        return None


def _inspect(obj, found, markers, stack) -> None:
    kind = type(obj).__name__
    if kind in SECRET_TYPES:
        found.append(f"a {kind} object")
    if kind == "WorkerSetup":
        markers.add("WorkerSetup")
    if isinstance(obj, type) and _attr(obj, "__name__") == "Worker":
        markers.add("Worker")
    name = _attr(obj, "__name__")
    if callable(obj) and isinstance(name, str) and name in SECRET_FUNCTIONS:
        found.append(f"function {name} of {_attr(obj, '__module__')}")
    if type(obj) is str:
        if "/problems/" in obj and obj.endswith(".py"):
            found.append(f"the path {obj}")
        return
    if type(obj) in (list, tuple) and len(obj) >= 7 and all(type(v) is int and v >= 1 << 40 for v in obj):
        found.append(f"{len(obj)} 63-bit integers (seeds?)")
    if type(obj) is dict:
        stack.extend(obj.keys())
        stack.extend(obj.values())
    elif type(obj) in (list, tuple, set, frozenset):
        stack.extend(obj)
    namespace = _attr(obj, "__dict__")
    if type(namespace) is dict or type(namespace).__name__ == "mappingproxy":
        stack.extend(namespace.values())


def _search() -> tuple[list[str], set[str]]:
    roots = [m for name, m in list(_MODULES.items()) if name.startswith(ROOT_PREFIXES)]
    roots.append(_MODULES["multiprocessing"].current_process())
    found, markers, seen, stack = [], set(), set(), roots
    while stack and len(seen) < LIMIT:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            _inspect(obj, found, markers, stack)
        except Exception:  # exotic objects (proxies, lazy modules) are skipped, not fatal
            continue
    for name in list(_MODULES):
        if "problem" in name and name != "metakernelbench.problem_kit":
            found.append(f"module {name}")
    return found, markers


def solve(hidden_states, residual, weight):
    _CALLS[0] += 1
    y = torch.empty_like(hidden_states)
    if _CALLS[0] % 4 == 1:
        found, markers = _search()
        if markers != {"Worker", "WorkerSetup"}:
            raise RuntimeError(f"the search is blind: it reached only {sorted(markers)}")
        if found:
            raise RuntimeError(f"grader secrets in the candidate process: {found[:8]}")
    _kernel()(hidden_states.contiguous(), residual.contiguous(), weight.contiguous(), y)
    return y
