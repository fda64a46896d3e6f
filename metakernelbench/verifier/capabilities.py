"""Take away, from the candidate's process, the ways to run GPU code that no DSL compiler produced.

The contract (design.md §4) lets a submission run only code its DSL compiled and the installed
libraries' own code. The DSL stack ships three kinds of tools that break that rule from Python:

1. **driver module loading and launching** (``cuda.bindings``: ``cuModuleLoadData``,
   ``cuLibraryLoadData``, ``cuLinkAddData``, ``cuLaunchKernel``, ``cuGetProcAddress``, CUDA graphs,
   their runtime-API twins, the ``_v2`` snake-case API, the ``cy*`` C-level capsules and the
   function-pointer tables of ``cuda.bindings._internal``);
2. **runtime CUDA C compilers** (``cuda.bindings.nvrtc``, nvJitLink, NVVM, nvFatbin; torch's own
   NVRTC and driver helpers in ``torch.cuda._utils`` behind ``torch.cuda._compile_kernel``, which
   use ``ctypes``; inductor's ``torch._C._StaticCudaLauncher``, which loads any cubin file);
3. **torch's runtime CUDA compilers** (``torch.cuda.jiterator`` and the ``torch._C`` entry it
   calls, TorchScript's GPU fusers), and the TVM-FFI module loaders and registry hooks
   (``ffi.ModuleLoadFromFile``, ``ffi.Module.load_from_bytes.cuda``, overriding
   ``tvm_callback_cuda_compile``) that hand a DSL runtime foreign code.

Watching for their use inside the process is fragile (the submission controls every Python object
there), so :func:`remove` takes them away instead, once, after the DSL stack is imported and before
the submission is: every entry point is replaced by a function that refuses (a ``GuardViolation``,
announced first with the audit event ``REFUSED_EVENT`` so that an audit hook can record it where
the submission cannot undo it), in its own module and in every other loaded module and class that
held a copy. The originals are not kept where Python can reach them: a refused entry point's
original is dropped; where the DSL itself needs the tool, the original lives only inside an audit
hook (the interpreter keeps hooks where no Python code can list them), and the public entry point
asks that hook for the call through the private audit event ``CALL_EVENT``. The hook runs the
original only for the DSL's own call sites, checked by the calling frame's code object and globals:

- CuTe DSL launches its kernels from JIT-compiled host code (``cudaLibraryLoadData`` in the native
  runtime, never from Python); its one Python-level load is ``cutlass.utils.HardwareInfo``'s
  occupancy query, which loads the cubin that ``cute.compile`` built for an empty kernel.
  ``cuLibraryLoadData`` is admitted from that method only; the handle never reaches the caller
  and every launcher stays removed.
- TIRx (apache-tvm 0.27) compiles its generated CUDA C with NVRTC through ``cuda.bindings.nvrtc``
  (``tvm.support.nvcc``) and builds the module in C++ (``ffi.Module.create.cuda``, which loads
  it natively on first launch). ``ffi.Module.create.cuda`` is admitted when TVM's
  ``codegen_build`` calls it, and NVRTC only from ``tvm.support.nvcc`` while that build runs.

What this cannot close (docs/grading.md): native code the submission already runs can call the
driver directly; ``ctypes`` function pointers built from an address raise no audit event (only
``dlsym`` by name does, and the CUDA entry points are refused here); a submission that rewrites
the DSL's own Python compile path (its passes, TVM's NVRTC helpers, CuTe's compile internals) can
make the DSL itself emit foreign code. Only a check from outside the process (the driver's list of
loaded modules against an independent compile) closes that.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable

from . import guard as _guard
from .guard import GuardViolation

__all__ = ["CALL_EVENT", "REFUSED_EVENT", "remove"]

CALL_EVENT = "metakernelbench.capability.call"  # a removed entry point asks the vault for its original
# raised with the reason before each refusal: the guard's audit hook answers it (fail closed), so a
# submission that catches the GuardViolation still loses the evaluation
REFUSED_EVENT = getattr(_guard, "REFUSE_EVENT", "metakernelbench.refuse")
_audit = sys.audit
_getframe = sys._getframe

# Entry points, by name, in each binding module (fullmatch). Loading, linking, launching, raw
# function pointers, and CUDA graphs (forbidden by the contract, and a launcher of any CUfunction).
_DRIVER = re.compile(r"cu(?:ModuleLoad|ModuleGetFunction|LibraryLoad|Link(?:Create|AddData|AddFile|Complete)"
                     r"|Launch|GetProcAddress|GetExportTable|GraphLaunch|GraphUpload|GraphInstantiate"
                     r"|StreamBeginCapture|GraphAdd\w*Node|Graph\w*NodeSetParams)\w*")
_RUNTIME = re.compile(r"cuda(?:LibraryLoad|Launch|GetDriverEntryPoint|GetKernel|GetFuncBySymbol|GraphLaunch"
                      r"|GraphUpload|GraphInstantiate|StreamBeginCapture|GraphAdd\w*Node|Graph\w*NodeSetParams)\w*")
_DRIVER_V2 = re.compile(r"(?:module_load|module_get_function|library_load|link_(?:create|add_data|add_file|complete)"
                        r"|launch|get_proc_address|get_export_table|graph_launch|graph_upload|graph_instantiate"
                        r"|stream_begin_capture|graph_add_\w*node|graph_\w*node_set_params)\w*")
_COMPILERS = re.compile(r"nvrtc\w+|nvJitLink(?:Create|AddData|AddFile|Complete)\w*"
                        r"|nvvm(?:CreateProgram|AddModuleToProgram|LazyAddModuleToProgram|CompileProgram|VerifyProgram)"
                        r"|nvFatbin(?:Create|Add)\w*")
_COMPILERS_SNAKE = re.compile(r"create\w*|add_\w+|compile_program|complete|lazy_add_module_to_program"
                              r"|verify_program|install_bundled_headers|set_\w+")
# NVRTC calls that compile nothing (error text, versions): left in place
_NVRTC_KEPT = {"nvrtcGetErrorString", "nvrtcVersion", "nvrtcGetNumSupportedArchs", "nvrtcGetSupportedArchs"}
# C symbols refused when any code resolves them by name through ctypes (torch's helpers do)
_SYMBOLS = re.compile(r"(?:cu(?:ModuleLoad|LibraryLoad|Link(?:Create|AddData|AddFile|Complete)|Launch"
                      r"|GetProcAddress|GetExportTable|GraphLaunch|GraphInstantiate|GraphAddKernelNode)"
                      r"|cuda(?:LibraryLoad|Launch|GetDriverEntryPoint|GraphLaunch|GraphInstantiate)"
                      r"|nvrtc(?:CreateProgram|CompileProgram)|nvJitLink(?:Create|AddData|Complete)"
                      r"|nvvm(?:CreateProgram|CompileProgram)|nvFatbinCreate|hipModuleLoad|hipModuleLaunch"
                      r"|hiprtcCompileProgram|TVMFFIFunctionSetGlobal)\w*")

_BINDINGS: tuple[tuple[str, re.Pattern, frozenset], ...] = (
    ("cuda.bindings.driver", _DRIVER, frozenset()),
    ("cuda.bindings.runtime", _RUNTIME, frozenset()),
    ("cuda.bindings._v2.driver", _DRIVER_V2, frozenset()),
    ("cuda.bindings.nvrtc", _COMPILERS, frozenset(_NVRTC_KEPT)),
    ("cuda.bindings._v2.nvrtc", _COMPILERS_SNAKE, frozenset()),
    ("cuda.bindings.nvjitlink", _COMPILERS_SNAKE, frozenset()),
    ("cuda.bindings.nvvm", _COMPILERS_SNAKE, frozenset()),
    ("cuda.bindings.nvfatbin", _COMPILERS_SNAKE, frozenset()),
)
# modules whose C-level capsules (``__pyx_capi__``) give function addresses without a dlsym
_CAPSULES = ("cuda.bindings.cydriver", "cuda.bindings.cyruntime", "cuda.bindings.cynvrtc",
             "cuda.bindings.cynvjitlink", "cuda.bindings.cynvvm", "cuda.bindings.cynvfatbin",
             "cuda.bindings._internal.driver", "cuda.bindings._internal.runtime",
             "cuda.bindings._internal.runtime_ptds", "cuda.bindings._internal.nvrtc",
             "cuda.bindings._internal.nvjitlink", "cuda.bindings._internal.nvvm",
             "cuda.bindings._internal.nvfatbin", "cuda.bindings._v2.driver", "cuda.bindings._v2.nvrtc")
_CAPSULE_NAME = re.compile(f"(?:{_DRIVER.pattern}|{_RUNTIME.pattern}|{_DRIVER_V2.pattern}"
                           r"|nvrtc(?:CreateProgram|CompileProgram)|nvJitLink(?:Create|AddData|AddFile|Complete)"
                           r"|nvvm(?:CreateProgram|AddModuleToProgram|LazyAddModuleToProgram|CompileProgram)"
                           r"|nvFatbin(?:Create|Add\w*))")
# the function-pointer tables cuda.bindings keeps for each library it wraps
_POINTER_TABLES = ("_inspect_function_pointer", "_inspect_function_pointers")

_TORCH: tuple[tuple[str, str], ...] = (
    ("torch._C", "_cuda_jiterator_compile_and_launch_kernel"),
    ("torch.cuda.jiterator", "_create_jit_fn"),
    ("torch.cuda.jiterator", "_create_multi_output_jit_fn"),
    ("torch.cuda", "_compile_kernel"),
    ("torch.cuda._utils", "_nvrtc_compile"),
    ("torch.cuda._utils", "_cuda_load_module"),
    ("torch.cuda._utils", "_get_gpu_rtc_library"),
    ("torch.cuda._utils", "_get_nvrtc_library"),
    ("torch.cuda._utils", "_get_hiprtc_library"),
    ("torch.cuda._utils", "_get_cuda_library"),
    ("torch.cuda._utils", "_get_gpu_runtime_library"),
    ("torch.cuda._utils", "_get_hip_runtime_library"),
    ("torch.cuda._utils", "_CudaKernel.__call__"),
    ("torch._C", "_StaticCudaLauncher._load_kernel"),
    ("torch._C", "_StaticCudaLauncher._launch_kernel"),
    # TorchScript's GPU fusers generate and NVRTC-compile kernels; they are switched off first
    ("torch._C", "_jit_set_texpr_fuser_enabled"),
    ("torch._C", "_jit_override_can_fuse_on_gpu"),
    ("torch._C", "_jit_set_nvfuser_enabled"),
)
_CUTLASS: tuple[tuple[str, str], ...] = (
    ("cutlass.runtime", "load_module"),  # loads an exported object (host code and cubin) from a file
    ("cutlass.runtime", "ExternalBinaryModule.__init__"),
)
# TVM-FFI global functions that load modules from files or bytes, or unregister globals
_FFI_REFUSED = ("ffi.ModuleLoadFromFile", "ffi.Module.load_from_file.so", "ffi.Module.load_from_file.ll",
                "ffi.Module.load_from_bytes.cuda", "ffi.FunctionRemoveGlobal")
# global names nobody may (re)register once the DSL is loaded: the compile callbacks and loaders
_FFI_PROTECTED = re.compile(r"tvm_callback_\w*|ffi\.Module\.\w.*|ffi\.ModuleLoadFromFile|target\.build\.\w+"
                            r"|tirx\.build|ffi\.FunctionRemoveGlobal")

_DONE: list[str] = []


def remove(dsl: str) -> list[str]:
    """Take the GPU code-loading capabilities away from this process; return what was removed.

    Call once in the candidate worker, after the DSL stack (and its launch hooks) is imported and
    before the submission is. ``dsl`` is ``"cutedsl"`` or ``"tirx"`` and selects which of the
    DSL's own call sites keep their tool (see the module docstring). Each returned entry names one
    removed entry point (``module.attr``, a TVM-FFI global, a C capsule or a ctypes symbol family),
    for the grade's record.
    """
    if _DONE:
        return list(_DONE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        removed = _remove(dsl)
    _DONE.extend(removed)
    return list(removed)


class _Plan:
    """What to replace: each original with its replacement and its owner, for the record."""

    def __init__(self) -> None:
        self.entries: list[tuple[object, str, object, object, str]] = []  # owner, attr, original, new, label
        self.by_id: dict[int, tuple[object, object]] = {}  # id(original) -> (original, replacement)
        self.ffi_handles: dict[int, object] = {}  # TVM-FFI function handle -> replacement
        self.gated: dict[str, tuple[object, Callable]] = {}  # vault key -> (original, gate)
        self.labels: list[str] = []

    def refuse(self, owner: object, attr: str, label: str) -> None:
        original = _own_attr(owner, attr)
        if original is not None:
            self._add(owner, attr, original, _wrap_like(original, _refusing(label)), label)

    def gate(self, owner: object, attr: str, label: str, gate: Callable, note: str) -> None:
        original = _own_attr(owner, attr)
        if original is not None:
            self.gated[label] = (_unwrap(original), gate)
            self._add(owner, attr, original, _wrap_like(original, _gated(label)), f"{label} ({note})")

    def _add(self, owner, attr, original, new, label) -> None:
        self.entries.append((owner, attr, original, new, label))
        self.by_id[id(original)] = (original, new)
        self.labels.append(label)


def _own_attr(owner: object, attr: str):
    """``owner``'s own attribute ``attr`` when it is a function-like object, else None."""
    if owner is None:
        return None
    try:
        value = vars(owner).get(attr)
    except TypeError:
        return None
    return value if callable(value) or isinstance(value, (staticmethod, classmethod)) else None


