"""Count and suppress DSL kernel launches inside the candidate process (the bypass test's lever).

Before the submission is imported, the DSL's launch entry points are wrapped. Every launch is
attributed to a *launch site*: the distinct compiled kernel code it runs, labelled by its kernel
symbol names (CuTe DSL) or by a hash of the generated module source (TIRx), so the label is stable
across calls and recompilations. The grader then re-runs the submission with one site suppressed
at a time; if the outputs are still valid, that site's kernel did not matter.

A submission that launches through some private path escapes the counter, which only hurts it:
every call must show at least one counted DSL launch.

The TIRx compile entry points also audit the module they are given: extern, packed and raw-source
calls (``T.call_extern``, ``T.cuda.func_call(source_code=...)``, ...) leave the DSL however the
submission assembled them, so they are refused before compiling.

Entry points (from the DSL sources, see notes/dsl-cute.md §8 and dsl-tirx.md §11):
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
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from .guard import GuardViolation

SNAPSHOT_BUDGET = 4 << 30  # bytes of pre-launch snapshots one audit call may collect


class LaunchRegistry:
    """Per-process launch bookkeeping: counts per site for the current call, and one site to skip."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.suppress: str | None = None
        self.seen: list[str] = []
        self._depth = threading.local()
        self.audit_numels: set[int] | None = None
        self.snapshots: list[tuple[str, torch.Tensor]] = []
        self._dsl_produced: list[torch.Tensor] = []  # raw bytes of what DSL launches left, on their device
        self._snapshot_bytes = 0
        self.refusals: list[str] = []  # the worker points this at its guard's violation list

    def refuse(self, what: str) -> None:
        """Record and raise a contract violation found by a hook (kept even if the submission catches it)."""
        if what not in self.refusals:
            self.refusals.append(what)
        raise GuardViolation(f"forbidden by the MetaKernelBench contract: {what}")

    def begin_call(self, suppress: str | None, audit_numels: list[int] | None = None) -> None:
        """Start a call; ``audit_numels`` holds element counts, and byte sizes as negative numbers."""
        self.counts = Counter()
        self.suppress = suppress
        self.audit_numels = set(audit_numels) if audit_numels else None
        self.snapshots, self._dsl_produced, self._snapshot_bytes = [], [], 0

    def launch(self, label: str, run: Callable[[], Any], args: tuple = ()) -> Any:
        """Count one launch of ``label`` and run it, unless it is the suppressed site."""
        depth = getattr(self._depth, "value", 0)
        if depth:  # an inner entry point of a launch already counted
            return run()
        if label not in self.seen:
            self.seen.append(label)
        self.counts[label] += 1
        if label == self.suppress:
            return None
        audited = self._audited(args) if self.audit_numels else []
        for t in audited:
            self._snapshot_before(label, t)
        self._depth.value = 1
        try:
            return run()
        finally:
            self._depth.value = 0
            if audited:
                if audited[0].is_cuda:
                    torch.cuda.synchronize(audited[0].device)
                self._dsl_produced.extend(_raw_bytes(t).clone() for t in audited)

    # ---- the audit: did an answer exist before the DSL kernel that "produced" it ran? ----------
    def _audited(self, args: tuple) -> list[torch.Tensor]:
        return [t for t in _tensors_in(args)
                if t.numel() in self.audit_numels or -(t.numel() * t.element_size()) in self.audit_numels]

    def _snapshot_before(self, label: str, t: torch.Tensor) -> None:
        if t.is_cuda:
            torch.cuda.synchronize(t.device)
        raw = _raw_bytes(t)
        if any(p.numel() == raw.numel() and torch.equal(p, raw) for p in self._dsl_produced):
            return  # written by an earlier DSL launch of this call
        size = t.numel() * t.element_size()
        if self._snapshot_bytes + size <= SNAPSHOT_BUDGET:
            self._snapshot_bytes += size
            self.snapshots.append((label, t.detach().clone().contiguous()))  # stays on its device until sent


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor on its own device (compared there: no host copies)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _tensors_in(args: Any) -> list[torch.Tensor]:
    """The torch tensors behind a launch's arguments (torch, DLPack-able, or CuTe from_dlpack)."""
    found: list[torch.Tensor] = []
    for a in args:
        if type(a) is torch.Tensor:
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found += _tensors_in(a)
        elif getattr(a, "_mkb_source", None) is not None:
            found.append(a._mkb_source)
        elif hasattr(a, "__dlpack__"):
            try:
                found.append(torch.from_dlpack(a))
            except Exception:  # not every DLPack producer is importable; the audit is best effort
                pass
    return found


REGISTRY = LaunchRegistry()


def _wrap_method(cls: type, name: str, label_of: Callable[[Any], str]) -> None:
    original = cls.__dict__[name]

    @functools.wraps(original)
    def counted(self, *args, **kwargs):
        return REGISTRY.launch(label_of(self), lambda: original(self, *args, **kwargs), args)

    setattr(cls, name, counted)


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
    import cutlass.cute.runtime as cute_runtime
    from cutlass.base_dsl.jit_executor import JitCompiledFunction
    from cutlass.cutlass_dsl import tvm_ffi_provider

    original_from_dlpack = cute_runtime.from_dlpack

    @functools.wraps(original_from_dlpack)
    def from_dlpack(tensor, *args, **kwargs):
        wrapped = original_from_dlpack(tensor, *args, **kwargs)
        if isinstance(tensor, torch.Tensor):
            try:
                object.__setattr__(wrapped, "_mkb_source", tensor)
            except (AttributeError, TypeError):
                pass
        return wrapped

    cute_runtime.from_dlpack = from_dlpack
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

        @functools.wraps(func)
        def launch(*args):
            return REGISTRY.launch(label, lambda: func(*args), args)

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
