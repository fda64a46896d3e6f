"""CuTe DSL oracle for problem 39: FLUX final layer (adaptive LayerNorm modulated by the timestep
embedding, then proj_out), fp32.

Two DSL kernels, all arithmetic in fp32 on the CUDA cores (the reference's matmuls are true fp32:
TF32 tensor cores would be far too coarse, so these are SIMT GEMMs, slower per FLOP than cuBLAS).

``mod_gemm_kernel``: mod = SiLU(temb) W^T + b for every sample. A 64-thread CTA computes a 32 x 32
tile (32 samples x 32 modulation columns; each thread a 4 x 4 block, rows ty*4 + {0..3} with
ty = tid / 8, columns tc*4 + {0..3} with tc = tid % 8). K advances in slices of 32: each thread loads
16 consecutive values of one temb row and of one weight row (row tid / 2, half tid % 2) into
registers, the next slice's loads are issued before the current slice is computed, and the temb
values pass through SiLU (x / (1 + exp(-x)), exp from ex2.approx with an fma-corrected argument,
IEEE division) while being stored K-major into shared memory. Sums are two-level: each chunk of 128
K values is accumulated from zero and then added to the running total, which keeps the fp32 error
of the 3072-long sums near that of a blocked library GEMM. Epilogue: sum + b (the reference's
separate bias add). The shift half of mod sits in columns [0, dim), the scale half in [Kp, Kp + dim)
(Kp = dim rounded up to 128; equal to dim at the graded shape).

``ln_proj_kernel``: output = (norm * (1 + scale) + shift) W_out^T + b_out. A 256-thread CTA owns 64
tokens and 64 output columns. First each warp computes LayerNorm statistics for 8 of the tokens: a
lane holds every 32nd float4 of the row in registers, sums them in order, the warp adds the lane sums
by a butterfly of shuffles; mean = sum * (1/dim); the centred squares are summed the same way
(var = sum * (1/dim), rstd = rsqrt(var + eps)), and mean/rstd go to shared memory. Then the GEMM runs
as in the first kernel (K slices of 32, register prefetch, two-level 128-value sums, each thread a
4 x 4 block: rows ty*4 + {0..3}, ty = tid / 16, columns tc*4 + {0..3}, tc = tid % 16), with the
normalisation and modulation fused into the operand staging: each thread loads 8 consecutive values
of its token row plus the matching shift and scale of the token's sample, and stores
x = ((h - mean) * rstd) * (1 + scale) + shift, in the reference's fp32 order, into shared memory.
Epilogue: sum + b_out. The normalised activation never goes to global memory.

Shapes that are not tile multiples (the small workload) are zero-padded by the host: padded K columns
of the activations meet zero weights (the statistics loop skips them), padded tokens and samples are
computed and dropped. The graded shapes need no padding.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, seq=256, dim=3072, out_dim=64)
EPS = 1e-6  # the eps make_inputs passes
_MBM, _MBN, _MTHREADS = 32, 32, 64  # mod GEMM tile and CTA size
_PBM, _PBN, _PTHREADS = 64, 64, 256  # LayerNorm + proj_out tile and CTA size
_BK = 32  # K slice
_FOLD = 4  # K slices (128 values) summed from zero before they are added to the total
_KQ = 128  # K padding quantum
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
def mod_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    k_tiles = cute.size(mA, mode=[1]) // _BK
    tiles_n = cute.size(mC, mode=[1]) // _MBN
    row0 = (cta // tiles_n) * _MBM
    col0 = (cta % tiles_n) * _MBN
    ty = tidx // 8
    tc = tidx % 8
    lrow = tidx // 2
    lq = tidx % 2  # which 16-wide half of the 32-wide K slice this thread loads

    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _MBM), stride=(_MBM, 1)), 16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _MBN), stride=(_MBN, 1)), 16)
    acc = cute.make_rmem_tensor((16,), cutlass.Float32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((16,), cutlass.Float32)
    ra = cute.make_rmem_tensor((16,), cutlass.Float32)
    rb = cute.make_rmem_tensor((16,), cutlass.Float32)
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (16,))  # (16, K / 16)
    g_b = cute.zipped_divide(mB[col0 + lrow, None], (16,))

    ra.store(g_a[None, lq].load())
    rb.store(g_b[None, lq].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            for j in cutlass.range_constexpr(16):
                x = ra[j]
                a_s[lq * 16 + j, lrow] = x / (1.0 + _exp(-x))  # SiLU, torch's x / (1 + exp(-x))
                b_s[lq * 16 + j, lrow] = rb[j]
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                ra.store(g_a[None, (kt + 1) * 2 + lq].load())
                rb.store(g_b[None, (kt + 1) * 2 + lq].load())
            for kk in cutlass.range_constexpr(_BK):
                av = cute.zipped_divide(a_s[kk, None], (4,))[None, ty].load()
                bv = cute.zipped_divide(b_s[kk, None], (4,))[None, tc].load()
                for i in cutlass.range_constexpr(4):
                    for j in cutlass.range_constexpr(4):
                        part[i * 4 + j] = part[i * 4 + j] + av[i] * bv[j]
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(16):  # fold the chunk's partial sums into the total
            acc[i] = acc[i] + part[i]

    bias = cute.zipped_divide(mBias, (4,))[None, col0 // 4 + tc].load()
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(4):
        for j in cutlass.range_constexpr(4):
            out[j] = acc[i * 4 + j] + bias[j]
        cute.zipped_divide(mC[row0 + ty * 4 + i, None], (4,))[None, col0 // 4 + tc].store(out.load())


@cute.kernel
def ln_proj_kernel(mH: cute.Tensor, mMod: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor,
                   dim: cutlass.Constexpr, seq: cutlass.Constexpr, batch: cutlass.Constexpr,
                   eps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    kp = cute.size(mH, mode=[1])
    k_tiles = kp // _BK
    tiles_n = cute.size(mC, mode=[1]) // _PBN
    row0 = (cta // tiles_n) * _PBM
    col0 = (cta % tiles_n) * _PBN
    warp = tidx // 32
    lane = tidx % 32

    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _PBM), stride=(_PBM, 1)), 16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _PBN), stride=(_PBN, 1)), 16)
    mean_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_PBM,)), 16)
    rstd_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_PBM,)), 16)

    # LayerNorm statistics: warp w owns tokens w*8 .. w*8 + 7; lane l holds float4 groups l, l + 32, ...
    groups = kp // (4 * 32)
    hv = cute.make_rmem_tensor((groups * 4,), cutlass.Float32)
    q = cute.make_rmem_tensor((1,), cutlass.Float32)
    for r in cutlass.range_constexpr(_PBM // 8):
        row = warp * (_PBM // 8) + r
        g_h = cute.zipped_divide(mH[row0 + row, None], (4,))  # (4, K / 4)
        for i in cutlass.range_constexpr(groups):
            vec = g_h[None, i * 32 + lane].load()
            for j in cutlass.range_constexpr(4):
                hv[i * 4 + j] = vec[j]
        s = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(groups * 4):  # padded columns hold zeros
            s = s + hv[i]
        s = cute.arch.warp_reduction(s, lambda a, b: a + b)
        mean = s * (1.0 / dim)
        q[0] = 0.0
        for i in cutlass.range_constexpr(groups):
            if cutlass.const_expr(dim == groups * 128):
                for j in cutlass.range_constexpr(4):
                    d = hv[i * 4 + j] - mean
                    q[0] = q[0] + d * d
            else:
                if (i * 32 + lane) * 4 < dim:  # skip padded columns
                    for j in cutlass.range_constexpr(4):
                        d = hv[i * 4 + j] - mean
                        q[0] = q[0] + d * d
        ss = cute.arch.warp_reduction(q[0], lambda a, b: a + b)
        if lane == 0:
            mean_s[row] = mean
            rstd_s[row] = cute.math.rsqrt(ss * (1.0 / dim) + eps)
    cute.arch.sync_threads()

    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 4
    lq = tidx % 4  # which 8-wide quarter of the 32-wide K slice this thread loads
    my_mean = mean_s[lrow]
    my_rstd = rstd_s[lrow]
    sample = (row0 + lrow) // seq
    if sample > batch - 1:  # padded tokens past the last sample
        sample = batch - 1
    acc = cute.make_rmem_tensor((16,), cutlass.Float32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((16,), cutlass.Float32)
    rh = cute.make_rmem_tensor((8,), cutlass.Float32)
    rsh = cute.make_rmem_tensor((8,), cutlass.Float32)
    rsc = cute.make_rmem_tensor((8,), cutlass.Float32)
    rw = cute.make_rmem_tensor((8,), cutlass.Float32)
    g_h = cute.zipped_divide(mH[row0 + lrow, None], (8,))  # (8, K / 8)
    g_m = cute.zipped_divide(mMod[sample, None], (8,))  # (8, 2K / 8): shift, then scale
    g_w = cute.zipped_divide(mW[col0 + lrow, None], (8,))
    scale_off = kp // 8

    rh.store(g_h[None, lq].load())
    rsh.store(g_m[None, lq].load())
    rsc.store(g_m[None, scale_off + lq].load())
    rw.store(g_w[None, lq].load())
    for kc in range(k_tiles // _FOLD):
        part.fill(0.0)
        for ks in range(_FOLD):
            kt = kc * _FOLD + ks
            for j in cutlass.range_constexpr(8):
                xn = (rh[j] - my_mean) * my_rstd
                a_s[lq * 8 + j, lrow] = xn * (1.0 + rsc[j]) + rsh[j]
                b_s[lq * 8 + j, lrow] = rw[j]
            cute.arch.sync_threads()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this slice is computed
                nxt = (kt + 1) * 4 + lq
                rh.store(g_h[None, nxt].load())
                rsh.store(g_m[None, nxt].load())
                rsc.store(g_m[None, scale_off + nxt].load())
                rw.store(g_w[None, nxt].load())
            for kk in cutlass.range_constexpr(_BK):
                av = cute.zipped_divide(a_s[kk, None], (4,))[None, ty].load()
                bv = cute.zipped_divide(b_s[kk, None], (4,))[None, tc].load()
                for i in cutlass.range_constexpr(4):
                    for j in cutlass.range_constexpr(4):
                        part[i * 4 + j] = part[i * 4 + j] + av[i] * bv[j]
            cute.arch.sync_threads()
        for i in cutlass.range_constexpr(16):  # fold the chunk's partial sums into the total
            acc[i] = acc[i] + part[i]

    bias = cute.zipped_divide(mBias, (4,))[None, col0 // 4 + tc].load()
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(4):
        for j in cutlass.range_constexpr(4):
            out[j] = acc[i * 4 + j] + bias[j]
        cute.zipped_divide(mC[row0 + ty * 4 + i, None], (4,))[None, col0 // 4 + tc].store(out.load())


@cute.jit
def mod_gemm(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _MBM) * (cute.size(mC, mode=[1]) // _MBN)
    mod_gemm_kernel(mA, mB, mBias, mC).launch(grid=[tiles, 1, 1], block=[_MTHREADS, 1, 1], stream=stream)


@cute.jit
def ln_proj(mH: cute.Tensor, mMod: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor,
            dim: cutlass.Constexpr, seq: cutlass.Constexpr, batch: cutlass.Constexpr, eps: cutlass.Constexpr,
            stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _PBM) * (cute.size(mC, mode=[1]) // _PBN)
    ln_proj_kernel(mH, mMod, mW, mBias, mC, dim, seq, batch, eps).launch(
        grid=[tiles, 1, 1], block=[_PTHREADS, 1, 1], stream=stream)


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


def _compile_mod(bp, kp, arch=None, ptx_dir=None):
    """temb [bp, kp], W [2kp, kp], b [2kp] -> mod [bp, 2kp]."""
    return cute.compile(mod_gemm, _fake(bp, kp), _fake(2 * kp, kp), _fake(2 * kp), _fake(bp, 2 * kp),
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_proj(mp, np_, kp, bp, dim, seq, batch, eps, arch=None, ptx_dir=None):
    """hidden [mp, kp], mod [bp, 2kp], W_out [np, kp], b_out [np] -> out [mp, np]."""
    return cute.compile(ln_proj, _fake(mp, kp), _fake(bp, 2 * kp), _fake(np_, kp), _fake(np_), _fake(mp, np_),
                        dim, seq, batch, eps, make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _halves(t, dim, kp):
    """[2 dim, ...] -> [2 kp, ...]: shift rows at 0, scale rows at kp (zero rows between)."""
    if dim == kp:
        return t.contiguous()
    p = torch.zeros((2 * kp,) + tuple(t.shape[1:]), dtype=torch.float32, device=t.device)
    p[:dim] = t[:dim]
    p[kp:kp + dim] = t[dim:]
    return p


def solve(hidden_states, temb, linear_weight, linear_bias, proj_out_weight, proj_out_bias, eps):
    batch, seq, dim = hidden_states.shape
    out_dim = proj_out_weight.shape[0]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, out_dim, dtype=torch.float32, device=dev)
    if tokens == 0 or out_dim == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    kp, bp, mp, np_ = _up(dim, _KQ), _up(batch, _MBM), _up(tokens, _PBM), _up(out_dim, _PBN)
    weight = _halves(linear_weight, dim, kp)
    if dim != kp:
        weight = _padded(weight, (2 * kp, kp))
    mod = torch.empty(bp, 2 * kp, dtype=torch.float32, device=dev)
    key = ("mod", bp, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_mod(bp, kp)
    _COMPILED[key](_padded(temb, (bp, kp)), weight, _halves(linear_bias, dim, kp), mod, stream)

    c = out.view(tokens, out_dim) if (mp, np_) == (tokens, out_dim) else torch.empty(
        mp, np_, dtype=torch.float32, device=dev)
    key = ("proj", mp, np_, kp, bp, dim, seq, batch, float(eps))
    if key not in _COMPILED:
        _COMPILED[key] = _compile_proj(mp, np_, kp, bp, dim, seq, batch, float(eps))
    _COMPILED[key](_padded(hidden_states.reshape(tokens, dim), (mp, kp)), mod,
                   _padded(proj_out_weight, (np_, kp)), _padded(proj_out_bias, (np_,)), c, stream)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, out_dim).copy_(c[:tokens, :out_dim])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both kernels for the graded workload; returns the compiled kernel symbol names."""
    w = WORKLOAD
    batch, seq, dim, out_dim = w["batch"], w["seq"], w["dim"], w["out_dim"]
    names = list(_compile_mod(batch, dim, arch, ptx_dir).kernel_info)
    names += list(_compile_proj(batch * seq, out_dim, dim, batch, dim, seq, batch, EPS, arch, ptx_dir).kernel_info)
    return names
