"""CuTe DSL oracle for problem 67: a complete order-2 Hyena block (d_model 256, L = 256), fp32.

Everything is fp32 on the CUDA cores (judged at fp32 tolerance: no TF32); torch only allocates
(and zero-pads operands of shapes that are not tile multiples, e.g. the small workload).

- ``ln_kernel``: LayerNorm, a warp per token (two-pass mean and variance from lane sums and
  butterfly shuffles, IEEE square root and division), zero on padded columns.
- ``gemm_kernel``: a shared-memory tiled SIMT GEMM C = A W^T + bias (128 x 128 tile per 256-thread
  CTA, 8 x 8 outputs per thread, K in slices of 16 with the next slice's loads in flight, two-level
  sums over 128-value K chunks), with three epilogues: bias (in_proj), bias + tanh GELU (fc1), and
  residual + (sum + bias) (out_proj onto x, fc2 onto r).
- ``filter_kernel``: the implicit filter, a CTA per time step: positional features
  z = [t, cos(f w), -sin(f w)] with torch's fp32 linspace and 2 pi n / L, three sine layers and the
  final projection through shared memory, then h (exp(-t |delta|) + shift) + filter_bias. Its
  [L, d] output read as [d, L] (the reference's raw reshape) is the per-channel kernel k.
- ``conv_kernel``: a CTA per (channel, sequence), a thread per time step: the causal depthwise
  short convolution (kernel 3) of the x0, x1 and v channels, g = v x1 into shared memory with
  k[c, :], then the causal long convolution computed directly, y_t = sum_{s <= t} k_s g_{t - s}
  (fp32, s ascending) in place of the reference's zero-padded FFT (the same linear convolution),
  y = (y + g filter_bias) x0, stored token-major for out_proj.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, seqlen=256, d_model=256, filter_dim=64, mlp_dim=1024)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_ROW_WARPS = 8
_ROOT = 0.7978845608028654  # torch's kBeta = M_SQRT2 * M_2_SQRTPI * 0.5
_KAPPA = 0.044715
_EPI_BIAS, _EPI_GELU, _EPI_RES = 0, 1, 2
_COMPILED = {}


def _sincos(x):
    """(sin x, cos x) in fp32 for moderate |x|: x = q pi/2 + r (pi/2 split in three parts, Cody-Waite),
    Cephes' single-precision minimax polynomials on |r| <= pi/4 (about 1 ulp), quadrant by q mod 4."""
    q = cute.math.floor(x * 0.6366197723675814 + 0.5)
    r = ((x - q * 1.5703125) - q * 4.837512969970703125e-4) - q * 7.54978995489188216e-8
    quad = cutlass.Int32(q) & 3
    r2 = r * r
    sn = r + (r * r2) * (-1.6666654611e-1 + r2 * (8.3321608736e-3 + r2 * -1.9515295891e-4))
    cs = (1.0 - 0.5 * r2) + (r2 * r2) * (4.166664568298827e-2
                                         + r2 * (-1.388731625493765e-3 + r2 * 2.443315711809948e-5))
    sin_v = cutlass.select_(quad == 0, sn, cutlass.select_(quad == 1, cs, cutlass.select_(quad == 2, -sn, -cs)))
    cos_v = cutlass.select_(quad == 0, cs, cutlass.select_(quad == 1, -sn, cutlass.select_(quad == 2, -cs, sn)))
    return cutlass.Float32(sin_v), cutlass.Float32(cos_v)


def _sin(x):
    return _sincos(x)[0]


