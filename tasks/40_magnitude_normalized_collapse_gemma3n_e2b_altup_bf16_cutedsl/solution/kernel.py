"""CuTe DSL oracle for problem 40: Gemma-3n AltUp collapse (unembed two predicted streams, match their
RMS to stream 0, average), bf16 inputs, fp32 math, bf16 output.

Two DSL kernels.

1. ``unembed_gemm_kernel`` (run once per predicted stream): P_i = x_i U_i^T on the tensor cores
   (warp-level ``mma.sync`` m16n8k16, bf16 operands, fp32 accumulation). Every operand value is
   bf16, so each product is exact and only the summation order differs from the reference's fp32
   GEMM. A CTA computes a 128 x 128 tile with 4 warps (2 x 2, each 64 x 64); K advances in slices of
   32 through a two-stage shared-memory ring filled by 16-byte ``cp.async`` copies (swizzled rows, so
   that ``ldmatrix`` reads them without bank conflicts), and ``ldmatrix`` feeds the MMA fragments.
   The fp32 sums are stored unrounded (the reference keeps p in fp32).
2. ``collapse_kernel``: one 128-thread CTA per token. Each thread keeps its 8-column chunks of x0
   (bf16 widened to fp32), P_1 and P_2 in registers; the three sums of squares are reduced by warp
   shuffles and then across the 4 warps in order through shared memory. target = sqrt(sum x0^2 /
   hidden), current_i = sqrt(max(sum p_i^2 / hidden, eps)) (IEEE sqrt and division), and every
   element is formed in the reference's fp32 order, ((x0 + (p_1 target) / current_1) +
   (p_2 target) / current_2) / 3, rounded to bf16 once.
Shapes that are not tile multiples (the small workload) use zero-padded scratch operands: padded
columns of P are never read, padded tokens are computed and dropped. The graded shapes need none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=3072)
EPS = 1e-5  # the epsilon make_inputs passes
STREAMS = 3
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 128  # 2 x 2 warps
_ROW_THREADS = 128
_COMPILED = {}


def _smem_rows(smem, rows):
    """A two-stage (rows, 32) bf16 ring. The pointer swizzle acts on byte addresses: bits 7-8 (row / 2)
    are xor-ed into bits 4-5 (the 16-byte chunk of the 64-byte row), so a cp.async vector stays whole
    and the 8 rows an ldmatrix reads land in different banks."""
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    return smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (rows, _BK, 2), (0, 1, 2)), 16,
                                swizzle=cute.make_swizzle(2, 4, 3))


def _g2s_copy():
    """global -> shared: 32 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy."""
    return cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((_GEMM_THREADS // (_BK // 8), _BK // 8), stride=(_BK // 8, 1)),
        cute.make_layout((1, 8)))


def _tiled_mma():
    return cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((2, 2, 1)), permutation_mnk=(32, 32, 16))


def _ldmatrix():
    return cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16)


@cute.kernel
def unembed_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = sum_k mA[m, k] * mB[n, k] in fp32; k_tiles slices of 32."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))  # (BM, BK, k tiles)
    gB = cute.local_tile(mB, (_BN, _BK), (bn, None))  # (BN, BK, k tiles)
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))  # (BM, BN)

    smem = cutlass.memory.SmemAllocator()
    sA = _smem_rows(smem, _BM)
    sB = _smem_rows(smem, _BN)

    g2s = _g2s_copy()
    thr_g2s = g2s.get_slice(tidx)
    tAgA = thr_g2s.partition_S(gA)
    tAsA = thr_g2s.partition_D(sA)
    tBgB = thr_g2s.partition_S(gB)
    tBsB = thr_g2s.partition_D(sB)

    tiled_mma = _tiled_mma()
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsB = thr_mma.partition_B(sB)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)
    acc.fill(0.0)

    s2r_A = cute.make_tiled_copy_A(_ldmatrix(), tiled_mma)
    s2r_B = cute.make_tiled_copy_B(_ldmatrix(), tiled_mma)
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

    cute.autovec_copy(acc, tCgC)  # the fp32 sums, unrounded (the reference keeps p in fp32)


@cute.jit
def unembed_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    unembed_gemm_kernel(mA, mB, mC, k // _BK).launch(grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1],
                                                     stream=stream)


@cute.kernel
def collapse_kernel(mX: cute.Tensor, mP1: cute.Tensor, mP2: cute.Tensor, mOut: cute.Tensor, hidden: cutlass.Constexpr,
                    eps: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    warp = tidx // 32
    chunks = hidden // 8
    steps = (chunks + _ROW_THREADS - 1) // _ROW_THREADS
    bounded = chunks % _ROW_THREADS != 0
    smem = cutlass.memory.SmemAllocator()
    part = smem.allocate_tensor(cutlass.Float32, cute.make_layout((3, 4), stride=(4, 1)), 16)
    g_x = cute.zipped_divide(mX[token, None], (8,))
    g_p1 = cute.zipped_divide(mP1[token, None], (8,))
    g_p2 = cute.zipped_divide(mP2[token, None], (8,))
    g_o = cute.zipped_divide(mOut[token, None], (8,))
    xs = cute.make_rmem_tensor((8, steps), cutlass.Float32)
    p1 = cute.make_rmem_tensor((8, steps), cutlass.Float32)
    p2 = cute.make_rmem_tensor((8, steps), cutlass.Float32)
    xs.fill(0.0)
    p1.fill(0.0)
    p2.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * _ROW_THREADS
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            xs[None, k].store(g_x[None, c].load().to(cutlass.Float32))
            p1[None, k].store(g_p1[None, c].load())
            p2[None, k].store(g_p2[None, c].load())
    s0 = cutlass.Float32(0.0)
    s1 = cutlass.Float32(0.0)
    s2 = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        for j in cutlass.range_constexpr(8):
            s0 = s0 + xs[j, k] * xs[j, k]
            s1 = s1 + p1[j, k] * p1[j, k]
            s2 = s2 + p2[j, k] * p2[j, k]
    s0 = cute.arch.warp_reduction(s0, lambda a, b: a + b)
    s1 = cute.arch.warp_reduction(s1, lambda a, b: a + b)
    s2 = cute.arch.warp_reduction(s2, lambda a, b: a + b)
    if lane == 0:
        part[0, warp] = s0
        part[1, warp] = s1
        part[2, warp] = s2
    cute.arch.sync_threads()
    t0 = part[0, 0]
    t1 = part[1, 0]
    t2 = part[2, 0]
    for w in cutlass.range_constexpr(1, _ROW_THREADS // 32):
        t0 = t0 + part[0, w]
        t1 = t1 + part[1, w]
        t2 = t2 + part[2, w]
    target = cute.math.sqrt(t0 / hidden)
    cur1 = cute.math.sqrt(cute.math.max(t1 / hidden, eps))
    cur2 = cute.math.sqrt(cute.math.max(t2 / hidden, eps))
    ys = cute.make_rmem_tensor((8,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * _ROW_THREADS
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            for j in cutlass.range_constexpr(8):
                total = xs[j, k] + (p1[j, k] * target) / cur1
                total = total + (p2[j, k] * target) / cur2
                ys[j] = total / 3.0
            g_o[None, c].store(ys.load().to(cutlass.BFloat16))


@cute.jit
def collapse(mX: cute.Tensor, mP1: cute.Tensor, mP2: cute.Tensor, mOut: cute.Tensor, hidden: cutlass.Constexpr,
             eps: cutlass.Constexpr, stream: cuda.CUstream):
    collapse_kernel(mX, mP1, mP2, mOut, hidden, eps).launch(grid=[cute.size(mOut, mode=[0]), 1, 1],
                                                            block=[_ROW_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _row_major(shape, dtype=cutlass.BFloat16, align=16):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=align)


def _compile_gemm(m, n, k, arch=None, ptx_dir=None):
    """A [m, k] bf16, U [n, k] bf16 -> P [m, n] fp32; all tile multiples."""
    a, u, c = _row_major((m, k)), _row_major((n, k)), _row_major((m, n), cutlass.Float32)
    return cute.compile(unembed_gemm, a, u, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_collapse(tokens, hidden, mp, np_, eps, arch=None, ptx_dir=None):
    """x0 [tokens, hidden] bf16, P_1, P_2 [mp, np] fp32 -> out [tokens, hidden] bf16."""
    x, out = _row_major((tokens, hidden)), _row_major((tokens, hidden))
    p1, p2 = _row_major((mp, np_), cutlass.Float32), _row_major((mp, np_), cutlass.Float32)
    return cute.compile(collapse, x, p1, p2, out, hidden, eps, make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def solve(hidden_states, unembed_proj_1, unembed_proj_2, epsilon):
    _, batch, seq, hidden = hidden_states.shape
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0 or hidden == 0:
        return out
    assert hidden % 8 == 0, "rows are handled in 16-byte chunks"
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    streams = hidden_states.reshape(STREAMS, tokens, hidden)
    mp, kp, np_ = _up(tokens, _BM), _up(hidden, _BK), _up(hidden, _BN)
    key = ("gemm", mp, np_, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(*key[1:])
    projected = []
    for i, proj in ((1, unembed_proj_1), (2, unembed_proj_2)):
        p = torch.empty(mp, np_, dtype=torch.float32, device=dev)
        _COMPILED[key](_padded(streams[i], (mp, kp)), _padded(proj, (np_, kp)), p, stream)
        projected.append(p)
    key = ("collapse", tokens, hidden, mp, np_, float(epsilon))
    if key not in _COMPILED:
        _COMPILED[key] = _compile_collapse(*key[1:])
    _COMPILED[key](streams[0].contiguous(), projected[0], projected[1], out.view(tokens, hidden), stream)
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile the GEMM and the collapse kernel for the fixed workload without a GPU; kernel names."""
    w = WORKLOAD
    tokens, hidden = w["batch"] * w["seq"], w["hidden"]
    names = list(_compile_gemm(tokens, hidden, hidden, arch, ptx_dir).kernel_info)
    names += list(_compile_collapse(tokens, hidden, tokens, hidden, EPS, arch, ptx_dir).kernel_info)
    return names
