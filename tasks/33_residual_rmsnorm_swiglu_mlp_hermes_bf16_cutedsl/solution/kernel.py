"""CuTe DSL oracle for problem 33: residual add, RMSNorm and SwiGLU MLP (Hermes-4-405B), bf16.

Three DSL kernels.

1. ``residual_rmsnorm_kernel``: one CTA per token row. Each thread loads 16-byte vectors (8 bf16)
   of the residual and the hidden state, forms s = bf16(residual + hidden) in fp32 registers, and
   the sum of squares is reduced by warp shuffles and then across warps through shared memory
   (every thread adds the per-warp sums in the same order). x = bf16(s * rsqrt(sum / hidden + eps)
   * w), multiplied in the reference's order with one rounding. rsqrt.approx (about 2^-23
   relative) can move x by one bf16 unit only next to a rounding midpoint.
2. ``swiglu_gemm_kernel``: a = bf16(bf16(silu(bf16(x Wg^T))) * bf16(x Wu^T)) on the tensor cores
   (warp-level ``mma.sync`` m16n8k16, bf16 operands, fp32 accumulation). A CTA owns a 128-row x
   64-column tile of ``a`` and computes both the gate and the up tile for it with two fp32
   accumulator sets partitioned by the same tiled MMA (4 warps, 2 x 2, each 64 x 32 of gate and of
   up), so element i of both sets is the same (row, column) and the SwiGLU runs in registers. K
   advances in slices of 32 through a two-stage shared-memory ring (x tile 128 x 32, gate and up
   tiles 64 x 32 each) filled by 16-byte ``cp.async`` copies (swizzled rows, so that ``ldmatrix``
   reads them without bank conflicts); one ``ldmatrix`` of the x fragment feeds both MMAs. The
   epilogue keeps the reference's roundings: gate and up to bf16, silu(g) = g / (1 + exp(-g)) with
   an IEEE division (exp through ex2.approx, a few fp32 ulps, far below the bf16 rounding that
   follows), rounded to bf16, times up (exact in fp32), rounded to bf16.
3. ``down_gemm_kernel``: y = bf16(a Wd^T), the same tensor-core GEMM with a 128 x 128 tile and one
   accumulator set (4 warps, each 64 x 64).
Every GEMM operand value is bf16, so each product is exact and only the summation order differs
from the reference's fp32 GEMMs. Shapes that are not tile multiples (the small workload) use
zero-padded scratch operands (zero gate and up columns give a = 0, which adds nothing to the down
GEMM); the graded shapes need none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, hidden=16384, intermediate=53248)
_BM, _BN, _BK = 128, 128, 32
_BN_GU = 64  # columns of a (and of each of gate, up) per swiglu CTA
_GEMM_THREADS = 128  # 2 x 2 warps
_MAX_NORM_THREADS = 256
_COMPILED = {}


def _plan(hidden):
    """(vector width, threads per CTA, steps per thread, whether the last step needs a bound check)."""
    vec = 8 if hidden % 8 == 0 else 1
    chunks = hidden // vec
    threads = min(_MAX_NORM_THREADS, (chunks + 31) // 32 * 32)
    steps = (chunks + threads - 1) // threads
    return vec, threads, steps, chunks % threads != 0


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return x.to(cutlass.BFloat16).to(cutlass.Float32)


@cute.kernel
def residual_rmsnorm_kernel(hidden_states: cute.Tensor, residual: cute.Tensor, weight: cute.Tensor, x: cute.Tensor,
                            eps: cutlass.Float32, vec: cutlass.Constexpr, threads: cutlass.Constexpr,
                            steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    hidden = cute.size(hidden_states, mode=[1])
    chunks = hidden // vec
    warps = threads // 32

    smem = cutlass.memory.SmemAllocator()
    partial = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)

    g_h = cute.zipped_divide(hidden_states[token, None], (vec,))
    g_r = cute.zipped_divide(residual[token, None], (vec,))
    g_w = cute.zipped_divide(weight, (vec,))
    g_x = cute.zipped_divide(x[token, None], (vec,))

    xs = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    xs.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            summed = g_r[None, c].load().to(cutlass.Float32) + g_h[None, c].load().to(cutlass.Float32)
            xs[None, k].store(summed.to(cutlass.BFloat16).to(cutlass.Float32))  # s = bf16(residual + hidden)

    sq = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        for j in cutlass.range_constexpr(vec):
            sq = sq + xs[j, k] * xs[j, k]
    sq = cute.arch.warp_reduction_sum(sq)
    if lane == 0:
        partial[warp] = sq
    cute.arch.sync_threads()
    total = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total = total + partial[i]
    rstd = cute.math.rsqrt(total / hidden + eps)

    ys = cute.make_rmem_tensor((vec,), cutlass.Float32)
    ws = cute.make_rmem_tensor((vec,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            ws.store(g_w[None, c].load().to(cutlass.Float32))
            for j in cutlass.range_constexpr(vec):
                ys[j] = xs[j, k] * rstd * ws[j]
            g_x[None, c].store(ys.load().to(cutlass.BFloat16))


@cute.jit
def residual_rmsnorm(hidden_states: cute.Tensor, residual: cute.Tensor, weight: cute.Tensor, x: cute.Tensor,
                     eps: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(hidden_states, mode=[0])
    vec, threads, steps, bounded = _plan(cute.size(hidden_states, mode=[1]))
    residual_rmsnorm_kernel(hidden_states, residual, weight, x, eps, vec, threads, steps, bounded).launch(
        grid=[tokens, 1, 1], block=[threads, 1, 1], stream=stream)


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
def swiglu_gemm_kernel(mA: cute.Tensor, mG: cute.Tensor, mU: cute.Tensor, mC: cute.Tensor,
                       k_tiles: cutlass.Constexpr):
    """mC[m, n] = bf16(bf16(silu(bf16(A G^T))) * bf16(A U^T)) over k_tiles slices of 32 columns."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))  # (BM, BK, k tiles)
    gG = cute.local_tile(mG, (_BN_GU, _BK), (bn, None))  # (BN_GU, BK, k tiles)
    gU = cute.local_tile(mU, (_BN_GU, _BK), (bn, None))
    gC = cute.local_tile(mC, (_BM, _BN_GU), (bm, bn))  # (BM, BN_GU)

    smem = cutlass.memory.SmemAllocator()
    sA = _smem_rows(smem, _BM)
    sG = _smem_rows(smem, _BN_GU)
    sU = _smem_rows(smem, _BN_GU)

    g2s = _g2s_copy()
    thr_g2s = g2s.get_slice(tidx)
    tAgA = thr_g2s.partition_S(gA)
    tAsA = thr_g2s.partition_D(sA)
    tGgG = thr_g2s.partition_S(gG)
    tGsG = thr_g2s.partition_D(sG)
    tUgU = thr_g2s.partition_S(gU)
    tUsU = thr_g2s.partition_D(sU)

    tiled_mma = _tiled_mma()
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsG = thr_mma.partition_B(sG)
    tCsU = thr_mma.partition_B(sU)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrG = tiled_mma.make_fragment_B(tCsG[None, None, None, 0])
    tCrU = tiled_mma.make_fragment_B(tCsU[None, None, None, 0])
    acc_g = tiled_mma.make_fragment_C(tCgC)
    acc_u = tiled_mma.make_fragment_C(tCgC)
    acc_g.fill(0.0)
    acc_u.fill(0.0)

    s2r_A = cute.make_tiled_copy_A(_ldmatrix(), tiled_mma)
    s2r_B = cute.make_tiled_copy_B(_ldmatrix(), tiled_mma)
    thr_s2r_A = s2r_A.get_slice(tidx)
    thr_s2r_B = s2r_B.get_slice(tidx)
    tXsA = thr_s2r_A.partition_S(sA)
    tXrA = thr_s2r_A.retile(tCrA)
    tXsG = thr_s2r_B.partition_S(sG)
    tXrG = thr_s2r_B.retile(tCrG)
    tXsU = thr_s2r_B.partition_S(sU)
    tXrU = thr_s2r_B.retile(tCrU)
    k_blocks = cute.size(tCrA, mode=[2])

    cute.copy(g2s, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s, tGgG[None, None, None, 0], tGsG[None, None, None, 0])
    cute.copy(g2s, tUgU[None, None, None, 0], tUsU[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next slice into the other stage
            nxt = (kt + 1) % 2
            cute.copy(g2s, tAgA[None, None, None, kt + 1], tAsA[None, None, None, nxt])
            cute.copy(g2s, tGgG[None, None, None, kt + 1], tGsG[None, None, None, nxt])
            cute.copy(g2s, tUgU[None, None, None, kt + 1], tUsU[None, None, None, nxt])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)  # this slice's group has landed
        cute.arch.sync_threads()
        stage = kt % 2
        for kb in cutlass.range_constexpr(k_blocks):
            cute.copy(s2r_A, tXsA[None, None, kb, stage], tXrA[None, None, kb])
            cute.copy(s2r_B, tXsG[None, None, kb, stage], tXrG[None, None, kb])
            cute.copy(s2r_B, tXsU[None, None, kb, stage], tXrU[None, None, kb])
            cute.gemm(tiled_mma, acc_g, tCrA[None, None, kb], tCrG[None, None, kb], acc_g)
            cute.gemm(tiled_mma, acc_u, tCrA[None, None, kb], tCrU[None, None, kb], acc_u)
        cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch

    out = cute.make_fragment_like(acc_g, cutlass.BFloat16)
    for i in cutlass.range_constexpr(cute.size(acc_g)):
        gate = _bf16(acc_g[i])
        act = _bf16(gate / (1.0 + cute.math.exp(-gate)))
        out[i] = (act * _bf16(acc_u[i])).to(cutlass.BFloat16)
    cute.autovec_copy(out, tCgC)


@cute.jit
def swiglu_gemm(mA: cute.Tensor, mG: cute.Tensor, mU: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr,
                stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    swiglu_gemm_kernel(mA, mG, mU, mC, k // _BK).launch(
        grid=[m // _BM, n // _BN_GU, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


@cute.kernel
def down_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = bf16(sum_k mA[m, k] * mB[n, k]) over k_tiles slices of 32 columns."""
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

    out = cute.make_fragment_like(acc, cutlass.BFloat16)
    out.store(acc.load().to(cutlass.BFloat16))
    cute.autovec_copy(out, tCgC)


@cute.jit
def down_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    down_gemm_kernel(mA, mB, mC, k // _BK).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _row_major(shape):
    return make_fake_compact_tensor(cutlass.BFloat16, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=16)


def _compile_norm(tokens, hidden, x_rows, x_cols, arch=None, ptx_dir=None):
    hs = _row_major((tokens, hidden))
    res = _row_major((tokens, hidden))
    w = _row_major((hidden,))
    x = _row_major((x_rows, x_cols))
    return cute.compile(residual_rmsnorm, hs, res, w, x, 1e-5, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_swiglu(m, n, k, arch=None, ptx_dir=None):
    """A [m, k], gate and up [n, k], C [m, n]; all tile multiples."""
    a, g, u, c = _row_major((m, k)), _row_major((n, k)), _row_major((n, k)), _row_major((m, n))
    return cute.compile(swiglu_gemm, a, g, u, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_down(m, n, k, arch=None, ptx_dir=None):
    """A [m, k], B [n, k], C [m, n]; all tile multiples."""
    a, b, c = _row_major((m, k)), _row_major((n, k)), _row_major((m, n))
    return cute.compile(down_gemm, a, b, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(w, rows, cols):
    if tuple(w.shape) == (rows, cols):
        return w.contiguous()
    p = torch.zeros(rows, cols, dtype=torch.bfloat16, device=w.device)
    p[:w.shape[0], :w.shape[1]] = w
    return p


def solve(hidden_states, residual, norm_weight, gate_proj_weight, up_proj_weight, down_proj_weight, eps):
    batch, seq, hidden = hidden_states.shape
    inter = gate_proj_weight.shape[0]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, ip, kp, np_ = _up(tokens, _BM), _up(inter, _BN_GU), _up(hidden, _BK), _up(hidden, _BN)
    if (mp, kp) != (tokens, hidden):
        x = torch.zeros(mp, kp, dtype=torch.bfloat16, device=dev)
    else:
        x = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=dev)
    a = torch.empty(mp, ip, dtype=torch.bfloat16, device=dev)
    c = out.view(tokens, hidden) if (mp, np_) == (tokens, hidden) else torch.empty(mp, np_, dtype=torch.bfloat16,
                                                                                   device=dev)
    key = ("norm", tokens, hidden, mp, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_norm(*key[1:])
    _COMPILED[key](hidden_states.reshape(tokens, hidden).contiguous(), residual.reshape(tokens, hidden).contiguous(),
                   norm_weight.contiguous(), x, float(eps), stream)
    key = ("swiglu", mp, ip, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_swiglu(*key[1:])
    _COMPILED[key](x, _padded(gate_proj_weight, ip, kp), _padded(up_proj_weight, ip, kp), a, stream)
    key = ("down", mp, np_, ip)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_down(*key[1:])
    _COMPILED[key](a, _padded(down_proj_weight, np_, ip), c, stream)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, hidden).copy_(c[:tokens, :hidden])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile the three kernels for the fixed workload without a GPU; return the kernel names."""
    w = WORKLOAD
    tokens, hidden, inter = w["batch"] * w["seq"], w["hidden"], w["intermediate"]
    names = list(_compile_norm(tokens, hidden, tokens, hidden, arch, ptx_dir).kernel_info)
    names += list(_compile_swiglu(tokens, inter, hidden, arch, ptx_dir).kernel_info)
    names += list(_compile_down(tokens, hidden, inter, arch, ptx_dir).kernel_info)
    return names
