"""Problem 62 (Qwen3-Next chunked gated delta rule, source's raw-g inter-chunk factors): both oracles
build for sm_90a on the CPU with the intended instructions; on a GPU they match the reference under
the grader's contract."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "62_chunk_gated_delta_rule_qwen3next_bf16"


def test_cutedsl_compiles(tmp_path):
    """fp64 recurrence over S0, M and N (fused multiply-adds, 64-bit shuffles as two 32-bit ones),
    staged k/q read with 16-byte shared-memory loads, the IEEE fp64 sqrt and reciprocal of the
    normalisation."""
    ptx = check_cutedsl_compiles(STEM, ["gdr_kernel"],
                                 ["fma.rn.f64", "mul.f64", "shfl.sync.bfly.b32", "bar.sync", "ld.shared.v2.b64",
                                  "sqrt.rn.f64", "rcp.rn.f64", "cvt.rn.f32.f64", "cvt.rn.bf16.f32"], tmp_path)
    assert ptx.count("shfl.sync.bfly.b32") == 12  # 2 reductions x xor 4, 2, 1 x 2 halves of an fp64
    assert "rsqrt.approx" not in ptx and "sqrt.approx" not in ptx and "ex2.approx" not in ptx


def test_tirx_sources():
    """fp64 S0/M/N and dot products, fp64 exps of the gate, q/k head h mod 4, the chunk-end refresh."""
    sources = check_tirx_sources(STEM, ["mkb_gated_delta_kernel"], [
        "__shared__ alignas(64) double kq_ptr[4096];",
        "alignas(64) double s0_ptr[16];",
        "alignas(64) double mm_ptr[16];",
        "alignas(64) double nn_ptr[16];",
        "es_ptr[((int)threadIdx.x)] = exp(",
        "(((((int)blockIdx.x) & 3) * seqlen) * 128)",
        "(float)(1.000000000000000 / sqrt(((double)",
        "__shfl_xor_sync((uint)4294967295, old_ptr[0], 4, 32)",
        "mm_ptr[0] = ((es_ptr[s3] * mm_ptr[0]) + (kr_ptr[0] * u_ptr[0]));",
        "nn_ptr[0] = (nn_ptr[0] + (kr_ptr[0] * un_ptr[0]));",
        "if ((((stage & 3) * 16) + s3) == 63) {",
        "s0_ptr[0] = (es_ptr[s3] * (s0_ptr[0] + nn_ptr[0]));",
        "((nv_bfloat16)((float)out_ptr[0]))",
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
