"""CuTe DSL oracle for problem 21: per-token-per-head dynamic FP8 quantisation fused with the cache append.

One DSL kernel does everything. Grid (token, key|value), one warp per KV head: each lane holds
``per`` consecutive values of the head (4 for dim 128, one 8-byte load), the head's absmax comes
from a butterfly max over the warp, and then every lane computes the same scale and reciprocal.
The e4m3 bytes are compared exactly by the grader, so the arithmetic follows the reference step by
step in fp32 with IEEE rounding: scale = max(absmax / 448, 1e-6) and 1 / scale are correctly
rounded divisions (``div.rn.f32``, no fast math), x * (1 / scale) one fp32 multiply, clamped to
+-448, then converted to e4m3 with round-to-nearest-even (the hardware ``cvt.rn.satfinite``;
after the clamp saturation never triggers). Bytes go to cache[slot // block_size, slot %
block_size, head] through a Float8E4M3FN view of the uint8 cache, the scale to the scale cache;
tokens with slot -1 write nothing.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

FP8_MAX = 448.0
MIN_SCALE = 1e-6
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=2048, heads=8, head_dim=128, num_blocks=256, block_size=16, max_padding=128)
_COMPILED = {}


def _max(a, b):
    return cutlass.Float32(cutlass.select_(a > b, a, b))


def _min(a, b):
    return cutlass.Float32(cutlass.select_(a < b, a, b))


@cute.jit
def _quantize_head(x: cute.Tensor, cache: cute.Tensor, scales: cute.Tensor, token: cutlass.Int32,
                   block: cutlass.Int32, offset: cutlass.Int32, head: cutlass.Int32, lane: cutlass.Int32,
                   per: cutlass.Constexpr, ragged: cutlass.Constexpr):
    """Quantise x[token, head, :] into cache[block, offset, head, :] and scales[block, offset, head]."""
    dim = cute.size(x, mode=[2])
    vals = cute.make_rmem_tensor((per,), cutlass.Float32)
    vals.fill(0.0)
    if cutlass.const_expr(ragged):
        for j in cutlass.range_constexpr(per):
            if lane * per + j < dim:
                vals[j] = cutlass.Float32(x[token, head, lane * per + j])
    else:
        vals.store(cute.zipped_divide(x[token, head, None], (per,))[None, lane].load().to(cutlass.Float32))

    amax = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(per):
        amax = _max(amax, _max(vals[j], -vals[j]))
    amax = cute.arch.warp_reduction(amax, _max)
    scale = _max(amax / FP8_MAX, MIN_SCALE)
    inv = cutlass.Float32(1.0) / scale
    for j in cutlass.range_constexpr(per):
        vals[j] = _max(_min(vals[j] * inv, FP8_MAX), -FP8_MAX)
    codes = cute.make_rmem_tensor((per,), cutlass.Float8E4M3FN)
    codes.store(vals.load().to(cutlass.Float8E4M3FN))

    fp8 = cute.recast_tensor(cache, cutlass.Float8E4M3FN)
    if cutlass.const_expr(ragged):
        for j in cutlass.range_constexpr(per):
            if lane * per + j < dim:
                fp8[block, offset, head, lane * per + j] = codes[j]
    else:
        cute.zipped_divide(fp8[block, offset, head, None], (per,))[None, lane].store(codes.load())
    if lane == 0:
        scales[block, offset, head] = scale


@cute.kernel
def fp8_cache_append_kernel(key: cute.Tensor, value: cute.Tensor, slots: cute.Tensor, k_cache: cute.Tensor,
                            v_cache: cute.Tensor, k_scales: cute.Tensor, v_scales: cute.Tensor,
                            per: cutlass.Constexpr, ragged: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, kv, _ = cute.arch.block_idx()
    head = tidx // 32
    lane = tidx % 32
    block_size = cute.size(k_cache, mode=[1])
    slot = cutlass.Int64(slots[token])
    if slot >= 0:
        block = cutlass.Int32(slot // block_size)
        offset = cutlass.Int32(slot % block_size)
        if kv == 0:
            _quantize_head(key, k_cache, k_scales, token, block, offset, head, lane, per, ragged)
        else:
            _quantize_head(value, v_cache, v_scales, token, block, offset, head, lane, per, ragged)


@cute.jit
def fp8_cache_append(key: cute.Tensor, value: cute.Tensor, slots: cute.Tensor, k_cache: cute.Tensor,
                     v_cache: cute.Tensor, k_scales: cute.Tensor, v_scales: cute.Tensor, stream: cuda.CUstream):
    tokens = cute.size(key, mode=[0])
    heads = cute.size(key, mode=[1])
    dim = cute.size(key, mode=[2])
    per = (dim + 31) // 32
    fp8_cache_append_kernel(key, value, slots, k_cache, v_cache, k_scales, v_scales, per, dim % 32 != 0).launch(
        grid=[tokens, 2, 1], block=[heads * 32, 1, 1], stream=stream)


def _compile(heads, head_dim, num_blocks, block_size, arch=None, ptx_dir=None):
    """The token count is a runtime symbol; heads, dims and the cache geometry are static."""
    tokens = cute.sym_int()
    rows = [make_fake_compact_tensor(cutlass.BFloat16, (tokens, heads, head_dim), stride_order=(2, 1, 0),
                                     assumed_align=16) for _ in range(2)]
    slots = make_fake_compact_tensor(cutlass.Int64, (tokens,))
    caches = [make_fake_compact_tensor(cutlass.Uint8, (num_blocks, block_size, heads, head_dim),
                                       stride_order=(3, 2, 1, 0), assumed_align=16) for _ in range(2)]
    scales = [make_fake_compact_tensor(cutlass.Float32, (num_blocks, block_size, heads), stride_order=(2, 1, 0))
              for _ in range(2)]
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(fp8_cache_append, *rows, slots, *caches, *scales, make_fake_stream(), options=options)


def solve(key, value, slot_mapping, key_cache, value_cache, k_scale_cache, v_scale_cache):
    caches = (key_cache, value_cache, k_scale_cache, v_scale_cache)
    if not all(t.is_contiguous() for t in caches):
        raise ValueError("the caches must be contiguous (they are updated in place)")
    tokens, heads, head_dim = key.shape
    num_blocks, block_size = key_cache.shape[:2]
    if tokens == 0:
        return None
    key_ = (heads, head_dim, num_blocks, block_size)
    if key_ not in _COMPILED:
        _COMPILED[key_] = _compile(*key_)
    _COMPILED[key_](key.contiguous(), value.contiguous(), slot_mapping.contiguous(), *caches,
                    cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return None


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["heads"], w["head_dim"], w["num_blocks"], w["block_size"], arch, ptx_dir).kernel_info)
