"""CPU-side proof that the CuTe DSL oracles compile for the H200 (sm_90a) without launching anything.

Each oracle file is loaded by path (its name starts with digits) and its ``precompile`` builds
every kernel of the file for the graded workload from fake tensors. The checks: the kernel symbols
are the ones the file defines (the names CUPTI and the verifier's launch hooks will see), the PTX
targets sm_90a and contains the instructions the kernel's design relies on (vector loads, warp
shuffles, IEEE division where the reference divides, ...), the oracle's ``solve`` takes the
problem's inputs in order, and the workload it compiles for is the problem's graded one.
Correctness and timing need the GPU and are run there.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch

pytest.importorskip("cutlass.cute")

from oracle_support import ORACLES, check_cutedsl_compiles, load, oracle_path  # noqa: E402

from metakernelbench.problems import find_problem, oracle_files  # noqa: E402
from metakernelbench.verifier.rules import scan_source  # noqa: E402

# oracle stem -> (kernel function names, one per compiled kernel, in order; PTX fragments required)
EXPECTED = {
    "02_gqa_paged_decode_h5_kv1_d128_ps1_bf16": (
        ["gqa_paged_decode_kernel"],
        ["shfl.sync.bfly.b32", "bar.sync", "ex2.approx", "st.shared", "ld.shared", "ld.global.v",
         "cvt.rn.bf16.f32", "div.rn.f32"],
    ),
    "21_dynamic_quantized_cache_append_per_token_head_fp8": (
        ["fp8_cache_append_kernel"],
        ["div.rn.f32", "rcp.rn.f32", "cvt.rn.satfinite.e4m3x2.f32", "shfl.sync.bfly.b32", "ld.global.v4.b16",
         "st.global.b32"],
    ),
    "23_mla_cache_gather_dequantize_fp8": (
        ["mla_gather_dequant_kernel"],
        ["cvt.rn.f16x2.e4m3x2", "cvt.f32.f16", "mul.f32", "st.global.v4.b32"],
    ),
    "25_batched_kv_cache_block_copy_remap_uint8": (
        ["kv_block_copy_kernel"],
        ["ld.global.b64", "st.global.b64"],
    ),
    "28_fused_add_rmsnorm_h4096_llama31_8b_bf16": (
        ["fused_add_rmsnorm_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "rsqrt.approx.f32",
         "cvt.rn.bf16x2.f32"],
    ),
    "36_rmsnorm_h128_qwen3_30b_bf16": (
        ["rmsnorm_rows_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "rsqrt.approx.f32", "cvt.rn.bf16x2.f32"],
    ),
    "49_group_limited_topk_routing_ringflash_bf16": (
        ["router_gemm_kernel", "group_topk_route_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "shfl.sync.bfly.b32", "shfl.sync.idx.b32", "rcp.rn.f32", "div.rn.f32",
         "st.global.b64"],
    ),
    "60_mamba2_output_projection_nemotron_nvfp4": (
        ["nvfp4_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "ld.global.v2.b32", "st.shared.v4.b32", "cvt.rn.bf16x2.f32", "cvt.rn.f32.u32"],
    ),
    "66_wkv_time_decay_stabilization_rwkv4_fp32": (
        ["wkv_forward_kernel"],
        ["div.rn.f32", "ex2.approx"],
    ),
    "_dsl_copy": (
        ["dsl_byte_copy_kernel"],
        ["ld.global", "st.global"],
    ),
}


def _load(stem: str):
    return load(stem, "cutedsl")


def test_every_expectation_has_its_oracle_file():
    """(Oracles added later carry their checks in tests/oracles/<family>/; test_oracle_files.py
    requires that some test names each one.)"""
    files = [*ORACLES.glob("_*_cutedsl.py"), *(p for p in oracle_files(ORACLES) if p.name.endswith("_cutedsl.py"))]
    stems = {p.name.removesuffix("_cutedsl.py") for p in files}
    assert set(EXPECTED) <= stems


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_cutedsl_oracle_compiles_for_sm90a(stem, tmp_path):
    kernels, fragments = EXPECTED[stem]
    check_cutedsl_compiles(stem, kernels, fragments, tmp_path)


@pytest.mark.parametrize("stem", sorted(s for s in EXPECTED if not s.startswith("_")))
def test_cutedsl_oracle_matches_its_problem(stem):
    module = _load(stem)
    problem = find_problem(stem)
    assert tuple(inspect.signature(module.solve).parameters) == problem.spec.inputs
    assert module.WORKLOAD == {k: problem.spec.workload[k] for k in module.WORKLOAD}


@pytest.mark.parametrize("stem", sorted(s for s in EXPECTED if not s.startswith("_")))
def test_cutedsl_oracle_passes_the_static_rules(stem):
    assert scan_source(oracle_path(stem, "cutedsl").read_text(), "cutedsl") == []


def test_cutedsl_dsl_copy_is_self_contained():
    """Its source is inlined into generated control files: only torch, cuda and cutlass imports."""
    source = (ORACLES / "_dsl_copy_cutedsl.py").read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports and all(line.split()[1].split(".")[0] in {"torch", "cuda", "cutlass"} for line in imports)
    assert callable(_load("_dsl_copy").dsl_copy)


@pytest.mark.parametrize("stem", ["49_group_limited_topk_routing_ringflash_bf16",
                                  "60_mamba2_output_projection_nemotron_nvfp4"])
def test_gemm_sums_each_k_slice_from_zero(stem, tmp_path):
    """The tensor core truncates its running sum: per 32-wide K slice, each warp's 16 m16n8 tiles
    start from zero (two mma's each), and the 64 slice sums are added with round-to-nearest adds."""
    kernels, fragments = EXPECTED[stem]
    ptx = check_cutedsl_compiles(stem, kernels, fragments, tmp_path)
    assert ptx.count("mma.sync.aligned.m16n8k16") == 32
    from_zero = re.findall(r"mma\.sync[^;]*\{(%r\d+), \1, \1, \1\};", ptx)
    assert len(from_zero) == 16
    assert ptx.count("add.f32") >= 64


def test_nvfp4_decode_arithmetic_is_exact_for_every_byte_and_scale():
    """The GEMM's decode, its arithmetic replayed in fp32: twice the E2M1 magnitude from the nibble
    table, times +-(block scale / 2); every packed byte under every finite e4m3 scale, bit for bit
    against the problem's decode (signed zeros included)."""
    table = _load("60_mamba2_output_projection_nemotron_nvfp4")._TWICE_E2M1
    scale_bytes = torch.arange(256, dtype=torch.uint8)
    scale_values = scale_bytes.view(torch.float8_e4m3fn).float()
    scale_values = scale_values[~scale_values.isnan()]
    codes = torch.arange(16, dtype=torch.int64)
    twice = ((table >> ((codes & 7) * 4)) & 15).to(torch.float32)
    half = scale_values[:, None] * 0.5
    got = twice[None, :] * torch.where(codes[None, :] >= 8, -half, half)
    values = torch.tensor((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0))
    want = (values[codes & 7] * (1 - 2 * (codes >> 3)))[None, :] * scale_values[:, None]
    assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    assert torch.equal(got.to(torch.bfloat16).float(), got)  # the narrowing to bf16 is exact
