"""Problem 73 (GDN multi-token verification over a state pool): both oracles build for sm_90a on the
CPU with the intended instructions; on a GPU they match the reference under the grader's contract."""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources

STEM = "73_gdn_mtp_qwen3next_bf16"


def test_cutedsl_compiles(tmp_path):
    """16-byte pool loads and copy/state stores, gates shared through shared memory behind a barrier,
    lane-group shuffles, the IEEE reciprocal of the sigmoid."""
    ptx = check_cutedsl_compiles(STEM, ["gdn_mtp_kernel"],
                                 ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "bar.sync",
                                  "st.shared.b32", "ld.shared.b32", "rcp.rn.f32", "cvt.rn.bf16.f32"], tmp_path)
    # request rows: 2 rows x 4 chunks loaded and copied; free pool rows: the same again
    assert ptx.count("ld.global.v4.b32") == 16 and ptx.count("st.global.v4.b32") == 16
    assert ptx.count("shfl.sync.bfly.b32") == 12  # one step body: 2 reductions x 2 rows x xor 4, 2, 1
    assert "rcp.approx" not in ptx and "div.approx" not in ptx


def test_tirx_sources():
    """Gates in fp64 (immune to fast math) through shared memory; the step loop; the pool copy."""
    sources = check_tirx_sources(STEM, ["mkb_gdn_mtp_kernel"], [
        "__shared__ alignas(64) float gates_ptr[8];",
        "tvm_builtin_cuda_cta_sync();",
        "for (int t = 0; t < 4; ++t)",
        "int entry = indices_ptr[((int)blockIdx.x)];",
        "if (indices_ptr[r] == (((int)blockIdx.x) - batch))",
        "*(float4*)(final_state_ptr",
        "exp(((double)", "log1p(((double)ex_ptr[0]))", "(1.000000000000000 / ((double)",
        "__shfl_xor_sync((uint)4294967295, old_ptr[0], 4, 32)",
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
