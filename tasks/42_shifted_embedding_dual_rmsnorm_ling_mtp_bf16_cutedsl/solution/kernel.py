"""CuTe DSL oracle for problem 42: MTP input fusion (Ling-flash-2.0): shifted embedding, two RMSNorms, eh_proj.

Two DSL kernels.

1. ``mtp_dual_rmsnorm_kernel``: grid (token, part); part 0 normalises the embedding row of the
   shifted id (ids[b, s + 1], or token 0 at the last position, looked up in the kernel), part 1 the
   token's hidden state, and each writes its half of the GEMM operand X = [emb_norm | hidden_norm]
   ([tokens, 2 * hidden] bf16). One row per CTA: each thread loads 16-byte vectors (8 bf16) into
   fp32 registers, the sum of squares is reduced by warp shuffles and then across warps through
   shared memory (every thread adds the per-warp sums in the same order). The reference's roundings
   are kept: n = bf16(x * rsqrt(sum / hidden + eps)), y = bf16(n * w) (the product of two bf16 values
   is exact in fp32, so its one rounding matches the reference's). rsqrt.approx (about 2^-23
   relative) can move n by one bf16 unit only next to a rounding midpoint.
2. ``eh_proj_gemm_kernel``: fused = X @ eh_proj_weight^T on the tensor cores (warp-level ``mma.sync``
   m16n8k16, bf16 operands, fp32 accumulation): every operand value is bf16, so each product is
   exact and only the summation order differs from the reference's fp32 GEMM. A CTA computes a
   128 x 128 tile with 4 warps (2 x 2, each 64 x 64); K advances in slices of 32 through a
   two-stage shared-memory ring filled by 16-byte ``cp.async`` copies (swizzled rows, so that
   ``ldmatrix`` reads them without bank conflicts), and ``ldmatrix`` feeds the MMA fragments. The
   fp32 accumulators are rounded to bf16 once. Shapes that are not tile multiples (the small
   workload) use zero-padded scratch operands; the graded shapes need none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, seq=256, hidden=4096, vocab=157184)
_BM, _BN, _BK = 128, 128, 32
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


@cute.kernel
def mtp_dual_rmsnorm_kernel(ids: cute.Tensor, hidden_states: cute.Tensor, table: cute.Tensor, enorm: cute.Tensor,
                            hnorm: cute.Tensor, x: cute.Tensor, eps: cutlass.Float32, vec: cutlass.Constexpr,
                            threads: cutlass.Constexpr, steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    token, part, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    seq = cute.size(ids, mode=[1])
    hidden = cute.size(table, mode=[1])
    chunks = hidden // vec
    warps = threads // 32
    b = token // seq
    s = token - b * seq
    row_id = cutlass.Int64(0)
    if s + 1 < seq:
        row_id = cutlass.Int64(ids[b, s + 1])

    smem = cutlass.memory.SmemAllocator()
    partial = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)

    g_e = cute.zipped_divide(table[row_id, None], (vec,))
    g_h = cute.zipped_divide(hidden_states[token, None], (vec,))
    g_ew = cute.zipped_divide(enorm, (vec,))
    g_hw = cute.zipped_divide(hnorm, (vec,))
    g_x = cute.zipped_divide(x[token, None], (vec,))

    xs = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    xs.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            if part == 0:
                xs[None, k].store(g_e[None, c].load().to(cutlass.Float32))
            else:
                xs[None, k].store(g_h[None, c].load().to(cutlass.Float32))

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
            if part == 0:
                ws.store(g_ew[None, c].load().to(cutlass.Float32))
            else:
                ws.store(g_hw[None, c].load().to(cutlass.Float32))
            for j in cutlass.range_constexpr(vec):
                ys[j] = xs[j, k] * rstd
            normed = ys.load().to(cutlass.BFloat16).to(cutlass.Float32)  # n = bf16(x * rstd)
            g_x[None, part * chunks + c].store((normed * ws.load()).to(cutlass.BFloat16))


@cute.jit
def mtp_dual_rmsnorm(ids: cute.Tensor, hidden_states: cute.Tensor, table: cute.Tensor, enorm: cute.Tensor,
                     hnorm: cute.Tensor, x: cute.Tensor, eps: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(hidden_states, mode=[0])
    vec, threads, steps, bounded = _plan(cute.size(hidden_states, mode=[1]))
    mtp_dual_rmsnorm_kernel(ids, hidden_states, table, enorm, hnorm, x, eps, vec, threads, steps, bounded).launch(
        grid=[tokens, 2, 1], block=[threads, 1, 1], stream=stream)


@cute.kernel
def eh_proj_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = bf16(sum_k mA[m, k] * mB[n, k]) over k_tiles slices of 32 columns."""
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

    # global -> shared: 32 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy
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
        cute.make_layout((2, 2, 1)), permutation_mnk=(32, 32, 16))
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

    out = cute.make_fragment_like(acc, cutlass.BFloat16)
    out.store(acc.load().to(cutlass.BFloat16))
    cute.autovec_copy(out, tCgC)


