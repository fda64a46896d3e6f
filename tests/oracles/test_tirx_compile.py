"""The TIRx oracles: kernels build on a CPU machine, and the generated CUDA is the intended one.

Without a GPU, ``tvm.compile`` for CUDA yields source-only modules, so these tests check what can
be checked here: every oracle's ``precompile()`` names its kernels; the CUDA source uses the
primitive the oracle is about (a block reduction for RMSNorm, warp shuffles for routing, 16-byte
vector copies for the block copy, ...) and no fast-math transcendental where precision matters
(NVRTC compiles with --use_fast_math, so a plain ``T.exp`` would become ``__expf``); the precise
exp/div helpers are accurate when built for the CPU; and, where NVRTC is importable, each source
compiles to an sm_90a cubin through TVM's own NVRTC path. The ``gpu`` test runs every oracle
against its reference under the grader's correctness contract (skipped without CUDA).
"""

from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from oracle_support import ORACLES, check_on_gpu, check_tirx_nvrtc, load
from tvm.script import tirx as T

from metakernelbench.problems import REPO_ROOT
from metakernelbench.verifier.rules import scan_source

PROBLEMS = {
    "02": "attention/02_gqa_paged_decode_h5_kv1_d128_ps1_bf16",
    "19": "kv_cache/19_qk_rmsnorm_partial_rope_paged_kv_update_glm4_bf16",
    "21": "kv_cache/21_dynamic_quantized_cache_append_per_token_head_fp8",
    "22": "kv_cache/22_main_index_dual_cache_insert_minimax_m3_bf16",
    "23": "kv_cache/23_mla_cache_gather_dequantize_fp8",
    "25": "kv_cache/25_batched_kv_cache_block_copy_remap_uint8",
    "28": "mlp_norm/28_fused_add_rmsnorm_h4096_llama31_8b_bf16",
    "36": "mlp_norm/36_rmsnorm_h128_qwen3_30b_bf16",
    "49": "moe/49_group_limited_topk_routing_ringflash_bf16",
    "60": "quantization/60_mamba2_output_projection_nemotron_nvfp4",
    "66": "linear_attention/66_wkv_time_decay_stabilization_rwkv4_fp32",
}
SYMBOLS = {
    "02": ["mkb_gqa_paged_decode_kernel"],
    "19": ["mkb_qk_norm_rope_kv_kernel"],
    "21": ["mkb_fp8_cache_append_kernel"],
    "22": ["mkb_minimax_norm_rope_insert_kernel"],
    "23": ["mkb_mla_gather_dequant_kernel"],
    "25": ["mkb_kv_block_copy_kernel"],
    "28": ["mkb_fused_add_rmsnorm_kernel"],
    "36": ["mkb_rmsnorm_rows_kernel"],
    "49": ["mkb_router_gemm_kernel", "mkb_group_topk_route_kernel"],
    "60": ["mkb_nvfp4_gemm_kernel"],
    "66": ["mkb_wkv4_kernel"],
}
PRECISE_EXP = ("02", "49", "66")  # these must not use the fast-math expf


def oracle(pid):
    """The oracle module of problem ``pid`` (loaded once per session)."""
    return load(Path(PROBLEMS[pid]).name, "tirx")


def test_every_pilot_problem_has_an_oracle():
    for pid, rel in PROBLEMS.items():
        assert (ORACLES / f"{rel}_tirx.py").is_file(), pid
        assert (REPO_ROOT / "problems" / f"{rel}.py").is_file(), pid


@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_oracle_passes_the_static_rules(pid):
    path = ORACLES / f"{PROBLEMS[pid]}_tirx.py"
    assert scan_source(path.read_text(), "tirx") == []


@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_precompile_names_the_kernels(pid):
    assert oracle(pid).precompile("sm_90a") == SYMBOLS[pid]


@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_kernel_is_a_cuda_entry_point(pid):
    for name, source in oracle(pid).kernel_sources("sm_90a").items():
        assert 'extern "C" __global__' in source and f"{name}(" in source


@pytest.mark.parametrize("pid", PRECISE_EXP)
def test_no_fast_math_exp(pid):
    source = list(oracle(pid).kernel_sources("sm_90a").values())[-1]  # 49: the routing kernel
    assert "expf(" not in source and "exp2f(" not in source
    assert "0x1.62e4p-1f" in source  # the split ln 2 of exp_precise's range reduction


def test_rmsnorm_uses_a_block_reduction():
    (source,) = oracle("28").kernel_sources("sm_90a").values()
    assert "tvm_builtin_cuda_cta_reduce_sum_8(" in source and "__shared__" in source
    assert "__launch_bounds__(256)" in source and "rsqrtf(" in source



