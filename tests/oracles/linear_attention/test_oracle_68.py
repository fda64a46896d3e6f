"""Problem 68 (Kimi Delta Attention, per-channel decay): both oracles build for sm_90a on the CPU with
the intended instructions; on a GPU they match the reference under the grader's contract."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "68_channelwise_gated_delta_rule_kda_bf16"


def test_cutedsl_compiles(tmp_path):
    """fp64 recurrence (fused multiply-adds, the per-row decay multiply, 64-bit shuffles as two 32-bit
    ones), staged k/q/decay read with 16-byte shared-memory loads, the IEEE fp64 sqrt and reciprocal
    of the normalisation."""
    ptx = check_cutedsl_compiles(STEM, ["kda_kernel"],
                                 ["fma.rn.f64", "mul.f64", "shfl.sync.bfly.b32", "bar.sync", "ld.shared.v2.b64",
                                  "sqrt.rn.f64", "rcp.rn.f64", "cvt.rn.f32.f64", "cvt.rn.bf16.f32"], tmp_path)
    assert ptx.count("shfl.sync.bfly.b32") == 12  # 2 reductions x xor 4, 2, 1 x 2 halves of an fp64
    assert "rsqrt.approx" not in ptx and "sqrt.approx" not in ptx and "ex2.approx" not in ptx


def test_tirx_sources():
    """fp64 state, decay (fp64 exp of g) and dot products, staged shared memory, the fp64 rsqrt of the
    normalisation."""
    sources = check_tirx_sources(STEM, ["mkb_kda_kernel"], [
        "__shared__ alignas(64) double kq_ptr[3072];",
        "alignas(64) double st_ptr[16];",
        "exp(((double)((float)g_ptr[",
        "(float)(1.000000000000000 / sqrt(((double)",
        "__shfl_xor_sync((uint)4294967295, old_ptr[0], 4, 32)",
        "st_ptr[0] = (st_ptr[0] * kq_ptr[(((s3 * 128) + ((((int)threadIdx.x) & 7) * 2)) + 2048)]);",
        "st_ptr[15] = (st_ptr[15] + (kr_ptr[15] * u_ptr[0]));",
        "((nv_bfloat16)((float)out_ptr[0]))",
        "tvm_builtin_cuda_cta_sync();",
    ])
    (source,) = sources.values()
    body = source[source.index('extern "C" __global__'):]
    assert "rsqrtf(" not in body and "sqrtf(" not in body and "expf(" not in body


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
