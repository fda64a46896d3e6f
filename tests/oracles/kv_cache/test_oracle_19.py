"""Problem 19 (GLM-4.5 QK-RMSNorm + partial NeoX RoPE + paged KV write): the CuTe DSL oracle.

The TIRx oracle's checks live in tests/oracles/test_tirx_compile.py.
"""

import pytest
from oracle_support import check_cutedsl_compiles, check_on_gpu, load

STEM = "19_qk_rmsnorm_partial_rope_paged_kv_update_glm4_bf16"


def test_cutedsl_compiles_for_sm90a(tmp_path):
    """16-byte loads and stores, a 16-lane butterfly sum, approximate rsqrt, bf16 rounding by pairs."""
    ptx = check_cutedsl_compiles(
        STEM, ["qk_norm_rope_kv_kernel"],
        ["ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly.b32", "rsqrt.approx.f32", "cvt.rn.bf16x2.f32",
         "ld.global.b64"], tmp_path)
    # the sum of squares over 16 lanes (xor 8, 4, 2, 1) and the RoPE partner (xor 4) for 8 values
    assert ptx.count("shfl.sync.bfly.b32") == 12
    assert ptx.count(", 4, 31, -1;") == 9 and ptx.count(", 8, 31, -1;") == 1
    # the slot is tested for -1 before the cache stores
    assert "setp.lt.s64" in ptx


def test_cutedsl_small_geometry_compiles(tmp_path):
    """Head dim 16 with rotary 8: lanes of 4 values (8-byte vectors), partner xor 1, a padded warp."""
    module = load(STEM, "cutedsl")
    module._compile(2, 1, 16, 8, 4, "sm_90a", str(tmp_path))
    ptx = "\n".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    assert "ld.global.v2.b32" in ptx and ", 1, 31, -1;" in ptx
    assert module._COMPILED == {}


@pytest.mark.gpu
def test_cutedsl_matches_reference_on_gpu():
    check_on_gpu(STEM, "cutedsl")
