"""The static rules (``verifier.rules``): each forbidden route is flagged, honest kernel files are not.

Every snippet below is a complete kernel file apart from the one forbidden route, so the test
checks that *this* route is what gets flagged (and the clean variant of the same file is not).
The honest files are the project's oracles (CUDA, both DSLs), the CPU fixtures and the exploit
suite's control submissions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metakernelbench.problems import oracle_files
from metakernelbench.verifier.rules import scan_source

REPO = Path(__file__).resolve().parents[2]
TIRX_HEAD = "import torch\nimport tvm\nfrom tvm.script import tirx as T\n"
CUTE_HEAD = "import torch\nimport cutlass\nimport cutlass.cute as cute\n"
SOLVE = "\n\ndef solve(*inputs):\n    return inputs[0]\n"

# (id, dsl, offending source, a substring of the flagged rule)
ROUTES = [
    ("triton", "tirx", "import triton", "import triton"),
    ("triton_from", "tirx", "from triton import language", "from triton"),
    ("tilelang", "tirx", "import tilelang", "import tilelang"),
    ("cupy", "tirx", "import cupy", "import cupy"),
    ("numba", "tirx", "from numba import cuda", "from numba"),
    ("load_inline_module", "tirx", "import torch.utils.cpp_extension", "cpp_extension"),
    ("load_inline_name", "tirx", "ext = torch.utils.cpp_extension.load_inline('x', '')", "load_inline"),
    ("torch_compile", "tirx", "f = torch.compile(lambda x: x)", "torch.compile"),
    ("inductor", "tirx", "import torch._inductor", "torch._inductor"),
    ("torch_jit", "tirx", "from torch.jit import script", "torch.jit"),
    ("cuda_graph_class", "tirx", "g = torch.cuda.CUDAGraph()", "CUDAGraph"),
    ("cuda_graph_context", "tirx", "ctx = torch.cuda.graph", "cuda.graph"),
    ("graphed_callables", "tirx", "f = torch.cuda.make_graphed_callables", "make_graphed_callables"),
    ("nvrtc", "cutedsl", "from cuda.bindings import nvrtc", "nvrtc"),
    ("cu_module_load", "cutedsl", "from cuda.bindings import driver\nm = driver.cuModuleLoadData(b'')",
     "cuModuleLoadData"),
    ("cu_link", "tirx", "import cuda.bindings.driver as d\nerr, link = d.cuLinkCreate(0, [], [])", "cuLinkCreate"),
    ("cu_get_function", "tirx", "import cuda.bindings.driver as d\nf = d.cuModuleGetFunction", "cuModuleGetFunction"),
    ("cu_proc_address", "cutedsl", "import cuda.bindings.driver as d\np = d.cuGetProcAddress", "cuGetProcAddress"),
    ("driver_v2", "tirx", "from cuda.bindings._v2 import driver", "cuda.bindings._v2"),
    ("nvrtc_name", "tirx", "p = nv.nvrtcCompileProgram", "nvrtcCompileProgram"),
    ("jiterator_module", "tirx", "from torch.cuda import jiterator", "jiterator"),
    ("jiterator_attr", "tirx", "f = torch.cuda.jiterator._create_jit_fn('')", "jiterator"),
    ("torch_compile_kernel", "tirx", "k = torch.cuda._compile_kernel('', 'k')", "_compile_kernel"),
    ("torch_compile_kernel_from", "tirx", "from torch.cuda import _compile_kernel", "_compile_kernel"),
    ("torch_cuda_utils", "tirx", "from torch.cuda import _utils\nb = _utils._nvrtc_compile('', 'k')", "_nvrtc_compile"),
    ("static_launcher", "tirx", "k = torch._C._StaticCudaLauncher", "_StaticCudaLauncher"),
    ("ctypes", "tirx", "import ctypes", "import ctypes"),
    ("call_extern", "tirx", "x = T.call_extern('float32', 'sqrtf', 1.0)", "call_extern"),
    ("call_pure_extern", "tirx", "x = T.call_pure_extern('float32', 'expf', 1.0)", "call_pure_extern"),
    ("call_packed", "tirx", "x = T.call_packed('f')", "call_packed"),
    ("func_call_source", "tirx", "x = T.cuda.func_call('f', source_code='__device__ void f(){}')", "func_call"),
    ("call_kernel", "tirx", "x = T.call_kernel('k')", "call_kernel"),
    ("get_global_func", "tirx", "f = tvm.get_global_func('ffi.Module.create.cuda')", "get_global_func"),
    ("register_global_func", "tirx", "import tvm_ffi\ntvm_ffi.register_global_func('tvm_callback_cuda_compile')",
     "register_global_func"),
    ("tvm_ffi_cpp", "tirx", "import tvm_ffi.cpp", "tvm_ffi.cpp"),
    ("load_module", "tirx", "m = tvm.runtime.load_module('x.so')", "load_module"),
    ("topi", "tirx", "from tvm import topi", "topi"),
    ("relax", "tirx", "import tvm.relax", "tvm.relax"),
    ("contrib", "tirx", "from tvm.contrib import nvcc", "tvm.contrib"),
    ("s_tir", "tirx", "import tvm.s_tir", "tvm.s_tir"),
    ("cutlass_in_tirx", "tirx", "import cutlass", "import cutlass"),
    ("tvm_in_cutedsl", "cutedsl", "import tvm", "import tvm"),
    ("cute_ffi", "cutedsl", "from cutlass.cute import ffi", "cutlass.cute"),
    ("cute_mlir", "cutedsl", "import cutlass._mlir", "cutlass._mlir"),
    ("quack", "cutedsl", "import quack", "import quack"),
    ("flashinfer", "cutedsl", "import flashinfer", "import flashinfer"),
    ("persisting_l2", "tirx", "x = rt.cudaLimit.cudaLimitPersistingL2CacheSize", "cudaLimitPersistingL2CacheSize"),
    ("access_policy", "tirx", "attr.accessPolicyWindow.num_bytes = 1", "accessPolicyWindow"),
    ("threading", "tirx", "import threading", "import threading"),
    ("thread_module", "tirx", "import _thread", "import _thread"),
    ("concurrent", "tirx", "from concurrent.futures import ThreadPoolExecutor", "concurrent"),
    ("multiprocessing", "tirx", "import multiprocessing", "import multiprocessing"),
    ("subprocess", "tirx", "import subprocess", "import subprocess"),
    ("os_system", "tirx", "import os\nos.system('true')", "os.system"),
    ("os_fork", "tirx", "import os\nos.fork()", "fork"),
    ("gc", "tirx", "import gc", "import gc"),
    ("inspect", "tirx", "import inspect", "import inspect"),
    ("sys", "tirx", "import sys", "import sys"),
    ("os_sys", "tirx", "import os\nm = os.sys", ".sys"),
    ("sys_modules", "tirx", "import os\nw = os.path.sys.modules['metakernelbench.verifier.worker']", ".modules"),
    ("getframe", "tirx", "f = torch._getframe", "_getframe"),
    ("traceback_frames", "tirx", "try:\n    pass\nexcept Exception as e:\n    f = e.__traceback__.tb_frame",
     "__traceback__"),
    ("f_back", "tirx", "g = (lambda: 0).f_back", "f_back"),
    ("globals_attr", "tirx", "g = solve.__globals__", "__globals__"),
    ("subclasses", "tirx", "s = object.__subclasses__()", "__subclasses__"),
    ("builtins", "tirx", "import builtins", "import builtins"),
    ("dunder_builtins", "tirx", "b = __builtins__", "__builtins__"),
    ("eval", "tirx", "x = eval('1')", "eval"),
    ("exec", "tirx", "exec('x = 1')", "exec"),
    ("compile_builtin", "tirx", "c = compile('1', 'f', 'eval')", "compile"),
    ("dunder_import", "tirx", "t = __import__('tri' + 'ton')", "__import__"),
    ("importlib", "tirx", "import importlib", "import importlib"),
    ("importlib_from", "tirx", "from importlib import import_module", "importlib"),
    ("open", "tirx", "src = open('/etc/passwd').read()", "open"),
    ("globals_call", "tirx", "g = globals()", "globals"),
    ("vars_call", "tirx", "v = vars(torch)", "vars"),
    ("setattr", "tirx", "setattr(torch, 'matmul', None)", "setattr"),
    ("getattr_computed", "tirx", "name = 'call_' + 'extern'\nf = getattr(T, name)", "getattr with a computed name"),
    ("getattr_forbidden", "tirx", "f = getattr(T, 'call_extern')", "getattr"),
    ("patch_module_attr", "tirx", "import time\ntime.perf_counter_ns = lambda: 0",
     "assignment to time.perf_counter_ns"),
    ("patch_torch", "tirx", "torch.cuda.synchronize = lambda *a: None", "assignment to torch.cuda.synchronize"),
    ("patch_tuple_target", "tirx", "import time\ntime.time, x = None, 1", "assignment to time.time"),
    ("augassign_module", "tirx", "import time\ntime.x += 1", "assignment to time.x"),
    ("delete_module_attr", "tirx", "del torch.cuda.synchronize", "assignment to torch.cuda.synchronize"),
    ("environ", "tirx", "import os\nos.environ['TVM_CUDA_NVRTC_EXTRA_OPTS'] = '-include x.cuh'", "environ"),
    ("pickle", "tirx", "import pickle", "import pickle"),
    ("socket", "tirx", "import socket", "import socket"),
    ("verifier", "tirx", "from metakernelbench.verifier import grader", "metakernelbench.verifier"),
    ("problems", "tirx", "from metakernelbench.problems import find_problem", "metakernelbench.problems"),
    ("metakernelbench_root", "tirx", "import metakernelbench", "metakernelbench"),
    ("problem_module", "tirx", "import problem", "import problem"),
    ("relative_import", "tirx", "from . import helper", "relative import"),
]


@pytest.mark.parametrize(("dsl", "code", "rule"), [pytest.param(d, c, r, id=i) for i, d, c, r in ROUTES])
def test_forbidden_route_is_flagged(dsl, code, rule):
    head = TIRX_HEAD if dsl == "tirx" else CUTE_HEAD
    found = scan_source(head + code + SOLVE, dsl)
    assert any(rule in v.rule for v in found), f"{rule!r} not flagged; got {[str(v) for v in found]}"
    assert all(v.line > 0 for v in found if rule in v.rule), "a violation names its line"


@pytest.mark.parametrize("dsl", ["tirx", "cutedsl"])
def test_clean_skeleton_is_not_flagged(dsl):
    head = TIRX_HEAD if dsl == "tirx" else CUTE_HEAD
    assert scan_source(head + SOLVE, dsl) == []


def test_missing_solve_is_flagged():
    found = scan_source(TIRX_HEAD + "def run(*inputs):\n    pass\n", "tirx")
    assert [v.rule for v in found] == ["missing solve"]


def test_nested_solve_does_not_count():
    found = scan_source(TIRX_HEAD + "class K:\n    def solve(self):\n        pass\n", "tirx")
    assert "missing solve" in [v.rule for v in found]


@pytest.mark.parametrize(("dsl", "other"), [("tirx", CUTE_HEAD), ("cutedsl", "import torch\n")])
def test_a_file_without_its_dsl_is_flagged(dsl, other):
    found = scan_source(other + SOLVE, dsl)
    assert "no DSL import" in [v.rule for v in found]


@pytest.mark.parametrize(("source", "rule"), [("import torch\n" + SOLVE, "no DSL import"),
                                              (TIRX_HEAD + "def run(*inputs):\n    pass\n", "missing solve")])
def test_a_rule_about_the_whole_file_names_no_line(source, rule):
    (found,) = [v for v in scan_source(source, "tirx") if v.rule == rule]
    assert found.line is None and str(found).startswith(rule), str(found)  # not "line 0: ..."


def test_syntax_error_is_reported_not_raised():
    found = scan_source("def solve(:\n", "tirx")
    assert len(found) == 1 and found[0].rule == "syntax error"


def test_problem_kit_may_be_imported():
    assert scan_source(TIRX_HEAD + "from metakernelbench.problem_kit import acc" + SOLVE, "tirx") == []


def test_local_objects_may_be_assigned_attributes():
    code = "class Cache:\n    pass\n\n\nc = Cache()\nc.value = 1\n_state = {}\n_state['k'] = 2"
    assert scan_source(TIRX_HEAD + code + SOLVE, "tirx") == []


def _honest_files() -> list:
    files = []
    for path in oracle_files(REPO / "oracles"):  # the controls (_*.py) define no solve
        dsl = "cutedsl" if path.stem.endswith("cutedsl") else "tirx" if path.stem.endswith("tirx") else None
        if dsl:
            files.append(pytest.param(path, dsl, id=f"oracles/{path.parent.name}/{path.name}"))
    for path in sorted((REPO / "tests" / "fixtures" / "kernels").glob("*.py")):
        files.append(pytest.param(path, "tirx", id=f"fixtures/{path.name}"))
    for path in sorted((REPO / "tests" / "exploits").glob("control_*.py")):
        files.append(pytest.param(path, "tirx", id=f"exploits/{path.name}"))
    return files


HONEST = _honest_files()


def test_there_are_honest_files_to_check():
    names = [p.id for p in HONEST]
    assert any(n.startswith("oracles/") and n.endswith("_tirx.py") for n in names)
    assert any(n.startswith("oracles/") and n.endswith("_cutedsl.py") for n in names)
    assert any(n.startswith("exploits/control_") for n in names)


@pytest.mark.parametrize(("path", "dsl"), HONEST)
def test_honest_kernel_files_are_not_flagged(path, dsl):
    assert [str(v) for v in scan_source(path.read_text(), dsl)] == []
