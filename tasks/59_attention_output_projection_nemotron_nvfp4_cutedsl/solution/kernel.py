"""CuTe DSL oracle for problem 59: NVFP4 attention output projection with the activation quantised in the call.

Five DSL kernels (five launches).

1. ``nvfp4_amax_kernel``: partial maxima of |x| over the flat fp32 activation, 528 CTAs of 256
   threads striding over 16-byte vectors; warp butterfly max, then across the 8 warps in shared
   memory. A maximum is exact in any order.
2. ``nvfp4_global_scale_kernel``: one warp folds the partial maxima and writes the global decode
   scale g = amax * fl(1 / 2688). This is what eager PyTorch computes on the GPU for
   ``amax / (448 * 6)``: a tensor divided by a Python number is a multiplication by the rounded
   reciprocal in its CUDA kernel (the same holds for ``/ 6.0`` below).
3. ``nvfp4_act_quant_kernel``: one thread per 16-element block. In fp32, as the reference:
   s = e4m3(fl(amax_block * fl(1/6)) / g) (a correctly rounded ``div.rn.f32``, then the hardware's
   nearest-even ``cvt.rn.satfinite`` to e4m3), unit = s * g, r = x / unit (``div.rn.f32``; unit 1
   for a zero scale), and |r| is rounded to the E2M1 grid by comparisons with the midpoints,
   ties going to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
   5 -> 4; above 5 the clamp to 6 changes nothing). The thread writes code * s as bf16, which is
   exact (at most 2 significant bits times e4m3's 4). Rows past the token count (padding to whole
   128-row tiles) are written as zeros.
4. ``nvfp4_weight_decode_kernel``: one thread per 16-element weight block decodes the packed
   E2M1 codes (low nibble first) and the e4m3 scale exactly from their bit fields and writes
   code * s as bf16 (exact); padding rows are zeros.
5. ``nvfp4_gemm_kernel``: C = (A_q @ W_q^T) * (g_x * g_w) on the tensor cores: warp-level
   ``mma.sync`` m16n8k16 with bf16 operands and fp32 accumulation. Every product of two decoded
   (code * s) values is exact in fp32, so the sums are the reference's up to summation order,
   and the two global scales are applied once to each fp32 sum (the reference folds them into
   each operand, one rounding each). A 256-thread CTA (4 x 2 warps) computes a 128 x 128 tile; K
   advances in slices of 32 through a two-stage shared-memory ring filled by 16-byte ``cp.async``
   copies (rows swizzled so that ``ldmatrix`` reads them without bank conflicts).
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

BLOCK = 16
INV_2688 = 0.00037202381645329297  # fl32(1 / 2688)
INV_6 = 0.1666666716337204  # fl32(1 / 6)
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=32768, in_features=4096, out_features=2816)
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 256  # 4 x 2 warps
_THREADS = 256
_AMAX_CTAS = 528
_COMPILED = {}


def _max(a, b):
    return cutlass.Float32(cutlass.select_(a > b, a, b))


def _fsel(cond, a, b):
    return cutlass.Float32(cutlass.select_(cond, a, b))


def _int(cond, a, b):
    return cutlass.Int32(cutlass.select_(cond, a, b))


def _e2m1(code):
    """Signed value of a 4-bit E2M1 code held in an Int32."""
    e = (code >> 1) & 3
    m = code & 1
    twice = _int(e == 0, m, (m + 2) << _int(e == 0, 0, e - 1))
    mag = cutlass.Float32(twice) * 0.5
    return _fsel(code >= 8, -mag, mag)


def _e4m3(byte):
    """Value of an e4m3fn byte held in an Int32 (finite codes only)."""
    e = (byte >> 3) & 15
    m = byte & 7
    mant = _int(e == 0, m, m + 8)
    shift = _int(e == 0, 1, e)
    mag = cutlass.Float32(mant << shift) * (2.0 ** -10)
    return _fsel(byte >= 128, -mag, mag)


@cute.kernel
def nvfp4_amax_kernel(x: cute.Tensor, partial: cute.Tensor):
    """partial[cta] = max |x| over the 4-element vectors this CTA strides over."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    xv = cute.zipped_divide(x, (4,))
    n4 = cute.size(x) // 4
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_THREADS // 32,)), 16)
    vals = cute.make_rmem_tensor((4,), cutlass.Float32)
    amax = cutlass.Float32(0.0)
    for i in range(bidx * _THREADS + tidx, n4, _AMAX_CTAS * _THREADS):
        vals.store(xv[None, i].load())
        for j in cutlass.range_constexpr(4):
            amax = _max(amax, _max(vals[j], -vals[j]))
    amax = cute.arch.warp_reduction(amax, _max)
    if tidx % 32 == 0:
        red[tidx // 32] = amax
    cute.arch.sync_threads()
    if tidx == 0:
        total = red[0]
        for j in cutlass.range_constexpr(1, _THREADS // 32):
            total = _max(total, red[j])
        partial[bidx] = total


@cute.kernel
def nvfp4_global_scale_kernel(partial: cute.Tensor, gbuf: cute.Tensor):
    """gbuf[0] = max(partial) * fl(1/2688): one warp."""
    tidx, _, _ = cute.arch.thread_idx()
    amax = cutlass.Float32(0.0)
    for i in range(tidx, _AMAX_CTAS, 32):
        amax = _max(amax, partial[i])
    amax = cute.arch.warp_reduction(amax, _max)
    if tidx == 0:
        gbuf[0] = amax * INV_2688


@cute.kernel
def nvfp4_act_quant_kernel(x: cute.Tensor, gbuf: cute.Tensor, q: cute.Tensor):
    """q[r, 16b : 16b + 16] = code * s (bf16) of x's block (r, b); zeros for rows r >= rows of x."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rows = cute.size(x, mode=[0])
    padded = cute.size(q, mode=[0])
    blocks = cute.size(q, mode=[1]) // BLOCK
    i = bidx * _THREADS + tidx
    if i < padded * blocks:
        r = i // blocks
        blk = i - r * blocks
        vals = cute.make_rmem_tensor((BLOCK,), cutlass.Float32)
        vals.fill(0.0)
        if r < rows:
            vals.store(cute.zipped_divide(x[r, None], (BLOCK,))[None, blk].load())
            g = gbuf[0]
            amax = cutlass.Float32(0.0)
            for j in cutlass.range_constexpr(BLOCK):
                amax = _max(amax, _max(vals[j], -vals[j]))
            sv = cute.make_rmem_tensor((2,), cutlass.Float32)
            sv[0] = (amax * INV_6) / g
            sv[1] = cutlass.Float32(0.0)
            s8 = cute.make_rmem_tensor((2,), cutlass.Float8E4M3FN)
            s8.store(sv.load().to(cutlass.Float8E4M3FN))
            sv.store(s8.load().to(cutlass.Float32))
            s = sv[0]
            unit = s * g
            den = _fsel(unit > 0.0, unit, 1.0)
            for j in cutlass.range_constexpr(BLOCK):
                rv = vals[j] / den
                a = _max(rv, -rv)
                v = cutlass.Float32(0.0)
                v = _fsel(a > 0.25, 0.5, v)
                v = _fsel(a >= 0.75, 1.0, v)
                v = _fsel(a > 1.25, 1.5, v)
                v = _fsel(a >= 1.75, 2.0, v)
                v = _fsel(a > 2.5, 3.0, v)
                v = _fsel(a >= 3.5, 4.0, v)
                v = _fsel(a > 5.0, 6.0, v)
                vals[j] = _fsel(rv < 0.0, -v, v) * s
        cute.zipped_divide(q[r, None], (BLOCK,))[None, blk].store(vals.load().to(cutlass.BFloat16))


@cute.kernel
def nvfp4_weight_decode_kernel(packed: cute.Tensor, scale: cute.Tensor, q: cute.Tensor):
    """q[r, 16b : 16b + 16] = code * s (bf16) of the weight's block (r, b); zeros for padding rows."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rows = cute.size(scale, mode=[0])
    padded = cute.size(q, mode=[0])
    blocks = cute.size(scale, mode=[1])
    i = bidx * _THREADS + tidx
    if i < padded * blocks:
        r = i // blocks
        blk = i - r * blocks
        vals = cute.make_rmem_tensor((BLOCK,), cutlass.Float32)
        vals.fill(0.0)
        if r < rows:
            sc = _e4m3(cutlass.Int32(scale[r, blk]))
            codes = cute.make_rmem_tensor((BLOCK // 2,), cutlass.Uint8)
            codes.store(cute.zipped_divide(packed[r, None], (BLOCK // 2,))[None, blk].load())
            for j in cutlass.range_constexpr(BLOCK // 2):
                byte = cutlass.Int32(codes[j])
                vals[2 * j] = _e2m1(byte & 15) * sc
                vals[2 * j + 1] = _e2m1(byte >> 4) * sc
        cute.zipped_divide(q[r, None], (BLOCK,))[None, blk].store(vals.load().to(cutlass.BFloat16))


@cute.kernel
def nvfp4_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, gbuf: cute.Tensor, w_scale: cutlass.Float32,
                      mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = (sum_k mA[m, k] mB[n, k]) * (gbuf[0] * w_scale), fp32."""
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

    # global -> shared: 64 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy
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
        cute.make_layout((4, 2, 1)), permutation_mnk=(64, 32, 16))
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

    gs = gbuf[0] * w_scale
    for i in cutlass.range_constexpr(cute.size(acc)):
        acc[i] = acc[i] * gs
    cute.autovec_copy(acc, tCgC)


@cute.jit
def amax(x: cute.Tensor, partial: cute.Tensor, stream: cuda.CUstream):
    nvfp4_amax_kernel(x, partial).launch(grid=[_AMAX_CTAS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def global_scale(partial: cute.Tensor, gbuf: cute.Tensor, stream: cuda.CUstream):
    nvfp4_global_scale_kernel(partial, gbuf).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)


@cute.jit
def act_quant(x: cute.Tensor, gbuf: cute.Tensor, q: cute.Tensor, stream: cuda.CUstream):
    n = cute.size(q, mode=[0]) * (cute.size(q, mode=[1]) // BLOCK)
    nvfp4_act_quant_kernel(x, gbuf, q).launch(
        grid=[(n + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def weight_decode(packed: cute.Tensor, scale: cute.Tensor, q: cute.Tensor, stream: cuda.CUstream):
    n = cute.size(q, mode=[0]) * (cute.size(q, mode=[1]) // BLOCK)
    nvfp4_weight_decode_kernel(packed, scale, q).launch(
        grid=[(n + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def gemm(mA: cute.Tensor, mB: cute.Tensor, gbuf: cute.Tensor, w_scale: cutlass.Float32, mC: cute.Tensor,
         k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    nvfp4_gemm_kernel(mA, mB, gbuf, w_scale, mC, k // _BK).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


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


def _compile(kind, shape, arch=None, ptx_dir=None):
    """Compile one launcher for static shapes; ``shape`` is the kind's key tuple."""
    bf16, f32, u8 = cutlass.BFloat16, cutlass.Float32, cutlass.Uint8
    opts = _options(arch, ptx_dir)
    if kind == "amax":
        (n,) = shape
        return cute.compile(amax, _row_major(f32, (n,)), _row_major(f32, (_AMAX_CTAS,)), make_fake_stream(),
                            options=opts)
    if kind == "gscale":
        return cute.compile(global_scale, _row_major(f32, (_AMAX_CTAS,)), _row_major(f32, (1,), 4),
                            make_fake_stream(), options=opts)
    if kind == "act":
        rows, padded, k = shape
        return cute.compile(act_quant, _row_major(f32, (rows, k)), _row_major(f32, (1,), 4),
                            _row_major(bf16, (padded, k)), make_fake_stream(), options=opts)
    if kind == "weight":
        rows, padded, k = shape
        return cute.compile(weight_decode, _row_major(u8, (rows, k // 2), 8), _row_major(u8, (rows, k // BLOCK), 1),
                            _row_major(bf16, (padded, k)), make_fake_stream(), options=opts)
    m, n, k = shape
    return cute.compile(gemm, _row_major(bf16, (m, k)), _row_major(bf16, (n, k)), _row_major(f32, (1,), 4), 1.0,
                        _row_major(f32, (m, n)), k, make_fake_stream(), options=opts)


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, shape)
    return _COMPILED[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def solve(hidden_states, weight_fp4, weight_scale_fp8, weight_global_decode_scale):
    m, k = hidden_states.shape
    n = weight_fp4.shape[0]
    dev = hidden_states.device
    if m == 0 or n == 0 or k == 0:
        return torch.zeros(m, n, dtype=torch.float32, device=dev)
    assert k % _BK == 0
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, np_ = _up(m, _BM), _up(n, _BN)
    x = hidden_states.contiguous()
    partial = torch.empty(_AMAX_CTAS, dtype=torch.float32, device=dev)
    gbuf = torch.empty(1, dtype=torch.float32, device=dev)
    _fn("amax", (m * k,))(x.view(m * k), partial, stream)
    _fn("gscale", ())(partial, gbuf, stream)
    qa = torch.empty(mp, k, dtype=torch.bfloat16, device=dev)
    _fn("act", (m, mp, k))(x, gbuf, qa, stream)
    qw = torch.empty(np_, k, dtype=torch.bfloat16, device=dev)
    _fn("weight", (n, np_, k))(weight_fp4.contiguous(), weight_scale_fp8.contiguous().view(torch.uint8), qw,
                               stream)
    out = torch.empty(mp, np_, dtype=torch.float32, device=dev)
    _fn("gemm", (mp, np_, k))(qa, qw, gbuf, float(weight_global_decode_scale), out, stream)
    if mp != m or np_ != n:
        out = out[:m, :n].contiguous()
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names."""
    m, k, n = WORKLOAD["tokens"], WORKLOAD["in_features"], WORKLOAD["out_features"]
    mp, np_ = _up(m, _BM), _up(n, _BN)
    names = []
    for kind, shape in (("amax", (m * k,)), ("gscale", ()), ("act", (m, mp, k)), ("weight", (n, np_, k)),
                        ("gemm", (mp, np_, k))):
        names += list(_compile(kind, shape, arch, ptx_dir).kernel_info)
    return names
