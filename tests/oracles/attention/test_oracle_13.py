"""Problem 13 (FIBO joint attention block, fp32): the oracles compile for sm_90a with the instructions
their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "13_dual_stream_joint_attention_fibo_fp32"


def test_cutedsl_compiles(tmp_path):
    # fp32 FMAs (no tensor cores), 16-byte loads/stores, shared-memory tiles, warp shuffles for the
    # row reductions, ex2 with the fma-corrected argument, IEEE division, rsqrt for LayerNorm
    ptx = check_cutedsl_compiles(STEM, ["rowprep_kernel", "gemm_kernel", "rowprep_kernel", "gemm_kernel",
                                        "rope_kernel", "rowprep_kernel", "gemm_kernel", "attention_kernel",
                                        "gemm_kernel"],
                                 ["fma.rn.f32", "ld.global.v4.b32", "st.global.v4.b32", "ld.shared.v4.b32",
                                  "shfl.sync.bfly.b32", "ex2.approx", "div.rn.f32", "rsqrt.approx", "bar.sync"],
                                 tmp_path)
    assert "mma.sync" not in ptx and "tf32" not in ptx


def test_tirx_sources():
    # float4 global and shared-memory accesses of the SIMT GEMM and attention, 16-lane xor shuffles,
    # the precise exp (range-reduced polynomial, exponent bits) instead of fast-math expf, block
    # reductions of the row kernel, 48 KB of shared memory in the attention kernel
    sources = check_tirx_sources(STEM, ["mkb_rowprep_kernel", "mkb_gemm_kernel", "mkb_rope_kernel",
                                        "mkb_joint_attention_kernel"],
                                 ["*(float4*)(ra_ptr + 0) = *(float4*)(A_ptr", "*(float4*)(af_ptr + 0) = *(float4*)(",
                                  "__shfl_xor_sync((uint)4294967295", "__launch_bounds__(256)", "pos0_ptr[",
                                  "__shared__ alignas(64) float p_s_ptr[4096]", "G_ptr[", "kt_ptr", "vt_ptr"])
    joined = "\n".join(sources.values())
    assert "expf(" not in joined and "exp2f(" not in joined and "mma" not in joined


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
