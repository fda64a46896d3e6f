"""CuTe DSL oracle for problem 30: ConvNeXt-V2 MLP with Global Response Normalization (NHWC, fp32).

Four DSL kernels, all arithmetic in fp32 on the CUDA cores (the reference's matmuls are true fp32:
TF32 tensor cores would be far too coarse, so the GEMMs are SIMT GEMMs, slower per FLOP than
cuBLAS, but the elementwise GRN passes of the eager reference are fused away).

``grn_gemm_kernel`` (built twice) is a shared-memory tiled SIMT GEMM: a 256-thread CTA computes a
128 x 128 tile; K advances in slices of 16; each thread loads 8 consecutive values of one activation
row and of one weight row per slice into registers (the next slice's loads are issued before the
current slice is computed) and stores them K-major into shared memory; each thread accumulates an
8 x 8 block (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3},
ty = tid / 16, tc = tid % 16). Sums are two-level: each chunk of 128 K values is accumulated from zero
and then added to the running total.
- fc1 build: x = gelu(h W1^T + b1) with torch's erf form (x * 0.5) * (1 + erf(x * sqrt(1/2))), the
  bias added after the sum, erf the precise library function; x [pixels, hidden] goes to global.
- fc2 build: output = y W2^T + b2 where the GRN output y = ((gamma * (x * n)) + beta) + x (the
  reference's fp32 order) is formed while the x slice is staged into shared memory; n of the pixel's
  image is prefetched with x, gamma and beta are read from a shared-memory copy.

``grn_sumsq_kernel``: sum over the image's pixels of x^2 per (image, channel). A 256-thread CTA owns
one image and 32 channels: lane = channel (a warp reads 128 contiguous bytes of one pixel row), warp w
takes pixels w, w + 8, ...; each thread sums its squares in chunks of 16 pixels (two-level), then the
8 warp partials are added in order through shared memory.

``grn_scale_kernel``: one 256-thread CTA per image: G = sqrt(sum) (IEEE sqrt), the mean of G over the
channels (thread-strided sums, butterfly shuffles, then the 8 warp sums in order, times 1/hidden),
n = G / (mean + eps) with IEEE division.

Shapes that are not tile multiples (the small workload) are zero-padded by the host: padded input
channels meet zero weights, padded hidden channels give x = gelu(0) = 0 and are left out of the
channel mean, padded pixels are computed and dropped (they are never part of an image's norm).
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, height=56, width=56, dim=128, hidden=512)
EPS = 1e-6  # the eps make_inputs passes
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_THREADS = 256
_SQ_CH = 32  # channels per sum-of-squares CTA
_SQ_CHUNK = 16  # pixels per thread summed from zero before they are added to the total
_SQRT_HALF = 0.7071067811865476  # torch's M_SQRT1_2
_COMPILED = {}


@cute.kernel
def grn_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, mN: cute.Tensor,
                    mGamma: cute.Tensor, mBeta: cute.Tensor, hw: cutlass.Constexpr, batch: cutlass.Constexpr,
                    kdim: cutlass.Constexpr, fc2: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    k_tiles = kdim // _BK
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
    rn = cute.make_rmem_tensor((8,), cutlass.Float32)
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (8,))  # (8, K / 8)
    g_b = cute.zipped_divide(mB[col0 + lrow, None], (8,))
    image = (row0 + lrow) // hw
    if image > batch - 1:  # padded pixels past the last image
        image = batch - 1
    g_n = cute.zipped_divide(mN[image, None], (8,))
    if cutlass.const_expr(fc2):  # gamma and beta of every hidden channel, once per CTA
        gb_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((2, kdim), stride=(kdim, 1)), 16)
        for c in range(tidx, kdim, _THREADS):
            gb_s[0, c] = mGamma[c]
            gb_s[1, c] = mBeta[c]
        cute.arch.sync_threads()

    ra.store(g_a[None, lchunk].load())
    rb.store(g_b[None, lchunk].load())
    if cutlass.const_expr(fc2):
        rn.store(g_n[None, lchunk].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            for j in cutlass.range_constexpr(8):
                if cutlass.const_expr(fc2):  # GRN: y = gamma * (x * n) + beta + x
                    k = kt * _BK + lchunk * 8 + j
                    x = ra[j]
                    a_s[lchunk * 8 + j, lrow] = (gb_s[0, k] * (x * rn[j]) + gb_s[1, k]) + x
                else:
                    a_s[lchunk * 8 + j, lrow] = ra[j]
                b_s[lchunk * 8 + j, lrow] = rb[j]
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                ra.store(g_a[None, (kt + 1) * 2 + lchunk].load())
                rb.store(g_b[None, (kt + 1) * 2 + lchunk].load())
                if cutlass.const_expr(fc2):
                    rn.store(g_n[None, (kt + 1) * 2 + lchunk].load())
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
            for j in cutlass.range_constexpr(4):
                h = acc[i * 8 + jh * 4 + j] + bias[jh * 4 + j]
                if cutlass.const_expr(not fc2):  # torch's erf GELU: x * 0.5 * (1 + erf(x * M_SQRT1_2))
                    h = h * 0.5 * (1.0 + cute.math.erf(h * _SQRT_HALF))
                out[j] = h
            g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.kernel
def grn_sumsq_kernel(mX: cute.Tensor, mS: cute.Tensor, hw: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    groups = cute.size(mS, mode=[1]) // _SQ_CH
    image = cta // groups
    c = (cta % groups) * _SQ_CH + tidx % 32
    phase = tidx // 32
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((8, 32), stride=(32, 1)), 16)
    tot = cute.make_rmem_tensor((1,), cutlass.Float32)
    part = cute.make_rmem_tensor((1,), cutlass.Float32)
    tot[0] = 0.0
    iters = (hw + 7) // 8
    for ci in range((iters + _SQ_CHUNK - 1) // _SQ_CHUNK):
        part[0] = 0.0
        for i in cutlass.range_constexpr(_SQ_CHUNK):
            p = phase + 8 * (ci * _SQ_CHUNK + i)
            if p < hw:
                v = mX[image * hw + p, c]
                part[0] = part[0] + v * v
        tot[0] = tot[0] + part[0]
    red[phase, tidx % 32] = tot[0]
    cute.arch.sync_threads()
    if tidx < 32:
        s = red[0, tidx]
        for r in cutlass.range_constexpr(1, 8):
            s = s + red[r, tidx]
        mS[image, c] = s


@cute.kernel
def grn_scale_kernel(mS: cute.Tensor, mN: cute.Tensor, hidden: cutlass.Constexpr, eps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    image, _, _ = cute.arch.block_idx()
    hp = cute.size(mS, mode=[1])
    smem = cutlass.memory.SmemAllocator()
    ws = smem.allocate_tensor(cutlass.Float32, cute.make_layout((8,)), 16)
    loc = cute.make_rmem_tensor((1,), cutlass.Float32)
    loc[0] = 0.0
    for c in range(tidx, hidden, _THREADS):
        loc[0] = loc[0] + cute.math.sqrt(mS[image, c])
    s = cute.arch.warp_reduction(loc[0], lambda a, b: a + b)
    if tidx % 32 == 0:
        ws[tidx // 32] = s
    cute.arch.sync_threads()
    total = ws[0]
    for w in cutlass.range_constexpr(1, 8):
        total = total + ws[w]
    den = total * (1.0 / hidden) + eps
    for c in range(tidx, hp, _THREADS):
        mN[image, c] = cute.math.sqrt(mS[image, c]) / den


@cute.jit
def grn_gemm(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, mN: cute.Tensor,
             mGamma: cute.Tensor, mBeta: cute.Tensor, hw: cutlass.Constexpr, batch: cutlass.Constexpr,
             kdim: cutlass.Constexpr, fc2: cutlass.Constexpr, stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    grn_gemm_kernel(mA, mB, mBias, mC, mN, mGamma, mBeta, hw, batch, kdim, fc2).launch(
        grid=[tiles, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def grn_sumsq(mX: cute.Tensor, mS: cute.Tensor, hw: cutlass.Constexpr, stream: cuda.CUstream):
    grid = cute.size(mS, mode=[0]) * (cute.size(mS, mode=[1]) // _SQ_CH)
    grn_sumsq_kernel(mX, mS, hw).launch(grid=[grid, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def grn_scale(mS: cute.Tensor, mN: cute.Tensor, hidden: cutlass.Constexpr, eps: cutlass.Constexpr,
              stream: cuda.CUstream):
    grn_scale_kernel(mS, mN, hidden, eps).launch(grid=[cute.size(mS, mode=[0]), 1, 1], block=[_THREADS, 1, 1],
                                                 stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(*shape):
    if len(shape) == 1:
        return make_fake_compact_tensor(cutlass.Float32, shape, assumed_align=16)
    return make_fake_compact_tensor(cutlass.Float32, shape, stride_order=(1, 0), assumed_align=16)


def _compile_gemm(mp, n, k, batch, hp, hw, fc2, arch=None, ptx_dir=None):
    """A [mp, k], W [n, k], bias [n], C [mp, n]; n [batch, hp], gamma/beta [hp] (used by fc2)."""
    return cute.compile(grn_gemm, _fake(mp, k), _fake(n, k), _fake(n), _fake(mp, n), _fake(batch, hp), _fake(hp),
                        _fake(hp), hw, batch, k, fc2, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_sumsq(mp, batch, hp, hw, arch=None, ptx_dir=None):
    """x [mp, hp] -> sums of squares [batch, hp]."""
    return cute.compile(grn_sumsq, _fake(mp, hp), _fake(batch, hp), hw, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_scale(batch, hp, hidden, eps, arch=None, ptx_dir=None):
    """sums of squares [batch, hp] -> n [batch, hp]."""
    return cute.compile(grn_scale, _fake(batch, hp), _fake(batch, hp), hidden, eps, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(hidden_states, pwconv1_weight, pwconv1_bias, grn_weight, grn_bias, pwconv2_weight, pwconv2_bias, eps):
    batch, height, width, dim = hidden_states.shape
    hidden = pwconv1_weight.shape[0]
    hw = height * width
    pixels = batch * hw
    dev = hidden_states.device
    out = torch.empty(batch, height, width, dim, dtype=torch.float32, device=dev)
    if pixels == 0 or dim == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, kp, hp = _up(pixels, _BM), _up(dim, _BK * _FOLD), _up(hidden, _BN)
    gamma = _padded(grn_weight.reshape(hidden), (hp,))
    beta = _padded(grn_bias.reshape(hidden), (hp,))
    x = torch.empty(mp, hp, dtype=torch.float32, device=dev)
    sums = torch.empty(batch, hp, dtype=torch.float32, device=dev)
    n = torch.empty(batch, hp, dtype=torch.float32, device=dev)

    key = ("fc1", mp, hp, kp, batch, hw)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(mp, hp, kp, batch, hp, hw, False)
    _COMPILED[key](_padded(hidden_states.reshape(pixels, dim), (mp, kp)), _padded(pwconv1_weight, (hp, kp)),
                   _padded(pwconv1_bias, (hp,)), x, n, gamma, beta, stream)
    key = ("sumsq", mp, batch, hp, hw)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_sumsq(mp, batch, hp, hw)
    _COMPILED[key](x, sums, stream)
    key = ("scale", batch, hp, hidden, float(eps))
    if key not in _COMPILED:
        _COMPILED[key] = _compile_scale(batch, hp, hidden, float(eps))
    _COMPILED[key](sums, n, stream)
    c = out.view(pixels, dim) if (mp, kp) == (pixels, dim) else torch.empty(mp, kp, dtype=torch.float32, device=dev)
    key = ("fc2", mp, kp, hp, batch, hw)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(mp, kp, hp, batch, hp, hw, True)
    _COMPILED[key](x, _padded(pwconv2_weight, (kp, hp)), _padded(pwconv2_bias, (kp,)), c, n, gamma, beta, stream)
    if c.data_ptr() != out.data_ptr():
        out.view(pixels, dim).copy_(c[:pixels, :dim])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every build for the graded workload; returns the compiled kernel symbol names."""
    w = WORKLOAD
    batch, hw, dim, hidden = w["batch"], w["height"] * w["width"], w["dim"], w["hidden"]
    mp = batch * hw
    names = list(_compile_gemm(mp, hidden, dim, batch, hidden, hw, False, arch, ptx_dir).kernel_info)
    names += list(_compile_sumsq(mp, batch, hidden, hw, arch, ptx_dir).kernel_info)
    names += list(_compile_scale(batch, hidden, hidden, EPS, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(mp, dim, hidden, batch, hidden, hw, True, arch, ptx_dir).kernel_info)
    return names
