"""CuTe DSL oracle for problem 13: FIBO joint attention block (adaLN-modulated image tokens attending
to themselves and to text tokens), fp32.

The reference is true fp32 (no TF32), so every product runs as CUDA-core fp32 FMAs; the GEMMs are
shared-memory tiled SIMT GEMMs, slower than cuBLAS's fp32 GEMMs that the eager reference uses.
Four DSL kernels, nine launches:

1. ``rowprep_kernel`` (three builds): one CTA per row, 16-byte loads into fp32 registers, row sums
   by warp shuffles and then across warps through shared memory (every thread adds the per-warp
   sums in the same order). silu build: silu(t) = t / (1 + exp(-t)) of the timestep embedding
   (exp(x) is ex2.approx of x log2(e) corrected for the rounding of that product by an fma, about
   as accurate as expf; IEEE division). LayerNorm builds (no affine, eps 1e-5): mean = sum / C,
   var = sum((x - mean)^2) / C, y = (x - mean) * rsqrt(var + eps); the image build then applies the
   modulation y * (1 + scale[b]) + shift[b] in the reference's order.
2. ``gemm_kernel`` (C = A W^T + bias, five launches: the adaLN linear on the zero-padded silu rows
   (only its scale, shift and gate rows), q, k, v, the text k and v, and the output projection):
   a 256-thread CTA computes a 128 x 128 tile; K advances in slices of 16 (two 16-byte vectors of
   A and of W per thread, the next slice's loads issued before the current slice is computed),
   stored K-major in shared memory; each thread accumulates an 8 x 8 block (rows ty*4 + {0..3} and
   64 + ty*4 + {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16).
   The sums are two-level: each chunk of 128 K values is accumulated from zero and then added to
   the running total, keeping the fp32 rounding error near that of a blocked library GEMM. The
   output-projection build's epilogue writes x + gate[b] * (sum + bias).
3. ``rope_kernel``: one CTA per image token; for q and k in place, each thread rotates pairs (d, d +
   21) of the three 42-dim axis slices of a head: (x1 cos - x2 sin, x2 cos + x1 sin) with cos/sin
   from column j < 21 of the axis table at the token's position on that axis; dims 126, 127 stay.
4. ``attention_kernel``: per (64 query rows, head, batch), 256 threads; the 1024 image keys and then
   the 256 text keys (no mask) are walked in blocks of 64 (keys past the end are masked). S = Q K^T
   goes over head-dim slices of 32 (Q and K slices stored dim-major in shared memory; thread (ty,
   tc) owns S rows ty*4 + {0..3} and keys tc*4 + {0..3}); online softmax in fp32 with the precise
   exp above: s = S / sqrt(128) (as a multiplication by its fp32 reciprocal), m_new = max(m, rowmax)
   over the 16 lanes sharing a row (xor shuffles), alpha = exp(m - m_new), p = exp(s - m_new), l =
   l * alpha + (the thread's p sum); P goes to shared memory and P V runs over two V slices of 32
   keys, each thread accumulating rows ty*4 + {0..3} and dims tc*4 + {0..3}, 64 + tc*4 + {0..3} of the
   block from zero before O = O * alpha + block (a two-level sum over the keys). Epilogue: the 16
   partial row sums are added by xor shuffles and O / l (IEEE division) is stored.
Shapes that are not tile multiples (the small workload) use zero-padded scratch operands; the
graded shapes need none.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 4): 12.9 ms against the
eager reference's 10.9 ms (0.84x). Over the problem's declared arithmetic (0.43 TFLOP, its
physical_floor) that is 33.0 TFLOP/s against eager's 39.1: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32 WGMMA
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=4, grid=(4, 16, 16), text_tokens=256, heads=24, text_dim=4096)
HEAD_DIM, AXIS_DIM = 128, 42
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_ROW_THREADS = 256
_ROPE_THREADS = 128
_QM = 64  # query rows per attention CTA and keys per block
_DC = 32  # head-dim slice of the S loop
_VK = 32  # keys per V slice
_NEG = -1.0e30  # a masked logit (exp of it minus the row max is 0)
_LOG2E = 1.4426950408889634
_LOG2E_TAIL = 1.925963033500e-08  # log2(e) - fp32(log2(e))
_LN2 = 0.6931471805599453
_EPS = 1e-5
_SILU, _LN, _LN_MOD = 0, 1, 2
_COMPILED = {}


def _exp(x):
    """exp(x) = 2^t (1 + ln2 d), t = fp32(x log2 e), d = the rounding error of t plus x times log2(e)'s tail."""
    t = x * _LOG2E
    d = cute.math.fma(x, _LOG2E, -t) + x * _LOG2E_TAIL
    p = cute.math.exp2(t)
    return cute.math.fma(p, d * _LN2, p)


