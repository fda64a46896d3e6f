"""Problem 63 (Mamba-2 mixer layer of Nemotron-H): both oracles build for sm_90a on the CPU with the
intended instructions; on a GPU they match the reference under the grader's contract."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "63_mamba2_selective_scan_nemotron_h_bf16"


def test_cutedsl_compiles(tmp_path):
    """Tensor-core projections (mma.sync fed by cp.async and ldmatrix), the fp32 recurrence with
    lane-group shuffles, IEEE division/reciprocal in the activations, bf16 roundings."""
    ptx = check_cutedsl_compiles(
        STEM, ["proj_gemm_kernel", "conv_act_kernel", "ssd_scan_kernel", "gated_norm_kernel", "proj_gemm_kernel"],
        ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "cp.async.cg.shared.global",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "shfl.sync.bfly.b32", "fma.rn.f32", "rcp.rn.f32",
         "div.rn.f32", "cvt.rn.bf16.f32", "bar.sync"], tmp_path)
    assert "div.approx" not in ptx


def test_tirx_sources():
    """Tensor-core projections through the mma.sync intrinsic, the fp32 recurrence with the state in
    registers and xor shuffles inside the lane group, the block reduction of the norm, and no
    fast-math exp or division where the precise forms are written out."""
    sources = check_tirx_sources(STEM, ["mkb_proj_gemm_kernel", "mkb_conv_act_kernel", "mkb_ssd_scan_kernel",
                                        "mkb_gated_norm_kernel"], [
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "alignas(64) float st_ptr[64];",
        "__shfl_xor_sync((uint)4294967295, yp_ptr[0], 8, 32)",
        "st_ptr[63] = ((st_ptr[63] * das_ptr[s3]) + (xd_ptr[3] * bs_ptr[",
        "log1pf(",
        "rsqrtf(",
        "tvm_builtin_cuda_cta_sync();",
    ])
    for source in sources.values():
        body = source[source.index('extern "C" __global__'):]
        assert "expf(" not in body and "__expf(" not in body


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
