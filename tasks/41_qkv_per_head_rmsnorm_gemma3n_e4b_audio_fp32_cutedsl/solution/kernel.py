"""CuTe DSL oracle for problem 41: Q/K/V projections (fp32) with per-head RMSNorm on Q and K.

One DSL kernel, ``qkv_proj_norm_kernel``, launched once per projection (q and k with the norm
epilogue, v without). It is a shared-memory tiled SIMT GEMM in fp32: y = x W^T must stay fp32
(the reference is an fp32 GEMM judged at fp32 tolerance, so TF32 tensor cores would be far too
coarse), hence CUDA-core FMAs with fp32 accumulation. A 256-thread CTA computes a 128 x 128 tile;
K advances in slices of 16: each thread loads two 16-byte vectors (8 fp32) of x and of W per slice
into registers (the next slice's loads are issued before the current slice is computed) and stores
them K-major into shared memory; each thread then accumulates an 8 x 8 block of outputs (rows
ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3}, ty = tid / 16,
tc = tid % 16) from 16-byte shared-memory reads.

Norm epilogue: a head's columns lie in one tile (head_dim divides 128), and the threads sharing a
row are the 16 consecutive lanes of a half-warp, so a row's sum of squares over a head is a
butterfly shuffle inside those lanes (all 16 for head_dim 128; aligned groups of head_dim / 4
lanes, per column half, for smaller heads). Then t * rsqrt(sum / head_dim + eps) * w in fp32,
the reference's order; rsqrt.approx (about 2^-23 relative) is far below the GEMM's own rounding.
Shapes that are not tile multiples (the small workload) are zero-padded by the host into scratch
tiles (a zero row normalises to zero); the graded shapes need none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, heads=8, head_dim=128)
_BM, _BN, _BK = 128, 128, 16
_THREADS = 256
_COMPILED = {}


@cute.kernel
def qkv_proj_norm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mW: cute.Tensor, eps: cutlass.Float32,
                         norm: cutlass.Constexpr, head_dim: cutlass.Constexpr):
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
    af = cute.make_rmem_tensor((8,), cutlass.Float32)
    bf = cute.make_rmem_tensor((8,), cutlass.Float32)
    ra = cute.make_rmem_tensor((8,), cutlass.Float32)
    rb = cute.make_rmem_tensor((8,), cutlass.Float32)
    g_a = cute.zipped_divide(mA[row0 + lrow, None], (8,))  # (8, K / 8)
    g_b = cute.zipped_divide(mB[col0 + lrow, None], (8,))

    ra.store(g_a[None, lchunk].load())
    rb.store(g_b[None, lchunk].load())
    for kt in range(k_tiles):
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
                    acc[i * 8 + j] = acc[i * 8 + j] + af[i] * bf[j]
        cute.arch.sync_threads()

    if cutlass.const_expr(norm):
        wv = cute.make_rmem_tensor((8,), cutlass.Float32)
        for j in cutlass.range_constexpr(4):
            wv[j] = mW[(tc * 4 + j) % head_dim]
            wv[4 + j] = mW[(64 + tc * 4 + j) % head_dim]
        for i in cutlass.range_constexpr(8):
            s_lo = cutlass.Float32(0.0)
            s_hi = cutlass.Float32(0.0)
            for j in cutlass.range_constexpr(4):
                s_lo = s_lo + acc[i * 8 + j] * acc[i * 8 + j]
                s_hi = s_hi + acc[i * 8 + 4 + j] * acc[i * 8 + 4 + j]
            if cutlass.const_expr(head_dim == _BN):
                s_lo = cute.arch.warp_reduction(s_lo + s_hi, lambda a, b: a + b, threads_in_group=16)
                s_hi = s_lo
            elif cutlass.const_expr(head_dim > 4):
                s_lo = cute.arch.warp_reduction(s_lo, lambda a, b: a + b, threads_in_group=head_dim // 4)
                s_hi = cute.arch.warp_reduction(s_hi, lambda a, b: a + b, threads_in_group=head_dim // 4)
            r_lo = cute.math.rsqrt(s_lo / head_dim + eps)
            r_hi = cute.math.rsqrt(s_hi / head_dim + eps)
            for j in cutlass.range_constexpr(4):
                acc[i * 8 + j] = acc[i * 8 + j] * r_lo * wv[j]
                acc[i * 8 + 4 + j] = acc[i * 8 + 4 + j] * r_hi * wv[4 + j]

    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        g_c = cute.zipped_divide(mC[row, None], (4,))
        for jh in cutlass.range_constexpr(2):
            for j in cutlass.range_constexpr(4):
                out[j] = acc[i * 8 + jh * 4 + j]
            g_c[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.jit
def qkv_proj_norm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mW: cute.Tensor, eps: cutlass.Float32,
                  norm: cutlass.Constexpr, head_dim: cutlass.Constexpr, stream: cuda.CUstream):
    tiles = (cute.size(mC, mode=[0]) // _BM) * (cute.size(mC, mode=[1]) // _BN)
    qkv_proj_norm_kernel(mA, mB, mC, mW, eps, norm, head_dim).launch(
        grid=[tiles, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _compile(m, n, k, head_dim, norm, arch=None, ptx_dir=None):
    """x [m, k], W [n, k], y [m, n] (tile multiples), norm weight [head_dim]; one build per norm flag."""
    a = make_fake_compact_tensor(cutlass.Float32, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(cutlass.Float32, (n, k), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(cutlass.Float32, (m, n), stride_order=(1, 0), assumed_align=16)
    w = make_fake_compact_tensor(cutlass.Float32, (head_dim,))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(qkv_proj_norm, a, b, c, w, 1e-6, norm, head_dim, make_fake_stream(), options=options)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _plan_ok(head_dim):
    lanes = head_dim // 4
    return head_dim == _BN or (head_dim % 4 == 0 and 1 <= lanes <= 16 and lanes & (lanes - 1) == 0)


def solve(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight, k_norm_weight, eps):
    batch, seq, dim = hidden_states.shape
    head_dim = q_norm_weight.shape[0]
    if not _plan_ok(head_dim):
        raise ValueError("head_dim must be 128 or 4 times a power of two <= 16")
    tokens, n = batch * seq, q_proj_weight.shape[0]
    x = hidden_states.reshape(tokens, dim).contiguous()
    outs = [torch.empty(tokens, n, dtype=torch.float32, device=x.device) for _ in range(3)]
    if tokens > 0:
        stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
        padded = tokens % _BM or n % _BN or dim % _BK
        mp, np_, kp = _up(tokens, _BM), _up(n, _BN), _up(dim, _BK)
        if padded:  # zero-pad to whole tiles; zero rows and columns add nothing and normalise to zero
            xp = torch.zeros(mp, kp, dtype=torch.float32, device=x.device)
            xp[:tokens, :dim] = x
            x = xp
        for out, weight, nw, norm in ((outs[0], q_proj_weight, q_norm_weight, True),
                                      (outs[1], k_proj_weight, k_norm_weight, True),
                                      (outs[2], v_proj_weight, q_norm_weight, False)):
            w = weight.contiguous()
            c = out
            if padded:
                w = torch.zeros(np_, kp, dtype=torch.float32, device=x.device)
                w[:n, :dim] = weight
                c = torch.empty(mp, np_, dtype=torch.float32, device=x.device)
            key = (mp, np_, kp, head_dim, norm)
            if key not in _COMPILED:
                _COMPILED[key] = _compile(*key)
            _COMPILED[key](x, w, c, nw.contiguous(), float(eps), stream)
            if padded:
                out.copy_(c[:tokens, :n])
    return tuple(o.view(batch, seq, n // head_dim, head_dim) for o in outs)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both variants (norm epilogue for q/k, plain for v) for the fixed workload."""
    w = WORKLOAD
    m, n = w["batch"] * w["seq"], w["heads"] * w["head_dim"]
    names = []
    for norm in (True, False):
        names += list(_compile(m, n, n, w["head_dim"], norm, arch, ptx_dir).kernel_info)
    return names
