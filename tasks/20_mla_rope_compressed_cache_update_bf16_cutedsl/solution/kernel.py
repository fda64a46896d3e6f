"""CuTe DSL oracle for problem 20: MLA q_b projection, NeoX RoPE and the compressed latent-cache write.

Two DSL kernels.

1. ``mla_q_gemm_kernel``: q = q_c @ q_b_weight^T on the tensor cores (warp-level ``mma.sync``
   m16n8k16, bf16 operands, fp32 accumulation). A CTA computes a 128 x 128 tile of q with 4 warps
   (2 x 2, each 64 x 64); K advances in slices of 32 through a two-stage shared-memory ring filled by
   16-byte ``cp.async`` copies (swizzled rows so that ``ldmatrix`` reads them without bank
   conflicts), and ``ldmatrix`` feeds the MMA fragments. A reads the first q_lora columns of
   qkv_lora in place. The fp32 accumulators are rounded to bf16 once and written to q_out, which
   is the reference's bf16 q (every product of two bf16 values is exact in fp32, so only the
   summation order differs from the reference's fp32 GEMM). Shapes that are not tile multiples
   (the small workload) are zero-padded by the host into scratch tiles; the graded shapes need none.
2. ``mla_rope_cache_kernel``: one CTA per token. Each thread takes (head, pair) items of the
   rotary half-dims, rotates q_pe in place in q_out, and for tokens with slot >= 0 copies kv_c and
   the rotated k_pe to row ``slot`` of the cache (viewed as [num_blocks * block_size, 576], which is
   [slot // block_size, slot % block_size, 0]). RoPE follows the reference's bf16 steps:
   o1 = bf16(bf16(x1 * cos) - bf16(x2 * sin)), o2 = bf16(bf16(x2 * cos) + bf16(x1 * sin)): the products
   of bf16 values are exact in fp32 and are rounded to bf16 by integer arithmetic on their bits
   (round to nearest even), which no compiler pass can contract into the following fp32 sum; the
   sum is then rounded by ``cvt.rn.bf16.f32``.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

HEADS = 16
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=2048, q_lora=1536, kv_lora=512, nope_dim=128, rope_dim=64, max_position=4096,
                num_blocks=256, block_size=16, max_padding=128)
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 128  # 2 x 2 warps
_ROPE_THREADS = 256
_COMPILED = {}


@cute.kernel
def mla_q_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = bf16(sum_k mA[m, k] * mB[n, k]) over the first k_tiles * 32 columns of mA and mB."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))  # (BM, BK, k tiles)
    gB = cute.local_tile(mB, (_BN, _BK), (bn, None))  # (BN, BK, k tiles)
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))  # (BM, BN)

    # two stages of K-contiguous rows of 32 bf16 (64 bytes). The pointer swizzle acts on byte addresses:
    # bits 7-8 (row / 2) are xor-ed into bits 4-5 (the 16-byte chunk of the row), so a cp.async vector
    # stays whole and the 8 rows an ldmatrix reads land in different banks
    swizzle = cute.make_swizzle(2, 4, 3)
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BM, _BK, 2), (0, 1, 2)), 16,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BN, _BK, 2), (0, 1, 2)), 16,
                              swizzle=swizzle)

    # global -> shared: 32 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy
    g2s = cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((_GEMM_THREADS // (_BK // 8), _BK // 8), stride=(_BK // 8, 1)),
        cute.make_layout((1, 8)))
    thr_g2s = g2s.get_slice(tidx)
    tAgA = thr_g2s.partition_S(gA)
    tAsA = thr_g2s.partition_D(sA)
    tBgB = thr_g2s.partition_S(gB)
    tBsB = thr_g2s.partition_D(sB)

    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((2, 2, 1)), permutation_mnk=(32, 32, 16))
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsB = thr_mma.partition_B(sB)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)
    acc.fill(0.0)

    s2r_A = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_B = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    thr_s2r_A = s2r_A.get_slice(tidx)
    thr_s2r_B = s2r_B.get_slice(tidx)
    tXsA = thr_s2r_A.partition_S(sA)
    tXrA = thr_s2r_A.retile(tCrA)
    tXsB = thr_s2r_B.partition_S(sB)
    tXrB = thr_s2r_B.retile(tCrB)
    k_blocks = cute.size(tCrA, mode=[2])

    cute.copy(g2s, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next slice into the other stage
            nxt = (kt + 1) % 2
            cute.copy(g2s, tAgA[None, None, None, kt + 1], tAsA[None, None, None, nxt])
            cute.copy(g2s, tBgB[None, None, None, kt + 1], tBsB[None, None, None, nxt])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)  # this slice's group has landed
        cute.arch.sync_threads()
        stage = kt % 2
        for kb in cutlass.range_constexpr(k_blocks):
            cute.copy(s2r_A, tXsA[None, None, kb, stage], tXrA[None, None, kb])
            cute.copy(s2r_B, tXsB[None, None, kb, stage], tXrB[None, None, kb])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch

    out = cute.make_fragment_like(acc, cutlass.BFloat16)
    out.store(acc.load().to(cutlass.BFloat16))
    cute.autovec_copy(out, tCgC)


@cute.jit
def mla_q_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    mla_q_gemm_kernel(mA, mB, mC, k // _BK).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


def _round_bf16(x):
    """fp32 -> nearest-even bf16 value (kept in fp32), by integer arithmetic on the bits, so the
    compiler cannot fold the rounding into a neighbouring multiply or add (no NaN/Inf occur here)."""
    bits = x.bitcast(cutlass.Int32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.bitcast(cutlass.Float32)


def _rope(x1, x2, c, s):
    """NeoX rotation of one bf16 (x1, x2) pair in the reference's bf16 steps; returns bf16 values."""
    x1, x2, c, s = (cutlass.Float32(v) for v in (x1, x2, c, s))
    o1 = _round_bf16(x1 * c) - _round_bf16(x2 * s)
    o2 = _round_bf16(x2 * c) + _round_bf16(x1 * s)
    return cutlass.BFloat16(o1), cutlass.BFloat16(o2)