@cute.kernel
def ln_kernel(x: cute.Tensor, w: cute.Tensor, b: cute.Tensor, y: cute.Tensor, dim: cutlass.Int32,
              inv_dim: cutlass.Float32, eps: cutlass.Float32, per: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    row = bidx * _ROW_WARPS + tidx // 32
    g_x = cute.zipped_divide(x[row, None], (4,))
    g_w = cute.zipped_divide(w, (4,))
    g_b = cute.zipped_divide(b, (4,))
    g_y = cute.zipped_divide(y[row, None], (4,))
    xv = cute.make_rmem_tensor((per * 4,), cutlass.Float32)
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    s = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(per):
        v = g_x[None, j * 32 + lane].load()
        for e in cutlass.range_constexpr(4):
            xv[j * 4 + e] = v[e]
            s = s + v[e]
    for o in (16, 8, 4, 2, 1):
        s = s + cute.arch.shuffle_sync_bfly(s, offset=o)
    mean = s * inv_dim
    q = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(per):
        for e in cutlass.range_constexpr(4):
            dv = xv[j * 4 + e] - mean
            q = q + cutlass.Float32(cutlass.select_(j * 128 + lane * 4 + e < dim, dv * dv, 0.0))
    for o in (16, 8, 4, 2, 1):
        q = q + cute.arch.shuffle_sync_bfly(q, offset=o)
    rstd = 1.0 / cute.math.sqrt(q * inv_dim + eps)
    for j in cutlass.range_constexpr(per):
        wv = g_w[None, j * 32 + lane].load()
        bv = g_b[None, j * 32 + lane].load()
        for e in cutlass.range_constexpr(4):
            val = ((xv[j * 4 + e] - mean) * rstd) * wv[e] + bv[e]
            out[e] = cutlass.Float32(cutlass.select_(j * 128 + lane * 4 + e < dim, val, 0.0))
        g_y[None, j * 32 + lane].store(out.load())


@cute.kernel
def gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, mR: cute.Tensor,
                epi: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
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
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (8,))
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

    bias = cute.make_rmem_tensor((8,), cutlass.Float32)
    for jh in cutlass.range_constexpr(2):
        for j in cutlass.range_constexpr(4):
            bias[jh * 4 + j] = mBias[col0 + jh * 64 + tc * 4 + j]
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        g_c = cute.zipped_divide(mC[row, None], (4,))
        for jh in cutlass.range_constexpr(2):
            if cutlass.const_expr(epi == _EPI_RES):
                rv = cute.zipped_divide(mR[row, None], (4,))[None, col0 // 4 + jh * 16 + tc].load()
            for j in cutlass.range_constexpr(4):
                h = acc[i * 8 + jh * 4 + j] + bias[jh * 4 + j]
                if cutlass.const_expr(epi == _EPI_GELU):  # 0.5 * x * (1 + tanh(kBeta * (x + kKappa * x^3)))
                    inner = _ROOT * (h + _KAPPA * (h * h * h))
                    h = 0.5 * h * (1.0 + cute.math.tanh(inner))
                if cutlass.const_expr(epi == _EPI_RES):
                    h = rv[j] + h
                out[j] = h
            g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.kernel
def filter_kernel(w1: cute.Tensor, b1: cute.Tensor, freq: cute.Tensor, w2: cute.Tensor, b2: cute.Tensor,
                  w3: cute.Tensor, b3: cute.Tensor, wf: cute.Tensor, fbias: cute.Tensor, deltas: cute.Tensor,
                  kf: cute.Tensor, shift: cutlass.Float32, seqlen: cutlass.Constexpr, fdim: cutlass.Constexpr):
    """kf[t, o] = the implicit filter at time t, channel o (the reference's [L, d] h)."""
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    d = cute.size(kf, mode=[1])
    smem = cutlass.memory.SmemAllocator()
    ha = smem.allocate_tensor(cutlass.Float32, cute.make_layout((fdim,)), 16)
    hb = smem.allocate_tensor(cutlass.Float32, cute.make_layout((fdim,)), 16)
    # torch.linspace(0, 1, L) in fp32: start + i step below the midpoint, end - (L - 1 - i) step above
    step = cutlass.Float32(1.0) / cutlass.Float32(seqlen - 1)
    tf = cutlass.Float32(t)
    tl = cutlass.Float32(cutlass.select_(t < seqlen // 2, tf * step, 1.0 - cutlass.Float32(seqlen - 1 - t) * step))
    wn = (cutlass.Float32(2.0 * math.pi) * tf) / cutlass.Float32(seqlen)
    a0 = cutlass.Float32(1e-4) * wn
    s0, c0 = _sincos(a0)
    s1, c1 = _sincos(wn)
    z = [tl, c0, c1, -s0, -s1]
    for o in range(tidx, fdim, _THREADS):
        s = cutlass.Float32(0.0)
        for j in cutlass.range_constexpr(5):
            s = s + z[j] * w1[o, j]
        ha[o] = _sin(freq[0, o] * (s + b1[o]))
    cute.arch.sync_threads()
    for o in range(tidx, fdim, _THREADS):
        s = cutlass.Float32(0.0)
        for j in range(fdim):
            s = s + ha[j] * w2[o, j]
        hb[o] = _sin(freq[0, o] * (s + b2[o]))
    cute.arch.sync_threads()
    for o in range(tidx, fdim, _THREADS):
        s = cutlass.Float32(0.0)
        for j in range(fdim):
            s = s + hb[j] * w3[o, j]
        ha[o] = _sin(freq[0, o] * (s + b3[o]))
    cute.arch.sync_threads()
    for o in range(tidx, d, _THREADS):
        s = cutlass.Float32(0.0)
        for j in range(fdim):
            s = s + ha[j] * wf[o, j]
        kf[t, o] = s * (cute.math.exp(-tl * cute.math.absf(deltas[o])) + shift) + fbias[o]


@cute.kernel
def conv_kernel(u: cute.Tensor, cw: cute.Tensor, cb: cute.Tensor, kflat: cute.Tensor, fbias: cute.Tensor,
                y: cute.Tensor, d: cutlass.Int32, seqlen: cutlass.Constexpr):
    """y[b L + t, c] = (sum_{s <= t} k[c, s] g[t - s] + g[t] fbias[c]) x0[t], g = v x1 (short-conv outputs)."""
    t, _, _ = cute.arch.thread_idx()
    c, b, _ = cute.arch.block_idx()
    smem = cutlass.memory.SmemAllocator()
    g_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((seqlen,)), 16)
    k_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((seqlen,)), 16)
    row = b * seqlen + t
    x0 = cutlass.Float32(0.0)
    g = cutlass.Float32(0.0)
    if t < seqlen:
        sc = []
        for part in cutlass.range_constexpr(3):
            ch = part * d + c
            s = cw[ch, 2] * u[row, ch]
            if t >= 1:
                s = cw[ch, 1] * u[row - 1, ch] + s
            if t >= 2:
                s = cw[ch, 0] * u[row - 2, ch] + s
            sc.append(s + cb[ch])
        x0 = sc[0]
        g = sc[2] * sc[1]
        g_s[t] = g
        k_s[t] = kflat[c * seqlen + t]
    cute.arch.sync_threads()
    if t < seqlen:
        total = cutlass.Float32(0.0)
        for s in range(t + 1):
            total = total + k_s[s] * g_s[t - s]
        y[row, c] = (total + g * fbias[c]) * x0


@cute.jit
def ln_step(x: cute.Tensor, w: cute.Tensor, b: cute.Tensor, y: cute.Tensor, dim: cutlass.Int32,
            inv_dim: cutlass.Float32, eps: cutlass.Float32, stream: cuda.CUstream):
    per = cute.size(y, mode=[1]) // 128
    ln_kernel(x, w, b, y, dim, inv_dim, eps, per).launch(
        grid=[cute.size(y, mode=[0]) // _ROW_WARPS, 1, 1], block=[_ROW_WARPS * 32, 1, 1], stream=stream)


@cute.jit
def gemm_step(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, mR: cute.Tensor,
              epi: cutlass.Constexpr, stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    gemm_kernel(mA, mB, mBias, mC, mR, epi).launch(grid=[tiles, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def filter_step(w1: cute.Tensor, b1: cute.Tensor, freq: cute.Tensor, w2: cute.Tensor, b2: cute.Tensor,
                w3: cute.Tensor, b3: cute.Tensor, wf: cute.Tensor, fbias: cute.Tensor, deltas: cute.Tensor,
                kf: cute.Tensor, shift: cutlass.Float32, seqlen: cutlass.Constexpr, fdim: cutlass.Constexpr,
                stream: cuda.CUstream):
    filter_kernel(w1, b1, freq, w2, b2, w3, b3, wf, fbias, deltas, kf, shift, seqlen, fdim).launch(
        grid=[seqlen, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def conv_step(u: cute.Tensor, cw: cute.Tensor, cb: cute.Tensor, kflat: cute.Tensor, fbias: cute.Tensor,
              y: cute.Tensor, d: cutlass.Int32, seqlen: cutlass.Constexpr, batch: cutlass.Constexpr,
              stream: cuda.CUstream):
    conv_kernel(u, cw, cb, kflat, fbias, y, d, seqlen).launch(
        grid=[cute.size(fbias, mode=[0]), batch, 1], block=[(seqlen + 31) // 32 * 32, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(*shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(cutlass.Float32, shape, stride_order=order, assumed_align=16)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _compile(kind, shape, arch=None, ptx_dir=None):
    """shape: (batch, seqlen, d, filter_dim, mlp, tp, dp, up3, mp) with the padded sizes last."""
    batch, seqlen, d, fdim, _, tp, dp, up3, mp = shape
    opts = _options(arch, ptx_dir)
    stream = make_fake_stream()
    if kind == "ln":
        return cute.compile(ln_step, _fake(tp, dp), _fake(dp), _fake(dp), _fake(tp, dp), 1, 1.0, 1e-5, stream,
                            options=opts)
    if kind == "in_proj":
        return cute.compile(gemm_step, _fake(tp, dp), _fake(up3, dp), _fake(up3), _fake(tp, up3), _fake(tp, up3),
                            _EPI_BIAS, stream, options=opts)
    if kind == "out_proj":
        return cute.compile(gemm_step, _fake(tp, dp), _fake(dp, dp), _fake(dp), _fake(tp, dp), _fake(tp, dp),
                            _EPI_RES, stream, options=opts)
    if kind == "fc1":
        return cute.compile(gemm_step, _fake(tp, dp), _fake(mp, dp), _fake(mp), _fake(tp, mp), _fake(tp, mp),
                            _EPI_GELU, stream, options=opts)
    if kind == "fc2":
        return cute.compile(gemm_step, _fake(tp, mp), _fake(dp, mp), _fake(dp), _fake(tp, dp), _fake(tp, dp),
                            _EPI_RES, stream, options=opts)
    if kind == "filter":
        return cute.compile(filter_step, _fake(fdim, 5), _fake(fdim), _fake(1, fdim), _fake(fdim, fdim),
                            _fake(fdim), _fake(fdim, fdim), _fake(fdim), _fake(d, fdim), _fake(d), _fake(d),
                            _fake(seqlen, d), 0.05, seqlen, fdim, stream, options=opts)
    return cute.compile(conv_step, _fake(tp, up3), _fake(3 * d, 3), _fake(3 * d), _fake(seqlen * d), _fake(d),
                        _fake(tp, dp), 1, seqlen, batch, stream, options=opts)


_KINDS = ("ln", "in_proj", "filter", "conv", "out_proj", "fc1", "fc2")


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, shape)
    return _COMPILED[key]


def _padded(t, shape):
    t = t.contiguous()
    if tuple(t.shape) == tuple(shape):
        return t
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _shape(batch, seqlen, d, fdim, mlp):
    tokens = batch * seqlen
    return (batch, seqlen, d, fdim, mlp, _up(tokens, _BM), _up(d, _BN), _up(3 * d, _BN), _up(mlp, _BN))


def solve(hidden_states, norm1_weight, norm1_bias, norm2_weight, norm2_bias, in_proj_weight, in_proj_bias,
          short_conv_weight, short_conv_bias, filter_linear1_weight, filter_linear1_bias, sin_freq,
          filter_linear2_weight, filter_linear2_bias, filter_linear3_weight, filter_linear3_bias,
          filter_linear_final_weight, filter_bias, exp_mod_deltas, out_proj_weight, out_proj_bias, mlp_fc1_weight,
          mlp_fc1_bias, mlp_fc2_weight, mlp_fc2_bias, layer_norm_eps, exp_mod_shift):
    batch, seqlen, d = hidden_states.shape
    fdim = filter_linear1_weight.shape[0]
    mlp = mlp_fc1_weight.shape[0]
    tokens = batch * seqlen
    shape = _shape(batch, seqlen, d, fdim, mlp)
    _, _, _, _, _, tp, dp, up3, mp = shape
    dev = hidden_states.device
    f32 = torch.float32
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    eps = float(layer_norm_eps)
    x = _padded(hidden_states.reshape(tokens, d), (tp, dp))
    n1 = torch.empty(tp, dp, dtype=f32, device=dev)
    _fn("ln", shape)(x, _padded(norm1_weight, (dp,)), _padded(norm1_bias, (dp,)), n1, d, 1.0 / d, eps, stream)
    u = torch.empty(tp, up3, dtype=f32, device=dev)
    _fn("in_proj", shape)(n1, _padded(in_proj_weight, (up3, dp)), _padded(in_proj_bias, (up3,)), u, u, stream)
    kf = torch.empty(seqlen, d, dtype=f32, device=dev)
    _fn("filter", shape)(filter_linear1_weight.contiguous(), filter_linear1_bias.contiguous(), sin_freq.contiguous(),
                         filter_linear2_weight.contiguous(), filter_linear2_bias.contiguous(),
                         filter_linear3_weight.contiguous(), filter_linear3_bias.contiguous(),
                         filter_linear_final_weight.contiguous(), filter_bias.contiguous(),
                         exp_mod_deltas.reshape(d).contiguous(), kf, float(exp_mod_shift), stream)
    y = torch.zeros(tp, dp, dtype=f32, device=dev) if (tp, dp) != (tokens, d) else torch.empty(tp, dp, dtype=f32,
                                                                                                device=dev)
    _fn("conv", shape)(u, short_conv_weight.reshape(3 * d, 3).contiguous(), short_conv_bias.contiguous(),
                       kf.view(-1), filter_bias.contiguous(), y, d, stream)
    r = torch.empty(tp, dp, dtype=f32, device=dev)
    _fn("out_proj", shape)(y, _padded(out_proj_weight, (dp, dp)), _padded(out_proj_bias, (dp,)), r, x, stream)
    n2 = torch.empty(tp, dp, dtype=f32, device=dev)
    _fn("ln", shape)(r, _padded(norm2_weight, (dp,)), _padded(norm2_bias, (dp,)), n2, d, 1.0 / d, eps, stream)
    m = torch.empty(tp, mp, dtype=f32, device=dev)
    _fn("fc1", shape)(n2, _padded(mlp_fc1_weight, (mp, dp)), _padded(mlp_fc1_bias, (mp,)), m, m, stream)
    out = torch.empty(tp, dp, dtype=f32, device=dev)
    _fn("fc2", shape)(m, _padded(mlp_fc2_weight, (dp, mp)), _padded(mlp_fc2_bias, (dp,)), out, r, stream)
    if (tp, dp) != (tokens, d):
        out = out[:tokens, :d].contiguous()
    return out.reshape(batch, seqlen, d)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    shape = _shape(w["batch"], w["seqlen"], w["d_model"], w["filter_dim"], w["mlp_dim"])
    return [name for kind in _KINDS for name in _compile(kind, shape, arch, ptx_dir).kernel_info]
