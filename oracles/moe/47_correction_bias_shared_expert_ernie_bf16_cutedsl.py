"""CuTe DSL oracle for problem 47: ERNIE-4.5 MoE layer (softmax router with a score-correction
bias, top-8 of 64 SwiGLU experts, an ungated shared expert), bf16.

Every GEMM and every elementwise step runs in five DSL kernels; torch only sorts indices.

- ``moe_router_kernel``: router logits = x W_gate^T in fp32 (W_gate is fp32): a CTA owns 64 tokens
  x 128 experts and loops over K in steps of 32; x (bf16, read as 32-bit words of two values) and
  W_gate are widened/copied to fp32 in shared memory (K-major, rows padded by one word); 256
  threads each hold a 4 x 8 fp32 accumulator (rows ty + 16i, columns tx + 16j) updated by fp32
  FMAs, as the reference's fp32 GEMM. These logits are the returned router_logits, so their sums
  are two-level: each 128-wide K chunk is summed from zero and then added to the total. One
  sequential fp32 FMA chain over the 8192 K values was 4.3x the reference's largest error against
  the float64 anchor on the H200 (1.71e-5 against cuBLAS's 3.96e-6, over the 3x allowance); an
  emulation of the two orders on 2048 x 64 logits gave 1.56e-5 sequential, 1.60e-6 in 128-wide
  chunks.
- ``moe_swiglu_kernel`` / ``moe_gemm_kernel`` (expert and shared-expert projections): the same CTA
  shape over rows gathered from an expert's 64-row tile (bf16 words widened exactly to fp32).
  SwiGLU: 64 gate columns and the same 64 up columns; the epilogue rounds gate and up to bf16
  and writes h = bf16(bf16(silu(gate)) * up). Down: y rounded to bf16. Rows, columns and K past
  their ends are masked (zero operands, no stores).
- ``moe_route_kernel``, one warp per token, lane l owning experts l, l + 32: softmax (warp max,
  exp(x - max), warp sum, one IEEE division), plus the correction bias; 8 rounds of a warp
  arg-max (ties to the lower expert) pick the top 8 biased scores, whose weights are
  bf16(score / max(sum of the 8 in selection order, norm_min)).
- ``moe_combine_kernel``: per token and column, the 8 contributions bf16(y * weight) in ascending
  expert order are added with a bf16 rounding after each add (from 0, the reference's
  accumulator), then bf16(routed + shared).
Glue (torch): the token-expert pairs are sorted by expert (stable), each expert's rows cut into
64-row tiles listed in a fixed-size table (empty entries do nothing, no host sync), and each
token's rows listed in expert order. The shared expert runs through the same kernels over all
tokens. No tensor cores: the GEMMs are SIMT fp32 FMAs (slower than the reference's cuBLAS GEMMs).

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 25): 536.9 ms against
the eager reference's 30.3 ms (0.06x). The grader's profiled call puts 99.95 % of the GPU time in DSL
kernels: the routed SwiGLU 270.4 ms, the routed down GEMM 157.3 ms, the shared SwiGLU 66.2 ms, the
shared down GEMM 38.4 ms, router and combine under 1 ms each. The layer's GEMMs are 14.4 TFLOP
(T k = 65,536 routed rows: 7.70 TFLOP gate/up and 3.85 TFLOP down; the shared expert over 8,192
tokens: 1.92 and 0.96 TFLOP), so these SIMT loops run at 24.5-29 TFLOP/s, while the reference's
cuBLAS GEMMs do the same work at about 476 TFLOP/s on tensor cores. The route that would beat eager,
not taken here: warpgroup MMA GEMMs on the same expert-sorted 64-row tiles (``cute.nvgpu.warpgroup``
MMA atoms over TMA-loaded, 128-byte-swizzled shared-memory stages, as CUTLASS's Hopper dense GEMM
example pipelines them); at the reference's rate the layer's GEMMs take about 30 ms.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

TOPK = 8
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seqlen=128, hidden=8192, experts=64, inter=3584, shared_inter=7168)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA (SwiGLU: 64 gate + 64 up), K step
HALF = BN // 2
_THREADS = 256
_ROUTER_CHUNK_SLABS = 4  # router logits: K slabs (of BK) per chunk summed from zero, then added to the total
_ROUTE_WARPS = 4
_NEG = float("-inf")
_COMPILED = {}


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


@cute.kernel
def moe_gemm_kernel(a_words: cute.Tensor, rowidx: cute.Tensor, b_words: cute.Tensor, tiles: cute.Tensor,
                    out: cute.Tensor):
    """out[p, n] = sum_k A[rowidx[p], k] * B[e, n, k] for the rows p of each tile's expert e."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kwords = cute.size(a_words, mode=[1])
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
        part = cute.make_rmem_tensor((4, 8), cutlass.Float32)  # this 128-wide K chunk's sums
        acc.fill(0.0)
        part.fill(0.0)
        for kw0 in range(0, kwords, BK // 2):
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
            for q in cutlass.range_constexpr(BN * BK // 2 // _THREADS):
                i = tidx + q * _THREADS
                c = i // (BK // 2)
                w = i - c * (BK // 2)
                b_s[2 * w, c] = cutlass.Float32(0.0)
                b_s[2 * w + 1, c] = cutlass.Float32(0.0)
                if n0 + c < n_out and kw0 + w < kwords:
                    word = b_words[expert, n0 + c, kw0 + w]
                    b_s[2 * w, c] = _lo(word)
                    b_s[2 * w + 1, c] = _hi(word)
            cute.arch.sync_threads()
            for k in cutlass.range_constexpr(BK):
                av = []
                for ii in cutlass.range_constexpr(4):
                    av.append(a_s[k, ty + 16 * ii])
                for jj in cutlass.range_constexpr(8):
                    bv = b_s[k, tx + 16 * jj]
                    for ii in cutlass.range_constexpr(4):
                        part[ii, jj] = part[ii, jj] + av[ii] * bv
            if (kw0 // (BK // 2)) % _ROUTER_CHUNK_SLABS == _ROUTER_CHUNK_SLABS - 1:
                for i in cutlass.range_constexpr(32):
                    acc[i] = acc[i] + part[i]
                    part[i] = cutlass.Float32(0.0)
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(32):  # the last, partial chunk (zeros when K is whole chunks)
            acc[i] = acc[i] + part[i]
        for ii in cutlass.range_constexpr(4):
            p = row_begin + ty + 16 * ii
            if p < row_end:
                for jj in cutlass.range_constexpr(8):
                    if n0 + tx + 16 * jj < n_out:
                        out[p, n0 + tx + 16 * jj] = acc[ii, jj].to(out.element_type)


@cute.kernel
def moe_swiglu_kernel(a_words: cute.Tensor, rowidx: cute.Tensor, gate_words: cute.Tensor, up_words: cute.Tensor,
                      tiles: cute.Tensor, h_out: cute.Tensor):
    """h[p, j] = bf16(bf16(silu(bf16(A_p . G_e[j]))) * bf16(A_p . U_e[j])) for the rows p of each tile."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kwords = cute.size(a_words, mode=[1])
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
        part = cute.make_rmem_tensor((4, 8), cutlass.Float32)  # this 128-wide K chunk's sums
        acc.fill(0.0)
        part.fill(0.0)
        for kw0 in range(0, kwords, BK // 2):
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
            for q in cutlass.range_constexpr(BN * BK // 2 // _THREADS):
                i = tidx + q * _THREADS
                c = i // (BK // 2)  # q < half the steps: c < HALF (gate); else up
                w = i - c * (BK // 2)
                j = c - HALF * (q // (BN * BK // 4 // _THREADS))
                b_s[2 * w, c] = cutlass.Float32(0.0)
                b_s[2 * w + 1, c] = cutlass.Float32(0.0)
                if n0 + j < inter and kw0 + w < kwords:
                    if cutlass.const_expr(q < BN * BK // 4 // _THREADS):
                        word = gate_words[expert, n0 + j, kw0 + w]
                        b_s[2 * w, c] = _lo(word)
                        b_s[2 * w + 1, c] = _hi(word)
                    else:
                        word = up_words[expert, n0 + j, kw0 + w]
                        b_s[2 * w, c] = _lo(word)
                        b_s[2 * w + 1, c] = _hi(word)
            cute.arch.sync_threads()
            for k in cutlass.range_constexpr(BK):
                av = []
                for ii in cutlass.range_constexpr(4):
                    av.append(a_s[k, ty + 16 * ii])
                for jj in cutlass.range_constexpr(8):
                    bv = b_s[k, tx + 16 * jj]
                    for ii in cutlass.range_constexpr(4):
                        part[ii, jj] = part[ii, jj] + av[ii] * bv
            if (kw0 // (BK // 2)) % _ROUTER_CHUNK_SLABS == _ROUTER_CHUNK_SLABS - 1:
                for i in cutlass.range_constexpr(32):
                    acc[i] = acc[i] + part[i]
                    part[i] = cutlass.Float32(0.0)
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(32):  # the last, partial chunk (zeros when K is whole chunks)
            acc[i] = acc[i] + part[i]
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
def moe_router_kernel(a_words: cute.Tensor, rowidx: cute.Tensor, b: cute.Tensor, tiles: cute.Tensor,
                      out: cute.Tensor):
    """out[p, n] = sum_k A[rowidx[p], k] * b[n, k] with fp32 b, over the rows p of each tile."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kwords = cute.size(a_words, mode=[1])
    n_out = cute.size(out, mode=[1])
    a_s, b_s = _smem_tiles()
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * BN
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        part = cute.make_rmem_tensor((4, 8), cutlass.Float32)  # this 128-wide K chunk's sums
        acc.fill(0.0)
        part.fill(0.0)
        for kw0 in range(0, kwords, BK // 2):
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
            for q in cutlass.range_constexpr(BN * BK // _THREADS):
                i = tidx + q * _THREADS
                c = i // BK
                k = i - c * BK
                b_s[k, c] = cutlass.Float32(0.0)
                if n0 + c < n_out and 2 * kw0 + k < 2 * kwords:
                    b_s[k, c] = b[n0 + c, 2 * kw0 + k]
            cute.arch.sync_threads()
            for k in cutlass.range_constexpr(BK):
                av = []
                for ii in cutlass.range_constexpr(4):
                    av.append(a_s[k, ty + 16 * ii])
                for jj in cutlass.range_constexpr(8):
                    bv = b_s[k, tx + 16 * jj]
                    for ii in cutlass.range_constexpr(4):
                        part[ii, jj] = part[ii, jj] + av[ii] * bv
            if (kw0 // (BK // 2)) % _ROUTER_CHUNK_SLABS == _ROUTER_CHUNK_SLABS - 1:
                for i in cutlass.range_constexpr(32):
                    acc[i] = acc[i] + part[i]
                    part[i] = cutlass.Float32(0.0)
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(32):  # the last, partial chunk (zeros when K is whole chunks)
            acc[i] = acc[i] + part[i]
        for ii in cutlass.range_constexpr(4):
            p = row_begin + ty + 16 * ii
            if p < row_end:
                for jj in cutlass.range_constexpr(8):
                    if n0 + tx + 16 * jj < n_out:
                        out[p, n0 + tx + 16 * jj] = acc[ii, jj]


@cute.kernel
def moe_route_kernel(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor, w_out: cute.Tensor,
                     norm_min: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    tokens = cute.size(logits, mode=[0])
    experts = cute.size(logits, mode=[1])
    per_lane = (experts + 31) // 32
    token = bidx * _ROUTE_WARPS + tidx // 32
    row = cutlass.select_(token < tokens, token, tokens - 1)  # the whole warp stays in step

    lg = []
    for j in cutlass.range_constexpr(per_lane):
        e = lane + 32 * j
        value = logits[row, cutlass.select_(e < experts, e, experts - 1)]
        lg.append(cutlass.Float32(cutlass.select_(e < experts, value, _NEG)))
    mx = lg[0]
    for j in cutlass.range_constexpr(1, per_lane):
        mx = cutlass.Float32(cutlass.select_(lg[j] > mx, lg[j], mx))
    for o in (16, 8, 4, 2, 1):
        other = cute.arch.shuffle_sync_bfly(mx, offset=o)
        mx = cutlass.Float32(cutlass.select_(other > mx, other, mx))
    ex = []
    total = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(per_lane):
        ex.append(cutlass.Float32(cutlass.select_(lane + 32 * j < experts, cute.math.exp(lg[j] - mx), 0.0)))
        total = total + ex[j]
    for o in (16, 8, 4, 2, 1):
        total = total + cute.arch.shuffle_sync_bfly(total, offset=o)
    score = []
    for j in cutlass.range_constexpr(per_lane):
        e = lane + 32 * j
        biased = ex[j] / total + bias[cutlass.select_(e < experts, e, experts - 1)]
        score.append(cutlass.Float32(cutlass.select_(e < experts, biased, _NEG)))

    sel_idx = []
    sel_s = []
    for _ in cutlass.range_constexpr(TOPK):
        bv = score[0]
        bi = lane
        for j in cutlass.range_constexpr(1, per_lane):
            take = score[j] > bv
            bv = cutlass.Float32(cutlass.select_(take, score[j], bv))
            bi = cutlass.Int32(cutlass.select_(take, lane + 32 * j, bi))
        for o in (16, 8, 4, 2, 1):
            ov = cute.arch.shuffle_sync_bfly(bv, offset=o)
            oi = cute.arch.shuffle_sync_bfly(bi, offset=o)
            take = (ov > bv) | ((ov == bv) & (oi < bi))
            bv = cutlass.Float32(cutlass.select_(take, ov, bv))
            bi = cutlass.Int32(cutlass.select_(take, oi, bi))
        sel_idx.append(bi)
        sel_s.append(bv)
        for j in cutlass.range_constexpr(per_lane):
            score[j] = cutlass.Float32(cutlass.select_(bi == lane + 32 * j, _NEG, score[j]))
    norm = sel_s[0]
    for k in cutlass.range_constexpr(1, TOPK):
        norm = norm + sel_s[k]
    denom = cutlass.Float32(cutlass.select_(norm < norm_min, norm_min, norm))
    if token < tokens:
        if lane == 0:
            for k in cutlass.range_constexpr(TOPK):
                idx_out[token, k] = cutlass.Int64(sel_idx[k])
                w_out[token, k] = _bf16(sel_s[k] / denom)


@cute.kernel
def moe_combine_kernel(y: cute.Tensor, sorted_w: cute.Tensor, slots: cute.Tensor, y_shared: cute.Tensor,
                       out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    hidden = cute.size(out, mode=[1])
    rows = []
    wts = []
    for k in cutlass.range_constexpr(TOPK):
        rows.append(slots[t, k])
        wts.append(sorted_w[rows[k]])
    for c in range(tidx, hidden, _THREADS):
        routed = _bf16(y[rows[0], c].to(cutlass.Float32) * wts[0])
        for k in cutlass.range_constexpr(1, TOPK):
            routed = _bf16(routed + _bf16(y[rows[k], c].to(cutlass.Float32) * wts[k]))
        out[t, c] = (routed + y_shared[t, c].to(cutlass.Float32)).to(cutlass.BFloat16)


@cute.jit
def moe_gemm(a_words: cute.Tensor, rowidx: cute.Tensor, b_words: cute.Tensor, tiles: cute.Tensor,
             out: cute.Tensor, stream: cuda.CUstream):
    moe_gemm_kernel(a_words, rowidx, b_words, tiles, out).launch(
        grid=[(cute.size(out, mode=[1]) + BN - 1) // BN, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_swiglu(a_words: cute.Tensor, rowidx: cute.Tensor, gate_words: cute.Tensor, up_words: cute.Tensor,
               tiles: cute.Tensor, h_out: cute.Tensor, stream: cuda.CUstream):
    moe_swiglu_kernel(a_words, rowidx, gate_words, up_words, tiles, h_out).launch(
        grid=[(cute.size(h_out, mode=[1]) + HALF - 1) // HALF, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_router(a_words: cute.Tensor, rowidx: cute.Tensor, b: cute.Tensor, tiles: cute.Tensor, out: cute.Tensor,
               stream: cuda.CUstream):
    moe_router_kernel(a_words, rowidx, b, tiles, out).launch(
        grid=[(cute.size(out, mode=[1]) + BN - 1) // BN, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_route(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor, w_out: cute.Tensor,
              norm_min: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(logits, mode=[0])
    moe_route_kernel(logits, bias, idx_out, w_out, norm_min).launch(
        grid=[(tokens + _ROUTE_WARPS - 1) // _ROUTE_WARPS, 1, 1], block=[_ROUTE_WARPS * 32, 1, 1], stream=stream)


@cute.jit
def moe_combine(y: cute.Tensor, sorted_w: cute.Tensor, slots: cute.Tensor, y_shared: cute.Tensor,
                out: cute.Tensor, stream: cuda.CUstream):
    moe_combine_kernel(y, sorted_w, slots, y_shared, out).launch(
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


def _max_tiles(rows, experts):
    return rows // BM + experts


def _compile_gemm(rows_a, rows, experts, n, k, out_dtype, arch=None, ptx_dir=None):
    """A [rows_a, k] gathered into `rows` rows, B [experts, n, k], out [rows, n] of out_dtype."""
    return cute.compile(moe_gemm, _fake(cutlass.Int32, (rows_a, k // 2)), _fake(cutlass.Int32, (rows,)),
                        _fake(cutlass.Int32, (experts, n, k // 2)),
                        _fake(cutlass.Int32, (_max_tiles(rows, experts), 3)), _fake(out_dtype, (rows, n)),
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_swiglu(rows_a, rows, experts, inter, k, arch=None, ptx_dir=None):
    w = _fake(cutlass.Int32, (experts, inter, k // 2))
    return cute.compile(moe_swiglu, _fake(cutlass.Int32, (rows_a, k // 2)), _fake(cutlass.Int32, (rows,)), w, w,
                        _fake(cutlass.Int32, (_max_tiles(rows, experts), 3)), _fake(cutlass.BFloat16, (rows, inter)),
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_router(tokens, experts, hidden, arch=None, ptx_dir=None):
    return cute.compile(moe_router, _fake(cutlass.Int32, (tokens, hidden // 2)), _fake(cutlass.Int32, (tokens,)),
                        _fake(cutlass.Float32, (experts, hidden)), _fake(cutlass.Int32, (_max_tiles(tokens, 1), 3)),
                        _fake(cutlass.Float32, (tokens, experts)), make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_route(tokens, experts, arch=None, ptx_dir=None):
    return cute.compile(moe_route, _fake(cutlass.Float32, (tokens, experts)), _fake(cutlass.Float32, (experts,)),
                        _fake(cutlass.Int64, (tokens, TOPK)), _fake(cutlass.Float32, (tokens, TOPK)), 1e-10,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_combine(tokens, hidden, arch=None, ptx_dir=None):
    pairs = tokens * TOPK
    return cute.compile(moe_combine, _fake(cutlass.BFloat16, (pairs, hidden)), _fake(cutlass.Float32, (pairs,)),
                        _fake(cutlass.Int32, (tokens, TOPK)), _fake(cutlass.BFloat16, (tokens, hidden)),
                        _fake(cutlass.BFloat16, (tokens, hidden)), make_fake_stream(), options=_options(arch, ptx_dir))


def _get(key, build):
    if key not in _COMPILED:
        _COMPILED[key] = build()
    return _COMPILED[key]


def _dense_tiles(rows, experts, device):
    """Tile table for one expert over rows 0..rows-1 (sized like a table for `experts` experts)."""
    i = torch.arange(_max_tiles(rows, experts), device=device)
    begin = torch.clamp(i * BM, max=rows)
    return torch.stack([torch.zeros_like(i), begin, torch.clamp(begin + BM, max=rows)], 1).to(torch.int32)


def _plan(index, weight, experts):
    """Rows sorted by expert (stable), their 64-row tiles, and each token's rows in expert order."""
    tokens, topk = index.shape
    pairs = tokens * topk
    device = index.device
    flat = index.flatten()
    order = torch.argsort(flat, stable=True)
    sorted_tok = (order // topk).to(torch.int32)
    sorted_w = weight.flatten()[order].contiguous()
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    ntiles = (counts + BM - 1) // BM
    tile_end = torch.cumsum(ntiles, 0)
    ti = torch.arange(_max_tiles(pairs, experts), device=device)
    te = torch.searchsorted(tile_end, ti, right=True)
    valid = te < experts
    tec = torch.clamp(te, max=experts - 1)
    row_begin = starts[tec] + (ti - (tile_end[tec] - ntiles[tec])) * BM
    row_end = torch.minimum(row_begin + BM, starts[tec] + counts[tec])
    tiles = torch.stack([tec, torch.where(valid, row_begin, 0), torch.where(valid, row_end, 0)], 1)
    slots = torch.argsort(order // topk, stable=True).view(tokens, topk)  # a token's rows, ascending expert
    return sorted_tok, sorted_w, tiles.to(torch.int32).contiguous(), slots.to(torch.int32).contiguous()


def _words(t):
    """A bf16 tensor's values as int32 words (two consecutive values each, low half first)."""
    return t.contiguous().view(torch.int32)


def solve(hidden_states, gate_weight, e_score_correction_bias, expert_gate_proj, expert_up_proj,
          expert_down_proj, shared_gate_proj, shared_up_proj, shared_down_proj, norm_min):
    shape = hidden_states.shape
    hidden = shape[-1]
    x = _words(hidden_states.reshape(-1, hidden))
    tokens = x.shape[0]
    experts, inter = expert_gate_proj.shape[0], expert_gate_proj.shape[1]
    shared_inter = shared_gate_proj.shape[0]
    device = hidden_states.device
    pairs = tokens * TOPK
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    f32, bf16 = torch.float32, torch.bfloat16

    logits = torch.empty(tokens, experts, dtype=f32, device=device)
    token_rows = torch.arange(tokens, dtype=torch.int32, device=device)
    dense = _dense_tiles(tokens, 1, device)
    _get(("router", tokens, experts, hidden), lambda: _compile_router(tokens, experts, hidden))(
        x, token_rows, gate_weight.float().contiguous(), dense, logits, stream)
    index = torch.empty(tokens, TOPK, dtype=torch.int64, device=device)
    weight = torch.empty(tokens, TOPK, dtype=f32, device=device)
    _get(("route", tokens, experts), lambda: _compile_route(tokens, experts))(
        logits, e_score_correction_bias.float().contiguous().view(-1), index, weight, float(norm_min), stream)

    sorted_tok, sorted_w, tiles, slots = _plan(index, weight, experts)
    h = torch.empty(pairs, inter, dtype=bf16, device=device)
    _get(("swiglu", tokens, pairs, experts, inter, hidden), lambda: _compile_swiglu(
        tokens, pairs, experts, inter, hidden))(
        x, sorted_tok, _words(expert_gate_proj), _words(expert_up_proj), tiles, h, stream)
    y = torch.empty(pairs, hidden, dtype=bf16, device=device)
    _get(("down", pairs, pairs, experts, hidden, inter), lambda: _compile_gemm(
        pairs, pairs, experts, hidden, inter, cutlass.BFloat16))(
        _words(h), torch.arange(pairs, dtype=torch.int32, device=device), _words(expert_down_proj), tiles, y,
        stream)
    h_shared = torch.empty(tokens, shared_inter, dtype=bf16, device=device)
    _get(("swiglu", tokens, tokens, 1, shared_inter, hidden), lambda: _compile_swiglu(
        tokens, tokens, 1, shared_inter, hidden))(
        x, token_rows, _words(shared_gate_proj).unsqueeze(0), _words(shared_up_proj).unsqueeze(0), dense, h_shared,
        stream)
    y_shared = torch.empty(tokens, hidden, dtype=bf16, device=device)
    _get(("down", tokens, tokens, 1, hidden, shared_inter), lambda: _compile_gemm(
        tokens, tokens, 1, hidden, shared_inter, cutlass.BFloat16))(
        _words(h_shared), token_rows, _words(shared_down_proj).unsqueeze(0), dense, y_shared, stream)
    out = torch.empty(tokens, hidden, dtype=bf16, device=device)
    _get(("combine", tokens, hidden), lambda: _compile_combine(tokens, hidden))(
        y, sorted_w, slots, y_shared, out, stream)
    return out.view(shape), logits


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    tokens, hidden, experts = w["batch"] * w["seqlen"], w["hidden"], w["experts"]
    inter, shared_inter = w["inter"], w["shared_inter"]
    pairs = tokens * TOPK
    builds = [_compile_router(tokens, experts, hidden, arch, ptx_dir),
              _compile_route(tokens, experts, arch, ptx_dir),
              _compile_swiglu(tokens, pairs, experts, inter, hidden, arch, ptx_dir),
              _compile_gemm(pairs, pairs, experts, hidden, inter, cutlass.BFloat16, arch, ptx_dir),
              _compile_swiglu(tokens, tokens, 1, shared_inter, hidden, arch, ptx_dir),
              _compile_gemm(tokens, tokens, 1, hidden, shared_inter, cutlass.BFloat16, arch, ptx_dir),
              _compile_combine(tokens, hidden, arch, ptx_dir)]
    return [name for compiled in builds for name in compiled.kernel_info]