@cute.kernel
def mla_rope_cache_kernel(qkv: cute.Tensor, q: cute.Tensor, positions: cute.Tensor, cos_sin: cute.Tensor,
                          slots: cute.Tensor, cache: cute.Tensor, q_lora: cutlass.Constexpr,
                          kv_lora: cutlass.Constexpr, nope: cutlass.Constexpr, rope: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, _, _ = cute.arch.block_idx()
    half = rope // 2
    head_dim = nope + rope
    pos = cutlass.Int32(positions[token])
    slot = cutlass.Int64(slots[token])
    for j in range(tidx, HEADS * half, _ROPE_THREADS):
        head = j // half
        p = j - head * half
        col = head * head_dim + nope + p
        o1, o2 = _rope(q[token, col], q[token, col + half], cos_sin[pos, p], cos_sin[pos, half + p])
        q[token, col] = o1
        q[token, col + half] = o2
    if slot >= 0:
        row = cutlass.Int32(slot)
        for j in range(tidx, kv_lora, _ROPE_THREADS):
            cache[row, j] = qkv[token, q_lora + j]
        for p in range(tidx, half, _ROPE_THREADS):
            o1, o2 = _rope(qkv[token, q_lora + kv_lora + p], qkv[token, q_lora + kv_lora + half + p],
                           cos_sin[pos, p], cos_sin[pos, half + p])
            cache[row, kv_lora + p] = o1
            cache[row, kv_lora + half + p] = o2


@cute.jit
def mla_rope_cache(qkv: cute.Tensor, q: cute.Tensor, positions: cute.Tensor, cos_sin: cute.Tensor,
                   slots: cute.Tensor, cache: cute.Tensor, q_lora: cutlass.Constexpr, kv_lora: cutlass.Constexpr,
                   nope: cutlass.Constexpr, rope: cutlass.Constexpr, stream: cuda.CUstream):
    tokens = cute.size(q, mode=[0])
    mla_rope_cache_kernel(qkv, q, positions, cos_sin, slots, cache, q_lora, kv_lora, nope, rope).launch(
        grid=[tokens, 1, 1], block=[_ROPE_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _row_major(dtype, shape, align=16):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=align)


def _compile_gemm(m, width, n, k, arch=None, ptx_dir=None):
    """A [m, width] (the first k columns are used), B [n, k'] with k' >= k, C [m, n]; all tile multiples."""
    a = _row_major(cutlass.BFloat16, (m, width))
    b = _row_major(cutlass.BFloat16, (n, k))
    c = _row_major(cutlass.BFloat16, (m, n))
    return cute.compile(mla_q_gemm, a, b, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_rope(tokens, width, n, max_position, rope, cache_rows, latent, q_lora, arch=None, ptx_dir=None):
    qkv = _row_major(cutlass.BFloat16, (tokens, width))
    q = _row_major(cutlass.BFloat16, (tokens, n))
    positions = make_fake_compact_tensor(cutlass.Int64, (tokens,))
    cos_sin = _row_major(cutlass.BFloat16, (max_position, rope))
    slots = make_fake_compact_tensor(cutlass.Int64, (tokens,))
    cache = _row_major(cutlass.BFloat16, (cache_rows, latent))
    kv_lora = latent - rope
    nope = n // HEADS - rope
    return cute.compile(mla_rope_cache, qkv, q, positions, cos_sin, slots, cache, q_lora, kv_lora, nope, rope,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _gemm(qkv_lora, weight, q, stream):
    """q[:, :] = bf16(qkv_lora[:, :q_lora] @ weight^T) by the tensor-core kernel."""
    tokens, width = qkv_lora.shape
    n, q_lora = weight.shape
    if tokens % _BM == 0 and n % _BN == 0 and q_lora % _BK == 0 and width % _BK == 0:
        a, b, c = qkv_lora, weight, q
    else:  # zero-pad to whole tiles (zeros add nothing to the sums)
        mp, np_, kp = _up(tokens, _BM), _up(n, _BN), _up(q_lora, _BK)
        a = torch.zeros(mp, kp, dtype=qkv_lora.dtype, device=q.device)
        a[:tokens, :q_lora] = qkv_lora[:, :q_lora]
        b = torch.zeros(np_, kp, dtype=weight.dtype, device=q.device)
        b[:n, :q_lora] = weight
        c = torch.empty(mp, np_, dtype=q.dtype, device=q.device)
    key = ("gemm", a.shape[0], a.shape[1], c.shape[1], b.shape[1])
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(a.shape[0], a.shape[1], c.shape[1], b.shape[1])
    _COMPILED[key](a, b, c, stream)
    if c is not q:
        q.copy_(c[:tokens, :n])


def solve(qkv_lora, q_b_weight, positions, cos_sin_cache, slot_mapping, kv_cache):
    if not kv_cache.is_contiguous():
        raise ValueError("kv_cache must be contiguous (it is updated in place)")
    num_blocks, block_size, _, latent = kv_cache.shape
    rope = cos_sin_cache.shape[1]
    n, q_lora = q_b_weight.shape
    tokens, width = qkv_lora.shape
    q = torch.empty(tokens, n, dtype=torch.bfloat16, device=qkv_lora.device)
    if tokens == 0:
        return q.view(tokens, HEADS, n // HEADS)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    qkv = qkv_lora.contiguous()
    _gemm(qkv, q_b_weight.contiguous(), q, stream)
    max_position = cos_sin_cache.shape[0]
    key = ("rope", tokens, width, n, max_position, rope, num_blocks * block_size, latent, q_lora)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_rope(*key[1:])
    _COMPILED[key](qkv, q, positions.contiguous(), cos_sin_cache.contiguous(), slot_mapping.contiguous(),
                   kv_cache.view(num_blocks * block_size, latent), stream)
    return q.view(tokens, HEADS, n // HEADS)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both kernels for the fixed workload without a GPU; return the kernel names."""
    w = WORKLOAD
    n = HEADS * (w["nope_dim"] + w["rope_dim"])
    width = w["q_lora"] + w["kv_lora"] + w["rope_dim"]
    gemm = _compile_gemm(w["tokens"], width, n, w["q_lora"], arch, ptx_dir)
    rope = _compile_rope(w["tokens"], width, n, w["max_position"], w["rope_dim"],
                         w["num_blocks"] * w["block_size"], w["kv_lora"] + w["rope_dim"], w["q_lora"], arch, ptx_dir)
    return list(gemm.kernel_info) + list(rope.kernel_info)
