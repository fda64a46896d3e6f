"""CuTe DSL oracle for problem 70: RetNet multi-scale retention in parallel form on the tensor cores.

o_i = sum_{j <= i} ((q_i / sqrt(d_k)) . k_j) gamma_h^(i - j) v_j with gamma_h = 1 - 2^(-5-h), no
softmax and no normalisation.

The whole computation is one DSL kernel, causal-attention style without the softmax. A CTA of 4
warps serves 64 query rows of one (batch, head) and one 128-wide slice of the value dimension (16
rows per warp); the grid is (row tiles, value slices, batch x heads), the row tiles with the most key
blocks launched first. Each CTA walks the 64-key blocks up to its diagonal.
- Q rows and, per key block, K rows and the V slice's rows are copied to swizzled shared memory by
  16-byte ``cp.async`` (the V copy overlaps S = Q K^T, the next K copy overlaps the decay and P V).
  Rows past the sequence are clamped to its last row (their scores are masked or their outputs not
  written); key columns past the problem's key size are zero-filled so they add nothing.
- S = Q K^T and O += P V run as warp-level ``mma.sync`` m16n8k16 (bf16 operands from ``ldmatrix``,
  fp32 accumulators): products of bf16 values are exact in fp32, so S is the fp32 dot product up to
  summation order. V is read through ``ldmatrix.trans``.
- P = (S * d_k^-0.5) * 2^((i - j) log2 gamma_h) for j <= i and 0 above the diagonal, in fp32 as the
  reference: log2 gamma_h = log2(1 - 1 / 2^(5+h)) (exact power of two, IEEE division, accurate
  log2f) and the accurate exp2f of the fp32 product (i - j) * log2 gamma_h.
- O += P V keeps the fp32 precision of P: P is split into hi = bf16(P) and lo = bf16(P - hi), and
  both bf16 operands go through the MMA (hi + lo carries ~16 significant bits of P).
- Epilogue: O is rounded to bf16 once and written through shared memory (the V tile, free by then)
  with 16-byte stores.
Value slices are 128 wide (each recomputes S: the price of keeping the fp32 O accumulators in
registers). Key and value sizes that are not multiples of 8 are zero-padded by the host into
scratch tensors (the small workload); the graded shape needs none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=8, heads=8, seqlen=1024, key_dim=256, value_dim=512)
_BM = 64  # query rows per CTA (4 warps x 16) and keys per block
_VW = 128  # value columns per CTA
_THREADS = 128
_COMPILED = {}


def _up(x, m):
    return (x + m - 1) // m * m


def _mn_view(t):
    """An MMA accumulator fragment ((2, 2), MMA_M, MMA_N) viewed as (rows, columns) of the thread."""
    lay = cute.make_layout(t.layout.shape)
    mn = cute.make_layout(((lay.shape[0][1], lay.shape[1]), (lay.shape[0][0], lay.shape[2])),
                          stride=((lay.stride[0][1], lay.stride[1]), (lay.stride[0][0], lay.stride[2])))
    return cute.make_tensor(t.iterator, cute.composition(t.layout, mn))


def _as_a_operand(t):
    """A bf16 copy of an S accumulator ((2, 2), MMA_M, MMA_N) as the A operand of P x:
    ((2, 2, 2), MMA_M, MMA_N / 2) (two n8 accumulator tiles form one k16 A tile)."""
    div = cute.logical_divide(t.layout, (None, None, 2))
    lay = cute.make_layout(((div.shape[0], div.shape[2][0]), div.shape[1], div.shape[2][1]),
                           stride=((div.stride[0], div.stride[2][0]), div.stride[1], div.stride[2][1]))
    return cute.make_tensor(t.iterator, lay)


@cute.jit
def _load_rows(g2s, dst, src, bc, first, length, idx, width, rows_per_pass, my_row, my_chunk):
    """cp.async of rows first.. (clamped to the chunk) of src[bc, row, idx, :width] into dst (a g2s
    partition); 8-column chunks past width are skipped (zero-filled once by the caller)."""
    for m in cutlass.range_constexpr(cute.size(dst, mode=[1])):
        r = cutlass.min(first + m * rows_per_pass + my_row, length - 1)
        for kk in cutlass.range_constexpr(cute.size(dst, mode=[2])):
            col = kk * 64 + my_chunk * 8
            if col < width:
                cute.copy(g2s, cute.local_tile(src[bc, r, idx, None], (8,), (kk * 8 + my_chunk,)),
                          dst[None, m, kk])


@cute.jit
def _zero_pad(dst, width, my_chunk):
    """Zero the 8-column chunks of a g2s partition that lie past width."""
    for m in cutlass.range_constexpr(cute.size(dst, mode=[1])):
        for kk in cutlass.range_constexpr(cute.size(dst, mode=[2])):
            if kk * 64 + my_chunk * 8 >= width:
                z = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                z.fill(0.0)
                dst[None, m, kk].store(z.load())


@cute.kernel
def retention_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, o: cute.Tensor, scale: cutlass.Float32,
                     heads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    tile_rev, split, bh = cute.arch.block_idx()
    length = cute.size(q, mode=[1])
    key_dim = cute.size(q, mode=[3])
    width = cute.size(v, mode=[3])
    n_tiles = (length + _BM - 1) // _BM
    tile = n_tiles - 1 - tile_rev  # the tiles with the most key blocks first
    k_pad = _up(key_dim, 64)
    p_pad = _up(width, 64)
    h = bh % heads
    r0 = tile * _BM
    cols = 8  # threads per 64-column slab of a row in the copies
    rows_per_pass = _THREADS // cols
    my_row = tidx // cols
    my_chunk = tidx % cols

    smem = cutlass.memory.SmemAllocator()
    atom = cute.make_layout((8, 64), stride=(64, 1))
    # the pointer swizzle acts on byte addresses: bits 7-9 (row % 8) are xor-ed into bits 4-6 (the 16-byte
    # chunk of a 128-byte row), so cp.async vectors and ldmatrix rows stay whole (M = 3 would split them)
    swizzle = cute.make_swizzle(3, 4, 3)
    sQ = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, k_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sK = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, k_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sV = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, p_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sVt = cute.composition(sV, cute.make_layout((p_pad, _BM), stride=(_BM, 1)))  # (value column, key)

    g2s = cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((rows_per_pass, cols), stride=(cols, 1)), cute.make_layout((1, 8)))
    thr_g2s = g2s.get_slice(tidx)
    tQsQ = thr_g2s.partition_D(sQ)  # ((8, 1), BM / 16, k_pad / 64)
    tKsK = thr_g2s.partition_D(sK)
    tVsV = thr_g2s.partition_D(sV)

    n_blocks = tile + 1
    _load_rows(g2s, tQsQ, q, bh, r0, length, 0, key_dim, rows_per_pass, my_row, my_chunk)
    _load_rows(g2s, tKsK, k, bh, 0, length, 0, key_dim, rows_per_pass, my_row, my_chunk)
    cute.arch.cp_async_commit_group()
    if cutlass.const_expr(k_pad != key_dim):
        _zero_pad(tQsQ, key_dim, my_chunk)
        _zero_pad(tKsK, key_dim, my_chunk)

    # log2 gamma_h = log2(1 - 2^-(5 + h)) in fp32 (1 / 2^(5 + h) is exact)
    log2_gamma = cute.math.log2(cutlass.Float32(1.0) - cutlass.Float32(1.0) / cutlass.Float32(
        cutlass.Int32(1) << (h + 5)))

    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((_THREADS // 32, 1, 1)), permutation_mnk=(_BM, 16, 16))
    thr_mma = tiled_mma.get_slice(tidx)
    tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
    tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sK))
    tOrVt = thr_mma.make_fragment_B(thr_mma.partition_B(sVt))
    acc_o = cute.make_rmem_tensor(thr_mma.partition_shape_C((_BM, p_pad)), cutlass.Float32)
    acc_o.fill(0.0)

    s2r_q = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_k = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_v = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16), tiled_mma)
    thr_s2r_q = s2r_q.get_slice(tidx)
    thr_s2r_k = s2r_k.get_slice(tidx)
    thr_s2r_v = s2r_v.get_slice(tidx)
    tXsQ = thr_s2r_q.partition_S(sQ)
    tXrQ = thr_s2r_q.retile(tSrQ)
    tXsK = thr_s2r_k.partition_S(sK)
    tXrK = thr_s2r_k.retile(tSrK)
    tXsVt = thr_s2r_v.partition_S(sVt)
    tXrVt = thr_s2r_v.retile(tOrVt)

    # coordinates (row in tile, key in block) of each S accumulator element
    tScS = _mn_view(thr_mma.partition_C(cute.make_identity_tensor((_BM, _BM))))
    acc_s_shape = thr_mma.partition_shape_C((_BM, _BM))
    n_rows = cute.size(tScS, mode=[0])  # rows per thread (2)
    n_cols = cute.size(tScS, mode=[1])

    for nb in range(n_blocks):
        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()  # K(nb) (and Q) landed; every warp is done with V(nb - 1)
        _load_rows(g2s, tVsV, v, bh, nb * _BM, length, split, width, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()

        acc_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
        acc_s.fill(0.0)
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            cute.copy(s2r_q, tXsQ[None, None, kb], tXrQ[None, None, kb])
            cute.copy(s2r_k, tXsK[None, None, kb], tXrK[None, None, kb])
            cute.gemm(tiled_mma, acc_s, tSrQ[None, None, kb], tSrK[None, None, kb], acc_s)

        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()  # V(nb) landed; every warp is done with K(nb)
        if nb + 1 < n_blocks:
            _load_rows(g2s, tKsK, k, bh, (nb + 1) * _BM, length, 0, key_dim, rows_per_pass, my_row, my_chunk)
            cute.arch.cp_async_commit_group()

        s_mn = _mn_view(acc_s)
        for i in cutlass.range_constexpr(n_rows):
            row = r0 + tScS[i, 0][0]
            for c in cutlass.range_constexpr(n_cols):
                key = nb * _BM + tScS[0, c][1]
                decay = cute.math.exp2(cutlass.Float32(row - key) * log2_gamma)
                s_mn[i, c] = cutlass.Float32(cutlass.select_(key <= row, (s_mn[i, c] * scale) * decay,
                                                             cutlass.Float32(0.0)))

        p_hi = cute.make_fragment_like(acc_s, cutlass.BFloat16)
        p_hi.store(acc_s.load().to(cutlass.BFloat16))
        p_lo = cute.make_fragment_like(acc_s, cutlass.BFloat16)
        p_lo.store((acc_s.load() - p_hi.load().to(cutlass.Float32)).to(cutlass.BFloat16))
        a_hi = _as_a_operand(p_hi)
        a_lo = _as_a_operand(p_lo)
        for kb in cutlass.range_constexpr(cute.size(a_hi, mode=[2])):
            cute.copy(s2r_v, tXsVt[None, None, kb], tXrVt[None, None, kb])
            cute.gemm(tiled_mma, acc_o, a_hi[None, None, kb], tOrVt[None, None, kb], acc_o)
            cute.gemm(tiled_mma, acc_o, a_lo[None, None, kb], tOrVt[None, None, kb], acc_o)

    # epilogue: bf16 O staged through shared memory (the V tile) for 16-byte stores
    r_o = cute.make_fragment_like(acc_o, cutlass.BFloat16)
    r_o.store(acc_o.load().to(cutlass.BFloat16))
    cute.arch.sync_threads()  # every warp is done reading sV
    r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16), tiled_mma)
    thr_r2s = r2s.get_slice(tidx)
    cute.copy(r2s, thr_r2s.retile(r_o), thr_r2s.partition_D(sV))
    cute.arch.sync_threads()
    for m in cutlass.range_constexpr(cute.size(tVsV, mode=[1])):
        r = r0 + m * rows_per_pass + my_row
        if r < length:
            for kk in cutlass.range_constexpr(cute.size(tVsV, mode=[2])):
                if kk * 64 + my_chunk * 8 < width:
                    dst = cute.local_tile(o[bh, r, split, None], (8,), (kk * cols + my_chunk,))
                    frag = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                    frag.store(tVsV[None, m, kk].load())
                    cute.autovec_copy(frag, dst)


@cute.jit
def retention(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, o: cute.Tensor, scale: cutlass.Float32,
              heads: cutlass.Constexpr, stream: cuda.CUstream):
    length = cute.size(q, mode=[1])
    retention_kernel(q, k, v, o, scale, heads).launch(
        grid=[(length + _BM - 1) // _BM, cute.size(v, mode=[2]), cute.size(q, mode=[0])],
        block=[_THREADS, 1, 1], stream=stream)


def _row_major(dtype, shape):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=16)


def _geometry(key_dim, value_dim):
    """(padded key size, padded value size, value slices, slice width)."""
    dk = _up(key_dim, 8)
    if value_dim % _VW == 0:
        return dk, value_dim, value_dim // _VW, _VW
    if _up(value_dim, 8) <= _VW:
        return dk, _up(value_dim, 8), 1, _up(value_dim, 8)
    dv = _up(value_dim, _VW)
    return dk, dv, dv // _VW, _VW


def _compile(batch, heads, seqlen, key_dim, value_dim, arch=None, ptx_dir=None):
    dk, _, slices, vw = _geometry(key_dim, value_dim)
    bh = batch * heads
    qk = [_row_major(cutlass.BFloat16, (bh, seqlen, 1, dk)) for _ in range(2)]
    v = _row_major(cutlass.BFloat16, (bh, seqlen, slices, vw))
    o = _row_major(cutlass.BFloat16, (bh, seqlen, slices, vw))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(retention, *qk, v, o, 1.0, heads, make_fake_stream(), options=options)


def _padded(t, size):
    """t with its last dimension zero-padded to size (a scratch copy only when needed)."""
    if t.shape[-1] == size:
        return t.contiguous()
    out = torch.zeros(*t.shape[:-1], size, dtype=t.dtype, device=t.device)
    out[..., :t.shape[-1]] = t
    return out


def solve(q, k, v):
    batch, heads, seqlen, key_dim = q.shape
    value_dim = v.shape[3]
    dk, dv, slices, vw = _geometry(key_dim, value_dim)
    bh = batch * heads
    o = torch.empty(batch, heads, seqlen, dv, dtype=torch.bfloat16, device=q.device)
    if o.numel() == 0:
        return o[..., :value_dim]
    key = (batch, heads, seqlen, key_dim, value_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](_padded(q, dk).view(bh, seqlen, 1, dk), _padded(k, dk).view(bh, seqlen, 1, dk),
                   _padded(v, dv).view(bh, seqlen, slices, vw), o.view(bh, seqlen, slices, vw),
                   float(key_dim ** -0.5), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return o if dv == value_dim else o[..., :value_dim].contiguous()


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(**WORKLOAD, arch=arch, ptx_dir=ptx_dir).kernel_info)
