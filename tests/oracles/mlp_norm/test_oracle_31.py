"""Oracles for problem 31 (GroupNorm, SD-1.5, fp32): compile checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "31_groupnorm_sd15_fp32"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["groupnorm_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync", "sqrt.rn.f32",
         "div.rn.f32", "rcp.rn.f32"],
        tmp_path)
    assert "rsqrt.approx" not in ptx and "sqrt.approx" not in ptx


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


def test_tirx_sources():
    sources = check_tirx_sources(
        STEM, ["mkb_groupnorm_kernel"],
        ["tvm_builtin_cuda_cta_reduce_sum_4(", "div.rn.f32", "sqrt.rn.f32", "rcp.rn.f32",
         "*(float4*)(x_ptr", "*(float4*)(y_ptr", "__launch_bounds__(128)"])
    (source,) = sources.values()
    assert "sqrtf(" not in source and "rsqrtf(" not in source


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
