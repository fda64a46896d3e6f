"""CuTe DSL oracle for problem 65: the Mamba-2 SSD intra-chunk (diagonal block) output on the tensor
cores.

Y[i] = sum_{j <= i} (C_i . B_j) exp(s_i - s_j) x_j within each chunk, where s is the within-chunk
cumulative sum of the per-step log decays (A_cumsum), head h reading group h // (heads / groups).

The whole computation is one DSL kernel. A CTA of 4 warps serves 64 query rows of one (sequence,
chunk, head) (16 rows per warp); the grid is (row tiles of the chunk, heads, sequences x chunks).
- The CTA first loads the head's per-step decays of the chunk (fp32) into shared memory; each thread
  then forms the cumulative sums of its positions by adding them in order, the reference's fp32
  cumsum up to summation order.
- C rows of the tile and, for each block of 64 keys up to the diagonal, the B and x rows are copied to
  swizzled shared memory by 16-byte ``cp.async`` (the V-like x copy overlaps S = C B^T; the next
  block's B copy overlaps the masking and the second product). Rows past the chunk are clamped to its
  last row (never used: their scores are masked or their outputs not written); state columns past
  the problem's state size are zero-filled so they add nothing.
- S = C B^T and Y += P x run as warp-level ``mma.sync`` m16n8k16 (bf16 operands from ``ldmatrix``,
  fp32 accumulators): products of bf16 values are exact in fp32, so S is the reference's fp32 score
  up to summation order. x is read through ``ldmatrix.trans``.
- P = S * exp(s_i - s_j) for j <= i and 0 above the diagonal (exp(-inf)), with the accurate expf, in
  the reference's order (score times decay, both fp32).
- Y += P x keeps the fp32 precision of P: P is split into hi = bf16(P) and lo = bf16(P - hi), and
  both bf16 operands go through the MMA (hi + lo carries ~16 significant bits of P).
- Epilogue: Y is rounded to bf16 once and written through shared memory (the x tile, free by then)
  with 16-byte stores.
Sizes: state and head_dim must be multiples of 8 (16-byte rows); they are padded to 64 in shared
memory.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=16, chunks=1, chunk_len=128, heads=32, head_dim=128, groups=8, state=128)
_BM = 64  # query rows per CTA (4 warps x 16) and keys per block
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
def ssd_diag_kernel(x: cute.Tensor, a: cute.Tensor, bm: cute.Tensor, cm: cute.Tensor, y: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    tile, h, bc = cute.arch.block_idx()
    length = cute.size(x, mode=[1])
    heads = cute.size(x, mode=[2])
    head_dim = cute.size(x, mode=[3])
    groups = cute.size(bm, mode=[2])
    state = cute.size(bm, mode=[3])
    chunks = cute.size(a, mode=[2])
    n_pad = _up(state, 64)
    p_pad = _up(head_dim, 64)
    l_pad = _up(length, 64)
    g = h // (heads // groups)
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
    sC = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, n_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, n_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sX = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, p_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sXt = cute.composition(sX, cute.make_layout((p_pad, _BM), stride=(_BM, 1)))  # (p, key)
    sA = smem.allocate_tensor(cutlass.Float32, cute.make_layout((l_pad,)), 16)
    sS = smem.allocate_tensor(cutlass.Float32, cute.make_layout((l_pad,)), 16)

    g2s = cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((rows_per_pass, cols), stride=(cols, 1)), cute.make_layout((1, 8)))
    thr_g2s = g2s.get_slice(tidx)
    tCsC = thr_g2s.partition_D(sC)  # ((8, 1), BM / 16, n_pad / 64)
    tBsB = thr_g2s.partition_D(sB)
    tXsX = thr_g2s.partition_D(sX)

    n_blocks = tile + 1
    _load_rows(g2s, tCsC, cm, bc, r0, length, g, state, rows_per_pass, my_row, my_chunk)
    _load_rows(g2s, tBsB, bm, bc, 0, length, g, state, rows_per_pass, my_row, my_chunk)
    cute.arch.cp_async_commit_group()
    if cutlass.const_expr(n_pad != state):
        _zero_pad(tCsC, state, my_chunk)
        _zero_pad(tBsB, state, my_chunk)

    # per-step decays of the chunk, then each thread's cumulative sums s[p] = a[0] + ... + a[p] in order
    b_idx = bc // chunks
    c_idx = bc % chunks
    for p in range(tidx, l_pad, _THREADS):
        sA[p] = cutlass.Float32(0.0)
        if p < length:
            sA[p] = a[b_idx, h, c_idx, p].to(cutlass.Float32)
    cute.arch.sync_threads()
    for p in range(tidx, l_pad, _THREADS):
        run = cutlass.Float32(0.0)
        for q in cutlass.range_constexpr(l_pad):
            run = run + cutlass.Float32(cutlass.select_(q <= p, sA[q], cutlass.Float32(0.0)))
        sS[p] = run

    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((_THREADS // 32, 1, 1)), permutation_mnk=(_BM, 16, 16))
    thr_mma = tiled_mma.get_slice(tidx)
    tSrC = thr_mma.make_fragment_A(thr_mma.partition_A(sC))
    tSrB = thr_mma.make_fragment_B(thr_mma.partition_B(sB))
    tOrXt = thr_mma.make_fragment_B(thr_mma.partition_B(sXt))
    acc_o = cute.make_rmem_tensor(thr_mma.partition_shape_C((_BM, p_pad)), cutlass.Float32)
    acc_o.fill(0.0)

    s2r_c = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_b = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_x = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16), tiled_mma)
    thr_s2r_c = s2r_c.get_slice(tidx)
    thr_s2r_b = s2r_b.get_slice(tidx)
    thr_s2r_x = s2r_x.get_slice(tidx)
    tXsC = thr_s2r_c.partition_S(sC)
    tXrC = thr_s2r_c.retile(tSrC)
    tXsB = thr_s2r_b.partition_S(sB)
    tXrB = thr_s2r_b.retile(tSrB)
    tXsXt = thr_s2r_x.partition_S(sXt)
    tXrXt = thr_s2r_x.retile(tOrXt)

    # coordinates (row in tile, key in block) of each S accumulator element
    tScS = _mn_view(thr_mma.partition_C(cute.make_identity_tensor((_BM, _BM))))
    acc_s_shape = thr_mma.partition_shape_C((_BM, _BM))
    n_rows = cute.size(tScS, mode=[0])  # rows per thread (2)
    n_cols = cute.size(tScS, mode=[1])

    for nb in range(n_blocks):
        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()  # B(nb) (and C, the cumulative sums) landed; every warp is done with x(nb - 1)
        _load_rows(g2s, tXsX, x, bc, nb * _BM, length, h, head_dim, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()

        acc_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
        acc_s.fill(0.0)
        for kb in cutlass.range_constexpr(cute.size(tSrC, mode=[2])):
            cute.copy(s2r_c, tXsC[None, None, kb], tXrC[None, None, kb])
            cute.copy(s2r_b, tXsB[None, None, kb], tXrB[None, None, kb])
            cute.gemm(tiled_mma, acc_s, tSrC[None, None, kb], tSrB[None, None, kb], acc_s)

        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()  # x(nb) landed; every warp is done with B(nb)
        if nb + 1 < n_blocks:
            _load_rows(g2s, tBsB, bm, bc, (nb + 1) * _BM, length, g, state, rows_per_pass, my_row, my_chunk)
            cute.arch.cp_async_commit_group()

        s_mn = _mn_view(acc_s)
        for i in cutlass.range_constexpr(n_rows):
            row = r0 + tScS[i, 0][0]
            s_row = sS[cutlass.min(row, l_pad - 1)]
            for c in cutlass.range_constexpr(n_cols):
                key = nb * _BM + tScS[0, c][1]
                seg = cutlass.Float32(cutlass.select_(key <= row, s_row - sS[key], -cutlass.Float32.inf))
                s_mn[i, c] = s_mn[i, c] * cute.math.exp(seg)

        p_hi = cute.make_fragment_like(acc_s, cutlass.BFloat16)
        p_hi.store(acc_s.load().to(cutlass.BFloat16))
        p_lo = cute.make_fragment_like(acc_s, cutlass.BFloat16)
        p_lo.store((acc_s.load() - p_hi.load().to(cutlass.Float32)).to(cutlass.BFloat16))
        a_hi = _as_a_operand(p_hi)
        a_lo = _as_a_operand(p_lo)
        for kb in cutlass.range_constexpr(cute.size(a_hi, mode=[2])):
            cute.copy(s2r_x, tXsXt[None, None, kb], tXrXt[None, None, kb])
            cute.gemm(tiled_mma, acc_o, a_hi[None, None, kb], tOrXt[None, None, kb], acc_o)
            cute.gemm(tiled_mma, acc_o, a_lo[None, None, kb], tOrXt[None, None, kb], acc_o)

    # epilogue: bf16 Y staged through shared memory (the x tile) for 16-byte stores
    r_o = cute.make_fragment_like(acc_o, cutlass.BFloat16)
    r_o.store(acc_o.load().to(cutlass.BFloat16))
    cute.arch.sync_threads()  # every warp is done reading sX
    r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16), tiled_mma)
    thr_r2s = r2s.get_slice(tidx)
    cute.copy(r2s, thr_r2s.retile(r_o), thr_r2s.partition_D(sX))
    cute.arch.sync_threads()
    for m in cutlass.range_constexpr(cute.size(tXsX, mode=[1])):
        r = r0 + m * rows_per_pass + my_row
        if r < length:
            for kk in cutlass.range_constexpr(cute.size(tXsX, mode=[2])):
                if kk * 64 + my_chunk * 8 < head_dim:
                    dst = cute.local_tile(y[bc, r, h, None], (8,), (kk * cols + my_chunk,))
                    frag = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                    frag.store(tXsX[None, m, kk].load())
                    cute.autovec_copy(frag, dst)


@cute.jit
def ssd_diag(x: cute.Tensor, a: cute.Tensor, bm: cute.Tensor, cm: cute.Tensor, y: cute.Tensor,
             stream: cuda.CUstream):
    length = cute.size(x, mode=[1])
    ssd_diag_kernel(x, a, bm, cm, y).launch(
        grid=[(length + _BM - 1) // _BM, cute.size(x, mode=[2]), cute.size(x, mode=[0])],
        block=[_THREADS, 1, 1], stream=stream)


def _row_major(dtype, shape):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=16)


def _compile(batch, chunks, chunk_len, heads, head_dim, groups, state, arch=None, ptx_dir=None):
    assert state % 8 == 0 and head_dim % 8 == 0 and heads % groups == 0
    bc = batch * chunks
    x = _row_major(cutlass.BFloat16, (bc, chunk_len, heads, head_dim))
    a = _row_major(cutlass.BFloat16, (batch, heads, chunks, chunk_len))
    b = _row_major(cutlass.BFloat16, (bc, chunk_len, groups, state))
    c = _row_major(cutlass.BFloat16, (bc, chunk_len, groups, state))
    y = _row_major(cutlass.BFloat16, (bc, chunk_len, heads, head_dim))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(ssd_diag, x, a, b, c, y, make_fake_stream(), options=options)


def solve(hidden_states, A_cumsum, B, C):
    batch, chunks, chunk_len, heads, head_dim = hidden_states.shape
    groups, state = B.shape[3], B.shape[4]
    y = torch.empty(batch, chunks, chunk_len, heads, head_dim, dtype=torch.bfloat16, device=hidden_states.device)
    if y.numel() == 0:
        return y
    key = (batch, chunks, chunk_len, heads, head_dim, groups, state)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    bc = batch * chunks
    _COMPILED[key](hidden_states.contiguous().view(bc, chunk_len, heads, head_dim), A_cumsum.contiguous(),
                   B.contiguous().view(bc, chunk_len, groups, state), C.contiguous().view(bc, chunk_len, groups, state),
                   y.view(bc, chunk_len, heads, head_dim), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return y


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(**WORKLOAD, arch=arch, ptx_dir=ptx_dir).kernel_info)
