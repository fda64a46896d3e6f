"""Count and suppress DSL kernel launches inside the candidate process (the bypass test's lever).

Before the submission is imported, the DSL's launch entry points are wrapped. Every launch is
attributed to a *launch site*: the distinct compiled kernel code it runs, labelled by its kernel
symbol names (CuTe DSL) or by a hash of the generated module source (TIRx), so the label is stable
across calls and recompilations. The grader then re-runs the submission with one site suppressed
at a time; if the outputs are still valid, that site's kernel did not matter.

A submission that launches through some private path escapes the counter, which only hurts it:
every call must show at least one counted DSL launch. The registry also adds up the host time spent
inside DSL launches (the CPU path's stand-in for the profiler's DSL share: a llvm TIRx kernel runs
on the calling thread, so its time is the launch's) and remembers the kernel symbols each site runs
(the profiler's kernels are classified by them on the GPU).

All of this runs inside the candidate's process: it is an early warning and a lever, never the
evidence a verdict rests on alone (the bypass test judges outputs the grader reads itself).

The TIRx compile entry points also audit the module they are given: extern, packed and raw-source
calls (``T.call_extern``, ``T.cuda.func_call(source_code=...)``, ...) leave the DSL however the
submission assembled them, so they are refused before compiling.

Entry points (read from the DSLs' own sources at the pinned versions):
- CuTe DSL 4.8: ``JitCompiledFunction.__call__`` / ``.run_compiled_program`` (direct ``@cute.jit``
  calls end there too) and the TVM-FFI subclasses' ``__call__``.
- TIRx (apache-tvm 0.27): every function handed out by ``tvm_ffi.Module.get_function`` of a module
  produced by ``tvm.compile`` / ``tvm.tirx.build`` / ``Executable.jit`` (``exe(...)``,
  ``exe.mod["main"]`` and ``exe.mod.main`` all go through it).
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .guard import REFUSE_EVENT, GuardViolation

__all__ = ["INSTALLERS", "LaunchRegistry", "REGISTRY", "install_cutedsl", "install_tirx"]

_audit = sys.audit  # bound before any submission code runs
_clock = time.perf_counter_ns


class LaunchRegistry:
    """Per-process launch bookkeeping: counts per site for the current call, one site to skip, the
    host time spent inside DSL launches, and the kernel symbols each site runs."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.suppress: str | None = None
        self.seen: list[str] = []
        self._depth = threading.local()
        self.dsl_ns = 0  # host time inside DSL launches during the current call
        self.kernel_names: dict[str, list[str]] = {}

    def refuse(self, what: str) -> None:
        """A contract violation found by a hook: the audit hook records it and ends the process
        (``guard``); the exception below is only reached when no audit hook is installed."""
        _audit(REFUSE_EVENT, what)
        raise GuardViolation(f"forbidden by the MetaKernelBench contract: {what}")

    def begin_call(self, suppress: str | None) -> None:
        self.counts = Counter()
        self.suppress = suppress
        self.dsl_ns = 0

    def launch(self, label: str, run: Callable[[], Any], names: list[str] | None = None) -> Any:
        """Count one launch of ``label`` and run it, unless it is the suppressed site."""
        depth = getattr(self._depth, "value", 0)
        if depth:  # an inner entry point of a launch already counted
            return run()
        if label not in self.seen:
            self.seen.append(label)
            self.kernel_names[label] = list(names or [])
        self.counts[label] += 1
        if label == self.suppress:
            return None
        self._depth.value = 1
        started = _clock()
        try:
            return run()
        finally:
            self.dsl_ns += _clock() - started
            self._depth.value = 0


REGISTRY = LaunchRegistry()


def _wrap_method(cls: type, name: str, label_of: Callable[[Any], str]) -> None:
    original = cls.__dict__[name]

    @functools.wraps(original)
    def counted(self, *args, **kwargs):
        label = label_of(self)
        return REGISTRY.launch(label, lambda: original(self, *args, **kwargs), _cute_names(self))

    setattr(cls, name, counted)


def _cute_names(fn: Any) -> list[str]:
    return sorted((getattr(fn, "kernel_info", None) or {}).keys())


def _cute_label(fn: Any) -> str:
    cached = getattr(fn, "_mkb_site", None)
    if cached:
        return cached
    names = sorted((getattr(fn, "kernel_info", None) or {}).keys())
    label = "cutedsl:" + (",".join(names) if names else getattr(fn, "function_name", "jit"))
    try:
        fn._mkb_site = label
    except AttributeError:
        pass
    return label


