"""Problem 64 (Mamba-2 SSD chunked scan with a carried state, Granite): the oracles build for sm_90a on
the CPU with the instructions their design relies on; on a GPU they match the reference."""

import pytest
from oracle_support import check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "64_mamba_chunk_scan_segsum_granite_bf16"


def test_tirx_sources():
    # state pass: the state entering each chunk written as float4, exponentials in fp64; output pass:
    # 16-byte C/B loads, float4 shared-memory reads of the SIMT loops, bf16 output
    sources = check_tirx_sources(STEM, ["mkb_ssd_states_kernel", "mkb_ssd_output_kernel"], [
        "*(float4*)(hs_ptr + ", "exp(((double)", "*(uint4*)(raw_ptr + 0) = *(uint4*)(cm_ptr",
        "*(uint4*)(raw_ptr + 0) = *(uint4*)(bm_ptr", "*(float4*)(af_ptr + 0) = *(float4*)(pool_ptr",
        "*(float4*)(bf_ptr + 0) = *(float4*)(pool_ptr", "__launch_bounds__(256)"])
    for source in sources.values():
        body = source[source.index('extern "C" __global__'):]
        assert "expf(" not in body and "mma.sync" not in body


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["tirx"])
def test_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
