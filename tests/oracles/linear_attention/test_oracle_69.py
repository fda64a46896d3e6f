"""Problem 69 (gated linear attention, chunked form): the oracles build for sm_90a on the CPU with the
instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "69_gated_linear_attention_gla_bf16"


def test_cutedsl_compiles(tmp_path):
    # SIMT fp32 loops (fma, vectorised shared-memory reads), the accurate expf (range reduction with
    # the low part of log2(e), 0f32A57060, then ex2 of the reduced argument), h written to the fp32
    # scratch, bf16 output
    ptx = check_cutedsl_compiles(STEM, ["gla_states_kernel", "gla_output_kernel"],
                                 ["fma.rn.f32", "ld.shared.v4.b32", "0f32A57060", "ex2.approx.ftz.f32",
                                  "st.global.b32", "cvt.rn.bf16.f32", "st.global.b16", "bar.sync"], tmp_path)
    assert "mma.sync" not in ptx


def test_tirx_sources():
    # state pass: h entering each chunk written as float4, exponentials in fp64; output pass: float4
    # shared-memory reads of the SIMT loops, the h slice read as float4, bf16 output
    sources = check_tirx_sources(STEM, ["mkb_gla_states_kernel", "mkb_gla_output_kernel"], [
        "*(float4*)(hs_ptr + ", "= *(float4*)(st_ptr + 0);", "exp(((double)", "= *(float4*)(hs_ptr + ",
        "*(float4*)(af_ptr + 0) = *(float4*)(pool_ptr", "*(float4*)(bf_ptr + 0) = *(float4*)(pool_ptr",
        "__launch_bounds__(256)"])
    for source in sources.values():
        body = source[source.index('extern "C" __global__'):]
        assert "expf(" not in body and "mma.sync" not in body


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
