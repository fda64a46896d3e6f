"""CuTe DSL oracle for problem 22: Gemma QK-norm, partial NeoX RoPE, main and index cache inserts (MiniMax-M3).

One DSL kernel does everything. One CTA per token; a group of ``lanes`` threads owns one head of
the token's q | k | v | index-q | index-k row, each thread ``vec`` contiguous bf16 (16 lanes of 8,
one 16-byte load, for head dim 128), so thread t of the CTA loads chunk t of the token's row. The
head's sum of squares is reduced inside the group by butterfly shuffles. The CTA is rounded up to
whole warps; surplus threads shuffle zeros and store nothing.

The roundings follow the reference: the norm is (x * rsqrt(ms + eps)) * (1 + w) in fp32, rounded
to bf16 once; RoPE is x1 * cos - x2 * sin and x2 * cos + x1 * sin in fp32 from those bf16 values,
rounded to bf16 once. Each product of two bf16 values is exact in fp32, so an FMA contraction by
the compiler gives the same sum as the reference's separate multiply and add. Only the approximate
rsqrt (about 2^-22 relative) differs from the reference's, by far less than the bf16 rounding.

The RoPE partner of the lane holding dims [vec * p, vec * p + vec) of the first rotary half is
lane p + ``partner`` (4 for a rotary half of 32 dims in vectors of 8), reached by one xor shuffle
per value; every lane shuffles (full-warp mask) and only the rotary lanes use the result. Dims past
the rotary part pass through. k goes to kv_cache[slot // block_size, head, slot % block_size,
0:head_dim], the raw v to [head_dim:2 * head_dim] of the same row, index-k to
index_cache[islot // block_size, islot % block_size]; q and index-q are returned. A negative slot
writes nothing.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

EPS = 1e-6
HEADS = 16
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(kv_heads=4, index_heads=4, head_dim=128, rotary_dim=64, block_size=64)
_COMPILED = {}


def _plan(head_dim, rotary_dim):
    """(vector width, lanes per head, RoPE partner distance in lanes), all powers of two."""
    half = rotary_dim // 2
    for vec in (8, 4, 2, 1):
        lanes, partner = head_dim // vec, half // vec
        if head_dim % vec == 0 and half % vec == 0 and lanes <= 32:
            if lanes & (lanes - 1) == 0 and partner & (partner - 1) == 0 and partner >= 1:
                return vec, lanes, partner
    raise ValueError("head_dim / vec must be a power of two <= 32 and the rotary half a power-of-two multiple")


@cute.kernel
def minimax_norm_rope_insert_kernel(qkv: cute.Tensor, q_weight: cute.Tensor, k_weight: cute.Tensor,
                                    iq_weight: cute.Tensor, ik_weight: cute.Tensor, positions: cute.Tensor,
                                    cos_sin: cute.Tensor, slots: cute.Tensor, index_slots: cute.Tensor,
                                    kv_cache: cute.Tensor, index_cache: cute.Tensor, q_out: cute.Tensor,
                                    iq_out: cute.Tensor, kv_heads: cutlass.Constexpr,
                                    index_heads: cutlass.Constexpr, vec: cutlass.Constexpr,
                                    lanes: cutlass.Constexpr, partner: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, _, _ = cute.arch.block_idx()
    k0 = HEADS
    v0 = k0 + kv_heads
    iq0 = v0 + kv_heads
    ik0 = iq0 + index_heads
    rows = ik0 + 1
    head_dim = vec * lanes
    block_size = cute.size(kv_cache, mode=[2])
    row = tidx // lanes
    part = tidx % lanes

    raw = cute.make_rmem_tensor((vec,), cutlass.BFloat16)
    wv = cute.make_rmem_tensor((vec,), cutlass.BFloat16)
    raw.fill(0.0)
    wv.fill(0.0)
    if row < rows:
        raw.store(cute.zipped_divide(qkv[token, None], (vec,))[None, tidx].load())
    if row < k0:
        wv.store(cute.zipped_divide(q_weight, (vec,))[None, part].load())
    else:
        if row < v0:
            wv.store(cute.zipped_divide(k_weight, (vec,))[None, part].load())
        else:
            if row >= iq0:
                if row < ik0:
                    wv.store(cute.zipped_divide(iq_weight, (vec,))[None, part].load())
                else:
                    if row < rows:
                        wv.store(cute.zipped_divide(ik_weight, (vec,))[None, part].load())

    vals = cute.make_rmem_tensor((vec,), cutlass.Float32)
    vals.store(raw.load().to(cutlass.Float32))
    sq = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(vec):
        sq = sq + vals[j] * vals[j]
    sq = cute.arch.warp_reduction(sq, lambda a, b: a + b, threads_in_group=lanes)
    scale = cute.math.rsqrt(sq / head_dim + EPS)

    # y = bf16((x * scale) * (1 + w)): one rounding, as the reference
    ys = cute.make_rmem_tensor((vec,), cutlass.Float32)
    ys.store(((vals.load() * scale) * (wv.load().to(cutlass.Float32) + 1.0)).to(cutlass.BFloat16)
             .to(cutlass.Float32))
    # the partner lane's y (x2 for a first-half lane, x1 for a second-half lane); every lane shuffles
    other = cute.make_rmem_tensor((vec,), cutlass.Float32)
    for j in cutlass.range_constexpr(vec):
        other[j] = cute.arch.shuffle_sync_bfly(ys[j], offset=partner)

    out = cute.make_rmem_tensor((vec,), cutlass.BFloat16)
    out.store(ys.load().to(cutlass.BFloat16))
    if part < 2 * partner and row < rows:
        pos = cutlass.Int32(positions[token])
        table = cute.zipped_divide(cos_sin[pos, None], (vec,))
        rot = part % partner
        cos = cute.make_rmem_tensor((vec,), cutlass.BFloat16)
        sin = cute.make_rmem_tensor((vec,), cutlass.BFloat16)
        cos.store(table[None, rot].load())
        sin.store(table[None, partner + rot].load())
        pa = ys.load() * cos.load().to(cutlass.Float32)
        pb = other.load() * sin.load().to(cutlass.Float32)
        if part < partner:
            out.store((pa - pb).to(cutlass.BFloat16))
        else:
            out.store((pa + pb).to(cutlass.BFloat16))

    if row < k0:
        cute.zipped_divide(q_out[token, row, None], (vec,))[None, part].store(out.load())
    else:
        if row < iq0:
            slot = cutlass.Int64(slots[token])
            if slot >= 0:
                block = cutlass.Int32(slot // block_size)
                offset = cutlass.Int32(slot % block_size)
                if row < v0:
                    dst = cute.zipped_divide(kv_cache[block, row - k0, offset, None], (vec,))
                    dst[None, part].store(out.load())
                else:
                    dst = cute.zipped_divide(kv_cache[block, row - v0, offset, None], (vec,))
                    dst[None, lanes + part].store(raw.load())
        else:
            if row < ik0:
                cute.zipped_divide(iq_out[token, row - iq0, None], (vec,))[None, part].store(out.load())
            else:
                if row < rows:
                    islot = cutlass.Int64(index_slots[token])
                    if islot >= 0:
                        block = cutlass.Int32(islot // block_size)
                        offset = cutlass.Int32(islot % block_size)
                        dst = cute.zipped_divide(index_cache[block, offset, None], (vec,))
                        dst[None, part].store(out.load())


@cute.jit
def minimax_norm_rope_insert(qkv: cute.Tensor, q_weight: cute.Tensor, k_weight: cute.Tensor, iq_weight: cute.Tensor,
                             ik_weight: cute.Tensor, positions: cute.Tensor, cos_sin: cute.Tensor, slots: cute.Tensor,
                             index_slots: cute.Tensor, kv_cache: cute.Tensor, index_cache: cute.Tensor,
                             q_out: cute.Tensor, iq_out: cute.Tensor, stream: cuda.CUstream):
    tokens = cute.size(q_out, mode=[0])
    kv_heads = cute.size(kv_cache, mode=[1])
    index_heads = cute.size(iq_out, mode=[1])
    vec, lanes, partner = _plan(cute.size(q_out, mode=[2]), cute.size(cos_sin, mode=[1]))
    threads = ((HEADS + 2 * kv_heads + index_heads + 1) * lanes + 31) // 32 * 32
    minimax_norm_rope_insert_kernel(qkv, q_weight, k_weight, iq_weight, ik_weight, positions, cos_sin, slots,
                                    index_slots, kv_cache, index_cache, q_out, iq_out, kv_heads, index_heads, vec,
                                    lanes, partner).launch(grid=[tokens, 1, 1], block=[threads, 1, 1], stream=stream)


def _compile(kv_heads, index_heads, head_dim, rotary_dim, block_size, arch=None, ptx_dir=None):
    """Tokens, both caches' block counts and table rows are runtime symbols; the head geometry is static."""
    tokens, num_blocks, index_blocks, max_position = (cute.sym_int() for _ in range(4))
    rows = HEADS + 2 * kv_heads + index_heads + 1
    qkv = make_fake_compact_tensor(cutlass.BFloat16, (tokens, rows * head_dim), stride_order=(1, 0),
                                   assumed_align=16)
    weights = [make_fake_compact_tensor(cutlass.BFloat16, (head_dim,), assumed_align=16) for _ in range(4)]
    positions = make_fake_compact_tensor(cutlass.Int64, (tokens,))
    cos_sin = make_fake_compact_tensor(cutlass.BFloat16, (max_position, rotary_dim), stride_order=(1, 0),
                                       assumed_align=16)
    slots = [make_fake_compact_tensor(cutlass.Int64, (tokens,)) for _ in range(2)]
    kv_cache = make_fake_compact_tensor(cutlass.BFloat16, (num_blocks, kv_heads, block_size, 2 * head_dim),
                                        stride_order=(3, 2, 1, 0), assumed_align=16)
    index_cache = make_fake_compact_tensor(cutlass.BFloat16, (index_blocks, block_size, head_dim),
                                           stride_order=(2, 1, 0), assumed_align=16)
    q_out = make_fake_compact_tensor(cutlass.BFloat16, (tokens, HEADS, head_dim), stride_order=(2, 1, 0),
                                     assumed_align=16)
    iq_out = make_fake_compact_tensor(cutlass.BFloat16, (tokens, index_heads, head_dim), stride_order=(2, 1, 0),
                                      assumed_align=16)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(minimax_norm_rope_insert, qkv, *weights, positions, cos_sin, *slots, kv_cache, index_cache,
                        q_out, iq_out, make_fake_stream(), options=options)