def install_cutedsl() -> str:
    """Wrap CuTe DSL's launch entry points; return the package version."""
    import cutlass
    from cutlass.base_dsl.jit_executor import JitCompiledFunction
    from cutlass.cutlass_dsl import tvm_ffi_provider

    _wrap_method(JitCompiledFunction, "__call__", _cute_label)
    _wrap_method(JitCompiledFunction, "run_compiled_program", _cute_label)
    for cls_name in ("TVMFFIJitCompiledFunction", "TVMFFIJitCompiledFunctionWithKwargs"):
        cls = getattr(tvm_ffi_provider, cls_name, None)
        if cls is not None and "__call__" in cls.__dict__:
            _wrap_method(cls, "__call__", _cute_label)
    return getattr(cutlass, "__version__", "4.8.1")


_KERNEL_NAME = re.compile(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?(\w+)\s*\(")


def _module_label(module: Any, fname: str) -> str:
    """Stable label of a compiled TIRx module: kernel names plus a hash of all its sources."""
    sources, kernels = [], []
    pending = [module]
    while pending:
        mod = pending.pop()
        try:
            text = mod.inspect_source()
        except Exception:  # some module kinds have no source to show
            text = ""
        sources.append(text)
        kernels += _KERNEL_NAME.findall(text)
        pending += list(getattr(mod, "imports", []) or [])
    digest = hashlib.sha1("\n".join(sources).encode()).hexdigest()[:10]
    names = ",".join(sorted(set(kernels))) or fname
    return f"tirx:{names}@{digest}"


# TIRx calls that leave the DSL (dsl-tirx.md §11), as the TVMScript printer spells them. Matching
# the printed module catches them however the submission built the call (T.call_extern in the
# source, or tvm.ir.Call(Op.get(...)) assembled from strings, which no static rule can read).
_ESCAPE_CALLS = re.compile(r"\bT\.(?:call_extern|call_pure_extern|call_packed|call_cpacked|call_ffi_kernel|"
                           r"tvm_call_trace_packed|call_packed_lowered|call_cpacked_lowered|"
                           r"anylist_setitem_call_c?packed|cuda\.func_call)\(")


def _audit_tirx_module(module: Any) -> None:
    """Refuse compiling a module that calls extern functions, packed functions or raw source."""
    if module is None or not hasattr(module, "script"):
        return
    try:
        text = module.script()
    except Exception:  # an unprintable module is audited on its plain text form
        text = str(module)
    found = _ESCAPE_CALLS.search(text)
    if found:
        REGISTRY.refuse(f"TIRx escape hatch {found.group(0)[2:-1]} in a compiled module")


def install_tirx() -> str:
    """Wrap TIRx module functions; return the apache-tvm version."""
    import tvm
    import tvm.runtime.executable as executable
    import tvm_ffi

    compiled: dict[int, Any] = {}  # id -> module, kept alive so ids stay unique

    def remember(module: Any) -> Any:
        if module is not None and hasattr(module, "get_function"):
            compiled[id(module)] = module
        return module

    original_get_function = tvm_ffi.Module.get_function

    @functools.wraps(original_get_function)
    def get_function(self, name, query_imports=False):
        func = original_get_function(self, name, query_imports)
        if id(self) not in compiled:
            return func
        label = _module_label(self, name)
        names = label.split(":", 1)[1].split("@", 1)[0].split(",")

        @functools.wraps(func)
        def launch(*args):
            return REGISTRY.launch(label, lambda: func(*args), names)

        launch.__tvm_ffi_function__ = func
        return launch

    tvm_ffi.Module.get_function = get_function

    original_jit = executable.Executable.jit

    @functools.wraps(original_jit)
    def jit(self, *args, **kwargs):
        return remember(original_jit(self, *args, **kwargs))

    executable.Executable.jit = jit

    original_compile = tvm.compile

    @functools.wraps(original_compile)
    def compile_(*args, **kwargs):
        _audit_tirx_module(args[0] if args else kwargs.get("mod"))
        result = original_compile(*args, **kwargs)
        remember(getattr(result, "mod", result))
        return result

    tvm.compile = compile_
    import tvm.tirx as tirx

    if hasattr(tirx, "build"):
        original_build = tirx.build

        @functools.wraps(original_build)
        def build(*args, **kwargs):
            _audit_tirx_module(args[0] if args else kwargs.get("mod"))
            return remember(original_build(*args, **kwargs))

        tirx.build = build
    return tvm.__version__


INSTALLERS = {"cutedsl": install_cutedsl, "tirx": install_tirx}
