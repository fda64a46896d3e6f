"""Oracles for problem 43 (embedding + RMSNorm backward, Jamba, bf16): compile checks on the CPU,
grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "43_embedding_rmsnorm_backward_jamba_bf16"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["embed_rmsnorm_bwd_kernel", "dw_reduce_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "cvt.rn.bf16x2.f32",
         "ld.global.b64", "cvt.f64.f32", "add.f64", "cvt.rn.f32.f64", "cvt.rn.bf16.f32"],
        tmp_path)
    assert ptx.count(".reqntid 512, 1, 1") == 1 and ptx.count(".reqntid 256, 1, 1") == 1


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_embed_rmsnorm_bwd_kernel", "mkb_dw_reduce_kernel"],
        ["__launch_bounds__(512)", "__shfl_xor_sync((uint)4294967295, red_ptr[0], 16, 32)",
         "tvm_builtin_cuda_cta_sync()", "*(uint4*)(dy_ptr", "*(ulonglong4*)(hs_ptr", "*(uint4*)(table_ptr",
         "((int)order_ptr[q])", "(double)partial_ptr[", "((nv_bfloat16)((float)acc_ptr[0]))"])
    main = sources["mkb_embed_rmsnorm_bwd_kernel"]
    assert "for (int vi = 0; vi < 64; ++vi)" in main  # 64 table rows per CTA, each stored once


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