def test_short_rows_reduce_within_a_shuffle_group():
    """Hidden 128: 16 threads per row, one 16-byte vector each, xor shuffles 8..1, no shared memory."""
    (source,) = oracle("36").kernel_sources("sm_90a").values()
    shuffles = [f"__shfl_xor_sync((uint)4294967295, sq_ptr[0], {m}, 32)" for m in (8, 4, 2, 1)]
    assert all(s in source for s in shuffles) and "__shfl_xor_sync((uint)4294967295, sq_ptr[0], 16," not in source
    assert "__shared__" not in source and "rsqrtf(" in source
    assert "*(uint4*)(x_ptr" in source and "*(uint4*)(y_ptr" in source
    (ragged,) = oracle("36").kernel_sources("sm_90a", hidden=100).values()
    assert "16, 32)" in ragged and "uint4" not in ragged  # 32 lanes, scalar loads


def test_paged_decode_reduces_in_warps_and_merges_in_shared_memory():
    (source,) = oracle("02").kernel_sources("sm_90a").values()
    assert "tvm_builtin_cuda_warp_reduce_sum_32(" in source
    assert "__shared__ alignas(64) float acc_part_ptr[10240]" in source  # 16 warps x 5 heads x 128
    assert "kv_indices_ptr[" in source and "log2f(" in source


def test_routing_uses_warp_shuffles():
    source = oracle("49").kernel_sources("sm_90a")["mkb_group_topk_route_kernel"]
    assert source.count("__shfl_xor_sync(") >= 2 + 8 * 5 * 3  # group top-2, then 8 arg-max rounds
    assert "topk_idx_ptr[" in source and "int64_t" in source


MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def _split_accumulation(body):
    """Each 32-wide K slice: two mma's into zeroed registers, then round-to-nearest adds."""
    return (body.count(f"tvm_builtin_ptx_{MMA_BF16.replace('.', '_')}(part_ptr[0]") == 32
            and "acc_ptr[0] = (acc_ptr[0] + part_ptr[0]);" in body)


def test_router_gemm_runs_on_the_tensor_cores_with_split_accumulation():
    source = oracle("49").kernel_sources("sm_90a")["mkb_router_gemm_kernel"]
    body = source[source.index("mkb_router_gemm_kernel(float"):]
    assert MMA_BF16 in source and _split_accumulation(body)
    assert "*(uint4*)(X32_ptr" in body and "*(uint4*)(W32_ptr" in body  # 16-byte operand loads
    assert "for (int kt = 0; kt < 128; ++kt)" in body  # K = 4096 in slices of 32


def test_block_copy_moves_16_byte_vectors_and_has_a_byte_fallback():
    (source,) = oracle("25").kernel_sources("sm_90a").values()
    assert "*(int4*)(dst_k_ptr" in source and "*(int4*)(dst_v_ptr" in source
    (fallback,) = oracle("25").kernel_sources("sm_90a", page_bytes=100, aligned=False).values()
    assert "uchar* __restrict__ dst_k_ptr" in fallback and "int4" not in fallback




def test_fp8_append_divides_with_ieee_rounding_and_stores_4_bytes():
    """Exact e4m3 bytes need IEEE division under NVRTC's fast math: div.rn / rcp.rn / cvt.rn by name."""
    (source,) = oracle("21").kernel_sources("sm_90a").values()
    body = source[source.index('extern "C" __global__'):]
    assert "tvm_builtin_ptx_div_f_rn_f32(tmp_ptr[0], amax_ptr[0]" in body
    assert "tvm_builtin_ptx_rcp_rn_f32(tmp_ptr[1], tmp_ptr[0])" in body
    assert body.count("tvm_builtin_ptx_cvt_f8x2_f32_rn_satfinite_e4m3x2_f32(") == 4
    assert " / " not in body  # no fast-math division anywhere
    assert "*(uint*)(k_cache_ptr" in body and "*(uint*)(v_cache_ptr" in body
    assert body.count("__shfl_xor_sync(") == 5


def test_norm_rope_rounds_every_step_to_bf16_and_skips_padding():
    """Problem 19: bf16 after the norm, the weight, each RoPE product and each RoPE sum; partner lane xor 4."""
    (source,) = oracle("19").kernel_sources("sm_90a").values()
    body = source[source.index('extern "C" __global__'):]
    assert "__launch_bounds__(768)" in source  # 48 heads x 16 lanes
    assert all(f"__shfl_xor_sync((uint)4294967295, sq_ptr[0], {m}, 32)" in body for m in (8, 4, 2, 1))
    assert body.count("__shfl_xor_sync((uint)4294967295, ys_ptr[") == 8
    assert "rb_ptr[0] = ((nv_bfloat16)(vals_ptr[0] * scale_ptr[0]));" in body
    assert "rb_ptr[0] = ((nv_bfloat16)(((float)rb_ptr[0]) * ((float)wv_ptr[0])));" in body
    assert "pa_ptr[0] = ((nv_bfloat16)(ys_ptr[0] * ((float)cs_ptr[0])));" in body
    assert "out_ptr[0] = ((nv_bfloat16)(((float)pa_ptr[0]) - ((float)pb_ptr[0])));" in body
    assert "out_ptr[0] = ((nv_bfloat16)(((float)pa_ptr[0]) + ((float)pb_ptr[0])));" in body
    assert body.count("if ((int64_t)0 <= slot)") == 2 and "*(uint4*)(kv_cache_ptr" in body
    (small,) = oracle("19").kernel_sources("sm_90a", heads=2, kv_heads=1, head_dim=16, rotary_dim=8,
                                           block_size=4).values()
    assert "__launch_bounds__(32)" in small and "ys_ptr[0], 1, 32)" in small  # 4 lanes of 4, partner xor 1


