"""Problem 12 (Gemma-3n audio local attention with relative positions and soft-capping, fp32): the
oracles compile for sm_90a with the instructions their design relies on; on a GPU they match the
reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "12_relative_position_local_attention_gemma3n_audio_fp32"


def test_cutedsl_compiles(tmp_path):
    # fp32 FMAs (no tensor cores), 16-byte GEMM loads/stores, shared-memory tiles, indexed and xor
    # warp shuffles (relative shift, row max/sum), IEEE division
    ptx = check_cutedsl_compiles(STEM, ["gemm_kernel", "gemm_kernel", "sinusoid_kernel", "gemm_kernel",
                                        "local_attention_kernel"],
                                 ["fma.rn.f32", "ld.global.v4.b32", "st.global.v4.b32", "ld.shared.v4.b32",
                                  "shfl.sync.idx.b32", "shfl.sync.bfly.b32", "div.rn.f32", "bar.sync"], tmp_path)
    assert "mma.sync" not in ptx and "tf32" not in ptx and "tanh.approx" not in ptx


def test_tirx_sources():
    # float4 GEMM loads and shared-memory reads, fp64 softplus/sin/cos/tanh (untouched by fast math),
    # the indexed shuffle of the relative shift, 32-lane xor shuffles, the padding mask
    sources = check_tirx_sources(STEM, ["mkb_gemm_kernel", "mkb_sinusoid_kernel", "mkb_local_attention_kernel"],
                                 ["*(float4*)(ra_ptr + 0) = *(float4*)(A_ptr", "log1p(exp(((double)",
                                  "sin(((double)", "cos(((double)", "tanh(((double)",
                                  "__shfl_sync((uint)4294967295, cur_ptr", "__shfl_xor_sync((uint)4294967295",
                                  "mask_ptr[", "rel_t_ptr[", "__launch_bounds__(256)"])
    joined = "\n".join(sources.values())
    assert "expf(" not in joined and "tanhf(" not in joined and "mma" not in joined


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
