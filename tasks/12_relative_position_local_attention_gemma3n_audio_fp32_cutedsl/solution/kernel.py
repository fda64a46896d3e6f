"""CuTe DSL oracle for problem 12: Gemma-3n audio local attention with relative positions and
soft-capping (8 heads x 64), fp32.

The reference is true fp32 (no TF32), so every product runs as CUDA-core fp32 FMAs; the projections
are shared-memory tiled SIMT GEMMs, slower than cuBLAS's fp32 GEMMs that the eager reference uses.
Three DSL kernels, six launches:

1. ``sinusoid_kernel``: the timing signal of the 128 relative distances, row j for distance 127 - j:
   angle = fp32(distance) * inv_timescales[k] (the reference's fp32 product), sin in the first half
   of the row and cos in the second, evaluated in fp64 (reduction by 2 pi, then nested Taylor
   series) and rounded to fp32 once.
2. ``gemm_kernel`` (q, k, v = x W^T; and relT = W_pos sinusoid^T, the relative-position table stored
   as [channel, j] so that the attention kernel reads it coalesced): a 256-thread CTA computes a 128 x
   128 tile; K advances in slices of 16 (two 16-byte vectors of each operand per thread, the next
   slice's loads issued before the current slice is computed), stored K-major in shared memory; each
   thread accumulates an 8 x 8 block (rows ty*4 + {0..3}, 64 + ty*4 + {0..3}, columns tc*4 + {0..3},
   64 + tc*4 + {0..3}). The sums are two-level (chunks of 128 K values summed from zero, then added to
   the total). Rows past the end (the token count is not a tile multiple) are clamped on load and not
   stored. The q build scales in the reference's order: (q * fp32(64^-0.5 / ln 2)) * softplus(s[d]),
   softplus(s) = log1p(exp(s)) in fp32 with precise exp/log1p.
3. ``local_attention_kernel``: one CTA of 8 warps per (32-frame query block u, head, batch); the
   context window is the 159 frames u*32 - 127 .. u*32 + 31 (160 columns, the last always masked).
   Q and the window's K go through shared memory in head-dim slices of 16 (dim-major; the K rows padded
   to 161 floats). Warp r owns query rows 4r .. 4r + 3, lane l owns window columns l + 32 t (t < 5):
   S = q.k for those, and B[w][j] = q_w . r(127 - j) for j = l + 32 t (t < 4), the relative table read
   from global memory. The Transformer-XL shift gives column c the term B[w][c - w]: it lives in lane
   (l - w) mod 32 at t or t - 1, fetched by a warp shuffle. logit = S + B[w][c - w], z = tanh(logit /
   50) * 50 (IEEE division, precise tanh), masked (band 0 <= c - w <= 127, frame inside the sequence
   and not padding); softmax over the row in fp32 (row max and sum by xor shuffles, precise exp, IEEE
   division), probabilities to shared memory. P V: the window's V in slices of 16 frames through shared
   memory, each thread accumulating its 4 rows at dims l + 32 e, summed from zero per 32 frames and
   then added to the total. Rows of frames past the sequence are not written.
Shapes that are not tile multiples in the channel dimension (the small workload) use zero-padded
scratch operands; the graded shapes need none.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, frames=1721, channels=512, heads=8)
BLOCK, MAX_PAST = 32, 127
_SPAN = MAX_PAST + 1  # relative distances 0..127
_WIN = 160  # window columns (159 frames and one masked column)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8
_THREADS = 256
_DS = 16  # head-dim slice of the S loop
_VS = 16  # frames per V slice
_KPAD = _WIN + 1
_NEG = -1.0e30
_TWO_PI = 6.283185307179586
_INV_2PI = 0.15915494309189535
_COMPILED = {}


@cute.kernel
def sinusoid_kernel(inv_ts: cute.Tensor, sinus: cute.Tensor, half: cutlass.Constexpr, steps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    j, _, _ = cute.arch.block_idx()
    dist = cutlass.Float32(MAX_PAST - j)
    for it in cutlass.range_constexpr(steps):
        kk = tidx + it * _THREADS
        if kk < half:
            angle = dist * inv_ts[kk]  # fp32, as the reference
            # sin and cos in fp64: reduce by 2 pi (angles are in [0, 128)), then Taylor series to r^31
            a = cutlass.Float64(angle)
            n = cutlass.Float64(cutlass.Int32(a * _INV_2PI + 0.5))
            r = a - n * _TWO_PI
            r2 = r * r
            sn = cutlass.Float64(1.0)
            cs = cutlass.Float64(1.0)
            for i in cutlass.range_constexpr(15, 0, -1):  # Horner: 1 - r2 / ((2i)(2i+1)) (...)
                sn = 1.0 - r2 / float((2 * i) * (2 * i + 1)) * sn
                cs = 1.0 - r2 / float((2 * i - 1) * (2 * i)) * cs
            sinus[j, kk] = cutlass.Float32(r * sn)
            sinus[j, half + kk] = cutlass.Float32(cs)


@cute.jit
def sinusoid(inv_ts: cute.Tensor, sinus: cute.Tensor, stream: cuda.CUstream):
    half = cute.size(inv_ts)
    sinusoid_kernel(inv_ts, sinus, half, (half + _THREADS - 1) // _THREADS).launch(
        grid=[_SPAN, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.kernel
def gemm_kernel(mS: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, q_const: cutlass.Float32,
                head_dim: cutlass.Constexpr, scaled: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    m = cute.size(mA, mode=[0])
    k_tiles = cute.size(mA, mode=[1]) // _BK
    tiles_n = cute.size(mC, mode=[1]) // _BN
    row0 = (cta // tiles_n) * _BM
    col0 = (cta % tiles_n) * _BN
    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 2
    lchunk = tidx % 2

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
    g_a = cute.zipped_divide(mA[cutlass.min(row0 + lrow, m - 1), None], (8,))  # rows past m clamped
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
            if kt + 1 < k_tiles:
                ra.store(g_a[None, (kt + 1) * 2 + lchunk].load())
                rb.store(g_b[None, (kt + 1) * 2 + lchunk].load())
            for kk in cutlass.range_constexpr(_BK):
                s_a = cute.zipped_divide(a_s[kk, None], (4,))
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
        for i in cutlass.range_constexpr(64):
            acc[i] = acc[i] + part[i]

    sc = cute.make_rmem_tensor((8,), cutlass.Float32)
    if cutlass.const_expr(scaled):  # softplus(s[d]) of the 8 columns, d = column % head_dim
        for jh in cutlass.range_constexpr(2):
            for j in cutlass.range_constexpr(4):
                s = mS[(col0 + jh * 64 + tc * 4 + j) % head_dim]
                sc[jh * 4 + j] = cute.math.log1p(cute.math.exp(s))
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        if row < m:
            g_c = cute.zipped_divide(mC[row, None], (4,))
            for jh in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(4):
                    h = acc[i * 8 + jh * 4 + j]
                    if cutlass.const_expr(scaled):
                        h = (h * q_const) * sc[jh * 4 + j]
                    out[j] = h
                g_c[None, (col0 + jh * 64) // 4 + tc].store(out.load())


@cute.jit
def gemm(mS: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, q_const: cutlass.Float32,
         head_dim: cutlass.Constexpr, scaled: cutlass.Constexpr, stream: cuda.CUstream):
    tiles = ((cute.size(mA, mode=[0]) + _BM - 1) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    gemm_kernel(mS, mA, mB, mC, q_const, head_dim, scaled).launch(grid=[tiles, 1, 1], block=[_THREADS, 1, 1],
                                                                  stream=stream)


@cute.kernel
def local_attention_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, rel_t: cute.Tensor, mask: cute.Tensor,
                           out: cute.Tensor, cap: cutlass.Float32, frames: cutlass.Constexpr,
                           head_dim: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    u, head, b = cute.arch.block_idx()
    warp = tidx // 32
    lane = tidx % 32
    col0 = head * head_dim
    f0 = u * BLOCK - MAX_PAST  # frame of window column 0
    dpl = (head_dim + 31) // 32  # output dims per lane

    smem = cutlass.memory.SmemAllocator()
    q_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_DS, BLOCK), stride=(BLOCK + 1, 1)), 16)
    k_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_DS, _WIN), stride=(_KPAD, 1)), 16)
    p_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BLOCK, _WIN), stride=(_WIN, 1)), 16)
    v_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_VS, head_dim), stride=(head_dim, 1)), 16)

    s = cute.make_rmem_tensor((20,), cutlass.Float32)  # [row i][column t]
    s.fill(0.0)
    bq = cute.make_rmem_tensor((16,), cutlass.Float32)  # [row i][distance column t]
    bq.fill(0.0)
    qa = cute.make_rmem_tensor((4,), cutlass.Float32)
    kb = cute.make_rmem_tensor((5,), cutlass.Float32)
    rl = cute.make_rmem_tensor((4,), cutlass.Float32)
    z = cute.make_rmem_tensor((5,), cutlass.Float32)

    # ---- S = q.k over the window and B = q.r over the distances, in head-dim slices of 16
    for dc in range(head_dim // _DS):
        for it in cutlass.range_constexpr(BLOCK * _DS // _THREADS):
            idx = it * _THREADS + tidx
            w = idx // _DS
            dd = idx % _DS
            fi = u * BLOCK + w
            val = cutlass.Float32(0.0)
            if fi < frames:
                val = q[b * frames + fi, col0 + dc * _DS + dd]
            q_s[dd, w] = val
        for it in cutlass.range_constexpr(_WIN * _DS // _THREADS):
            idx = it * _THREADS + tidx
            c = idx // _DS
            dd = idx % _DS
            f = f0 + c
            val = cutlass.Float32(0.0)
            if (f >= 0) & (f < frames):
                val = k[b * frames + f, col0 + dc * _DS + dd]
            k_s[dd, c] = val
        cute.arch.sync_threads()
        for dd in cutlass.range_constexpr(_DS):
            for i in cutlass.range_constexpr(4):
                qa[i] = q_s[dd, warp * 4 + i]
            for t in cutlass.range_constexpr(5):
                kb[t] = k_s[dd, lane + 32 * t]
            for t in cutlass.range_constexpr(4):
                rl[t] = rel_t[col0 + dc * _DS + dd, lane + 32 * t]
            for i in cutlass.range_constexpr(4):
                for t in cutlass.range_constexpr(5):
                    s[i * 5 + t] = s[i * 5 + t] + qa[i] * kb[t]
                for t in cutlass.range_constexpr(4):
                    bq[i * 4 + t] = bq[i * 4 + t] + qa[i] * rl[t]
        cute.arch.sync_threads()

    # ---- relative shift, soft cap, mask, softmax; P to shared memory
    for i in cutlass.range_constexpr(4):
        w = warp * 4 + i
        src = (lane - w) & 31
        for t in cutlass.range_constexpr(5):
            cur = cutlass.Float32(0.0)
            prev = cutlass.Float32(0.0)
            if cutlass.const_expr(t < 4):
                cur = bq[i * 4 + t]
            if cutlass.const_expr(t >= 1):
                prev = bq[i * 4 + t - 1]
            cur = cute.arch.shuffle_sync(cur, src)
            prev = cute.arch.shuffle_sync(prev, src)
            c = lane + 32 * t
            rel = cutlass.Float32(cutlass.select_(lane >= w, cur, prev))  # B[w][c - w]
            f = f0 + c
            ok = (c - w >= 0) & (c - w <= MAX_PAST) & (c < _WIN - 1) & (f >= 0) & (f < frames)
            fc = cutlass.max(cutlass.min(f, frames - 1), 0)
            ok = ok & (mask[b, fc] == 0)
            logit = s[i * 5 + t] + rel
            zc = cute.math.tanh(logit / cap) * cap
            z[t] = cutlass.Float32(cutlass.select_(ok, zc, _NEG))
        mx = z[0]
        for t in cutlass.range_constexpr(1, 5):
            mx = cute.arch.fmax(mx, z[t])
        for sh in cutlass.range_constexpr(5):
            mx = cute.arch.fmax(mx, cute.arch.shuffle_sync_bfly(mx, offset=1 << sh, mask=-1, mask_and_clamp=31))
        total = cutlass.Float32(0.0)
        for t in cutlass.range_constexpr(5):
            z[t] = cute.math.exp(z[t] - mx)
            total = total + z[t]
        for sh in cutlass.range_constexpr(5):
            total = total + cute.arch.shuffle_sync_bfly(total, offset=1 << sh, mask=-1, mask_and_clamp=31)
        for t in cutlass.range_constexpr(5):
            p_s[w, lane + 32 * t] = z[t] / total

    # ---- O = P V over V slices of 16 frames, summed from zero per 32 frames
    acc = cute.make_rmem_tensor((4, dpl), cutlass.Float32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((4, dpl), cutlass.Float32)
    part.fill(0.0)
    for vs in range(_WIN // _VS):
        for it in cutlass.range_constexpr((_VS * head_dim + _THREADS - 1) // _THREADS):
            idx = it * _THREADS + tidx
            if idx < _VS * head_dim:
                c = idx // head_dim
                d = idx % head_dim
                f = f0 + vs * _VS + c
                val = cutlass.Float32(0.0)
                if (f >= 0) & (f < frames):
                    val = v[b * frames + f, col0 + d]
                v_s[c, d] = val
        cute.arch.sync_threads()  # V slice visible (and P, before the first)
        for cc in cutlass.range_constexpr(_VS):
            for i in cutlass.range_constexpr(4):
                pw = p_s[warp * 4 + i, vs * _VS + cc]
                for e in cutlass.range_constexpr(dpl):
                    if cutlass.const_expr((e + 1) * 32 <= head_dim):
                        part[i, e] = part[i, e] + pw * v_s[cc, lane + 32 * e]
                    else:
                        d = cutlass.min(lane + 32 * e, head_dim - 1)
                        part[i, e] = part[i, e] + pw * v_s[cc, d]
        cute.arch.sync_threads()  # every thread is done with the V slice
        if vs % 2 == 1:
            for i in cutlass.range_constexpr(4):
                for e in cutlass.range_constexpr(dpl):
                    acc[i, e] = acc[i, e] + part[i, e]
                    part[i, e] = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(4):
        fi = u * BLOCK + warp * 4 + i
        if fi < frames:
            for e in cutlass.range_constexpr(dpl):
                d = lane + 32 * e
                if d < head_dim:
                    out[b * frames + fi, col0 + d] = acc[i, e]


@cute.jit
def local_attention(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, rel_t: cute.Tensor, mask: cute.Tensor,
                    out: cute.Tensor, cap: cutlass.Float32, batch: cutlass.Constexpr, frames: cutlass.Constexpr,
                    heads: cutlass.Constexpr, head_dim: cutlass.Constexpr, stream: cuda.CUstream):
    local_attention_kernel(q, k, v, rel_t, mask, out, cap, frames, head_dim).launch(
        grid=[(frames + BLOCK - 1) // BLOCK, heads, batch], block=[_THREADS, 1, 1], stream=stream)


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


def _compile_sinusoid(half, cols, arch=None, ptx_dir=None):
    return cute.compile(sinusoid, _fake((half,), align=4), _fake((_SPAN, cols)), make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_gemm(m, n, k, head_dim, scaled, arch=None, ptx_dir=None):
    """A [m, k] (any m), W [n, k], C [m, n] (n a multiple of 128, k of 128); s [head_dim] for the scaled
    build, an unused [1] tensor otherwise."""
    return cute.compile(gemm, _fake((head_dim if scaled else 1,), align=4), _fake((m, k)), _fake((n, k)),
                        _fake((m, n)), 1.0, head_dim, scaled, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_attention(batch, frames, cols, rel_rows, heads, head_dim, arch=None, ptx_dir=None):
    rows = batch * frames
    big = [_fake((rows, cols)) for _ in range(3)]
    return cute.compile(local_attention, *big, _fake((rel_rows, _SPAN)), _fake((batch, frames), cutlass.Int32, 4),
                        _fake((rows, cols)), 50.0, batch, frames, heads, head_dim, make_fake_stream(),
                        options=_options(arch, ptx_dir))


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


def solve(hidden_states, mask, q_proj_weight, k_proj_weight, v_proj_weight, pos_proj_weight, per_dim_scale,
          inv_timescales, attention_logits_soft_cap):
    batch, frames, channels = hidden_states.shape
    head_dim = per_dim_scale.shape[0]
    heads = channels // head_dim
    dev = hidden_states.device
    assert head_dim % _DS == 0 and head_dim * heads == channels and channels % 2 == 0
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    rows = batch * frames
    cp, kp = _up(channels, _BN), _up(channels, _BK * _FOLD)
    x = _padded(hidden_states.reshape(rows, channels), (rows, kp))
    scale = per_dim_scale.contiguous()
    q_const = float(torch.tensor(head_dim ** -0.5 / math.log(2.0), dtype=torch.float32))
    proj = []
    for w, scaled in ((q_proj_weight, True), (k_proj_weight, False), (v_proj_weight, False)):
        c = torch.empty(rows, cp, dtype=torch.float32, device=dev)
        _run(("gemm", rows, cp, kp, head_dim, scaled), _compile_gemm, scale if scaled else scale[:1], x,
             _padded(w, (cp, kp)), c, q_const, stream)
        proj.append(c)
    sinus = torch.zeros(_SPAN, kp, dtype=torch.float32, device=dev)
    _run(("sinusoid", channels // 2, kp), _compile_sinusoid, inv_timescales.contiguous(), sinus, stream)
    rel_t = torch.empty(cp, _SPAN, dtype=torch.float32, device=dev)  # relT[channel, j]
    _run(("gemm", cp, _SPAN, kp, head_dim, False), _compile_gemm, scale[:1], _padded(pos_proj_weight, (cp, kp)),
         sinus, rel_t, q_const, stream)
    out = torch.empty(rows, cp, dtype=torch.float32, device=dev)
    _run(("attention", batch, frames, cp, cp, heads, head_dim), _compile_attention, *proj, rel_t,
         mask.to(torch.int32).contiguous(), out, float(attention_logits_soft_cap), stream)
    out = out if cp == channels else out[:, :channels].contiguous()
    return out.view(batch, frames, heads, head_dim)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every build for the fixed workload without a GPU; the kernel names in launch order."""
    w = WORKLOAD
    batch, frames, channels, heads = w["batch"], w["frames"], w["channels"], w["heads"]
    head_dim, rows = channels // heads, batch * frames
    names = list(_compile_gemm(rows, channels, channels, head_dim, True, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(rows, channels, channels, head_dim, False, arch, ptx_dir).kernel_info)
    names += list(_compile_sinusoid(channels // 2, channels, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(channels, _SPAN, channels, head_dim, False, arch, ptx_dir).kernel_info)
    names += list(_compile_attention(batch, frames, channels, channels, heads, head_dim, arch, ptx_dir).kernel_info)
    return names