def test_gemma_norm_rope_rounds_once_per_stage_and_fills_both_caches():
    """Problem 22: one bf16 rounding after the (1 + w) norm and one after each RoPE sum; three destinations."""
    (source,) = oracle("22").kernel_sources("sm_90a").values()
    body = source[source.index('extern "C" __global__'):]
    assert "__launch_bounds__(480)" in source  # 29 heads x 16 lanes, rounded up to whole warps
    assert "(vals_ptr[0] * scale_ptr[0]) * (0x1p+0f/*1.000000e+00*/ + ((float)wv_ptr[0]))" in body
    assert "((ys_ptr[0] * ((float)cs_ptr[0])) - (vals_ptr[0] * ((float)sn_ptr[0])))" in body
    assert "((ys_ptr[0] * ((float)cs_ptr[0])) + (vals_ptr[0] * ((float)sn_ptr[0])))" in body
    assert body.count("__shfl_xor_sync((uint)4294967295, ys_ptr[") == 8
    for dst in ("q_out_ptr", "iq_out_ptr", "kv_cache_ptr", "index_cache_ptr"):
        assert f"*(uint4*)({dst}" in body
    assert "index_slots_ptr[" in body and "*(uint4*)(raw_ptr" in body  # v is copied unnormalised


def test_cache_gather_reads_bytes_and_writes_fp32_vectors():
    (source,) = oracle("23").kernel_sources("sm_90a").values()
    assert "uchar* __restrict__ src_ptr" in source and "float scale" in source
    assert "*(float4*)(out_ptr" in source and "lens_ptr[" in source and "table_ptr[" in source
    (scalar,) = oracle("23").kernel_sources("sm_90a", entry=23).values()
    assert "float4" not in scalar


def test_nvfp4_gemm_decodes_packed_operands_in_its_load():
    (source,) = oracle("60").kernel_sources("sm_90a").values()
    body = source[source.index("mkb_nvfp4_gemm_kernel(uint"):]
    assert "uchar* __restrict__ SA_ptr" in body and "uchar* __restrict__ SB_ptr" in body
    assert "*(uint2*)(A32_ptr" in body and "*(uint2*)(B32_ptr" in body  # 8 packed bytes per thread
    assert "__shared__ alignas(64) uint lut_ptr[256]" in body and "float gs" in body
    assert MMA_BF16 in source and _split_accumulation(body)
    assert "for (int kt = 0; kt < 60; ++kt)" in body  # K = 1920 in slices of 32


def test_nvfp4_pair_decode_is_exact_for_every_byte_and_scale():
    """The GEMM's decode (byte -> bf16 pair table, times the e4m3 scale, narrowed by truncation),
    built for the CPU: every packed byte under every finite scale, bit for bit against torch."""
    module = oracle("60")

    @T.prim_func
    def decode(c_h: T.handle, s_h: T.handle, o_h: T.handle):
        n = T.int32()
        codes = T.match_buffer(c_h, (n,), "uint8")
        scales = T.match_buffer(s_h, (n,), "uint8")
        out = T.match_buffer(o_h, (n,), "uint32")
        for i in range(n):
            out[i] = module.scale_pair(module.e2m1_pair_bits(T.int32(codes[i])),
                                       module.e4m3_to_f32(T.int32(scales[i])))

    exe = tvm.compile(tvm.IRModule({"main": decode}), target=tvm.target.Target("llvm"), tir_pipeline="tirx")
    scale_bytes = torch.arange(256, dtype=torch.uint8)
    scale_bytes = scale_bytes[~scale_bytes.view(torch.float8_e4m3fn).float().isnan()]
    codes = torch.arange(256, dtype=torch.uint8).repeat(len(scale_bytes))
    scales = scale_bytes.repeat_interleave(256)
    out = np.zeros(codes.shape, dtype=np.uint32)
    exe.mod["main"](codes.numpy(), scales.numpy(), out)
    got = torch.from_numpy(out.view(np.int32)).view(torch.bfloat16).view(-1, 2).float()
    table = torch.tensor((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0))
    nibbles = torch.stack([codes & 15, codes >> 4], dim=-1).long()
    want = table[nibbles & 7] * (1 - 2 * (nibbles >> 3)) * scales.view(torch.float8_e4m3fn).float()[:, None]
    assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())


