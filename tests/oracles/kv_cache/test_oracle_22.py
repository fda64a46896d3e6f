"""Problem 22 (MiniMax-M3 Gemma QK-norm + partial RoPE + main and index cache inserts): the CuTe DSL oracle.

The TIRx oracle's checks live in tests/oracles/test_tirx_compile.py.
"""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, load

STEM = "22_main_index_dual_cache_insert_minimax_m3_bf16"


def test_cutedsl_compiles_for_sm90a(tmp_path):
    """16-byte loads and stores, a 16-lane butterfly sum, approximate rsqrt, one bf16 rounding per stage."""
    ptx = check_cutedsl_compiles(
        STEM, ["minimax_norm_rope_insert_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "rsqrt.approx.f32", "cvt.rn.bf16.f32",
         "cvt.rn.bf16x2.f32", "ld.global.b64"], tmp_path)
    assert ".reqntid 480, 1, 1" in ptx  # 29 heads x 16 lanes, rounded up to whole warps
    # the sum of squares over 16 lanes (xor 8, 4, 2, 1) and the RoPE partner (xor 4) for 8 values
    assert ptx.count("shfl.sync.bfly.b32") == 12
    assert ptx.count(", 4, 31, -1;") == 9 and ptx.count(", 8, 31, -1;") == 1
    # q, k, v, index-q and index-k each have their store; both slot maps are tested for -1
    assert ptx.count("st.global.v4.b32") == 5 and ptx.count("setp.lt.s64") == 2
    # the norm: (x * rsqrt) * (1 + w), rounded to bf16 once
    assert "0f3F800000" in ptx and ptx.count("cvt.rn.bf16.f32") == 8


def test_cutedsl_small_geometry_compiles(tmp_path):
    """Head dim 16 with rotary 8: lanes of 4 values (8-byte vectors), partner xor 1."""
    module = load(STEM, "cutedsl")
    module._compile(2, 2, 16, 8, 4, "sm_90a", str(tmp_path))
    ptx = "\n".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    assert "ld.global.v2.b32" in ptx and ", 1, 31, -1;" in ptx and ".reqntid 96, 1, 1" in ptx
    assert module._COMPILED == {}


@pytest.mark.gpu
def test_cutedsl_matches_reference_on_gpu():
    check_on_gpu(STEM, "cutedsl")