def _unwrap(value):
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value


def _wrap_like(original, stub):
    if isinstance(original, staticmethod):
        return staticmethod(stub)
    if isinstance(original, classmethod):
        return classmethod(stub)
    return stub


def _refusing(label: str) -> Callable:
    why = (f"{label} (only code the DSL compiled may run on the GPU; this entry point was removed from "
           "the process)")

    def refused(*args, **kwargs):
        _audit(REFUSED_EVENT, why)
        raise GuardViolation(f"forbidden by the MetaKernelBench contract: {why}")

    refused.__name__ = refused.__qualname__ = label.rsplit(" ", 1)[-1].rsplit(".", 1)[-1]
    refused.__doc__ = f"Removed by MetaKernelBench: {label} runs GPU code that no DSL compiler produced."
    return refused


def _gated(label: str) -> Callable:
    def gated(*args, **kwargs):
        box: list = []
        _audit(CALL_EVENT, label, args, kwargs, box)
        if box:
            return box[0]
        _audit(REFUSED_EVENT, f"{label} (kept for the DSL's own use only)")
        raise GuardViolation(f"forbidden by the MetaKernelBench contract: {label} (kept for the DSL's own use only)")

    gated.__name__ = gated.__qualname__ = label.rsplit(" ", 1)[-1].rsplit(".", 1)[-1]
    gated.__doc__ = f"Removed by MetaKernelBench: {label}, except where the DSL itself calls it."
    return gated