@cute.jit
def eh_proj_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    eh_proj_gemm_kernel(mA, mB, mC, k // _BK).launch(
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


def _compile_norm(batch, seq, hidden, vocab, x_rows, x_cols, arch=None, ptx_dir=None):
    ids = _row_major(cutlass.Int64, (batch, seq), align=8)
    hs = _row_major(cutlass.BFloat16, (batch * seq, hidden))
    table = _row_major(cutlass.BFloat16, (vocab, hidden))
    enorm = _row_major(cutlass.BFloat16, (hidden,))
    hnorm = _row_major(cutlass.BFloat16, (hidden,))
    x = _row_major(cutlass.BFloat16, (x_rows, x_cols))
    return cute.compile(mtp_dual_rmsnorm, ids, hs, table, enorm, hnorm, x, 1e-6, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_gemm(m, n, k, arch=None, ptx_dir=None):
    """A [m, k], B [n, k], C [m, n]; all tile multiples."""
    a = _row_major(cutlass.BFloat16, (m, k))
    b = _row_major(cutlass.BFloat16, (n, k))
    c = _row_major(cutlass.BFloat16, (m, n))
    return cute.compile(eh_proj_gemm, a, b, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def solve(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight, eh_proj_weight, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    vocab = word_embeddings.shape[0]
    n, k = eh_proj_weight.shape
    tokens = batch * seq
    out = torch.empty(batch, seq, n, dtype=torch.bfloat16, device=hidden_states.device)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, np_, kp = _up(tokens, _BM), _up(n, _BN), _up(k, _BK)
    padded = (mp, np_, kp) != (tokens, n, k)
    if padded:  # zero-padded operands (zero rows / columns add nothing to the sums)
        x = torch.zeros(mp, kp, dtype=torch.bfloat16, device=out.device)
        w = torch.zeros(np_, kp, dtype=torch.bfloat16, device=out.device)
        w[:n, :k] = eh_proj_weight
        c = torch.empty(mp, np_, dtype=torch.bfloat16, device=out.device)
    else:
        x = torch.empty(tokens, k, dtype=torch.bfloat16, device=out.device)
        w = eh_proj_weight.contiguous()
        c = out.view(tokens, n)
    key = ("norm", batch, seq, hidden, vocab, mp, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_norm(*key[1:])
    _COMPILED[key](input_ids.contiguous(), hidden_states.reshape(tokens, hidden).contiguous(),
                   word_embeddings.contiguous(), enorm_weight.contiguous(), hnorm_weight.contiguous(), x,
                   float(rms_norm_eps), stream)
    key = ("gemm", mp, np_, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(*key[1:])
    _COMPILED[key](x, w, c, stream)
    if padded:
        out.view(tokens, n).copy_(c[:tokens, :n])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both kernels for the fixed workload without a GPU; return the kernel names."""
    w = WORKLOAD
    tokens, hidden = w["batch"] * w["seq"], w["hidden"]
    norm = _compile_norm(w["batch"], w["seq"], hidden, w["vocab"], tokens, 2 * hidden, arch, ptx_dir)
    gemm = _compile_gemm(tokens, hidden, 2 * hidden, arch, ptx_dir)
    return list(norm.kernel_info) + list(gemm.kernel_info)
