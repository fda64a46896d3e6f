"""Run by test_capabilities.py in a fresh process: ``python capabilities_probe.py <dsl> [removal]``.

Imports torch and the DSL as a candidate worker does (launch hooks included), records the original
entry points, calls ``capabilities.remove(dsl)`` (unless the second argument is ``none``, the
control run that proves the checks can fail) and prints one JSON line: what refused, which
originals are still held by a loaded module or class, and whether the DSL still compiles (and, for
TIRx, runs on llvm). Kernels sit at module level: both DSLs read their source from the file.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import types
import warnings

import torch

DSL = sys.argv[1] if __name__ == "__main__" else "none"
REMOVE = len(sys.argv) < 3 or sys.argv[2] != "none"

if DSL == "cutedsl":
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    @cute.kernel
    def _add_one(y: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        y[tidx] = y[tidx] + cutlass.Float32(1.0)

    @cute.jit
    def _launch(y: cute.Tensor):
        _add_one(y).launch(grid=[1, 1, 1], block=[32, 1, 1])

elif DSL == "tirx":
    import tvm
    import tvm_ffi
    from tvm.script import tirx as T

    @T.prim_func
    def _add_one_cpu(x: T.Buffer((8,), "float32"), y: T.Buffer((8,), "float32")):
        for i in range(8):
            y[i] = x[i] + T.float32(1.0)

    @T.prim_func
    def _add_one_cuda(x_h: T.handle, y_h: T.handle):
        n = T.int32()
        x = T.match_buffer(x_h, (n,), "float32")
        y = T.match_buffer(y_h, (n,), "float32")
        T.device_entry()
        block = T.cta_id([(n + 127) // 128])
        tx = T.thread_id([128])
        if block * 128 + tx < n:
            y[block * 128 + tx] = x[block * 128 + tx] + T.float32(1.0)


COMMON = [
    "cuda.bindings.driver:cuModuleLoad", "cuda.bindings.driver:cuModuleLoadData",
    "cuda.bindings.driver:cuModuleLoadDataEx", "cuda.bindings.driver:cuModuleLoadFatBinary",
    "cuda.bindings.driver:cuLibraryLoadData", "cuda.bindings.driver:cuLibraryLoadFromFile",
    "cuda.bindings.driver:cuLinkCreate", "cuda.bindings.driver:cuLinkAddData", "cuda.bindings.driver:cuLinkComplete",
    "cuda.bindings.driver:cuModuleGetFunction", "cuda.bindings.driver:cuLaunchKernel",
    "cuda.bindings.driver:cuLaunchKernelEx", "cuda.bindings.driver:cuLaunchCooperativeKernel",
    "cuda.bindings.driver:cuGetProcAddress", "cuda.bindings.driver:cuGraphLaunch",
    "cuda.bindings.driver:cuGraphAddKernelNode", "cuda.bindings.driver:cuStreamBeginCapture",
    "cuda.bindings.runtime:cudaLibraryLoadData", "cuda.bindings.runtime:cudaGetDriverEntryPoint",
    "cuda.bindings.runtime:cudaGraphLaunch", "cuda.bindings._v2.driver:module_load_data",
    "cuda.bindings._v2.driver:library_load_data", "cuda.bindings._v2.driver:launch_kernel",
    "cuda.bindings._v2.driver:get_proc_address_v2", "cuda.bindings.nvrtc:nvrtcCreateProgram",
    "cuda.bindings.nvrtc:nvrtcCompileProgram", "cuda.bindings._v2.nvrtc:create_program",
    "cuda.bindings._v2.nvrtc:compile_program", "cuda.bindings.nvjitlink:create", "cuda.bindings.nvjitlink:add_data",
    "cuda.bindings.nvvm:compile_program", "cuda.bindings.nvfatbin:create",
    "cuda.bindings._internal.driver:_inspect_function_pointers",
    "torch._C:_cuda_jiterator_compile_and_launch_kernel", "torch.cuda.jiterator:_create_jit_fn",
    "torch.cuda.jiterator:_create_multi_output_jit_fn", "torch.cuda:_compile_kernel",
    "torch.cuda._utils:_nvrtc_compile", "torch.cuda._utils:_cuda_load_module",
    "torch.cuda._utils:_get_gpu_runtime_library", "torch.cuda._utils:_get_nvrtc_library",
    "torch._C:_StaticCudaLauncher._load_kernel", "torch._C:_StaticCudaLauncher._launch_kernel",
    "torch._C:_jit_set_texpr_fuser_enabled", "torch._C:_jit_override_can_fuse_on_gpu",
    "tvm_ffi._ffi_api:ModuleLoadFromFile",
]
PER_DSL = {"cutedsl": ["cutlass.runtime:load_module", "cutlass.cute.runtime:load_module",
                       "cutlass.runtime:ExternalBinaryModule.__init__"],
           "tirx": []}


def _resolve(path: str):
    module_name, attr_path = path.split(":")
    value = importlib.import_module(module_name)
    for part in attr_path.split("."):
        value = getattr(value, part)
    return value


def _outcome(call) -> str:
    from metakernelbench.verifier.guard import GuardViolation

    try:
        call()
    except GuardViolation:
        return "refused"
    except BaseException as exc:  # noqa: BLE001 - any other outcome is reported as such
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return "ran"


def _holders(original) -> list[str]:
    """Loaded modules and classes whose namespace still holds ``original`` (by identity, or by TVM-FFI
    handle for TVM-FFI functions)."""
    ffi_function = getattr(sys.modules.get("tvm_ffi.core"), "Function", None)
    handle = original.__chandle__() if ffi_function is not None and type(original) is ffi_function else None
    found, seen = [], set()
    owners = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    while owners:
        owner = owners.pop()
        try:
            items = list(object.__getattribute__(owner, "__dict__").items())
        except Exception:
            continue
        for name, value in items:
            wrapped = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            same = wrapped is original or (handle is not None and type(value) is ffi_function
                                           and value.__chandle__() == handle)
            if same:
                found.append(f"{getattr(owner, '__name__', owner)}.{name}")
            elif isinstance(value, type) and id(value) not in seen:
                seen.add(id(value))
                owners.append(value)
    return found


def probe(dsl: str, remove: bool) -> dict:
    from metakernelbench.verifier import capabilities, hooks

    if dsl in hooks.INSTALLERS:
        hooks.INSTALLERS[dsl]()
    import tvm_ffi  # noqa: F401 - both DSL stacks may load it; its loaders are checked too

    paths = COMMON + PER_DSL.get(dsl, [])
    originals = {p: _resolve(p) for p in paths}
    compiled_cubins: list[bytes] = []
    nvrtc_headers = dsl == "tirx" and os.environ.get("CUDA_PATH") and \
        os.path.isfile(os.path.join(os.environ["CUDA_PATH"], "include", "cuda_runtime.h"))
    if nvrtc_headers:
        _fake_cuda_runtime(compiled_cubins)  # stands in for the GPU build's CUDA module factory
    removed = capabilities.remove(dsl) if remove else []
    result: dict = {"removed": removed, "refused": {}, "held": {}}
    for path in paths:
        current = _resolve(path)
        result["refused"][path] = _outcome(lambda c=current: c("mkb-probe", 0, 0, 0))
        holders = _holders(originals[path])
        if holders:
            result["held"][path] = holders
    result.update(_process_wide(dsl))
    if dsl == "cutedsl":
        result.update(_cutedsl_checks())
    elif dsl == "tirx":
        result.update(_tirx_checks(compiled_cubins if nvrtc_headers else None))
    return result


def _process_wide(dsl: str) -> dict:
    import _imp

    import tvm_ffi

    out: dict = {}
    libc = ctypes.CDLL(None)
    out["dlsym_cuModuleLoadData"] = _outcome(lambda: libc.cuModuleLoadData)
    out["dlsym_nvrtcCompileProgram"] = _outcome(lambda: libc["nvrtcCompileProgram"])
    out["dlsym_getpid"] = _outcome(lambda: libc.getpid)
    capi = importlib.import_module("cuda.bindings.cydriver").__pyx_capi__
    out["capsule_cuModuleLoadData"] = "cuModuleLoadData" in capi
    out["capsule_cuDeviceGet"] = "cuDeviceGet" in capi
    driver = importlib.import_module("cuda.bindings.driver")
    again = _imp.create_dynamic(importlib.util.find_spec("cuda.bindings.driver"))
    out["reimport_same_module"] = again is driver
    out["reimport_keeps_removal"] = type(again.cuModuleLoadData).__name__ == "function"
    out["fusers_off"] = not torch._C._jit_texpr_fuser_enabled() and not torch._C._jit_can_fuse_on_gpu()

    def compile_callback(code):
        return b""

    out["override_compile_callback"] = _outcome(
        lambda: tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_callback, override=True))
    out["register_postproc"] = _outcome(
        lambda: tvm_ffi.register_global_func("tvm_callback_cuda_postproc", compile_callback))
    out["remove_global"] = _outcome(lambda: tvm_ffi.remove_global_func("tvm_callback_cuda_compile"))
    out["register_new_name"] = _outcome(lambda: tvm_ffi.register_global_func("mkb.probe.fresh", compile_callback))
    out["load_module"] = _outcome(lambda: tvm_ffi.load_module("/nonexistent/mkb-probe.so"))
    if dsl == "tirx":
        with tempfile.NamedTemporaryFile(suffix=".so") as library:  # it must exist to reach the loader
            out["tvm_load_module"] = _outcome(lambda: tvm.runtime.load_module(library.name))
    out["jiterator"] = _outcome(lambda: torch.cuda.jiterator._create_jit_fn(
        "template <typename T> T probe(T x) { return x; }"))
    return out


def _cutedsl_checks() -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory() as dump:
        y = make_fake_compact_tensor(cutlass.Float32, (32,))

        def build(extra: str):
            compiled = cute.compile(_launch, y, options=f"--gpu-arch sm_90a --keep-ptx --dump-dir {dump}{extra}")
            out.setdefault("kernels", []).extend(sorted(compiled.kernel_info))

        out["compile"] = _outcome(lambda: build(""))
        out["compile_tvm_ffi"] = _outcome(lambda: build(" --enable-tvm-ffi"))
        ptx = "\n".join(open(os.path.join(dump, f)).read() for f in os.listdir(dump) if f.endswith(".ptx"))
        out["ptx_entry"] = ".entry kernel_cutlass_" in ptx and ".target sm_90a" in ptx
    from cutlass.utils.hardware_info import HardwareInfo

    # HardwareInfo's occupancy query is the DSL's own use of cuLibraryLoadData: on a machine without
    # a driver the load then fails in the driver, not in the gate
    out["occupancy_query"] = _outcome(lambda: HardwareInfo._get_device_function(object.__new__(HardwareInfo)))
    return out


def _fake_cuda_runtime(compiled: list[bytes]) -> None:
    """Register ``ffi.Module.create.cuda`` as the CUDA runtime does on a GPU machine: it compiles
    the generated source through ``tvm_callback_cuda_compile`` (NVRTC), then builds a module."""
    def create(code, fmt, fmap, source):
        text = bytes(code).decode()
        cubin = tvm_ffi.get_global_func("tvm_callback_cuda_compile")(text)
        compiled.append(bytes(cubin[:4]))
        return tvm_ffi.get_global_func("runtime.SourceModuleCreate")(text, "cu")

    tvm_ffi.register_global_func("ffi.Module.create.cuda", create)


def _tirx_checks(compiled: list[bytes] | None) -> dict:
    out: dict = {}

    def run_llvm():
        exe = tvm.compile(tvm.IRModule({"main": _add_one_cpu}), target=tvm.target.Target("llvm"),
                          tir_pipeline="tirx")
        x = torch.arange(8, dtype=torch.float32)
        y = torch.zeros(8, dtype=torch.float32)
        exe.mod["main"](x, y)
        out["llvm_result_ok"] = bool(torch.equal(y, x + 1))

    out["compile_llvm"] = _outcome(run_llvm)

    def build_cuda():
        target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
        with target:
            exe = tvm.compile(tvm.IRModule({"main": _add_one_cuda}), target=target, tir_pipeline="tirx")
        out["cuda_source_ok"] = "__global__" in exe.mod.imports[0].inspect_source()

    out["compile_cuda"] = _outcome(build_cuda)
    if compiled is not None:
        out["nvrtc_in_build"] = [c.hex() for c in compiled]
        out["nvrtc_direct"] = _outcome(lambda: tvm.support.nvcc.compile_cuda(
            'extern "C" __global__ void probe() {}', target_format="cubin", arch="sm_90a"))
        out["create_cuda_direct"] = _outcome(lambda: tvm_ffi.get_global_func("ffi.Module.create.cuda")(
            b"", "cubin", {}, {}))
    return out


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print(json.dumps(probe(DSL, REMOVE)))
