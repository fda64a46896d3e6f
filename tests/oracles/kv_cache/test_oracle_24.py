"""Problem 24 (context-parallel gather of a mixed FP8 MLA cache, up-converted to bf16): both oracles."""

import numpy as np
import pytest
import torch
from oracle_support import check_cutedsl_compiles, check_on_gpu, check_tirx_nvrtc, check_tirx_sources, load

STEM = "24_context_parallel_cache_gather_fp8_upconvert_bf16"


def test_cutedsl_compiles_for_sm90a(tmp_path):
    """8 e4m3 bytes per thread decoded by the hardware, one fp32 multiply, bf16 by pairs, 16-byte stores."""
    ptx = check_cutedsl_compiles(
        STEM, ["cp_gather_upconvert_kernel"],
        ["ld.global.v2.b32", "cvt.rn.f16x2.e4m3x2", "cvt.f32.f16", "mul.f32", "cvt.rn.bf16x2.f32",
         "ld.global.v4.b32", "st.global.v4.b32"], tmp_path)
    assert ".reqntid 64, 1, 1" in ptx
    # the RoPE vectors start at byte 528 of the entry and land at byte 1024 of the output row
    assert "+528];" in ptx and "+1024]," in ptx
    assert ptx.count("st.global.v4.b32") == 2 and "fma" not in ptx


def test_tirx_sources():
    (source,) = check_tirx_sources(
        STEM, ["mkb_cp_gather_upconvert_kernel"],
        ["__launch_bounds__(64)", "uchar* __restrict__ codes_ptr", "float* __restrict__ scales_ptr",
         "nv_bfloat16* __restrict__ rope_ptr", "*(uint2*)(raw_ptr + 0) = *(uint2*)(codes_ptr",
         "*(uint4*)(out_ptr", "lens_ptr[", "table_ptr["]).values()
    body = source[source.index('extern "C" __global__'):]
    assert body.count("* scale));") == 8  # bf16(decode * scale), once per value
    assert "(((int)threadIdx.x) >> 4)) + 128)]" in body  # the scale of the thread's group of 128
    assert "+ 264))" in body and "+ 512))" in body  # RoPE words 264.. of the entry to columns 512..


def test_tirx_e4m3_decode_is_exact_for_every_byte():
    """All 256 codes through an llvm build of the decoder, bit for bit against torch (signed zeros too)."""
    import tvm
    from tvm.script import tirx as T

    decode_fn = load(STEM, "tirx").e4m3_to_f32

    @T.prim_func
    def decode(a: T.handle, o: T.handle):
        n = T.int32()
        src = T.match_buffer(a, (n,), "uint8")
        out = T.match_buffer(o, (n,), "float32")
        for i in range(n):
            out[i] = decode_fn(T.int32(src[i]))

    exe = tvm.compile(tvm.IRModule({"main": decode}), target=tvm.target.Target("llvm"), tir_pipeline="tirx")
    codes = np.arange(256, dtype=np.uint8)
    got = np.zeros(256, dtype=np.float32)
    exe.mod["main"](codes, got)
    want = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all() and nan.sum() == 2
    assert (got[~nan].view(np.int32) == want[~nan].view(np.int32)).all()


@pytest.mark.slow
def test_tirx_nvrtc(monkeypatch):
    check_tirx_nvrtc(STEM, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("dsl", ["cutedsl", "tirx"])
def test_matches_reference_on_gpu(dsl):
    check_on_gpu(STEM, dsl)
