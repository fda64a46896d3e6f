"""Oracles for problem 46 (MoE router backward: renormalisation, scatter, softmax backward and the two
router GEMMs, bf16 I/O): compile checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "46_router_dispatch_backward_qwen3_coder_30b_bf16"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["router_bwd_kernel", "tc_hidden_kernel", "tc_gate_kernel", "reduce_gate_kernel", "gemm_hidden_kernel",
               "gemm_gate_kernel"],
        ["shfl.sync.bfly.b32", "shfl.sync.idx.b32", "div.rn.f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global", "bar.sync", "fma.rn.f32",
         "cvt.rn.bf16.f32"],
        tmp_path)
    assert ptx.count("mma.sync.aligned") >= 2 * 16  # both tensor-core GEMMs' K steps unrolled
    assert ptx.count("fma.rn.f32") >= 2 * 32 * 32  # the SIMT GEMMs' inner K step fully unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["router_kernel", "hidden_kernel", "gate_kernel", "reduce_kernel",
               "tc_hidden_kernel", "tc_gate_kernel"],
        ["__shfl_xor_sync", "__shfl_sync", "tvm_builtin_cuda_cta_sync();",
         "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "__shared__ alignas(64) uint b_s_ptr[2560]",
         "__shared__ alignas(64) float a_s_ptr[2080]", "(nv_bfloat16)"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
