"""capabilities.remove: the GPU code-loading entry points are gone from a candidate's process.

Each DSL is probed in a fresh process (``capabilities_probe.py``): torch, the DSL and its launch
hooks are imported as the candidate worker does, ``remove(dsl)`` runs, and the probe reports which
entry points still run, which originals a loaded module or class still holds, and whether the DSL
still compiles (CuTe DSL to sm_90a PTX; TIRx on llvm, run, and for CUDA through TVM's own NVRTC
build when CUDA headers are installed). A control run without ``remove`` shows that every check
can fail. No GPU is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("capabilities_probe.py")
REPO = Path(__file__).resolve().parents[2]
_RESULTS: dict[tuple[str, str], dict] = {}


def _cuda_root() -> str | None:
    for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda-13.0", "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_runtime.h").is_file():
            return root
    return None


def probe(dsl: str, removal: str = "remove") -> dict:
    """The probe's report for ``dsl``, run once per test session."""
    key = (dsl, removal)
    if key not in _RESULTS:
        pytest.importorskip("cutlass" if dsl == "cutedsl" else "tvm")
        pytest.importorskip("cuda.bindings.driver")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        root = _cuda_root()
        if root:
            env["CUDA_PATH"] = root
        done = subprocess.run([sys.executable, str(PROBE), dsl, removal], capture_output=True, text=True,
                              timeout=900, cwd=REPO, env=env)
        assert done.returncode == 0, done.stderr[-6000:]
        _RESULTS[key] = json.loads(done.stdout.strip().splitlines()[-1])
    return _RESULTS[key]


DSLS = ["cutedsl", "tirx"]


@pytest.mark.parametrize("dsl", DSLS)
def test_every_removed_entry_point_refuses(dsl: str) -> None:
    report = probe(dsl)
    ran = {path: outcome for path, outcome in report["refused"].items() if outcome != "refused"}
    assert not ran, ran
    removed = "\n".join(report["removed"])
    for name in ("cuda.bindings.driver.cuModuleLoadData", "cuda.bindings.driver.cuLaunchKernel",
                 "cuda.bindings.nvrtc.nvrtcCompileProgram", "torch._C._cuda_jiterator_compile_and_launch_kernel",
                 "torch.cuda._utils._nvrtc_compile", "torch._C._StaticCudaLauncher._load_kernel",
                 "tvm_ffi global ffi.ModuleLoadFromFile", "cuda.bindings.cydriver.__pyx_capi__"):
        assert name in removed, name


@pytest.mark.parametrize("dsl", DSLS)
def test_no_original_is_left_in_a_loaded_module_or_class(dsl: str) -> None:
    assert probe(dsl)["held"] == {}


@pytest.mark.parametrize("dsl", DSLS)
def test_process_wide_routes_are_closed(dsl: str) -> None:
    report = probe(dsl)
    assert report["dlsym_cuModuleLoadData"] == report["dlsym_nvrtcCompileProgram"] == "refused"
    assert report["dlsym_getpid"] == "ran"  # other symbols still resolve
    assert not report["capsule_cuModuleLoadData"] and report["capsule_cuDeviceGet"]
    assert report["reimport_same_module"] and report["reimport_keeps_removal"]
    assert report["fusers_off"]
    for key in ("override_compile_callback", "register_postproc", "remove_global", "load_module", "jiterator"):
        assert report[key] == "refused", (key, report[key])
    assert report["register_new_name"] == "ran"  # the DSL's lazy registrations still work


def test_cutedsl_still_compiles_and_its_occupancy_query_keeps_its_load() -> None:
    report = probe("cutedsl")
    assert report["compile"] == report["compile_tvm_ffi"] == "ran", report
    assert report["ptx_entry"] and all(k.startswith("kernel_cutlass__add_one") for k in report["kernels"])
    # admitted by the gate: on a machine without a driver the load fails in the driver itself
    assert report["occupancy_query"] != "refused"


def test_tirx_still_compiles_and_runs() -> None:
    report = probe("tirx")
    assert report["compile_llvm"] == "ran" and report["llvm_result_ok"], report
    assert report["compile_cuda"] == "ran" and report["cuda_source_ok"], report
    assert report["tvm_load_module"] == "refused"
    if "nvrtc_in_build" not in report:
        pytest.skip("no CUDA toolkit headers here: TVM's NVRTC build path was not exercised")
    assert report["nvrtc_in_build"] == [b"\x7fELF".hex()]  # NVRTC ran inside TVM's own build
    assert report["nvrtc_direct"] == report["create_cuda_direct"] == "refused"


def test_the_checks_fail_when_nothing_is_removed() -> None:
    """The control: without ``remove`` the same probe finds every entry point working and held."""
    report = probe("tirx", "none")
    assert report["removed"] == []
    assert all(outcome != "refused" for outcome in report["refused"].values())
    assert len(report["held"]) == len(report["refused"])
    assert report["dlsym_cuModuleLoadData"] != "refused" and report["capsule_cuModuleLoadData"]
    assert report["override_compile_callback"] != "refused" and report["jiterator"] != "refused"
    if "nvrtc_direct" in report:
        assert report["nvrtc_direct"] != "refused"
