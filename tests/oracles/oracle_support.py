"""Checks shared by the oracle tests: load an oracle by path, compile it for sm_90a on the CPU, and
(on a GPU) compare it with its problem's reference under the grader's correctness contract.

Each oracle's own test file (``tests/oracles/<family>/test_oracle_<NN>.py``) states what its kernels
are called and which instructions their design relies on, and calls these helpers.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
import torch

from metakernelbench.problems import REPO_ROOT, find_problem, oracle_file
from metakernelbench.testing.selfcheck import draw_mismatch, standard_draws

ORACLES = REPO_ROOT / "oracles"
_LOADED: dict[Path, ModuleType] = {}
_PTX: dict[str, tuple[list[str], dict[str, str]]] = {}


def oracle_path(stem: str, dsl: str) -> Path:
    """``oracles/<family>/<stem>_<dsl>.py`` (the controls ``_*`` sit at the top of ``oracles/``)."""
    if stem.startswith("_"):
        return ORACLES / f"{stem}_{dsl}.py"
    return oracle_file(find_problem(stem), dsl, ORACLES)


def load(stem: str, dsl: str) -> ModuleType:
    """The oracle module, loaded once per session (its file name starts with digits: load by path)."""
    path = oracle_path(stem, dsl)
    if path not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"mkb_oracle_{stem.lstrip('_')}_{dsl}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED[path] = module
    return _LOADED[path]


def cutedsl_ptx(stem: str, ptx_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The CuTe DSL oracle's ``precompile`` for sm_90a, run once per session (two tests check the
    same build): its kernel names and the PTX files it wrote to ``ptx_dir``, by file name."""
    if stem not in _PTX:
        names = load(stem, "cutedsl").precompile(arch="sm_90a", ptx_dir=str(ptx_dir))
        _PTX[stem] = names, {p.name: p.read_text() for p in sorted(ptx_dir.glob("*.ptx"))}
    return _PTX[stem]


def check_cutedsl_compiles(stem: str, kernels: list[str], fragments: list[str], ptx_dir: Path) -> str:
    """``precompile`` builds every kernel for sm_90a from fake tensors; returns the PTX.

    Asserted: one compiled kernel per expected name, in order, with CuTe DSL's symbol prefix; the PTX
    targets sm_90a, holds every expected fragment and no local-memory spills; a compile for the CPU
    leaves no pinned-arch build in the module's runtime caches (``*_COMPILED``).
    """
    module = load(stem, "cutedsl")
    names, ptx_files = cutedsl_ptx(stem, ptx_dir)
    assert len(names) == len(kernels), names
    for name, kernel in zip(names, kernels, strict=True):
        assert name.startswith(f"kernel_cutlass_{kernel}_"), name
    assert len(ptx_files) == len(set(names))
    ptx = "\n".join(ptx_files.values())
    assert ".target sm_90a" in ptx
    for name in names:
        assert f".entry {name}(" in ptx
    missing = [f for f in fragments if f not in ptx]
    assert not missing, f"PTX lacks {missing}"
    assert ".local" not in ptx, "register arrays spilled to local memory"
    caches = [v for k, v in vars(module).items() if k.endswith("_COMPILED")]
    assert caches and all(cache == {} for cache in caches)
    return ptx


def check_tirx_sources(stem: str, symbols: list[str], fragments: list[str]) -> dict[str, str]:
    """``precompile`` names the kernels; each is an ``extern "C" __global__`` entry point; the CUDA
    source holds every expected fragment. Returns the sources by kernel name."""
    module = load(stem, "tirx")
    assert module.precompile("sm_90a") == symbols
    sources = module.kernel_sources("sm_90a")
    for name, source in sources.items():
        assert 'extern "C" __global__' in source and f"{name}(" in source
    joined = "\n".join(sources.values())
    missing = [f for f in fragments if f not in joined]
    assert not missing, f"CUDA source lacks {missing}"
    return sources


def cuda_root() -> str | None:
    for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda-13.0", "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_runtime.h").is_file():
            return root
    return None


def check_tirx_nvrtc(stem: str, monkeypatch) -> None:
    """Every CUDA source of the TIRx oracle compiles to an sm_90a cubin through TVM's NVRTC path.

    A module's kernels often share one source (``kernel_sources`` maps each kernel to the source of
    the module that holds it): each distinct source is compiled once."""
    pytest.importorskip("cuda.bindings.nvrtc")
    root = cuda_root()
    if root is None:
        pytest.skip("no CUDA toolkit headers on this machine")
    monkeypatch.setenv("CUDA_PATH", root)
    from tvm.support import nvcc

    for source in dict.fromkeys(load(stem, "tirx").kernel_sources("sm_90a").values()):
        cubin = nvcc.compile_cuda(source, target_format="cubin", arch="sm_90a", compiler="nvrtc")
        assert bytes(cubin[:4]) == b"\x7fELF"


def check_on_gpu(stem: str, dsl: str) -> None:
    """The small workload and two draws of the graded one must pass (run only where CUDA is)."""
    problem = find_problem(stem)
    solve = load(stem, dsl).solve
    for workload, seed in standard_draws(problem):
        mismatch = draw_mismatch(problem, solve, workload, seed, torch.device("cuda"))
        assert mismatch is None, f"{stem} {dsl} {workload}: {mismatch}"
