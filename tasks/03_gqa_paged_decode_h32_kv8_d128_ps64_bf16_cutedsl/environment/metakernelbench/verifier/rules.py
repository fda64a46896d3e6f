"""Static rules: an AST scan of the submitted kernel file before anything of it runs (design.md §4).

The scan rejects the routes the contract forbids that are visible in source: other kernel
languages and compilers, DSL escape hatches to raw CUDA or foreign code, kernel libraries, CUDA
graphs, process/thread tricks, introspection of the grader, monkeypatching and dynamic code.
It is deliberately strict about *names*: an agent has no legitimate reason to mention these, and
each rule says what to do instead. Runtime guards (``guard``) back it up for what source hides.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

__all__ = [
    "DSL_FOREIGN", "FORBIDDEN_BUILTINS", "FORBIDDEN_MODULES", "FORBIDDEN_NAMES", "MAX_KERNEL_BYTES", "QUALIFIED",
    "RuleViolation", "StaticCheck", "check_kernel_file", "check_source", "module_rule", "scan_source",
    "static_refusal",
]

if TYPE_CHECKING:
    from .result import GradeResult

MAX_KERNEL_BYTES = 512 * 1024  # a kernel file larger than this is refused before it is read further

# module prefix -> why it is forbidden
FORBIDDEN_MODULES: dict[str, str] = {
    "triton": "Triton is another kernel language",
    "tilelang": "TileLang is another kernel language",
    "cupy": "CuPy compiles raw CUDA",
    "numba": "Numba compiles its own kernels",
    "jax": "JAX/XLA compiles its own kernels",
    "tvm_tirx": "the standalone tvm_tirx compiler is not the DSL under test",
    "torch.utils.cpp_extension": "inline CUDA/C++ extensions are forbidden",
    "torch._inductor": "torch.compile/inductor generates Triton kernels",
    "torch._dynamo": "torch.compile is forbidden",
    "torch.jit": "TorchScript/NVFuser is forbidden",
    "torch.library": "registering custom ops is forbidden",
    "ctypes": "loading native code is forbidden",
    "cffi": "loading native code is forbidden",
    "cuda.bindings.nvrtc": "NVRTC compiles raw CUDA",
    "cuda.bindings.nvjitlink": "linking foreign device code is forbidden",
    "cuda.bindings.nvvm": "NVVM compiles foreign device code",
    "cuda.bindings.nvfatbin": "packing foreign device code is forbidden",
    "cuda.bindings._v2": "the driver's module loading and launches are forbidden",
    "cuda.bindings._internal": "raw driver function pointers are forbidden",
    "cuda.bindings.cydriver": "raw driver entry points are forbidden",
    "cuda.bindings.cyruntime": "raw runtime entry points are forbidden",
    "cuda.bindings.cynvrtc": "NVRTC compiles raw CUDA",
    "torch.cuda.jiterator": "the jiterator compiles raw CUDA at runtime",
    "torch.cuda._utils": "torch's NVRTC and driver helpers compile and load raw CUDA",
    "cuda.core": "cuda.core launches raw CUDA",
    "cuda.cccl": "CCCL Python kernels are another library",
    "cuda.compute": "cuda.compute kernels are another library",
    "nvmath": "nvmath is a kernel library",
    "pycuda": "PyCUDA compiles raw CUDA",
    "quack": "quack is a CuTe-DSL kernel library",
    "flash_attn": "flash-attention kernels are a kernel library",
    "flashinfer": "FlashInfer kernels are a kernel library",
    "cudnn": "cuDNN frontend kernels are a kernel library",
    "cutlass_cppgen": "CUTLASS C++ is not the DSL under test",
    "cutlass_library": "CUTLASS C++ is not the DSL under test",
    "liger_kernel": "Liger kernels are a kernel library",
    "sgl_kernel": "sgl-kernel is a kernel library",
    "deep_gemm": "DeepGEMM is a kernel library",
    "vllm": "vLLM kernels are a kernel library",
    "xformers": "xFormers kernels are a kernel library",
    "apex": "Apex kernels are a kernel library",
    "tvm.topi": "TOPI is TVM's operator library",
    "tvm.relax": "Relax compiles whole models with library kernels",
    "tvm.s_tir": "s_tir/dlight/meta_schedule generate schedules for you",
    "tvm.te": "TE is not the DSL under test",
    "tvm.contrib": "tvm.contrib wraps vendor libraries and nvcc",
    "tvm.tirx.bench": "tirx.bench overrides the CUDA compile callbacks",
    "tvm.support": "tvm.support.nvcc compiles raw CUDA",
    "tvm_ffi.cpp": "tvm_ffi.cpp builds inline C++/CUDA",
    "cutlass.cute.ffi": "CuTe ffi links foreign bitcode",
    "cutlass.base_dsl.ffi": "CuTe ffi links foreign bitcode",
    "cutlass._mlir": "raw MLIR bypasses the DSL",
    "cutlass.jax": "the JAX bridge is not needed",
    "threading": "work must not continue after solve returns",
    "_thread": "work must not continue after solve returns",
    "multiprocessing": "no helper processes",
    "concurrent": "no helper threads or processes",
    "subprocess": "no helper processes",
    "asyncio": "no background tasks",
    "signal": "no signal handlers",
    "socket": "no network",
    "gc": "no introspection of the grader",
    "inspect": "no introspection of the grader",
    "importlib": "no dynamic imports",
    "builtins": "no patching of builtins",
    "sys": "no interpreter introspection",
    "pickle": "no unpickling",
    "marshal": "no code loading",
    "metakernelbench.verifier": "the grader is not yours to call",
    "metakernelbench.problems": "the reference and input generator are not yours to call",
    "mkb_problem": "the reference and input generator are not yours to call",
    "problem": "the problem file (reference and input generator) must not be imported",
}
DSL_FOREIGN = {"cutedsl": {"tvm": "this task's DSL is CuTe DSL, not TVM"},
               "tirx": {"cutlass": "this task's DSL is TIRx, not CuTe DSL"}}

# attribute or function names that are escape hatches whatever object they hang off
FORBIDDEN_NAMES: dict[str, str] = {
    "CUDAGraph": "CUDA graphs are forbidden", "graph": None,  # checked only as torch.cuda.graph
    "make_graphed_callables": "CUDA graphs are forbidden", "graph_pool_handle": "CUDA graphs are forbidden",
    "compile": None,  # checked only as torch.compile
    "load_inline": "inline C++/CUDA is forbidden", "load_library": "loading native libraries is forbidden",
    "cuModuleLoad": "loading foreign modules is forbidden", "cuModuleLoadData": "loading foreign modules",
    "cuModuleLoadDataEx": "loading foreign modules", "cuLibraryLoadData": "loading foreign modules",
    "cuLaunchKernel": "raw launches are forbidden", "cuLaunchKernelEx": "raw launches are forbidden",
    "cudaLaunchKernel": "raw launches are forbidden",
    "cuModuleLoadFatBinary": "loading foreign modules", "cuModuleGetFunction": "loading foreign modules",
    "cuLibraryLoadFromFile": "loading foreign modules", "cudaLibraryLoadData": "loading foreign modules",
    "cuLinkCreate": "linking foreign device code", "cuLinkAddData": "linking foreign device code",
    "cuLinkAddFile": "linking foreign device code", "cuLinkComplete": "linking foreign device code",
    "cuGetProcAddress": "raw driver entry points", "cudaGetDriverEntryPoint": "raw driver entry points",
    "cuLaunchCooperativeKernel": "raw launches are forbidden",
    "nvrtcCreateProgram": "NVRTC compiles raw CUDA", "nvrtcCompileProgram": "NVRTC compiles raw CUDA",
    "jiterator": "the jiterator compiles raw CUDA at runtime", "_create_jit_fn": "the jiterator compiles raw CUDA",
    "_create_multi_output_jit_fn": "the jiterator compiles raw CUDA",
    "_cuda_jiterator_compile_and_launch_kernel": "the jiterator compiles raw CUDA",
    "_nvrtc_compile": "torch's NVRTC helper compiles raw CUDA", "_cuda_load_module": "loading foreign modules",
    "_StaticCudaLauncher": "inductor's launcher loads foreign cubins",
    "_inspect_function_pointers": "raw driver entry points", "__pyx_capi__": "raw C entry points",
    "call_extern": "extern calls escape the DSL", "call_pure_extern": "extern calls escape the DSL",
    "call_packed": "packed calls escape the DSL", "call_cpacked": "packed calls escape the DSL",
    "call_kernel": "foreign kernels escape the DSL", "call_ffi_kernel": "foreign kernels escape the DSL",
    "func_call": "raw CUDA source escapes the DSL", "source_code": "raw CUDA source escapes the DSL",
    "register_global_func": "overriding TVM callbacks is forbidden",
    "register_func": "overriding TVM callbacks is forbidden",
    "register_tir_pipeline": "custom compiler passes are forbidden",
    "tvm_callback_cuda_compile": "overriding the CUDA compile callback is forbidden",
    "tvm_callback_cuda_postproc": "overriding the CUDA compile callback is forbidden",
    "get_global_func": "TVM global functions can load raw CUDA",
    "load_module": "loading prebuilt modules is forbidden", "export_cuda_host": "raw host export",
    "compile_cuda": "raw CUDA compilation is forbidden",
    "accessPolicyWindow": "persisting-L2 tricks are forbidden",
    "cudaLimitPersistingL2CacheSize": "persisting-L2 tricks are forbidden",
    "_getframe": "no introspection of the grader", "__traceback__": "no introspection of the grader",
    "tb_frame": "no introspection of the grader", "f_back": "no introspection of the grader",
    "f_locals": "no introspection of the grader", "f_globals": "no introspection of the grader",
    "__subclasses__": "no introspection of the grader", "__globals__": "no introspection of the grader",
    "__builtins__": "no patching of builtins", "__code__": "no code objects",
    "sys": "no interpreter introspection (os.sys and friends are sys)",
    "modules": "sys.modules holds the grader's loaded modules",
    "environ": "environment variables are set by the grader", "putenv": "environment is the grader's",
    "system": None,  # checked only as os.system
    "fork": "no helper processes", "execv": "no helper processes", "execve": "no helper processes",
    "spawnv": "no helper processes", "posix_spawn": "no helper processes", "popen": "no helper processes",
}
FORBIDDEN_BUILTINS = {
    "eval": "dynamic code is forbidden", "exec": "dynamic code is forbidden",
    "compile": "dynamic code is forbidden", "__import__": "dynamic imports are forbidden",
    "globals": "no introspection", "vars": "no introspection", "breakpoint": "no debugger",
    "setattr": "monkeypatching is forbidden", "delattr": "monkeypatching is forbidden",
    "open": "the kernel must not read or write files",
}
QUALIFIED: dict[tuple[str, str], str] = {
    ("torch", "compile"): "torch.compile is forbidden (it generates Triton)",
    ("cuda", "graph"): "CUDA graphs are forbidden",
    ("cuda", "_compile_kernel"): "torch.cuda._compile_kernel compiles raw CUDA with NVRTC",
    ("os", "system"): "no helper processes",
    ("os", "fork"): "no helper processes",
}


@dataclass(frozen=True)
class RuleViolation:
    """One broken rule; ``line`` is None when the rule is about the file as a whole (no ``solve``, no
    DSL import), so no line is named rather than a line 0 the file does not have."""

    line: int | None
    rule: str
    detail: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.rule} ({self.detail})"


def module_rule(name: str, dsl: str) -> str | None:
    """Why a kernel written in ``dsl`` may not import module ``name`` (None: it may). The contract's
    table of forbidden imports asks this, so that it states what this scan enforces."""
    table = {**FORBIDDEN_MODULES, **DSL_FOREIGN.get(dsl, {})}
    for prefix, why in table.items():
        if name == prefix or name.startswith(prefix + "."):
            return why
    kit = "metakernelbench.problem_kit"
    if name.startswith("metakernelbench") and name != kit and not name.startswith(kit + "."):
        return "the grader and the problems are not yours to import"
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, dsl: str):
        self.dsl = dsl
        self.found: list[RuleViolation] = []
        self.modules: set[str] = set()  # local names bound to imported modules

    def add(self, node: ast.AST, rule: str, detail: str) -> None:
        self.found.append(RuleViolation(getattr(node, "lineno", None), rule, detail))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            why = module_rule(alias.name, self.dsl)
            if why:
                self.add(node, f"import {alias.name}", why)
            self.modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add(node, "relative import", "the kernel is a single file")
            return
        base = node.module or ""
        why = module_rule(base, self.dsl)
        if why:
            self.add(node, f"from {base} import ...", why)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            sub = module_rule(full, self.dsl)
            if sub and not why:
                self.add(node, f"from {base} import {alias.name}", sub)
            name_why = FORBIDDEN_NAMES.get(alias.name) or QUALIFIED.get((base.split(".")[-1], alias.name))
            if name_why:
                self.add(node, f"import of {alias.name}", name_why)
            self.modules.add(alias.asname or alias.name)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        why = FORBIDDEN_NAMES.get(node.attr)
        if why:
            self.add(node, f"use of .{node.attr}", why)
        if isinstance(node.value, ast.Name):
            qual = QUALIFIED.get((node.value.id, node.attr))
            if qual:
                self.add(node, f"use of {node.value.id}.{node.attr}", qual)
        elif isinstance(node.value, ast.Attribute):
            qual = QUALIFIED.get((node.value.attr, node.attr))
            if qual:
                self.add(node, f"use of ...{node.value.attr}.{node.attr}", qual)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS and isinstance(node.ctx, ast.Load):
            self.add(node, f"use of {node.id}", FORBIDDEN_BUILTINS[node.id])
        elif node.id in FORBIDDEN_NAMES and FORBIDDEN_NAMES[node.id] and isinstance(node.ctx, ast.Load):
            self.add(node, f"use of {node.id}", FORBIDDEN_NAMES[node.id])

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            if not isinstance(node.args[1], ast.Constant):
                self.add(node, "getattr with a computed name", "dynamic attribute access hides what is used")
            elif isinstance(node.args[1].value, str):
                attr = node.args[1].value
                if FORBIDDEN_NAMES.get(attr) or attr in ("compile", "graph", "system"):
                    self.add(node, f"getattr(..., {attr!r})", "forbidden attribute")
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        why = FORBIDDEN_NAMES.get(node.arg or "")
        if why:
            self.add(node.value, f"keyword {node.arg}=", why)
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Attribute):
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.modules:
                self.add(target, f"assignment to {ast.unparse(target)}",
                         "patching imported modules (timers, torch, the DSL) is forbidden")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_target(elt)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)


def scan_source(source: str, dsl: str) -> list[RuleViolation]:
    """All static-rule violations in a kernel file's source (empty when it is clean)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [RuleViolation(exc.lineno, "syntax error", str(exc.msg))]
    scanner = _Scanner(dsl)
    scanner.visit(tree)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "solve" for n in tree.body):
        scanner.found.append(RuleViolation(None, "missing solve", "define solve(*inputs) at module level"))
    uses_dsl = {"cutedsl": ("cutlass",), "tirx": ("tvm",)}.get(dsl, ())
    if uses_dsl and not any(m.split(".")[0] in uses_dsl for m in _imported_modules(tree)):
        scanner.found.append(RuleViolation(None, "no DSL import",
                                              f"a {dsl} kernel file must import {uses_dsl[0]}"))
    return scanner.found


