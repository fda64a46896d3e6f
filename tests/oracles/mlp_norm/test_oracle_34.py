"""Oracle checks for problem 34 (SwiGLU MLP backward of Hermes-4-405B from saved activations, bf16)."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "34_swiglu_mlp_backward_hermes_bf16"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["dh_kernel", "dx_kernel", "dw_kernel", "dw_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global", "cp.async.wait_group",
         "bar.sync", "rcp.rn.f32", "ex2.approx", "cvt.rn.bf16.f32"],
        tmp_path)
    assert ptx.count("mma.sync.aligned") >= 16 * 5  # every GEMM's K slice unrolled (dx twice)


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["dh_kernel", "dx_kernel", "dw_down_kernel", "dw_in_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "tvm_builtin_cuda_cta_sync()",
         "__shared__ alignas(64) uint a_s_ptr[1280]", "__shared__ alignas(64) uint b_s_ptr[2560]"])
    assert "for (int kt = 0; kt < 512; ++kt)" in sources["dh_kernel"]  # K = hidden 16384 in slices of 32
    assert "for (int kt = 0; kt < 3328; ++kt)" in sources["dx_kernel"]  # two products of K = 53248
    assert "if (kt == 1664)" in sources["dx_kernel"]
    assert "for (int kt = 0; kt < 256; ++kt)" in sources["dw_in_kernel"]  # K = 8192 tokens


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
