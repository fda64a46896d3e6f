"""Problem 72 (GDN decode): both oracles build for sm_90a on the CPU with the intended instructions;
on a GPU they match the reference under the grader's contract."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "72_gdn_decode_qwen3next_bf16"


def test_cutedsl_compiles(tmp_path):
    """16-byte state loads/stores, lane-group shuffles, the accurate expf/log1pf and IEEE reciprocal."""
    ptx = check_cutedsl_compiles(STEM, ["gdn_decode_kernel"],
                                 ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "rcp.rn.f32",
                                  "fma.rn.f32", "cvt.rn.bf16.f32", "ld.global.v4.b16"], tmp_path)
    assert ptx.count("shfl.sync.bfly.b32") == 12  # 2 reductions x 2 rows x xor 4, 2, 1
    assert "rcp.approx" not in ptx and "div.approx" not in ptx


def test_tirx_sources():
    """Gates evaluated in fp64 (immune to fast math), float4 state traffic, xor shuffles 4, 2, 1."""
    sources = check_tirx_sources(STEM, ["mkb_gdn_decode_kernel"], [
        "*(float4*)(sr_ptr + 0) = *(float4*)(state_ptr",
        "*(float4*)(new_state_ptr",
        "exp(((double)", "log1p(((double)ex_ptr[0]))", "(1.000000000000000 / ((double)",
        "__shfl_xor_sync((uint)4294967295, old_ptr[0], 4, 32)",
        "__shfl_xor_sync((uint)4294967295, acc_ptr[1], 1, 32)",
        "((nv_bfloat16)(scale * acc_ptr[0]))",
    ])
    (source,) = sources.values()
    body = source[source.index('extern "C" __global__'):]
    assert "expf(" not in body and "logf(" not in body and "log1pf(" not in body


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
