"""CuTe DSL oracle for problem 45: capacity-limited MoE expert execution (routing given), SwiGLU
experts with weights stored [E, in, out], bf16.

The dispatch gather, the three expert GEMMs, the SwiGLU and the weighted combine run in DSL kernels;
torch only sorts the (token, k) assignments and builds index tables.

- Capacity rule (glue, as the reference): the assignments flattened token-major are stably sorted
  by expert; an expert keeps its first C = floor(T k / E * 1.25) sorted assignments and drops the
  rest. The kept rows of expert e are sorted positions starts[e] .. starts[e] + min(count, C) - 1;
  they are cut into 64-row tiles listed in a fixed table of E * ceil(C / 64) entries (empty entries
  do nothing, so there is no host sync). Zero rows of the reference's padded buffer are not run:
  their outputs are never used.
- ``moe_tc_gemm_kernel`` (the graded shapes: hidden and inter multiples of 128), tensor cores: a
  CTA (8 warps, 4 x 2) owns one tile of up to 64 rows of one expert and 128 output columns; K
  advances in steps of 32 through a two-stage shared-memory ring filled by 16-byte ``cp.async``
  copies: A rows gathered through an index table (rows past the tile's end repeat its last row and
  are not stored), B tiles of the N-major weights read by ``ldmatrix.trans``, A by ``ldmatrix``;
  warp-level ``mma.sync`` m16n8k16 with bf16 operands and fp32 accumulation (exact products, a bf16
  GEMM with fp32 accumulation as the reference's). With ``glu`` the CTA keeps a gate and an up
  accumulator for the same columns and writes h = bf16(bf16(silu(bf16(gate))) * bf16(up))
  (exp and an IEEE division); otherwise it writes y = bf16(h W_d[e]).
- ``moe_swiglu_kernel`` / ``moe_gemm_kernel`` (other shapes): the same tiles on SIMT: operands read
  as 32-bit words and widened exactly to fp32 into shared memory, 256 threads each with a 4 x 8
  fp32 accumulator updated by FMAs, and the same epilogues.
- ``moe_combine_kernel``: one CTA per token; per column, the token's kept contributions
  bf16(y * weight) in ascending expert order (dropped ones add zero) are summed with a bf16
  rounding after each add, as the reference.
``_TENSOR_CORES = False`` routes every shape through the SIMT kernels.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

CAPACITY_FACTOR = 1.25
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=8192, hidden=6144, inter=2560, experts=160, top_k=8)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA (SwiGLU: 64 gate + 64 up), K step
HALF = BN // 2
TBM, TBN, TBK = 64, 128, 32  # tensor-core tiles: rows, columns (of gate and of up), K step
_THREADS = 256
_COMPILED = {}
_TENSOR_CORES = True  # False: the SIMT kernels for every shape


def _lo(word):
    """The bf16 in the low half of an Int32 word, as fp32 (exact)."""
    return (word << 16).bitcast(cutlass.Float32)


def _hi(word):
    """The bf16 in the high half of an Int32 word, as fp32 (exact)."""
    return (word & -65536).bitcast(cutlass.Float32)


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return x.to(cutlass.BFloat16).to(cutlass.Float32)


def _smem_tiles():
    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BM), stride=(BM + 1, 1)), byte_alignment=16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BN), stride=(BN + 1, 1)), byte_alignment=16)
    return a_s, b_s


@cute.jit
def _load_a(a_s: cute.Tensor, a_words: cute.Tensor, rowidx: cute.Tensor, row_begin: cutlass.Int32,
            row_end: cutlass.Int32, kw0: cutlass.Int32, tidx: cutlass.Int32):
    """a_s[k, r] = A[rowidx[row_begin + r], 2 * kw0 + k] (zero past the tile's rows or K)."""
    kwords = cute.size(a_words, mode=[1])
    for q in cutlass.range_constexpr(BM * BK // 2 // _THREADS):
        i = tidx + q * _THREADS
        r = i // (BK // 2)
        w = i - r * (BK // 2)
        a_s[2 * w, r] = cutlass.Float32(0.0)
        a_s[2 * w + 1, r] = cutlass.Float32(0.0)
        if row_begin + r < row_end and kw0 + w < kwords:
            word = a_words[rowidx[row_begin + r], kw0 + w]
            a_s[2 * w, r] = _lo(word)
            a_s[2 * w + 1, r] = _hi(word)


@cute.jit
def _mac(acc: cute.Tensor, a_s: cute.Tensor, b_s: cute.Tensor, ty: cutlass.Int32, tx: cutlass.Int32):
    """acc[i, j] += sum_k a_s[k, ty + 16 i] * b_s[k, tx + 16 j] over the K step."""
    for k in cutlass.range_constexpr(BK):
        av = []
        for ii in cutlass.range_constexpr(4):
            av.append(a_s[k, ty + 16 * ii])
        for jj in cutlass.range_constexpr(8):
            bv = b_s[k, tx + 16 * jj]
            for ii in cutlass.range_constexpr(4):
                acc[ii, jj] = acc[ii, jj] + av[ii] * bv


@cute.kernel
def moe_swiglu_kernel(a_words: cute.Tensor, rowidx: cute.Tensor, gate_words: cute.Tensor, up_words: cute.Tensor,
                      tiles: cute.Tensor, h_out: cute.Tensor):
    """h[p, j] = bf16(bf16(silu(bf16(A_p . G_e[:, j]))) * bf16(A_p . U_e[:, j])) for the rows p of a tile."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kdim = cute.size(gate_words, mode=[1])
    nwords = cute.size(gate_words, mode=[2])  # inter // 2
    inter = cute.size(h_out, mode=[1])
    a_s, b_s = _smem_tiles()
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * HALF
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        acc.fill(0.0)
        for k0 in range(0, kdim, BK):
            _load_a(a_s, a_words, rowidx, row_begin, row_end, k0 // 2, tidx)
            for q in cutlass.range_constexpr(HALF * BK // 2 // _THREADS):
                i = tidx + q * _THREADS
                kk = i // (HALF // 2)
                w = i - kk * (HALF // 2)  # word w holds columns n0 + 2w, n0 + 2w + 1
                b_s[kk, 2 * w] = cutlass.Float32(0.0)
                b_s[kk, 2 * w + 1] = cutlass.Float32(0.0)
                b_s[kk, HALF + 2 * w] = cutlass.Float32(0.0)
                b_s[kk, HALF + 2 * w + 1] = cutlass.Float32(0.0)
                if k0 + kk < kdim and n0 // 2 + w < nwords:
                    gword = gate_words[expert, k0 + kk, n0 // 2 + w]
                    b_s[kk, 2 * w] = _lo(gword)
                    b_s[kk, 2 * w + 1] = _hi(gword)
                    uword = up_words[expert, k0 + kk, n0 // 2 + w]
                    b_s[kk, HALF + 2 * w] = _lo(uword)
                    b_s[kk, HALF + 2 * w + 1] = _hi(uword)
            cute.arch.sync_threads()
            _mac(acc, a_s, b_s, ty, tx)
            cute.arch.sync_threads()
        for ii in cutlass.range_constexpr(4):
            p = row_begin + ty + 16 * ii
            if p < row_end:
                for jj in cutlass.range_constexpr(4):
                    if n0 + tx + 16 * jj < inter:
                        gate = _bf16(acc[ii, jj])
                        up = _bf16(acc[ii, jj + 4])
                        act = _bf16(gate / (1.0 + cute.math.exp(-gate)))
                        h_out[p, n0 + tx + 16 * jj] = (act * up).to(cutlass.BFloat16)


@cute.kernel
def moe_gemm_kernel(a_words: cute.Tensor, rowidx: cute.Tensor, b_words: cute.Tensor, tiles: cute.Tensor,
                    out: cute.Tensor):
    """out[p, n] = bf16(sum_k A[rowidx[p], k] * B[e, k, n]) for the rows p of each tile's expert e."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kdim = cute.size(b_words, mode=[1])
    nwords = cute.size(b_words, mode=[2])
    n_out = cute.size(out, mode=[1])
    a_s, b_s = _smem_tiles()
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * BN
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        acc.fill(0.0)
        for k0 in range(0, kdim, BK):
            _load_a(a_s, a_words, rowidx, row_begin, row_end, k0 // 2, tidx)
            for q in cutlass.range_constexpr(BN * BK // 2 // _THREADS):
                i = tidx + q * _THREADS
                kk = i // (BN // 2)
                w = i - kk * (BN // 2)
                b_s[kk, 2 * w] = cutlass.Float32(0.0)
                b_s[kk, 2 * w + 1] = cutlass.Float32(0.0)
                if k0 + kk < kdim and n0 // 2 + w < nwords:
                    word = b_words[expert, k0 + kk, n0 // 2 + w]
                    b_s[kk, 2 * w] = _lo(word)
                    b_s[kk, 2 * w + 1] = _hi(word)
            cute.arch.sync_threads()
            _mac(acc, a_s, b_s, ty, tx)
            cute.arch.sync_threads()
        for ii in cutlass.range_constexpr(4):
            p = row_begin + ty + 16 * ii
            if p < row_end:
                for jj in cutlass.range_constexpr(8):
                    if n0 + tx + 16 * jj < n_out:
                        out[p, n0 + tx + 16 * jj] = acc[ii, jj].to(cutlass.BFloat16)


@cute.kernel
def moe_combine_kernel(y: cute.Tensor, sorted_w: cute.Tensor, slots: cute.Tensor, out: cute.Tensor,
                       top_k: cutlass.Constexpr):
    """out[t, c] = the bf16-rounded running sum of bf16(y[row, c] * w[row]) over t's kept rows."""
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    hidden = cute.size(out, mode=[1])
    rows = []
    wts = []
    for k in cutlass.range_constexpr(top_k):
        r = slots[t, k]  # -1: dropped
        rows.append(cutlass.select_(r >= 0, r, 0))
        wts.append(cutlass.Float32(cutlass.select_(r >= 0, sorted_w[cutlass.select_(r >= 0, r, 0)], 0.0)))
    for c in range(tidx, hidden, _THREADS):
        total = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(top_k):
            if slots[t, k] >= 0:
                total = _bf16(total + _bf16(y[rows[k], c].to(cutlass.Float32) * wts[k]))
        out[t, c] = total.to(cutlass.BFloat16)


def _load_a_tile(g2s, dst, a, rowidx, row_begin, row_end, kt, tidx):
    """cp.async of one 64 x 32 A tile: thread (row, chunk) copies 8 bf16 of row rowidx[row_begin + row]
    (rows past the tile's end repeat its last row; their results are not stored)."""
    r = cutlass.min(row_begin + tidx // (TBK // 8), row_end - 1)
    src = cute.local_tile(a[rowidx[r], None], (8,), (kt * (TBK // 8) + tidx % (TBK // 8),))
    cute.copy(g2s, src, dst)


@cute.kernel
def moe_tc_gemm_kernel(a: cute.Tensor, rowidx: cute.Tensor, b0: cute.Tensor, b1: cute.Tensor, tiles: cute.Tensor,
                       out: cute.Tensor, glu: cutlass.Constexpr):
    """Tensor-core tile GEMM over one expert's rows: A rows gathered through rowidx, B [e, K, N] N-major.

    glu: out[p, n] = bf16(bf16(silu(bf16(A_p . B0_e[:, n]))) * bf16(A_p . B1_e[:, n]));
    otherwise out[p, n] = bf16(A_p . B0_e[:, n]).
    """
    tidx, _, _ = cute.arch.thread_idx()
    tb, nb, _ = cute.arch.block_idx()
    k_tiles = cute.size(b0, mode=[1]) // TBK
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    if row_end > row_begin:
        smem = cutlass.memory.SmemAllocator()
        a_atom = cute.make_layout((8, TBK), stride=(TBK, 1))
        sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(a_atom, (TBM, TBK, 2), (0, 1, 2)), 1024,
                                  swizzle=cute.make_swizzle(2, 4, 3))
        b_atom = cute.make_layout((8, 64), stride=(64, 1))
        sB0 = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(b_atom, (TBK, TBN, 2), (0, 1, 2)), 1024,
                                   swizzle=cute.make_swizzle(3, 4, 3))
        sB1 = sB0
        if cutlass.const_expr(glu):
            sB1 = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(b_atom, (TBK, TBN, 2), (0, 1, 2)), 1024,
                                       swizzle=cute.make_swizzle(3, 4, 3))
        nk_view = cute.make_layout((TBN, TBK, 2), stride=(TBK, 1, TBN * TBK))  # (n, k, stage) -> (k, n, stage)
        sB0t = cute.composition(sB0, nk_view)
        sB1t = cute.composition(sB1, nk_view)

        cp_atom = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                                      cutlass.BFloat16, num_bits_per_copy=128)
        g2s_a = cute.make_tiled_copy_tv(cp_atom, cute.make_layout((TBM, TBK // 8), stride=(TBK // 8, 1)),
                                        cute.make_layout((1, 8)))
        tAsA = g2s_a.get_slice(tidx).partition_D(sA)  # ((8, 1), 1, 1, stages)
        g2s_b = cute.make_tiled_copy_tv(cp_atom, cute.make_layout((_THREADS // (TBN // 8), TBN // 8),
                                                                  stride=(TBN // 8, 1)), cute.make_layout((1, 8)))
        thr_g2s_b = g2s_b.get_slice(tidx)
        e64 = cutlass.Int64(expert)  # an expert's offset (up to E K N elements) needs 64-bit arithmetic
        gB0 = cute.local_tile(b0[e64, None, None], (TBK, TBN), (None, nb))  # (TBK, TBN, k tiles)
        gB1 = cute.local_tile(b1[e64, None, None], (TBK, TBN), (None, nb))
        tBgB0 = thr_g2s_b.partition_S(gB0)
        tBgB1 = thr_g2s_b.partition_S(gB1)
        tBsB0 = thr_g2s_b.partition_D(sB0)
        tBsB1 = thr_g2s_b.partition_D(sB1)

        tiled_mma = cute.make_tiled_mma(
            cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
            cute.make_layout((4, 2, 1)), permutation_mnk=(64, 32, 16))
        thr_mma = tiled_mma.get_slice(tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA)[None, None, None, 0])
        tCrB0 = tiled_mma.make_fragment_B(thr_mma.partition_B(sB0t)[None, None, None, 0])
        tCrB1 = tiled_mma.make_fragment_B(thr_mma.partition_B(sB1t)[None, None, None, 0])
        acc0 = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
        acc1 = cute.make_rmem_tensor(thr_mma.partition_shape_C((TBM, TBN)), cutlass.Float32)
        acc0.fill(0.0)
        acc1.fill(0.0)
        s2r_a = cute.make_tiled_copy_A(
            cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
        s2r_b = cute.make_tiled_copy_B(
            cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16), tiled_mma)
        thr_s2r_a = s2r_a.get_slice(tidx)
        thr_s2r_b = s2r_b.get_slice(tidx)
        tXsA = thr_s2r_a.partition_S(sA)
        tXrA = thr_s2r_a.retile(tCrA)
        tXsB0 = thr_s2r_b.partition_S(sB0t)
        tXrB0 = thr_s2r_b.retile(tCrB0)
        tXsB1 = thr_s2r_b.partition_S(sB1t)
        tXrB1 = thr_s2r_b.retile(tCrB1)
        kk_blocks = cute.size(tCrA, mode=[2])

        _load_a_tile(g2s_a, tAsA[None, 0, 0, 0], a, rowidx, row_begin, row_end, 0, tidx)
        cute.copy(g2s_b, tBgB0[None, None, None, 0], tBsB0[None, None, None, 0])
        if cutlass.const_expr(glu):
            cute.copy(g2s_b, tBgB1[None, None, None, 0], tBsB1[None, None, None, 0])
        cute.arch.cp_async_commit_group()
        for kt in range(k_tiles):
            if kt + 1 < k_tiles:  # prefetch the next K tile into the other stage
                nxt = (kt + 1) % 2
                _load_a_tile(g2s_a, tAsA[None, 0, 0, nxt], a, rowidx, row_begin, row_end, kt + 1, tidx)
                cute.copy(g2s_b, tBgB0[None, None, None, kt + 1], tBsB0[None, None, None, nxt])
                if cutlass.const_expr(glu):
                    cute.copy(g2s_b, tBgB1[None, None, None, kt + 1], tBsB1[None, None, None, nxt])
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(1)  # this K tile's group has landed
            cute.arch.sync_threads()
            stage = kt % 2
            for kk in cutlass.range_constexpr(kk_blocks):
                cute.copy(s2r_a, tXsA[None, None, kk, stage], tXrA[None, None, kk])
                cute.copy(s2r_b, tXsB0[None, None, kk, stage], tXrB0[None, None, kk])
                cute.gemm(tiled_mma, acc0, tCrA[None, None, kk], tCrB0[None, None, kk], acc0)
                if cutlass.const_expr(glu):
                    cute.copy(s2r_b, tXsB1[None, None, kk, stage], tXrB1[None, None, kk])
                    cute.gemm(tiled_mma, acc1, tCrA[None, None, kk], tCrB1[None, None, kk], acc1)
            cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch

        tCcC = thr_mma.partition_C(cute.make_identity_tensor((TBM, TBN)))  # (m, n) of every accumulator
        n0 = nb * TBN
        for i in cutlass.range_constexpr(cute.size(acc0)):
            p = row_begin + tCcC[i][0]
            if p < row_end:
                if cutlass.const_expr(glu):
                    gate = _bf16(acc0[i])
                    up = _bf16(acc1[i])
                    act = _bf16(gate / (1.0 + cute.math.exp(-gate)))
                    out[p, n0 + tCcC[i][1]] = (act * up).to(cutlass.BFloat16)
                else:
                    out[p, n0 + tCcC[i][1]] = acc0[i].to(cutlass.BFloat16)


@cute.jit
def moe_swiglu(a_words: cute.Tensor, rowidx: cute.Tensor, gate_words: cute.Tensor, up_words: cute.Tensor,
               tiles: cute.Tensor, h_out: cute.Tensor, stream: cuda.CUstream):
    moe_swiglu_kernel(a_words, rowidx, gate_words, up_words, tiles, h_out).launch(
        grid=[(cute.size(h_out, mode=[1]) + HALF - 1) // HALF, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_gemm(a_words: cute.Tensor, rowidx: cute.Tensor, b_words: cute.Tensor, tiles: cute.Tensor,
             out: cute.Tensor, stream: cuda.CUstream):
    moe_gemm_kernel(a_words, rowidx, b_words, tiles, out).launch(
        grid=[(cute.size(out, mode=[1]) + BN - 1) // BN, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_tc_gemm(a: cute.Tensor, rowidx: cute.Tensor, b0: cute.Tensor, b1: cute.Tensor, tiles: cute.Tensor,
                out: cute.Tensor, glu: cutlass.Constexpr, stream: cuda.CUstream):
    moe_tc_gemm_kernel(a, rowidx, b0, b1, tiles, out, glu).launch(
        grid=[cute.size(tiles, mode=[0]), cute.size(out, mode=[1]) // TBN, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_combine(y: cute.Tensor, sorted_w: cute.Tensor, slots: cute.Tensor, out: cute.Tensor,
                top_k: cutlass.Constexpr, stream: cuda.CUstream):
    moe_combine_kernel(y, sorted_w, slots, out, top_k).launch(
        grid=[cute.size(out, mode=[0]), 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(dtype, shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=16)


def _capacity(tokens, top_k, experts):
    return int(tokens * top_k / experts * CAPACITY_FACTOR)


def _max_tiles(capacity, experts):
    return experts * ((capacity + BM - 1) // BM)


def _compile_swiglu(tokens, pairs, n_tiles, experts, hidden, inter, arch=None, ptx_dir=None):
    w = _fake(cutlass.Int32, (experts, hidden, inter // 2))
    return cute.compile(moe_swiglu, _fake(cutlass.Int32, (tokens, hidden // 2)), _fake(cutlass.Int32, (pairs,)),
                        w, w, _fake(cutlass.Int32, (n_tiles, 3)), _fake(cutlass.BFloat16, (pairs, inter)),
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_down(pairs, n_tiles, experts, hidden, inter, arch=None, ptx_dir=None):
    return cute.compile(moe_gemm, _fake(cutlass.Int32, (pairs, inter // 2)), _fake(cutlass.Int32, (pairs,)),
                        _fake(cutlass.Int32, (experts, inter, hidden // 2)), _fake(cutlass.Int32, (n_tiles, 3)),
                        _fake(cutlass.BFloat16, (pairs, hidden)), make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_tc(glu, rows_a, pairs, n_tiles, experts, k, n, arch=None, ptx_dir=None):
    """A [rows_a, k] gathered into `pairs` rows, B [experts, k, n] (two of them when glu), out [pairs, n]."""
    bf16 = cutlass.BFloat16
    w = _fake(bf16, (experts, k, n))
    return cute.compile(moe_tc_gemm, _fake(bf16, (rows_a, k)), _fake(cutlass.Int32, (pairs,)), w, w,
                        _fake(cutlass.Int32, (n_tiles, 3)), _fake(bf16, (pairs, n)), glu, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _use_tensor_cores(hidden, inter):
    """The tensor-core kernels need whole 128-column tiles (and so whole 32-wide K steps)."""
    return _TENSOR_CORES and hidden % TBN == 0 and inter % TBN == 0


def _compile_combine(tokens, top_k, hidden, arch=None, ptx_dir=None):
    pairs = tokens * top_k
    return cute.compile(moe_combine, _fake(cutlass.BFloat16, (pairs, hidden)), _fake(cutlass.Float32, (pairs,)),
                        _fake(cutlass.Int32, (tokens, top_k)), _fake(cutlass.BFloat16, (tokens, hidden)), top_k,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _get(key, build):
    if key not in _COMPILED:
        _COMPILED[key] = build()
    return _COMPILED[key]


def _plan(selected, weights, experts, capacity):
    """Sorted assignments, the kept rows' tile table and each token's kept rows in expert order.

    Returns the token of each sorted position, the routing weight (fp32) of each sorted position,
    the [E * ceil(C / BM), 3] tile table (expert, first row, end row) and [T, k] sorted positions
    of each token's assignments in ascending expert order, -1 where the assignment was dropped.
    """
    tokens, top_k = selected.shape
    pairs = tokens * top_k
    device = selected.device
    flat = selected.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    kept_n = torch.clamp(counts, max=capacity)
    per_e = (capacity + BM - 1) // BM
    e = torch.arange(experts, device=device).repeat_interleave(per_e)
    j = torch.arange(per_e, device=device).repeat(experts)
    begin = starts[e] + j * BM
    end = torch.minimum(begin + BM, starts[e] + kept_n[e])
    tiles = torch.stack([e, begin, torch.maximum(end, begin)], 1).to(torch.int32).contiguous()
    sorted_e = flat[order]
    position = torch.arange(pairs, device=device) - starts[sorted_e]
    rows = torch.where(position < capacity, torch.arange(pairs, device=device), -1)
    slot_of_pair = torch.empty_like(rows)
    slot_of_pair[order] = rows
    by_expert = selected.argsort(dim=-1)
    slots = slot_of_pair.view(tokens, top_k).gather(1, by_expert)
    sorted_tok = (order // top_k).to(torch.int32).contiguous()
    sorted_w = weights.flatten()[order].float().contiguous()
    return sorted_tok, sorted_w, tiles, slots.to(torch.int32).contiguous()


def _words(t):
    """A bf16 tensor's values as int32 words (two consecutive values each, low half first)."""
    return t.contiguous().view(torch.int32)


def solve(hidden_states, selected_experts, routing_weights, expert_gate_weights, expert_up_weights,
          expert_down_weights):
    tokens, hidden = hidden_states.shape
    top_k = selected_experts.shape[1]
    experts, _, inter = expert_gate_weights.shape
    pairs = tokens * top_k
    capacity = _capacity(tokens, top_k, experts)
    device = hidden_states.device
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    bf16 = torch.bfloat16
    out = torch.zeros(tokens, hidden, dtype=bf16, device=device)
    if capacity == 0:
        return out
    sorted_tok, sorted_w, tiles, slots = _plan(selected_experts, routing_weights, experts, capacity)
    n_tiles = tiles.shape[0]
    h = torch.empty(pairs, inter, dtype=bf16, device=device)
    y = torch.empty(pairs, hidden, dtype=bf16, device=device)
    rows = torch.arange(pairs, dtype=torch.int32, device=device)
    if _use_tensor_cores(hidden, inter):
        wg, wu, wd = expert_gate_weights.contiguous(), expert_up_weights.contiguous(), expert_down_weights.contiguous()
        _get(("tc_glu", tokens, pairs, n_tiles, experts, hidden, inter), lambda: _compile_tc(
            True, tokens, pairs, n_tiles, experts, hidden, inter))(
            hidden_states.contiguous(), sorted_tok, wg, wu, tiles, h, stream)
        _get(("tc_down", pairs, n_tiles, experts, inter, hidden), lambda: _compile_tc(
            False, pairs, pairs, n_tiles, experts, inter, hidden))(h, rows, wd, wd, tiles, y, stream)
    else:
        _get(("swiglu", tokens, pairs, n_tiles, experts, hidden, inter), lambda: _compile_swiglu(
            tokens, pairs, n_tiles, experts, hidden, inter))(
            _words(hidden_states), sorted_tok, _words(expert_gate_weights), _words(expert_up_weights), tiles, h,
            stream)
        _get(("down", pairs, n_tiles, experts, hidden, inter), lambda: _compile_down(
            pairs, n_tiles, experts, hidden, inter))(
            _words(h), rows, _words(expert_down_weights), tiles, y, stream)
    _get(("combine", tokens, top_k, hidden), lambda: _compile_combine(tokens, top_k, hidden))(
        y, sorted_w, slots, out, stream)
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    tokens, hidden, inter, experts, top_k = w["tokens"], w["hidden"], w["inter"], w["experts"], w["top_k"]
    pairs = tokens * top_k
    n_tiles = _max_tiles(_capacity(tokens, top_k, experts), experts)
    builds = [_compile_tc(True, tokens, pairs, n_tiles, experts, hidden, inter, arch, ptx_dir),
              _compile_tc(False, pairs, pairs, n_tiles, experts, inter, hidden, arch, ptx_dir),
              _compile_combine(tokens, top_k, hidden, arch, ptx_dir),
              _compile_swiglu(tokens, pairs, n_tiles, experts, hidden, inter, arch, ptx_dir),
              _compile_down(pairs, n_tiles, experts, hidden, inter, arch, ptx_dir)]
    return [name for compiled in builds for name in compiled.kernel_info]