def _imported_modules(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def static_refusal(name: str, dsl: str, source: bytes, started: float) -> GradeResult | None:
    """The verdict of the static stage when it refuses the file (size, syntax, rules), else None.

    ``started`` is the grading's ``time.perf_counter()`` start (the verdict's ``grade_wall_s``)."""
    from .result import Status, failure  # here: the scan above needs only the standard library (sandbox ``check``)

    if len(source) > MAX_KERNEL_BYTES:
        return failure(Status.RULE_VIOLATION, name, dsl, f"kernel file over {MAX_KERNEL_BYTES} bytes")
    violations = scan_source(source.decode("utf-8", errors="replace"), dsl)
    syntax = [v for v in violations if v.rule == "syntax error"]
    if syntax:  # it does not compile: a compile error, not a broken rule
        return failure(Status.COMPILE_ERROR, name, dsl, f"syntax error on line {syntax[0].line}: {syntax[0].detail}",
                       grade_wall_s=time.perf_counter() - started)
    if violations:
        return failure(Status.RULE_VIOLATION, name, dsl, "static rules: " + str(violations[0]),
                       violations=[str(v) for v in violations],
                       grade_wall_s=time.perf_counter() - started)
    return None


@dataclass(frozen=True)
class StaticCheck:
    """One kernel file judged by the static stage: the file (resolved), its DSL and the refusal (None:
    it passed). The first reader of the file checks it once (``grade``, or the judge's runner before it
    starts the workers) and a passing check is handed on to ``grade``, which does not read and parse
    the file again: nothing of the submission runs before the grade releases the candidate worker, so
    the file the worker imports is the file that was checked either way."""

    kernel: Path
    dsl: str
    refusal: GradeResult | None

    @property
    def passed(self) -> bool:
        return self.refusal is None


def check_source(name: str, dsl: str, kernel: Path, source: bytes, started: float) -> StaticCheck:
    """The static stage on the bytes of ``kernel`` already read (``static_refusal``)."""
    return StaticCheck(kernel, dsl, static_refusal(name, dsl, source, started))


def check_kernel_file(name: str, dsl: str, kernel_path: str | Path, started: float) -> StaticCheck:
    """The static stage of a grade: read the kernel file (COMPILE_ERROR when it cannot be read), then
    ``check_source``."""
    from .result import Status, failure

    kernel = Path(kernel_path).resolve()
    try:
        source = kernel.read_bytes()
    except OSError as exc:
        return StaticCheck(kernel, dsl, failure(Status.COMPILE_ERROR, name, dsl, f"cannot read the kernel file: {exc}"))
    return check_source(name, dsl, kernel, source, started)