_GATED_CODE = _gated("x").__code__


def _import(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # not installed, or not importable on this machine: nothing to take away
        return None


def _resolve(module_name: str, path: str) -> tuple[object, str]:
    owner: object = sys.modules.get(module_name) or _import(module_name)
    *classes, attr = path.split(".")
    for name in classes:
        owner = getattr(owner, name, None) if owner is not None else None
    return owner, attr


def _remove(dsl: str) -> list[str]:
    plan = _Plan()
    state = threading.local()  # the vault's count of DSL builds under way on this thread
    _plan_bindings(plan, dsl, state)
    _plan_torch(plan)
    if dsl == "cutedsl":
        for module_name, path in _CUTLASS:
            plan.refuse(*_resolve(module_name, path), f"{module_name}.{path}")
    ffi = _plan_tvm_ffi(plan, dsl, state)
    _install_vault(plan.gated, state)
    registered = ffi() if ffi is not None else []
    for owner, attr, _original, new, _label in plan.entries:
        _set(owner, attr, new)
    _substitute(plan)
    return sorted(plan.labels) + registered + _drop_capsules() + [
        "ctypes lookups (dlsym) of the CUDA loaders, launchers and runtime compilers and of TVMFFIFunctionSetGlobal"]


def _plan_bindings(plan: _Plan, dsl: str, state: threading.local) -> None:
    nvrtc_gate = _tvm_nvrtc_gate() if dsl == "tirx" else None
    occupancy_gate = _cute_occupancy_gate() if dsl == "cutedsl" else None
    for module_name, pattern, kept in _BINDINGS:
        module = _import(module_name)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            if name in kept or not pattern.fullmatch(name) or not callable(value) or isinstance(value, type):
                continue
            label = f"{module_name}.{name}"
            if nvrtc_gate is not None and module_name == "cuda.bindings.nvrtc":
                plan.gate(module, name, label, nvrtc_gate, "kept for TVM's own CUDA build")
            elif occupancy_gate is not None and label == "cuda.bindings.driver.cuLibraryLoadData":
                plan.gate(module, name, label, occupancy_gate, "kept for CuTe DSL's HardwareInfo occupancy query")
            else:
                plan.refuse(module, name, label)
    for module_name in _CAPSULES:
        module = _import(module_name)
        for name in _POINTER_TABLES:
            plan.refuse(module, name, f"{module_name}.{name}")


def _plan_torch(plan: _Plan) -> None:
    torch_c = sys.modules.get("torch._C")
    if torch_c is not None:  # the fusers off first: their setters are removed below
        for setter in ("_jit_set_texpr_fuser_enabled", "_jit_override_can_fuse_on_gpu"):
            with contextlib.suppress(Exception):
                getattr(torch_c, setter)(False)
    for module_name, path in _TORCH:
        plan.refuse(*_resolve(module_name, path), f"{module_name}.{path}")


def _plan_tvm_ffi(plan: _Plan, dsl: str, state: threading.local) -> Callable[[], list[str]] | None:
    """The TVM-FFI globals that load foreign modules are overridden; ``ffi.Module.create.cuda`` is
    kept for TIRx's own build; registering a global is kept for new names only (a submission could
    otherwise replace ``tvm_callback_cuda_compile`` and have the DSL's build load its binary).
    Returns the step that registers the overrides (run once the vault holds the originals)."""
    core = _import("tvm_ffi.core")  # CuTe DSL imports it on its first --enable-tvm-ffi compile
    register = getattr(core, "_register_global_func", None)
    get_global = getattr(core, "_get_global_func", None)
    if register is None or get_global is None:
        return None
    overrides: list[tuple[str, object, str]] = []
    for name in _FFI_REFUSED:
        original = get_global(name, True)
        if original is not None:
            stub = _refusing(f"TVM-FFI global {name}")
            plan.ffi_handles[original.__chandle__()] = stub
            overrides.append((name, stub, f"tvm_ffi global {name}"))
    gate = _tvm_codegen_gate() if dsl == "tirx" else None
    original = get_global("ffi.Module.create.cuda", True)
    if gate is not None and original is not None:
        label = "TVM-FFI global ffi.Module.create.cuda"
        plan.gated[label] = (original, gate)
        stub = _gated(label)
        plan.ffi_handles[original.__chandle__()] = stub
        overrides.append(("ffi.Module.create.cuda", stub, "tvm_ffi global ffi.Module.create.cuda "
                                                           "(kept for TVM's codegen_build only)"))
    plan.gate(core, "_register_global_func", "tvm_ffi.core._register_global_func", _ffi_register_gate(get_global),
              "new names only: no override, no compile callbacks, loaders or builders")

    def apply() -> list[str]:
        # a refusal raised under a TVM-FFI call (C++ calling a removed global) comes back as itself,
        # not as a RuntimeError, so the worker reports a broken rule
        with contextlib.suppress(Exception):
            importlib.import_module("tvm_ffi.error").register_error("GuardViolation", GuardViolation)
        for name, stub, _ in overrides:
            register(name, stub, True)
        return [label for _, _, label in overrides]

    return apply


# ---- gates: the DSL's own call sites, told apart by the calling frame ------------------------------
def _frame_is(frame, function) -> bool:
    """The frame runs ``function``'s code with its module's globals (not a copy built elsewhere)."""
    return frame is not None and frame.f_code is function.__code__ and frame.f_globals is function.__globals__


def _cute_occupancy_gate() -> Callable | None:
    """``cutlass.utils.HardwareInfo._get_device_function``: loads ``cute.compile``'s cubin of an empty
    kernel to ask the driver for occupancy; the loaded library never leaves that method."""
    hardware_info = _import("cutlass.utils.hardware_info")
    method = vars(getattr(hardware_info, "HardwareInfo", object)).get("_get_device_function")
    if not isinstance(method, types.FunctionType):
        return None

    def occupancy_query(caller, args, kwargs, state) -> bool:
        return _frame_is(caller, method)

    return occupancy_query


def _tvm_codegen_gate() -> Callable | None:
    """``tvm.tirx.build.codegen_build``: TVM's CUDA codegen (C++) builds the module of the CUDA C it
    generated through ``ffi.Module.create.cuda``; NVRTC is admitted while that build runs."""
    codegen_build = getattr(_import("tvm.tirx.build"), "codegen_build", None)
    if not isinstance(codegen_build, types.FunctionType):
        return None

    def codegen(caller, args, kwargs, state) -> bool:
        return _frame_is(caller, codegen_build)

    codegen.enters_build = True
    return codegen


def _tvm_nvrtc_gate() -> Callable | None:
    """``tvm.support.nvcc._compile_cuda_nvrtc``, while ``ffi.Module.create.cuda`` runs for TVM's build
    (its C++ side calls back into ``tvm_callback_cuda_compile``)."""
    compile_nvrtc = getattr(_import("tvm.support.nvcc"), "_compile_cuda_nvrtc", None)
    if not isinstance(compile_nvrtc, types.FunctionType):
        return None

    def nvrtc_in_build(caller, args, kwargs, state) -> bool:
        return getattr(state, "depth", 0) > 0 and _frame_is(caller, compile_nvrtc)

    return nvrtc_in_build


def _ffi_register_gate(get_global: Callable) -> Callable:
    def registration(caller, args, kwargs, state) -> bool:
        name = args[0] if args else kwargs.get("name")
        override = args[2] if len(args) > 2 else kwargs.get("override", False)
        if not isinstance(name, str) or override or _FFI_PROTECTED.fullmatch(name):
            return False
        return get_global(name, True) is None

    return registration


# ---- the vault ---------------------------------------------------------------------------------
def _install_vault(gated: dict[str, tuple[object, Callable]], state: threading.local) -> None:
    """An audit hook that holds the originals the DSL still needs and refuses ctypes lookups of the
    removed C entry points. The interpreter keeps audit hooks where Python cannot list or remove
    them, so nothing in it is reachable from the submission (walks of the garbage collector's
    object lists are refused by the guard)."""
    table = dict(gated)
    watched = frozenset({CALL_EVENT, "ctypes.dlsym", "ctypes.dlsym/handle"})
    symbols, getframe, gated_code = _SYMBOLS, _getframe, _GATED_CODE

    def refuse(label: str, why: str):
        _audit(REFUSED_EVENT, f"{label} ({why})")
        raise GuardViolation(f"forbidden by the MetaKernelBench contract: {label} ({why})")

    def vault(event: str, args: tuple) -> None:
        if event not in watched:
            return
        if event != CALL_EVENT:
            name = args[1] if len(args) > 1 else None
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            if isinstance(name, str) and symbols.fullmatch(name):
                refuse(f"ctypes lookup of {name}", "a CUDA loader, launcher or runtime compiler")
            return
        if len(args) != 4 or args[0] not in table or type(args[3]) is not list:
            return
        key, call_args, call_kwargs, box = args
        original, gate = table[key]
        stub = getframe(1)
        if stub.f_code is not gated_code or not gate(stub.f_back, call_args, call_kwargs, state):
            refuse(key, "kept for the DSL's own call site only")
        if getattr(gate, "enters_build", False):
            state.depth = getattr(state, "depth", 0) + 1
            try:
                box.append(original(*call_args, **call_kwargs))
            finally:
                state.depth -= 1
        else:
            box.append(original(*call_args, **call_kwargs))

    sys.addaudithook(vault)


# ---- replacing every copy ----------------------------------------------------------------------
def _set(owner: object, attr: str, value) -> None:
    if isinstance(owner, types.ModuleType):
        vars(owner)[attr] = value
        return
    try:
        setattr(owner, attr, value)
    except (TypeError, AttributeError):  # a static extension type: write its own dict
        _set_type_attr(owner, attr, value)


def _set_type_attr(cls: type, name: str, value) -> None:
    namespace = gc.get_referents(cls.__dict__)[0]  # the type's dict behind its read-only proxy
    namespace[name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def _substitute(plan: _Plan) -> None:
    """Replace the originals wherever else a loaded module, or a class one of them holds, kept a
    copy (``from x import y``, TVM-FFI ``_ffi_api`` tables). One pass over every loaded module's
    namespace and its classes' namespaces (a few hundred thousand values: kept to a tight loop)."""
    by_id, handles = plan.by_id, plan.ffi_handles
    ffi_function = getattr(sys.modules.get("tvm_ffi.core"), "Function", None) if handles else None
    seen: set[int] = set()
    hits: list[tuple[object, str, object]] = []
    owners = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    while owners:
        owner = owners.pop()
        try:
            namespace = object.__getattribute__(owner, "__dict__")
            items = list(namespace.items())
        except Exception:  # no plain namespace to read
            continue
        for name, value in items:
            hit = by_id.get(id(value))
            if hit is not None and hit[0] is value:
                hits.append((owner, name, hit[1]))
            elif type(value) is ffi_function:
                with contextlib.suppress(Exception):
                    new = handles.get(value.__chandle__())
                    if new is not None:
                        hits.append((owner, name, new))
            elif isinstance(value, type) and id(value) not in seen:
                seen.add(id(value))
                owners.append(value)
    for owner, name, new in hits:
        _set(owner, name, new)


def _drop_capsules() -> list[str]:
    """Delete the C-level capsules of removed functions: ctypes can call the addresses they hold."""
    dropped: list[str] = []
    for module_name in _CAPSULES:
        capi = getattr(sys.modules.get(module_name), "__pyx_capi__", None)
        if not isinstance(capi, dict):
            continue
        names = [n for n in capi if _CAPSULE_NAME.fullmatch(n.lstrip("_"))]
        for name in names:
            del capi[name]
        if names:
            dropped.append(f"{module_name}.__pyx_capi__ ({len(names)} C entry points)")
    return dropped