def test_wkv_walks_the_sequence_in_one_thread():
    (source,) = oracle("66").kernel_sources("sm_90a").values()
    assert "for (int t = 0; t < steps; ++t)" in source


def test_dsl_copy_builds():
    module = load("_dsl_copy", "tirx")
    source = module._copy_build("sm_90a").mod.imports[0].inspect_source()
    assert "mkb_dsl_copy_kernel(" in source and "uchar*" in source


# ---- the precise helpers, built for the CPU --------------------------------------------------

def _cpu_map(fn, *arrays):
    """Apply an expression builder element-wise with an llvm TIRx kernel."""
    if len(arrays) == 1:
        @T.prim_func
        def unary(a: T.handle, o: T.handle):
            n = T.int32()
            src = T.match_buffer(a, (n,), "float32")
            out = T.match_buffer(o, (n,), "float32")
            for i in range(n):
                out[i] = fn(src[i])
        func = unary
    else:
        @T.prim_func
        def binary(a: T.handle, b: T.handle, o: T.handle):
            n = T.int32()
            lhs = T.match_buffer(a, (n,), "float32")
            rhs = T.match_buffer(b, (n,), "float32")
            out = T.match_buffer(o, (n,), "float32")
            for i in range(n):
                out[i] = fn(lhs[i], rhs[i])
        func = binary
    exe = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target("llvm"),
                      tir_pipeline="tirx")
    out = np.zeros_like(arrays[0])
    exe.mod["main"](*arrays, out)
    return out


def _ulps(got, exact):
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32))


@pytest.mark.parametrize("pid", PRECISE_EXP)
def test_exp_precise_is_within_about_one_ulp(pid):
    x = np.concatenate([np.linspace(-87.0, 88.0, 200_001), np.linspace(-12.0, 0.0, 100_001)])
    x = x.astype(np.float32)
    got = _cpu_map(oracle(pid).exp_precise, x)
    assert _ulps(got, np.exp(x.astype(np.float64))).max() < 1.5
    below = np.array([-90.0, -1e30, -np.inf], dtype=np.float32)
    assert (_cpu_map(oracle(pid).exp_precise, below) == 0.0).all()


@pytest.mark.parametrize("pid", ("49", "66"))
def test_div_precise_is_within_about_one_ulp(pid):
    """On the CPU the residual n - d * q is not fused (no FMA contraction), hence 1.5, not 0.5."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(100_000).astype(np.float32)
    b = (rng.uniform(0.01, 100.0, 100_000) * rng.choice([-1, 1], 100_000)).astype(np.float32)
    got = _cpu_map(oracle(pid).div_precise, a, b)
    assert _ulps(got, a.astype(np.float64) / b.astype(np.float64)).max() < 1.5



def _cpu_decode(fn, codes):
    """Apply a byte -> fp32 decoder to a uint8 array with an llvm TIRx kernel."""
    @T.prim_func
    def decode(a: T.handle, o: T.handle):
        n = T.int32()
        src = T.match_buffer(a, (n,), "uint8")
        out = T.match_buffer(o, (n,), "float32")
        for i in range(n):
            out[i] = fn(T.int32(src[i]))

    exe = tvm.compile(tvm.IRModule({"main": decode}), target=tvm.target.Target("llvm"), tir_pipeline="tirx")
    out = np.zeros(codes.shape, dtype=np.float32)
    exe.mod["main"](codes, out)
    return out


def test_e4m3_decode_is_exact_for_every_byte():
    """All 256 codes, bit for bit against torch's float8_e4m3fn (signed zeros and subnormals included)."""
    codes = np.arange(256, dtype=np.uint8)
    got = _cpu_decode(oracle("23").e4m3_to_f32, codes)
    want = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all() and nan.sum() == 2
    assert (got[~nan].view(np.int32) == want[~nan].view(np.int32)).all()


# ---- NVRTC: the generated CUDA compiles for sm_90a -------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_sources_compile_to_sm90a_cubins(pid, monkeypatch):
    check_tirx_nvrtc(Path(PROBLEMS[pid]).name, monkeypatch)


# ---- on a GPU: each oracle against its reference, by the grader's contract ---------------------

@pytest.mark.gpu
@pytest.mark.parametrize("pid", list(PROBLEMS))
def test_oracle_matches_reference_on_gpu(pid):
    check_on_gpu(Path(PROBLEMS[pid]).name, "tirx")
