"""Oracles for problem 38 (residual RMSNorm backward, Qwen3-4B, bf16): compile checks on the CPU,
grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "38_residual_rmsnorm_backward_qwen3_4b_bf16"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["rmsnorm_bwd_kernel", "dw_reduce_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "cvt.rn.bf16x2.f32",
         "cvt.f64.f32", "add.f64", "cvt.rn.f32.f64"],
        tmp_path)
    assert ptx.count(".reqntid 320, 1, 1") == 1 and ptx.count(".reqntid 256, 1, 1") == 1


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_rmsnorm_bwd_kernel", "mkb_dw_reduce_kernel"],
        ["__launch_bounds__(320)", "__shfl_xor_sync((uint)4294967295, red_ptr[0], 16, 32)",
         "tvm_builtin_cuda_cta_sync()", "*(uint4*)(dy_ptr", "*(ulonglong4*)(n_ptr", "*(uint4*)(dx_ptr",
         "(double)partial_ptr[", "__shared__ alignas(64) double sums_ptr[256]"])
    main = sources["mkb_rmsnorm_bwd_kernel"]
    assert "for (int it = 0; it < 32; ++it)" in main  # 64 tokens per CTA, two per step


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