def solve(qkv, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight, positions,
          cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache, index_cache):
    if not (kv_cache.is_contiguous() and index_cache.is_contiguous()):
        raise ValueError("the caches must be contiguous (they are updated in place)")
    _, kv_heads, block_size, two_dims = kv_cache.shape
    head_dim = two_dims // 2
    tokens = qkv.shape[0]
    index_heads = qkv.shape[1] // head_dim - HEADS - 2 * kv_heads - 1
    rotary_dim = cos_sin_cache.shape[1]
    q = torch.empty(tokens, HEADS, head_dim, dtype=torch.bfloat16, device=qkv.device)
    iq = torch.empty(tokens, index_heads, head_dim, dtype=torch.bfloat16, device=qkv.device)
    if tokens == 0:
        return q, iq
    key = (kv_heads, index_heads, head_dim, rotary_dim, block_size)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](qkv.contiguous(), q_norm_weight.contiguous(), k_norm_weight.contiguous(),
                   index_q_norm_weight.contiguous(), index_k_norm_weight.contiguous(), positions.contiguous(),
                   cos_sin_cache.contiguous(), slot_mapping.contiguous(), index_slot_mapping.contiguous(), kv_cache,
                   index_cache, q, iq, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return q, iq


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["kv_heads"], w["index_heads"], w["head_dim"], w["rotary_dim"], w["block_size"], arch,
                         ptx_dir).kernel_info)
