"""Oracle checks for problem 40 (Gemma-3n AltUp collapse: unembed two streams, RMS-match to stream 0,
average, bf16)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "40_magnitude_normalized_collapse_gemma3n_e2b_altup_bf16"


def test_cutedsl_compiles(tmp_path):
    check_cutedsl_compiles(
        STEM, ["unembed_gemm_kernel", "collapse_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cp.async.wait_group", "bar.sync", "ld.global.v4", "shfl.sync.bfly",
         "sqrt.rn.f32", "div.rn.f32", "cvt.rn.bf16x2.f32", "st.global.v4"],
        tmp_path)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_unembed_gemm_kernel", "mkb_collapse_kernel"],
        ["tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(acc_ptr[60]",
         "tvm_builtin_cuda_cta_sync()", "*(float2*)(C_ptr", "*(uint4*)(xb_ptr + 0) = *(uint4*)(X_ptr",
         "*(float4*)(p2_ptr + 4) = *(float4*)(P2_ptr", "__shfl_xor_sync((uint)4294967295, s1", "sqrtf(",
         "*(uint4*)(Out_ptr"])
    assert "for (int kt = 0; kt < 96; ++kt)" in sources["mkb_unembed_gemm_kernel"]  # K = 3072 in slices of 32


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
