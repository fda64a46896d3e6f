"""CuTe DSL oracle for problem 10: backward of the Gemma-3 attention core (q/k RMSNorm, RoPE, soft-capped
causal GQA), recomputing the forward, fp32 throughout (no TF32).

Everything runs in fp32 SIMT kernels (the reference is judged at fp32 tolerance, so TF32 tensor cores
would be too coarse). Eight DSL kernels:

``gemm_kernel``: a shared-memory tiled SIMT GEMM, C = A B over a batch of matrices (grid y = batch).
A 256-thread CTA computes a 128 x 128 tile; K advances in slices of 16 held K-major in shared memory,
the next slice's global loads issued before the current slice is computed. A is stored [M, K] (loaded
as 8 consecutive K values and transposed on the store) or [K, M]; B is stored [K, N] or [N, K] (then
loaded like an [M, K] A). Each thread accumulates an 8 x 8 block from 16-byte shared-memory reads.
Sums are two-level: every chunk of 128 K values is summed from zero and then added to the running
total (near the error of a blocked library GEMM). An accumulate build adds the tile to C's previous
contents (grad_hidden = ((dq W_q) + dk W_k) + dv W_v, the reference's order). It is built for: the
q/k/v projections x W^T; the logits Q K^T per (sequence, KV head) with the G query heads of a group
stacked as G*S rows; O = P V; dO = dy W_o; dP = dO V^T; dQ = dS K; dK = dS^T Q and dV = P^T dO (A read
transposed, K = G*S sums the group's heads); the weight gradients dy^T O and d_lin^T x; the input
gradient.

``normrope_kernel``: one thread per (token, head) row: r = 1 / sqrt(mean(x^2) + eps) (IEEE sqrt and
reciprocal), y = (x r)(1 + w), rotate-half RoPE y cos + rot(y) sin, stored head-major [B, heads, S, D].
``headmajor_kernel`` transposes v to the same head-major layout.

``softmax_kernel``: one warp per logits row (lanes over keys): t = tanh(z fp32(scaling / cap)) (the
precise tanh), c = t cap, causal mask, row max and sum by xor shuffles, p = exp(c - max) / sum (exp by
ex2 with a rounding correction, IEEE division); stores p and t.

``dsoftmax_kernel``: one warp per row: s = sum_j dP P, dS = ((P (dP - s)) (1 - t^2)) scaling.

``normbwd_kernel``: one thread per (token, head) row: the inverse RoPE dn = dq cos + rot^T(dq sin),
x_hat = x r, g = dn (1 + w), d_lin = r (g - x_hat mean(g x_hat)) stored token-major, and dn x_hat
stored per row for the weight gradient.

``colsum_kernel`` / ``colsum_final_kernel``: the norm weights' gradients: per-CTA fp64 column sums of
256 rows, then an fp64 sum of the CTA partials.

Layouts between kernels that the GEMMs cannot address directly (O and dO between token-major and
head-major) are torch permute copies. Shapes that are not tile multiples (the small workload) are
zero-padded by the host: head_dim to 128 per head, seq to a multiple of 128 per sequence, hidden to a
multiple of 128; padded keys are causally masked, padded query rows carry dy = 0, so they add nothing;
results are sliced.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 4): 83.6 ms against the
eager reference's 58.1 ms (0.70x). Over the problem's declared arithmetic (2.24 TFLOP, its
physical_floor) that is 26.8 TFLOP/s against eager's 38.6: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32 WGMMA
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=3072, heads=24, kv_heads=8, head_dim=128)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_ROWS = 128  # threads per CTA of the per-row kernels
_CS = 256  # rows per CTA of the column sums
_LOG2E = 1.4426950408889634
_LOG2E_TAIL = 1.925963033500e-08  # log2(e) - fp32(log2(e))
_LN2 = 0.6931471805599453
_COMPILED = {}


def _exp(x):
    """exp(x) = 2^t (1 + ln2 d), t = fp32(x log2 e), d = the rounding error of t plus x times log2(e)'s tail."""
    t = x * _LOG2E
    d = cute.math.fma(x, _LOG2E, -t) + x * _LOG2E_TAIL
    p = cute.math.exp2(t)
    return cute.math.fma(p, d * _LN2, p)


