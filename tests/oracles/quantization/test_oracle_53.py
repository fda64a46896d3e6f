"""Oracles for problem 53 (Qwen3-VL FP8 gate/up projection with SiLU gating, pre-quantised operands):
compile checks on the CPU, grading on a GPU."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "53_mlp_gate_up_projection_qwen3vl_fp8"


def test_cutedsl_compiles(tmp_path):
    ptx = check_cutedsl_compiles(
        STEM, ["fp8_decode_act_kernel", "fp8_decode_gate_up_kernel", "fp8_gate_up_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
         "cp.async.cg.shared.global", "cvt.rn.f16x2.e4m3x2", "div.rn.f32", "ex2.approx"],
        tmp_path)
    assert ptx.count("mma.sync.aligned.m16n8k16") == 128  # one 128-wide K block unrolled


def test_tirx_sources():
    check_tirx_sources(
        STEM, ["mkb_fp8_gate_up_gemm_kernel"],
        ["tvm_builtin_cuda_cta_sync();", "__shared__ alignas(64) uint a_s_ptr[5120]", "*(uint4*)(rb_ptr + 0)",
         "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"])


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
def test_cutedsl_on_gpu():
    check_on_gpu(STEM, "cutedsl")


@pytest.mark.gpu
def test_tirx_on_gpu():
    check_on_gpu(STEM, "tirx")