@cute.kernel
def rowprep_kernel(src: cute.Tensor, dst: cute.Tensor, mod: cute.Tensor, rows_per_batch: cutlass.Constexpr,
                   mode: cutlass.Constexpr, steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    width = cute.size(src, mode=[1])
    chunks = width // 4
    warps = _ROW_THREADS // 32
    smem = cutlass.memory.SmemAllocator()
    part_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)
    part_sq = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)
    g_x = cute.zipped_divide(src[row, None], (4,))
    g_y = cute.zipped_divide(dst[row, None], (4,))
    xs = cute.make_rmem_tensor((4, steps), cutlass.Float32)
    xs.fill(0.0)
    ys = cute.make_rmem_tensor((4,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * _ROW_THREADS
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            xs[None, k].store(g_x[None, c].load())
    if cutlass.const_expr(mode == _SILU):
        for k in cutlass.range_constexpr(steps):
            c = tidx + k * _ROW_THREADS
            ok = True
            if cutlass.const_expr(bounded):
                ok = c < chunks
            if ok:
                for j in cutlass.range_constexpr(4):
                    ys[j] = xs[j, k] / (1.0 + _exp(-xs[j, k]))
                g_y[None, c].store(ys.load())
    else:
        s = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(steps):
            for j in cutlass.range_constexpr(4):
                s = s + xs[j, k]
        s = cute.arch.warp_reduction_sum(s)
        if lane == 0:
            part_sum[warp] = s
        cute.arch.sync_threads()
        total = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(warps):
            total = total + part_sum[i]
        mean = total / width
        sq = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(steps):
            c = tidx + k * _ROW_THREADS
            ok = True
            if cutlass.const_expr(bounded):
                ok = c < chunks
            if ok:
                for j in cutlass.range_constexpr(4):
                    xs[j, k] = xs[j, k] - mean
                    sq = sq + xs[j, k] * xs[j, k]
        sq = cute.arch.warp_reduction_sum(sq)
        if lane == 0:
            part_sq[warp] = sq
        cute.arch.sync_threads()
        total_sq = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(warps):
            total_sq = total_sq + part_sq[i]
        rstd = cute.math.rsqrt(total_sq / width + _EPS)
        b = row // rows_per_batch
        for k in cutlass.range_constexpr(steps):
            c = tidx + k * _ROW_THREADS
            ok = True
            if cutlass.const_expr(bounded):
                ok = c < chunks
            if ok:
                for j in cutlass.range_constexpr(4):
                    y = xs[j, k] * rstd
                    if cutlass.const_expr(mode == _LN_MOD):  # mod[b] = (scale, shift, gate)
                        y = y * (1.0 + mod[b, c * 4 + j]) + mod[b, width + c * 4 + j]
                    ys[j] = y
                g_y[None, c].store(ys.load())


@cute.jit
def rowprep(src: cute.Tensor, dst: cute.Tensor, mod: cute.Tensor, rows_per_batch: cutlass.Constexpr,
            mode: cutlass.Constexpr, stream: cuda.CUstream):
    chunks = cute.size(src, mode=[1]) // 4
    steps = (chunks + _ROW_THREADS - 1) // _ROW_THREADS
    rowprep_kernel(src, dst, mod, rows_per_batch, mode, steps, chunks % _ROW_THREADS != 0).launch(
        grid=[cute.size(src, mode=[0]), 1, 1], block=[_ROW_THREADS, 1, 1], stream=stream)


@cute.kernel
def gemm_kernel(mGate: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor,
                mX: cute.Tensor, rows_per_batch: cutlass.Constexpr, gate_off: cutlass.Constexpr,
                gated: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    k_tiles = cute.size(mA, mode=[1]) // _BK
    tiles_n = cute.size(mC, mode=[1]) // _BN
    row0 = (cta // tiles_n) * _BM
    col0 = (cta % tiles_n) * _BN
    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 2
    lchunk = tidx % 2  # which 8-wide half of the 16-wide K slice this thread loads

    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BM), stride=(_BM, 1)), 16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BN), stride=(_BN, 1)), 16)
    acc = cute.make_rmem_tensor((64,), cutlass.Float32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((64,), cutlass.Float32)
    af = cute.make_rmem_tensor((8,), cutlass.Float32)
    bf = cute.make_rmem_tensor((8,), cutlass.Float32)
    ra = cute.make_rmem_tensor((8,), cutlass.Float32)
    rb = cute.make_rmem_tensor((8,), cutlass.Float32)
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (8,))  # (8, K / 8)
    g_b = cute.zipped_divide(mB[col0 + lrow, None], (8,))

    ra.store(g_a[None, lchunk].load())
    rb.store(g_b[None, lchunk].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            for j in cutlass.range_constexpr(8):
                a_s[lchunk * 8 + j, lrow] = ra[j]
                b_s[lchunk * 8 + j, lrow] = rb[j]
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                ra.store(g_a[None, (kt + 1) * 2 + lchunk].load())
                rb.store(g_b[None, (kt + 1) * 2 + lchunk].load())
            for kk in cutlass.range_constexpr(_BK):
                s_a = cute.zipped_divide(a_s[kk, None], (4,))  # (4, 32)
                s_b = cute.zipped_divide(b_s[kk, None], (4,))
                lo = s_a[None, ty].load()
                hi = s_a[None, 16 + ty].load()
                blo = s_b[None, tc].load()
                bhi = s_b[None, 16 + tc].load()
                for i in cutlass.range_constexpr(4):
                    af[i] = lo[i]
                    af[4 + i] = hi[i]
                    bf[i] = blo[i]
                    bf[4 + i] = bhi[i]
                for i in cutlass.range_constexpr(8):
                    for j in cutlass.range_constexpr(8):
                        part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(64):  # fold the chunk's partial sums into the total
            acc[i] = acc[i] + part[i]

    bias = cute.make_rmem_tensor((8,), cutlass.Float32)
    for jh in cutlass.range_constexpr(2):
        for j in cutlass.range_constexpr(4):
            bias[jh * 4 + j] = mBias[col0 + jh * 64 + tc * 4 + j]
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        g_c = cute.zipped_divide(mC[row, None], (4,))
        for jh in cutlass.range_constexpr(2):
            col = col0 + jh * 64 + tc * 4
            for j in cutlass.range_constexpr(4):
                h = acc[i * 8 + jh * 4 + j] + bias[jh * 4 + j]
                if cutlass.const_expr(gated):  # x + gate[b] * (attn W^T + b)
                    h = mX[row, col + j] + mGate[row // rows_per_batch, gate_off + col + j] * h
                out[j] = h
            g_c[None, col // 4].store(out.load())


@cute.jit
def gemm(mGate: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, mX: cute.Tensor,
         rows_per_batch: cutlass.Constexpr, gate_off: cutlass.Constexpr, gated: cutlass.Constexpr,
         stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    gemm_kernel(mGate, mA, mB, mBias, mC, mX, rows_per_batch, gate_off, gated).launch(
        grid=[tiles, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.kernel
def rope_kernel(q: cute.Tensor, k: cute.Tensor, pos0: cute.Tensor, pos1: cute.Tensor, pos2: cute.Tensor,
                c0: cute.Tensor, s0: cute.Tensor, c1: cute.Tensor, s1: cute.Tensor, c2: cute.Tensor, s2: cute.Tensor,
                tokens: cutlass.Constexpr, pairs: cutlass.Constexpr, steps: cutlass.Constexpr):
    """pairs = heads * 63 per tensor; pair e: head e // 63, axis (e % 63) // 21, column j = e % 21."""
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    tok = row % tokens
    half = AXIS_DIM // 2
    for it in range(steps):
        e = tidx + it * _ROPE_THREADS
        if e < 2 * pairs:
            which = e // pairs
            r = e - which * pairs
            h = r // (3 * half)
            ra = r - h * (3 * half)
            axis = ra // half
            j = ra - axis * half
            cs = cutlass.Float32(0.0)
            sn = cutlass.Float32(0.0)
            if axis == 0:
                cs = c0[pos0[tok], j]
                sn = s0[pos0[tok], j]
            elif axis == 1:
                cs = c1[pos1[tok], j]
                sn = s1[pos1[tok], j]
            else:
                cs = c2[pos2[tok], j]
                sn = s2[pos2[tok], j]
            i1 = h * HEAD_DIM + axis * AXIS_DIM + j
            if which == 0:
                x1 = q[row, i1]
                x2 = q[row, i1 + half]
                q[row, i1] = x1 * cs - x2 * sn
                q[row, i1 + half] = x2 * cs + x1 * sn
            else:
                x1 = k[row, i1]
                x2 = k[row, i1 + half]
                k[row, i1] = x1 * cs - x2 * sn
                k[row, i1 + half] = x2 * cs + x1 * sn


@cute.jit
def rope(q: cute.Tensor, k: cute.Tensor, pos0: cute.Tensor, pos1: cute.Tensor, pos2: cute.Tensor, c0: cute.Tensor,
         s0: cute.Tensor, c1: cute.Tensor, s1: cute.Tensor, c2: cute.Tensor, s2: cute.Tensor, rows: cutlass.Constexpr,
         tokens: cutlass.Constexpr, heads: cutlass.Constexpr, stream: cuda.CUstream):
    pairs = heads * 3 * (AXIS_DIM // 2)
    steps = (2 * pairs + _ROPE_THREADS - 1) // _ROPE_THREADS
    rope_kernel(q, k, pos0, pos1, pos2, c0, s0, c1, s1, c2, s2, tokens, pairs, steps).launch(
        grid=[rows, 1, 1], block=[_ROPE_THREADS, 1, 1], stream=stream)


def _group_max(x):
    for sh in range(4):  # the 16 lanes sharing a row: xor 1, 2, 4, 8
        x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=1 << sh, mask=-1, mask_and_clamp=31))
    return x


def _group_sum(x):
    for sh in range(4):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=1 << sh, mask=-1, mask_and_clamp=31)
    return x


@cute.kernel
def attention_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, kt: cute.Tensor, vt: cute.Tensor,
                     out: cute.Tensor, scale: cutlass.Float32, tokens: cutlass.Constexpr, text: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    tile, head, b = cute.arch.block_idx()
    ty = tidx // 16
    tc = tidx % 16
    keys = tokens + text
    n_blocks = (keys + _QM - 1) // _QM
    r0 = tile * _QM
    col0 = head * HEAD_DIM

    smem = cutlass.memory.SmemAllocator()
    q_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_DC, _QM), stride=(_QM, 1)), 16)  # [d][row]
    k_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_DC, _QM), stride=(_QM, 1)), 16)  # [d][key]
    v_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_VK, HEAD_DIM), stride=(HEAD_DIM, 1)), 16)
    p_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_QM, _QM), stride=(_QM, 1)), 16)  # [key][row]

    s = cute.make_rmem_tensor((16,), cutlass.Float32)
    acc_o = cute.make_rmem_tensor((32,), cutlass.Float32)
    acc_o.fill(0.0)
    part = cute.make_rmem_tensor((32,), cutlass.Float32)
    m_run = cute.make_rmem_tensor((4,), cutlass.Float32)
    m_run.fill(_NEG)
    l_run = cute.make_rmem_tensor((4,), cutlass.Float32)
    l_run.fill(0.0)
    alpha = cute.make_rmem_tensor((4,), cutlass.Float32)
    vec = cute.make_rmem_tensor((4,), cutlass.Float32)

    for nb in range(n_blocks):
        # ---- S = Q K^T over head-dim slices of 32
        s.fill(0.0)
        for dc in range(HEAD_DIM // _DC):
            for it in cutlass.range_constexpr(_QM * _DC // 4 // _THREADS):
                u = it * _THREADS + tidx
                lr = u // (_DC // 4)
                c4 = u % (_DC // 4)
                dcol = (col0 + dc * _DC) // 4 + c4  # 4-float column group
                qr = cutlass.min(r0 + lr, tokens - 1)
                vec.store(cute.zipped_divide(q[b * tokens + qr, None], (4,))[None, dcol].load())
                for e in cutlass.range_constexpr(4):
                    q_s[c4 * 4 + e, lr] = vec[e]
                key = cutlass.min(nb * _QM + lr, keys - 1)
                if key < tokens:
                    vec.store(cute.zipped_divide(k[b * tokens + key, None], (4,))[None, dcol].load())
                else:
                    vec.store(cute.zipped_divide(kt[b * text + key - tokens, None], (4,))[None, dcol].load())
                for e in cutlass.range_constexpr(4):
                    k_s[c4 * 4 + e, lr] = vec[e]
            cute.arch.sync_threads()
            for d in cutlass.range_constexpr(_DC):
                a4 = cute.zipped_divide(q_s[d, None], (4,))[None, ty].load()
                b4 = cute.zipped_divide(k_s[d, None], (4,))[None, tc].load()
                for i in cutlass.range_constexpr(4):
                    for j in cutlass.range_constexpr(4):
                        s[i * 4 + j] = s[i * 4 + j] + a4[i] * b4[j]
            cute.arch.sync_threads()
        # ---- online softmax (fp32, precise exp); P to shared memory as [key][row]
        for i in cutlass.range_constexpr(4):
            for j in cutlass.range_constexpr(4):
                s[i * 4 + j] = cutlass.Float32(cutlass.select_(nb * _QM + tc * 4 + j < keys, s[i * 4 + j] * scale,
                                                               _NEG))
            mx = cute.arch.fmax(cute.arch.fmax(s[i * 4 + 0], s[i * 4 + 1]), cute.arch.fmax(s[i * 4 + 2], s[i * 4 + 3]))
            m_new = cute.arch.fmax(m_run[i], _group_max(mx))
            alpha[i] = _exp(m_run[i] - m_new)
            p_sum = cutlass.Float32(0.0)
            for j in cutlass.range_constexpr(4):
                p = _exp(s[i * 4 + j] - m_new)
                p_s[tc * 4 + j, ty * 4 + i] = p
                p_sum = p_sum + p
            l_run[i] = l_run[i] * alpha[i] + p_sum
            m_run[i] = m_new
        # ---- block P V from zero over two V slices of 32 keys, then O = O * alpha + block
        part.fill(0.0)
        for vs in range(_QM // _VK):
            for it in cutlass.range_constexpr(_VK * HEAD_DIM // 4 // _THREADS):
                u = it * _THREADS + tidx
                lk = u // (HEAD_DIM // 4)
                c4 = u % (HEAD_DIM // 4)
                key = cutlass.min(nb * _QM + vs * _VK + lk, keys - 1)
                if key < tokens:
                    vec.store(cute.zipped_divide(v[b * tokens + key, None], (4,))[None, col0 // 4 + c4].load())
                else:
                    vec.store(cute.zipped_divide(vt[b * text + key - tokens, None], (4,))[None, col0 // 4 + c4].load())
                cute.zipped_divide(v_s[lk, None], (4,))[None, c4].store(vec.load())
            cute.arch.sync_threads()  # V slice (and P) visible
            for kk in cutlass.range_constexpr(_VK):
                p4 = cute.zipped_divide(p_s[vs * _VK + kk, None], (4,))[None, ty].load()
                v_lo = cute.zipped_divide(v_s[kk, None], (4,))[None, tc].load()
                v_hi = cute.zipped_divide(v_s[kk, None], (4,))[None, 16 + tc].load()
                for i in cutlass.range_constexpr(4):
                    for j in cutlass.range_constexpr(4):
                        part[i * 8 + j] = part[i * 8 + j] + p4[i] * v_lo[j]
                        part[i * 8 + 4 + j] = part[i * 8 + 4 + j] + p4[i] * v_hi[j]
            cute.arch.sync_threads()  # every thread is done with the V slice (and, after the last, P)
        for i in cutlass.range_constexpr(4):
            for j in cutlass.range_constexpr(8):
                acc_o[i * 8 + j] = acc_o[i * 8 + j] * alpha[i] + part[i * 8 + j]

    # ---- epilogue: O / l (IEEE division), 16-byte stores
    for i in cutlass.range_constexpr(4):
        total = _group_sum(l_run[i])
        r = r0 + ty * 4 + i
        if r < tokens:
            g_o = cute.zipped_divide(out[b * tokens + r, None], (4,))
            for jh in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(4):
                    vec[j] = acc_o[i * 8 + jh * 4 + j] / total
                g_o[None, (col0 + jh * 64) // 4 + tc].store(vec.load())


@cute.jit
def attention(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, kt: cute.Tensor, vt: cute.Tensor, out: cute.Tensor,
              scale: cutlass.Float32, batch: cutlass.Constexpr, tokens: cutlass.Constexpr, text: cutlass.Constexpr,
              heads: cutlass.Constexpr, stream: cuda.CUstream):
    attention_kernel(q, k, v, kt, vt, out, scale, tokens, text).launch(
        grid=[(tokens + _QM - 1) // _QM, heads, batch], block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(shape, dtype=cutlass.Float32, align=16):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=align)


def _compile_rowprep(rows, width, dst_rows, dst_cols, mod_rows, mod_cols, rows_per_batch, mode, arch=None,
                     ptx_dir=None):
    return cute.compile(rowprep, _fake((rows, width)), _fake((dst_rows, dst_cols)), _fake((mod_rows, mod_cols)),
                        rows_per_batch, mode, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_gemm(m, n, k, gate_rows, gate_cols, rows_per_batch, gate_off, gated, arch=None, ptx_dir=None):
    """A [m, k], W [n, k], bias [n], C [m, n] (m, n multiples of 128, k of 128); X [m, n] and the gate
    tensor [gate_rows, gate_cols] for the gated epilogue."""
    c = _fake((m, n))
    x, g = (_fake((m, n)), _fake((gate_rows, gate_cols))) if gated else (c, c)
    return cute.compile(gemm, g, _fake((m, k)), _fake((n, k)), _fake((n,)), c, x, rows_per_batch, gate_off, gated,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_rope(rows, cols, tokens, heads, positions, arch=None, ptx_dir=None):
    pos = [_fake((tokens,), cutlass.Int32, 4) for _ in range(3)]
    tables = [_fake((n, AXIS_DIM), align=4) for n in positions for _ in range(2)]
    return cute.compile(rope, _fake((rows, cols)), _fake((rows, cols)), *pos, *tables, rows, tokens, heads,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_attention(rows, cols, text_rows, batch, tokens, text, heads, arch=None, ptx_dir=None):
    big = [_fake((rows, cols)) for _ in range(3)]
    small = [_fake((text_rows, cols)) for _ in range(2)]
    return cute.compile(attention, *big, *small, _fake((rows, cols)), 1.0, batch, tokens, text, heads,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _run(key, make, *args):
    if key not in _COMPILED:
        _COMPILED[key] = make(*key[1:])
    _COMPILED[key](*args)


def _gemm(a, w, bias, stream, x=None, gate=None, rows_per_batch=1, gate_off=0):
    """a [mp, kp] (tile-padded) times w^T plus bias (x + gate * that when x is given): [mp, n padded]."""
    mp, kp, n_p = a.shape[0], a.shape[1], _up(w.shape[0], _BN)
    c = torch.empty(mp, n_p, dtype=torch.float32, device=a.device)
    gated = x is not None
    key = ("gemm", mp, n_p, kp, gate.shape[0] if gated else 0, gate.shape[1] if gated else 0, rows_per_batch,
           gate_off, gated)
    _run(key, _compile_gemm, gate if gated else c, a, _padded(w, (n_p, kp)), _padded(bias, (n_p,)), c,
         x if gated else c, stream)
    return c


def solve(hidden_states, timestep_embedding, encoder_hidden_states, adaln_linear_weight, adaln_linear_bias,
          to_q_weight, to_q_bias, to_k_weight, to_k_bias, to_v_weight, to_v_bias, to_k_context_weight,
          to_k_context_bias, to_v_context_weight, to_v_context_bias, to_out_weight, to_out_bias, pos_idx_axis0,
          pos_idx_axis1, pos_idx_axis2, rope_cos_axis0, rope_sin_axis0, rope_cos_axis1, rope_sin_axis1,
          rope_cos_axis2, rope_sin_axis2, is_joint_block):
    if is_joint_block != 1:
        raise ValueError("only the joint block (is_joint_block = 1) is defined")
    batch, tokens, hidden = hidden_states.shape
    heads = hidden // HEAD_DIM
    text, text_dim = encoder_hidden_states.shape[1], encoder_hidden_states.shape[2]
    dev = hidden_states.device
    assert hidden % _BN == 0 and text >= 1
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    rows, text_rows = batch * tokens, batch * text
    mp, bp, tp, dp = _up(rows, _BM), _up(batch, _BM), _up(text_rows, _BM), _up(text_dim, _BK * _FOLD)

    # adaLN: mod = silu(temb) W^T + b, only the scale, shift and gate rows
    temb = timestep_embedding.contiguous()
    silu = torch.zeros(bp, hidden, dtype=torch.float32, device=dev)
    _run(("rowprep", batch, hidden, bp, hidden, batch, hidden, 1, _SILU), _compile_rowprep, temb, silu, temb, stream)
    mod = _gemm(silu, adaln_linear_weight[:3 * hidden], adaln_linear_bias[:3 * hidden], stream)  # [bp, 3 hidden]

    x = hidden_states.reshape(rows, hidden).contiguous()
    x_mod = torch.zeros(mp, hidden, dtype=torch.float32, device=dev) if mp != rows else torch.empty_like(x)
    _run(("rowprep", rows, hidden, mp, hidden, bp, 3 * hidden, tokens, _LN_MOD), _compile_rowprep, x, x_mod, mod,
         stream)
    q = _gemm(x_mod, to_q_weight, to_q_bias, stream)
    k = _gemm(x_mod, to_k_weight, to_k_bias, stream)
    v = _gemm(x_mod, to_v_weight, to_v_bias, stream)
    pos = [p.to(torch.int32).contiguous() for p in (pos_idx_axis0, pos_idx_axis1, pos_idx_axis2)]
    tables = [t.contiguous() for t in (rope_cos_axis0, rope_sin_axis0, rope_cos_axis1, rope_sin_axis1,
                                       rope_cos_axis2, rope_sin_axis2)]
    positions = tuple(t.shape[0] for t in tables[::2])
    _run(("rope", mp, hidden, tokens, heads, positions), _compile_rope, q, k, *pos, *tables, stream)

    enc = encoder_hidden_states.reshape(text_rows, text_dim).contiguous()
    t_ln = torch.zeros(tp, dp, dtype=torch.float32, device=dev) if (tp, dp) != (text_rows, text_dim) else \
        torch.empty_like(enc)
    _run(("rowprep", text_rows, text_dim, tp, dp, text_rows, text_dim, 1, _LN), _compile_rowprep, enc, t_ln, enc,
         stream)
    k_text = _gemm(t_ln, to_k_context_weight, to_k_context_bias, stream)
    v_text = _gemm(t_ln, to_v_context_weight, to_v_context_bias, stream)

    attn = torch.zeros(mp, hidden, dtype=torch.float32, device=dev) if mp != rows else torch.empty_like(x)
    _run(("attention", mp, hidden, tp, batch, tokens, text, heads), _compile_attention, q, k, v, k_text, v_text,
         attn, float(1.0 / math.sqrt(HEAD_DIM)), stream)
    x_res = _padded(x, (mp, hidden))
    out = _gemm(attn, to_out_weight, to_out_bias, stream, x=x_res, gate=mod, rows_per_batch=tokens,
                gate_off=2 * hidden)
    return out[:rows].view(batch, tokens, hidden)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every build for the fixed workload without a GPU; the kernel names in launch order."""
    w = WORKLOAD
    batch, text, heads, text_dim = w["batch"], w["text_tokens"], w["heads"], w["text_dim"]
    tokens = w["grid"][0] * w["grid"][1] * w["grid"][2]
    hidden = heads * HEAD_DIM
    rows, text_rows, bp = batch * tokens, batch * text, _up(batch, _BM)
    positions = (16, 56, 56)
    names = list(_compile_rowprep(batch, hidden, bp, hidden, batch, hidden, 1, _SILU, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(bp, 3 * hidden, hidden, 0, 0, 1, 0, False, arch, ptx_dir).kernel_info)
    names += list(_compile_rowprep(rows, hidden, rows, hidden, bp, 3 * hidden, tokens, _LN_MOD, arch,
                                   ptx_dir).kernel_info)
    names += list(_compile_gemm(rows, hidden, hidden, 0, 0, 1, 0, False, arch, ptx_dir).kernel_info)
    names += list(_compile_rope(rows, hidden, tokens, heads, positions, arch, ptx_dir).kernel_info)
    names += list(_compile_rowprep(text_rows, text_dim, text_rows, text_dim, text_rows, text_dim, 1, _LN, arch,
                                   ptx_dir).kernel_info)
    names += list(_compile_gemm(text_rows, hidden, text_dim, 0, 0, 1, 0, False, arch, ptx_dir).kernel_info)
    names += list(_compile_attention(rows, hidden, text_rows, batch, tokens, text, heads, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(rows, hidden, hidden, bp, 3 * hidden, tokens, 2 * hidden, True, arch,
                                ptx_dir).kernel_info)
    return names