@cute.kernel
def gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr,
                a_km: cutlass.Constexpr, b_nk: cutlass.Constexpr, accumulate: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, bz, _ = cute.arch.block_idx()
    k_tiles = k // _BK
    tiles_n = cute.size(mC, mode=[2]) // _BN
    row0 = (cta // tiles_n) * _BM
    col0 = (cta % tiles_n) * _BN
    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 2
    lchunk = tidx % 2  # [M, K] / [N, K] operands: which 8-wide half of the 16-wide K slice this thread loads
    kr = tidx // 16  # [K, X] operands: the slice row this thread loads
    xq = tidx % 16  # ... and its 8-wide column group

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
    g_a = cute.zipped_divide(mA[bz, row0 + lrow, None], (8,))  # [M, K] A: (8, K / 8)
    g_b = cute.zipped_divide(mB[bz, col0 + lrow, None], (8,))  # [N, K] B: (8, K / 8)

    if cutlass.const_expr(a_km):
        ra.store(cute.zipped_divide(mA[bz, kr, None], (8,))[None, row0 // 8 + xq].load())
    else:
        ra.store(g_a[None, lchunk].load())
    if cutlass.const_expr(b_nk):
        rb.store(g_b[None, lchunk].load())
    else:
        rb.store(cute.zipped_divide(mB[bz, kr, None], (8,))[None, col0 // 8 + xq].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            if cutlass.const_expr(a_km):
                cute.zipped_divide(a_s[kr, None], (8,))[None, xq].store(ra.load())
            else:
                for j in cutlass.range_constexpr(8):
                    a_s[lchunk * 8 + j, lrow] = ra[j]
            if cutlass.const_expr(b_nk):
                for j in cutlass.range_constexpr(8):
                    b_s[lchunk * 8 + j, lrow] = rb[j]
            else:
                cute.zipped_divide(b_s[kr, None], (8,))[None, xq].store(rb.load())
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                nrow = (kt + 1) * _BK + kr
                if cutlass.const_expr(a_km):
                    ra.store(cute.zipped_divide(mA[bz, nrow, None], (8,))[None, row0 // 8 + xq].load())
                else:
                    ra.store(g_a[None, (kt + 1) * 2 + lchunk].load())
                if cutlass.const_expr(b_nk):
                    rb.store(g_b[None, (kt + 1) * 2 + lchunk].load())
                else:
                    rb.store(cute.zipped_divide(mB[bz, nrow, None], (8,))[None, col0 // 8 + xq].load())
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

    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        g_c = cute.zipped_divide(mC[bz, row, None], (4,))
        for jh in cutlass.range_constexpr(2):
            if cutlass.const_expr(accumulate):
                old = g_c[None, col0 // 4 + jh * 16 + tc].load()
                for j in cutlass.range_constexpr(4):
                    out[j] = old[j] + acc[i * 8 + jh * 4 + j]
            else:
                for j in cutlass.range_constexpr(4):
                    out[j] = acc[i * 8 + jh * 4 + j]
            g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.kernel
def normrope_kernel(lin: cute.Tensor, w: cute.Tensor, cos: cute.Tensor, sin: cute.Tensor, out: cute.Tensor,
                    rr: cute.Tensor, nh: cutlass.Constexpr, seq: cutlass.Constexpr, seq_p: cutlass.Constexpr,
                    d: cutlass.Constexpr, d_p: cutlass.Constexpr, eps: cutlass.Constexpr):
    """lin [B*seq_p, nh*d_p] token-major -> out [B, nh, seq_p, d_p] normed and rotated; rr [B*seq_p*nh] = r."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    idx = bidx * _ROWS + tidx
    tok = idx // nh
    h = idx % nh
    b = tok // seq_p
    s = tok % seq_p
    half = d // 2
    rows = cute.size(lin, mode=[0]) * nh
    if idx < rows:
        if s < seq:
            ss = cutlass.Float32(0.0)
            for e in range(d):
                x = lin[tok, h * d_p + e]
                ss = ss + x * x
            r = 1.0 / cute.math.sqrt(ss / d + eps)
            rr[idx] = r
            for e in range(d):
                y = (lin[tok, h * d_p + e] * r) * (1.0 + w[e])
                ep = e + half
                sg = cutlass.Float32(-1.0)
                if e >= half:
                    ep = e - half
                    sg = cutlass.Float32(1.0)
                yp = (lin[tok, h * d_p + ep] * r) * (1.0 + w[ep])
                out[b, h, s, e] = y * cos[b, s, e] + (sg * yp) * sin[b, s, e]
            for e in range(d, d_p):
                out[b, h, s, e] = cutlass.Float32(0.0)
        else:
            rr[idx] = cutlass.Float32(0.0)
            for e in range(d_p):
                out[b, h, s, e] = cutlass.Float32(0.0)


@cute.kernel
def headmajor_kernel(lin: cute.Tensor, out: cute.Tensor, nh: cutlass.Constexpr, seq_p: cutlass.Constexpr,
                     d_p: cutlass.Constexpr):
    """lin [B*seq_p, nh*d_p] token-major -> out [B, nh, seq_p, d_p] (v)."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    idx = bidx * _ROWS + tidx
    tok = idx // nh
    h = idx % nh
    if idx < cute.size(lin, mode=[0]) * nh:
        for e in range(d_p):
            out[tok // seq_p, h, tok % seq_p, e] = lin[tok, h * d_p + e]


@cute.kernel
def softmax_kernel(lg: cute.Tensor, pr: cute.Tensor, sc: cutlass.Constexpr, cap: cutlass.Constexpr,
                   seq_p: cutlass.Constexpr):
    """lg [R, seq_p] logits (overwritten by t = tanh), pr [R, seq_p] probabilities; row -> query row % seq_p."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    row = bidx * (_ROWS // 32) + tidx // 32
    lane = tidx % 32
    qi = row % seq_p
    steps = seq_p // 32
    c = cute.make_rmem_tensor((steps,), cutlass.Float32)
    mx = cutlass.Float32(-3.0e38)
    for st in cutlass.range_constexpr(steps):
        j = st * 32 + lane
        t = cute.math.tanh(lg[row, j] * sc)
        lg[row, j] = t
        c[st] = t * cap
        if j <= qi:
            mx = cute.arch.fmax(mx, c[st])
    for sh in cutlass.range_constexpr(5):
        mx = cute.arch.fmax(mx, cute.arch.shuffle_sync_bfly(mx, offset=1 << sh, mask=-1, mask_and_clamp=31))
    sm = cutlass.Float32(0.0)
    for st in cutlass.range_constexpr(steps):
        j = st * 32 + lane
        e = cutlass.Float32(0.0)
        if j <= qi:
            e = _exp(c[st] - mx)
        c[st] = e
        sm = sm + e
    for sh in cutlass.range_constexpr(5):
        sm = sm + cute.arch.shuffle_sync_bfly(sm, offset=1 << sh, mask=-1, mask_and_clamp=31)
    for st in cutlass.range_constexpr(steps):
        pr[row, st * 32 + lane] = c[st] / sm


@cute.kernel
def dsoftmax_kernel(dp: cute.Tensor, pr: cute.Tensor, tt: cute.Tensor, scaling: cutlass.Constexpr,
                    seq_p: cutlass.Constexpr):
    """dp [R, seq_p] (overwritten by dS), pr probabilities, tt = tanh of the scaled logits."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    row = bidx * (_ROWS // 32) + tidx // 32
    lane = tidx % 32
    steps = seq_p // 32
    s = cutlass.Float32(0.0)
    for st in cutlass.range_constexpr(steps):
        j = st * 32 + lane
        s = s + dp[row, j] * pr[row, j]
    for sh in cutlass.range_constexpr(5):
        s = s + cute.arch.shuffle_sync_bfly(s, offset=1 << sh, mask=-1, mask_and_clamp=31)
    for st in cutlass.range_constexpr(steps):
        j = st * 32 + lane
        t = tt[row, j]
        dp[row, j] = ((pr[row, j] * (dp[row, j] - s)) * (1.0 - t * t)) * scaling


@cute.kernel
def normbwd_kernel(dq: cute.Tensor, lin: cute.Tensor, rr: cute.Tensor, w: cute.Tensor, cos: cute.Tensor,
                   sin: cute.Tensor, dlin: cute.Tensor, prod: cute.Tensor, nh: cutlass.Constexpr,
                   seq: cutlass.Constexpr, seq_p: cutlass.Constexpr, d: cutlass.Constexpr, d_p: cutlass.Constexpr):
    """dq [B, nh, seq_p, d_p] -> dlin [B*seq_p, nh*d_p] token-major; prod [B*seq_p*nh, d_p] = dn x_hat."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    idx = bidx * _ROWS + tidx
    tok = idx // nh
    h = idx % nh
    b = tok // seq_p
    s = tok % seq_p
    half = d // 2
    rows = cute.size(lin, mode=[0]) * nh
    if idx < rows:
        if s < seq:
            r = rr[idx]
            m = cutlass.Float32(0.0)
            for e in range(d):
                ep = e + half
                sg = cutlass.Float32(1.0)
                if e >= half:
                    ep = e - half
                    sg = cutlass.Float32(-1.0)
                dn = dq[b, h, s, e] * cos[b, s, e] + sg * (dq[b, h, s, ep] * sin[b, s, ep])
                xh = lin[tok, h * d_p + e] * r
                m = m + (dn * (1.0 + w[e])) * xh
            m = m / d
            for e in range(d):
                ep = e + half
                sg = cutlass.Float32(1.0)
                if e >= half:
                    ep = e - half
                    sg = cutlass.Float32(-1.0)
                dn = dq[b, h, s, e] * cos[b, s, e] + sg * (dq[b, h, s, ep] * sin[b, s, ep])
                xh = lin[tok, h * d_p + e] * r
                dlin[tok, h * d_p + e] = r * (dn * (1.0 + w[e]) - xh * m)
                prod[idx, e] = dn * xh
            for e in range(d, d_p):
                dlin[tok, h * d_p + e] = cutlass.Float32(0.0)
                prod[idx, e] = cutlass.Float32(0.0)
        else:
            for e in range(d_p):
                dlin[tok, h * d_p + e] = cutlass.Float32(0.0)
                prod[idx, e] = cutlass.Float32(0.0)


@cute.kernel
def colsum_kernel(prod: cute.Tensor, part: cute.Tensor):
    """part[cta, c] = fp64 sum of prod[cta*256 .. +255, c] (thread = column)."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rows = cute.size(prod, mode=[0])
    s = cutlass.Float64(0.0)
    for i in range(_CS):
        rw = bidx * _CS + i
        if rw < rows:
            s = s + cutlass.Float64(prod[rw, tidx])
    part[bidx, tidx] = s


@cute.kernel
def colsum_final_kernel(part: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    ctas = cute.size(part, mode=[0])
    s = cutlass.Float64(0.0)
    for i in range(ctas):
        s = s + part[i, tidx]
    out[tidx] = cutlass.Float32(s)


@cute.jit
def gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr, a_km: cutlass.Constexpr,
         b_nk: cutlass.Constexpr, accumulate: cutlass.Constexpr, stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[1]) // _BM) * (cute.size(mC, mode=[2]) // _BN)
    gemm_kernel(mA, mB, mC, k, a_km, b_nk, accumulate).launch(
        grid=[tiles, cute.size(mC, mode=[0]), 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def normrope(lin: cute.Tensor, w: cute.Tensor, cos: cute.Tensor, sin: cute.Tensor, out: cute.Tensor,
             rr: cute.Tensor, nh: cutlass.Constexpr, seq: cutlass.Constexpr, seq_p: cutlass.Constexpr,
             d: cutlass.Constexpr, d_p: cutlass.Constexpr, eps: cutlass.Constexpr, stream: cuda.CUstream):
    rows = cute.size(lin, mode=[0]) * nh
    normrope_kernel(lin, w, cos, sin, out, rr, nh, seq, seq_p, d, d_p, eps).launch(
        grid=[(rows + _ROWS - 1) // _ROWS, 1, 1], block=[_ROWS, 1, 1], stream=stream)


@cute.jit
def headmajor(lin: cute.Tensor, out: cute.Tensor, nh: cutlass.Constexpr, seq_p: cutlass.Constexpr,
              d_p: cutlass.Constexpr, stream: cuda.CUstream):
    rows = cute.size(lin, mode=[0]) * nh
    headmajor_kernel(lin, out, nh, seq_p, d_p).launch(grid=[(rows + _ROWS - 1) // _ROWS, 1, 1],
                                                      block=[_ROWS, 1, 1], stream=stream)


@cute.jit
def softmax(lg: cute.Tensor, pr: cute.Tensor, sc: cutlass.Constexpr, cap: cutlass.Constexpr,
            seq_p: cutlass.Constexpr, stream: cuda.CUstream):
    softmax_kernel(lg, pr, sc, cap, seq_p).launch(
        grid=[cute.size(lg, mode=[0]) // (_ROWS // 32), 1, 1], block=[_ROWS, 1, 1], stream=stream)


@cute.jit
def dsoftmax(dp: cute.Tensor, pr: cute.Tensor, tt: cute.Tensor, scaling: cutlass.Constexpr,
             seq_p: cutlass.Constexpr, stream: cuda.CUstream):
    dsoftmax_kernel(dp, pr, tt, scaling, seq_p).launch(
        grid=[cute.size(dp, mode=[0]) // (_ROWS // 32), 1, 1], block=[_ROWS, 1, 1], stream=stream)


@cute.jit
def normbwd(dq: cute.Tensor, lin: cute.Tensor, rr: cute.Tensor, w: cute.Tensor, cos: cute.Tensor,
            sin: cute.Tensor, dlin: cute.Tensor, prod: cute.Tensor, nh: cutlass.Constexpr, seq: cutlass.Constexpr,
            seq_p: cutlass.Constexpr, d: cutlass.Constexpr, d_p: cutlass.Constexpr, stream: cuda.CUstream):
    rows = cute.size(lin, mode=[0]) * nh
    normbwd_kernel(dq, lin, rr, w, cos, sin, dlin, prod, nh, seq, seq_p, d, d_p).launch(
        grid=[(rows + _ROWS - 1) // _ROWS, 1, 1], block=[_ROWS, 1, 1], stream=stream)


@cute.jit
def colsum(prod: cute.Tensor, part: cute.Tensor, stream: cuda.CUstream):
    colsum_kernel(prod, part).launch(grid=[cute.size(part, mode=[0]), 1, 1],
                                     block=[cute.size(part, mode=[1]), 1, 1], stream=stream)


@cute.jit
def colsum_final(part: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    colsum_final_kernel(part, out).launch(grid=[1, 1, 1], block=[cute.size(part, mode=[1]), 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(*shape, dtype=cutlass.Float32):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=16)


def _compile_gemm(nb, m, n, k, a_km, b_nk, accumulate, arch=None, ptx_dir=None):
    """C [nb, m, n] (+)= A B; A stored [nb, m, k] (or [nb, k, m] when a_km), B [nb, k, n] (or [nb, n, k])."""
    a = _fake(nb, k, m) if a_km else _fake(nb, m, k)
    b = _fake(nb, n, k) if b_nk else _fake(nb, k, n)
    return cute.compile(gemm, a, b, _fake(nb, m, n), k, a_km, b_nk, accumulate, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_normrope(tp, nh, batch, seq, seq_p, d, d_p, eps, arch=None, ptx_dir=None):
    return cute.compile(normrope, _fake(tp, nh * d_p), _fake(d), _fake(batch, seq, d), _fake(batch, seq, d),
                        _fake(batch, nh, seq_p, d_p), _fake(tp * nh), nh, seq, seq_p, d, d_p, eps,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_headmajor(tp, nh, batch, seq_p, d_p, arch=None, ptx_dir=None):
    return cute.compile(headmajor, _fake(tp, nh * d_p), _fake(batch, nh, seq_p, d_p), nh, seq_p, d_p,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_softmax(rows, seq_p, sc, cap, arch=None, ptx_dir=None):
    return cute.compile(softmax, _fake(rows, seq_p), _fake(rows, seq_p), sc, cap, seq_p, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_dsoftmax(rows, seq_p, scaling, arch=None, ptx_dir=None):
    return cute.compile(dsoftmax, _fake(rows, seq_p), _fake(rows, seq_p), _fake(rows, seq_p), scaling, seq_p,
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_normbwd(tp, nh, batch, seq, seq_p, d, d_p, arch=None, ptx_dir=None):
    return cute.compile(normbwd, _fake(batch, nh, seq_p, d_p), _fake(tp, nh * d_p), _fake(tp * nh), _fake(d),
                        _fake(batch, seq, d), _fake(batch, seq, d), _fake(tp, nh * d_p), _fake(tp * nh, d_p), nh,
                        seq, seq_p, d, d_p, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_colsum(rows, d_p, arch=None, ptx_dir=None):
    ctas = (rows + _CS - 1) // _CS
    return cute.compile(colsum, _fake(rows, d_p), _fake(ctas, d_p, dtype=cutlass.Float64), make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_colsum_final(rows, d_p, arch=None, ptx_dir=None):
    ctas = (rows + _CS - 1) // _CS
    return cute.compile(colsum_final, _fake(ctas, d_p, dtype=cutlass.Float64), _fake(d_p), make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _up(x, tile):
    return (max(x, 1) + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _run(key, builder, *args):
    if key not in _COMPILED:
        _COMPILED[key] = builder()
    _COMPILED[key](*args)


def _gemm(a, b, c, a_km, b_nk, accumulate, stream):
    """c [nb, m, n] (+)= a b for 3-D operands (see _compile_gemm)."""
    nb, m, n = c.shape
    k = a.shape[1] if a_km else a.shape[2]
    _run(("gemm", nb, m, n, k, a_km, b_nk, accumulate),
         lambda: _compile_gemm(nb, m, n, k, a_km, b_nk, accumulate), a, b, c, stream)


def _plan(batch, seq, hidden, heads, kv_heads, head_dim):
    seq_p, d_p, c_p = _up(seq, _BM), _up(head_dim, 128), _up(hidden, _BN)
    return seq_p, d_p, c_p, batch * seq_p


def solve(grad_output, hidden_states, cos, sin, q_weight, k_weight, v_weight, o_weight, q_norm_weight,
          k_norm_weight, scaling, attn_logit_softcapping, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    d = q_norm_weight.shape[0]
    heads, kvh = q_weight.shape[0] // d, k_weight.shape[0] // d
    g = heads // kvh
    seq_p, d_p, c_p, tp = _plan(batch, seq, hidden, heads, kvh, d)
    dev = hidden_states.device
    f32 = torch.float32
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    scaling, cap, eps = float(scaling), float(attn_logit_softcapping), float(rms_norm_eps)

    x = _padded(hidden_states, (batch, seq_p, c_p)).view(1, tp, c_p)
    dy = _padded(grad_output, (batch, seq_p, c_p)).view(1, tp, c_p)
    wq = _padded(q_weight.view(heads, d, hidden), (heads, d_p, c_p)).view(1, heads * d_p, c_p)
    wk = _padded(k_weight.view(kvh, d, hidden), (kvh, d_p, c_p)).view(1, kvh * d_p, c_p)
    wv = _padded(v_weight.view(kvh, d, hidden), (kvh, d_p, c_p)).view(1, kvh * d_p, c_p)
    wo = _padded(o_weight.view(hidden, heads, d), (c_p, heads, d_p)).view(1, c_p, heads * d_p)
    cs, sn = cos.contiguous(), sin.contiguous()
    qw, kw = q_norm_weight.contiguous(), k_norm_weight.contiguous()

    # forward: projections, norms + RoPE (head-major), attention probabilities, O
    q_lin = torch.empty(1, tp, heads * d_p, dtype=f32, device=dev)
    k_lin = torch.empty(1, tp, kvh * d_p, dtype=f32, device=dev)
    v_lin = torch.empty(1, tp, kvh * d_p, dtype=f32, device=dev)
    _gemm(x, wq, q_lin, False, True, False, stream)
    _gemm(x, wk, k_lin, False, True, False, stream)
    _gemm(x, wv, v_lin, False, True, False, stream)
    q = torch.empty(batch, heads, seq_p, d_p, dtype=f32, device=dev)
    k = torch.empty(batch, kvh, seq_p, d_p, dtype=f32, device=dev)
    v = torch.empty(batch, kvh, seq_p, d_p, dtype=f32, device=dev)
    q_r = torch.empty(tp * heads, dtype=f32, device=dev)
    k_r = torch.empty(tp * kvh, dtype=f32, device=dev)
    for lin, w, out, rr, nh in ((q_lin, qw, q, q_r, heads), (k_lin, kw, k, k_r, kvh)):
        _run(("normrope", tp, nh, batch, seq, seq_p, d, d_p, eps),
             lambda nh=nh: _compile_normrope(tp, nh, batch, seq, seq_p, d, d_p, eps),
             lin[0], w, cs, sn, out, rr, stream)
    _run(("headmajor", tp, kvh, batch, seq_p, d_p), lambda: _compile_headmajor(tp, kvh, batch, seq_p, d_p),
         v_lin[0], v, stream)
    nb, gs = batch * kvh, g * seq_p
    q3, k3, v3 = q.view(nb, gs, d_p), k.view(nb, seq_p, d_p), v.view(nb, seq_p, d_p)
    tt = torch.empty(nb, gs, seq_p, dtype=f32, device=dev)
    pr = torch.empty(nb, gs, seq_p, dtype=f32, device=dev)
    _gemm(q3, k3, tt, False, True, False, stream)
    sc = scaling / cap
    rows = nb * gs
    _run(("softmax", rows, seq_p, sc, cap), lambda: _compile_softmax(rows, seq_p, sc, cap),
         tt.view(rows, seq_p), pr.view(rows, seq_p), stream)
    o = torch.empty(nb, gs, d_p, dtype=f32, device=dev)
    _gemm(pr, v3, o, False, False, False, stream)
    o_flat = o.view(batch, heads, seq_p, d_p).permute(0, 2, 1, 3).reshape(1, tp, heads * d_p)

    # backward through o_proj, PV, softmax, soft cap and scaling
    dwo = torch.empty(1, c_p, heads * d_p, dtype=f32, device=dev)
    _gemm(dy, o_flat, dwo, True, False, False, stream)
    d_attn = torch.empty(1, tp, heads * d_p, dtype=f32, device=dev)
    _gemm(dy, wo, d_attn, False, False, False, stream)
    do3 = d_attn.view(batch, seq_p, heads, d_p).permute(0, 2, 1, 3).reshape(nb, gs, d_p)
    ds = torch.empty(nb, gs, seq_p, dtype=f32, device=dev)
    _gemm(do3, v3, ds, False, True, False, stream)
    _run(("dsoftmax", rows, seq_p, scaling), lambda: _compile_dsoftmax(rows, seq_p, scaling),
         ds.view(rows, seq_p), pr.view(rows, seq_p), tt.view(rows, seq_p), stream)
    dq = torch.empty(nb, gs, d_p, dtype=f32, device=dev)
    dk = torch.empty(nb, seq_p, d_p, dtype=f32, device=dev)
    dv = torch.empty(nb, seq_p, d_p, dtype=f32, device=dev)
    _gemm(ds, k3, dq, False, False, False, stream)
    _gemm(ds, q3, dk, True, False, False, stream)
    _gemm(pr, do3, dv, True, False, False, stream)

    # inverse RoPE and RMSNorm backward, norm-weight gradients
    dq_lin = torch.empty(1, tp, heads * d_p, dtype=f32, device=dev)
    dk_lin = torch.empty(1, tp, kvh * d_p, dtype=f32, device=dev)
    gqw = torch.empty(d_p, dtype=f32, device=dev)
    gkw = torch.empty(d_p, dtype=f32, device=dev)
    for dgrad, lin, rr, w, dlin, gw, nh in ((dq, q_lin, q_r, qw, dq_lin, gqw, heads),
                                             (dk, k_lin, k_r, kw, dk_lin, gkw, kvh)):
        prod = torch.empty(tp * nh, d_p, dtype=f32, device=dev)
        part = torch.empty((tp * nh + _CS - 1) // _CS, d_p, dtype=torch.float64, device=dev)
        _run(("normbwd", tp, nh, batch, seq, seq_p, d, d_p),
             lambda nh=nh: _compile_normbwd(tp, nh, batch, seq, seq_p, d, d_p),
             dgrad.view(batch, nh, seq_p, d_p), lin[0], rr, w, cs, sn, dlin[0], prod, stream)
        _run(("colsum", tp * nh, d_p), lambda nh=nh: _compile_colsum(tp * nh, d_p), prod, part, stream)
        _run(("colsum_final", tp * nh, d_p), lambda nh=nh: _compile_colsum_final(tp * nh, d_p), part, gw, stream)
    dv_lin = dv.view(batch, kvh, seq_p, d_p).permute(0, 2, 1, 3).reshape(1, tp, kvh * d_p)

    # input and weight gradients of the projections
    dx = torch.empty(1, tp, c_p, dtype=f32, device=dev)
    _gemm(dq_lin, wq.view(1, heads * d_p, c_p), dx, False, False, False, stream)
    _gemm(dk_lin, wk.view(1, kvh * d_p, c_p), dx, False, False, True, stream)
    _gemm(dv_lin, wv.view(1, kvh * d_p, c_p), dx, False, False, True, stream)
    dwq = torch.empty(1, heads * d_p, c_p, dtype=f32, device=dev)
    dwk = torch.empty(1, kvh * d_p, c_p, dtype=f32, device=dev)
    dwv = torch.empty(1, kvh * d_p, c_p, dtype=f32, device=dev)
    _gemm(dq_lin, x, dwq, True, False, False, stream)
    _gemm(dk_lin, x, dwk, True, False, False, stream)
    _gemm(dv_lin, x, dwv, True, False, False, stream)

    def wgrad(t, nh):
        return t.view(nh, d_p, c_p)[:, :d, :hidden].reshape(nh * d, hidden).contiguous()

    return (dx.view(batch, seq_p, c_p)[:, :seq, :hidden].contiguous(), wgrad(dwq, heads), wgrad(dwk, kvh),
            wgrad(dwv, kvh), dwo.view(c_p, heads, d_p)[:hidden, :, :d].reshape(hidden, heads * d).contiguous(),
            gqw[:d].contiguous(), gkw[:d].contiguous())


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every build for the graded workload; kernel symbol names."""
    w = WORKLOAD
    batch, seq, hidden, heads, kvh, d = (w["batch"], w["seq"], w["hidden"], w["heads"], w["kv_heads"],
                                         w["head_dim"])
    seq_p, d_p, c_p, tp = _plan(batch, seq, hidden, heads, kvh, d)
    nb, gs = batch * kvh, heads // kvh * seq_p
    scaling, cap, eps = d ** -0.5, 50.0, 1e-6
    o = dict(arch=arch, ptx_dir=ptx_dir)
    names, seen = [], set()
    for args in ((1, tp, heads * d_p, c_p, False, True, False), (1, tp, kvh * d_p, c_p, False, True, False),
                 (nb, gs, seq_p, d_p, False, True, False), (nb, gs, d_p, seq_p, False, False, False),
                 (1, c_p, heads * d_p, tp, True, False, False), (1, tp, heads * d_p, c_p, False, False, False),
                 (nb, seq_p, d_p, gs, True, False, False), (1, tp, c_p, heads * d_p, False, False, False),
                 (1, tp, c_p, kvh * d_p, False, False, True), (1, heads * d_p, c_p, tp, True, False, False),
                 (1, kvh * d_p, c_p, tp, True, False, False)):
        if args not in seen:  # builds that coincide at these shapes are compiled once
            seen.add(args)
            names += list(_compile_gemm(*args, **o).kernel_info)
    names += list(_compile_normrope(tp, heads, batch, seq, seq_p, d, d_p, eps, **o).kernel_info)
    names += list(_compile_normrope(tp, kvh, batch, seq, seq_p, d, d_p, eps, **o).kernel_info)
    names += list(_compile_headmajor(tp, kvh, batch, seq_p, d_p, **o).kernel_info)
    names += list(_compile_softmax(nb * gs, seq_p, scaling / cap, cap, **o).kernel_info)
    names += list(_compile_dsoftmax(nb * gs, seq_p, scaling, **o).kernel_info)
    names += list(_compile_normbwd(tp, heads, batch, seq, seq_p, d, d_p, **o).kernel_info)
    names += list(_compile_normbwd(tp, kvh, batch, seq, seq_p, d, d_p, **o).kernel_info)
    for nh in (heads, kvh):
        names += list(_compile_colsum(tp * nh, d_p, **o).kernel_info)
        names += list(_compile_colsum_final(tp * nh, d_p, **o).kernel_info)
    return names
