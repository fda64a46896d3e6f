"""CuTe DSL oracle for problem 27: Qwen3-Omni vision patch merger (LayerNorm, 2x2 shuffle, GELU MLP), bf16.

Two DSL kernels (the GEMM kernel is built twice: with and without the GELU epilogue).

1. ``patch_layernorm_kernel``: one CTA per patch row. Each thread loads 16-byte vectors (8 bf16)
   into fp32 registers; the row sum and then the sum of squared deviations from the mean are
   reduced by warp shuffles and across warps through shared memory (every thread adds the per-warp
   sums in the same order): mean = sum / C, var = sum((x - mean)^2) / C (biased, as the reference),
   normed = bf16((x - mean) * rsqrt(var + eps) * w + b) in the reference's order. The 2x2 spatial
   shuffle is fused into the store: the host prepares, per patch, dest = token * 4 + slot (token of
   its 2x2 window in (t, h / 2, w / 2) order, slot = 2 * (h % 2) + w % 2, image by image from
   grid_thw), and the kernel writes the normalised row at columns slot * C .. slot * C + C - 1 of
   row ``token`` of the fc1 operand [tokens, 4 C]. rsqrt.approx (about 2^-23 relative) can move a
   value by one bf16 unit only next to a rounding midpoint.
2. ``bias_gemm_kernel``: C = A W^T + bias on the tensor cores (warp-level ``mma.sync`` m16n8k16,
   bf16 operands, fp32 accumulation): every operand value is bf16, so each product is exact and
   only the summation order differs from the reference's fp32 GEMMs. A CTA computes a 128 x 128
   tile with 4 warps (2 x 2, each 64 x 64); K advances in slices of 32 through a two-stage
   shared-memory ring filled by 16-byte ``cp.async`` copies (swizzled rows, so that ``ldmatrix``
   reads them without bank conflicts), and ``ldmatrix`` feeds the MMA fragments. Epilogue: the fp32
   sum plus the bias (one fp32 add, as the reference) rounded to bf16; for fc1 then the exact GELU
   x * 0.5 * (1 + erf(x / sqrt(2))) in fp32 (torch's formula), rounded to bf16. fc1 (6144 -> 6144)
   runs with the GELU epilogue and writes the fc2 operand; fc2 (6144 -> 3584) without.
Shapes that are not tile multiples (the small workload) use zero-padded scratch operands (padded
fc1 columns are gelu(0) = 0 and meet zero fc2 weights); the graded shapes need none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(images=8, frames=1, grid_h=64, grid_w=64, context=1536, out_dim=3584)
MERGE = 2
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


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return x.to(cutlass.BFloat16).to(cutlass.Float32)


@cute.kernel
def patch_layernorm_kernel(hidden: cute.Tensor, dest: cute.Tensor, weight: cute.Tensor, bias: cute.Tensor,
                           x: cute.Tensor, eps: cutlass.Float32, vec: cutlass.Constexpr, threads: cutlass.Constexpr,
                           steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    patch, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    width = cute.size(hidden, mode=[1])
    chunks = width // vec
    warps = threads // 32
    target = dest[patch]
    token = target // 4
    slot = target - token * 4

    smem = cutlass.memory.SmemAllocator()
    part_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)
    part_sq = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)

    g_h = cute.zipped_divide(hidden[patch, None], (vec,))
    g_w = cute.zipped_divide(weight, (vec,))
    g_b = cute.zipped_divide(bias, (vec,))
    g_x = cute.zipped_divide(x[token, None], (vec,))

    xs = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
    xs.fill(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            xs[None, k].store(g_h[None, c].load().to(cutlass.Float32))

    s = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        for j in cutlass.range_constexpr(vec):
            s = s + xs[j, k]
    s = cute.arch.warp_reduction_sum(s)
    if lane == 0:
        part_sum[warp] = s
    cute.arch.sync_threads()
    total = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total = total + part_sum[i]
    mean = total / width

    sq = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            for j in cutlass.range_constexpr(vec):
                xs[j, k] = xs[j, k] - mean
                sq = sq + xs[j, k] * xs[j, k]
    sq = cute.arch.warp_reduction_sum(sq)
    if lane == 0:
        part_sq[warp] = sq
    cute.arch.sync_threads()
    total_sq = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total_sq = total_sq + part_sq[i]
    rstd = cute.math.rsqrt(total_sq / width + eps)

    ys = cute.make_rmem_tensor((vec,), cutlass.Float32)
    ws = cute.make_rmem_tensor((vec,), cutlass.Float32)
    bs = cute.make_rmem_tensor((vec,), cutlass.Float32)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < chunks
        if ok:
            ws.store(g_w[None, c].load().to(cutlass.Float32))
            bs.store(g_b[None, c].load().to(cutlass.Float32))
            for j in cutlass.range_constexpr(vec):
                ys[j] = xs[j, k] * rstd * ws[j] + bs[j]
            g_x[None, slot * chunks + c].store(ys.load().to(cutlass.BFloat16))


@cute.jit
def patch_layernorm(hidden: cute.Tensor, dest: cute.Tensor, weight: cute.Tensor, bias: cute.Tensor, x: cute.Tensor,
                    eps: cutlass.Float32, stream: cuda.CUstream):
    patches = cute.size(hidden, mode=[0])
    vec, threads, steps, bounded = _plan(cute.size(hidden, mode=[1]))
    patch_layernorm_kernel(hidden, dest, weight, bias, x, eps, vec, threads, steps, bounded).launch(
        grid=[patches, 1, 1], block=[threads, 1, 1], stream=stream)


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
def bias_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr,
                     gelu: cutlass.Constexpr):
    """mC[m, n] = bf16(sum_k mA[m, k] * mB[n, k] + bias[n]), then (gelu) bf16(gelu_erf(.)); k_tiles slices of 32."""
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

    tCcC = thr_mma.partition_C(cute.make_identity_tensor((_BM, _BN)))  # (m, n) of every accumulator
    out = cute.make_fragment_like(acc, cutlass.BFloat16)
    for i in cutlass.range_constexpr(cute.size(acc)):
        v = _bf16(acc[i] + mBias[bn * _BN + tCcC[i][1]].to(cutlass.Float32))
        if cutlass.const_expr(gelu):  # torch's exact gelu: x * 0.5 * (1 + erf(x / sqrt(2)))
            v = v * 0.5 * (1.0 + cute.math.erf(v * 0.7071067811865476))
        out[i] = v.to(cutlass.BFloat16)
    cute.autovec_copy(out, tCgC)


@cute.jit
def bias_gemm(mA: cute.Tensor, mB: cute.Tensor, mBias: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr,
              gelu: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    bias_gemm_kernel(mA, mB, mBias, mC, k // _BK, gelu).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)



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


def _compile_norm(patches, width, x_rows, x_cols, arch=None, ptx_dir=None):
    hidden = _row_major((patches, width))
    dest = _row_major((patches,), cutlass.Int32, 4)
    w, b = _row_major((width,)), _row_major((width,))
    x = _row_major((x_rows, x_cols))
    return cute.compile(patch_layernorm, hidden, dest, w, b, x, 1e-6, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_gemm(m, n, k, gelu, arch=None, ptx_dir=None):
    """A [m, k], W [n, k], bias [n], C [m, n]; all tile multiples."""
    a, w, bias, c = _row_major((m, k)), _row_major((n, k)), _row_major((n,)), _row_major((m, n))
    return cute.compile(bias_gemm, a, w, bias, c, k, gelu, make_fake_stream(), options=_options(arch, ptx_dir))


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def _destinations(grid, device):
    """dest[p] = token * 4 + slot of every patch row p (2x2 windows in (t, h / 2, w / 2) order, image by image)."""
    parts, tokens = [], 0
    for t, h, w in grid:
        local = torch.arange(t * h * w, device=device, dtype=torch.int32)
        frame, rest = local // (h * w), local % (h * w)
        row, col = rest // w, rest % w
        token = tokens + frame * (h // MERGE) * (w // MERGE) + (row // MERGE) * (w // MERGE) + col // MERGE
        parts.append(token * (MERGE * MERGE) + (row % MERGE) * MERGE + col % MERGE)
        tokens += t * (h // MERGE) * (w // MERGE)
    return torch.cat(parts), tokens


def solve(hidden, grid_thw, ln_weight, ln_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias, eps):
    patches, width = hidden.shape
    merged, out_dim = fc1_weight.shape[0], fc2_weight.shape[0]
    dev = hidden.device
    dest, tokens = _destinations(grid_thw.tolist(), dev)
    out = torch.empty(tokens, out_dim, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, kp, n1, n2 = _up(tokens, _BM), _up(merged, _BK), _up(merged, _BN), _up(out_dim, _BN)
    if (mp, kp) != (tokens, merged):
        x = torch.zeros(mp, kp, dtype=torch.bfloat16, device=dev)
    else:
        x = torch.empty(tokens, merged, dtype=torch.bfloat16, device=dev)
    act = torch.empty(mp, n1, dtype=torch.bfloat16, device=dev)
    c = out if (mp, n2) == (tokens, out_dim) else torch.empty(mp, n2, dtype=torch.bfloat16, device=dev)
    key = ("norm", patches, width, mp, kp)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_norm(*key[1:])
    _COMPILED[key](hidden.contiguous(), dest, ln_weight.contiguous(), ln_bias.contiguous(), x, float(eps), stream)
    key = ("gemm", mp, n1, kp, True)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(*key[1:])
    _COMPILED[key](x, _padded(fc1_weight, (n1, kp)), _padded(fc1_bias, (n1,)), act, stream)
    key = ("gemm", mp, n2, n1, False)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_gemm(*key[1:])
    _COMPILED[key](act, _padded(fc2_weight, (n2, n1)), _padded(fc2_bias, (n2,)), c, stream)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c[:tokens, :out_dim])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile the norm kernel and both GEMM builds for the fixed workload without a GPU; kernel names."""
    w = WORKLOAD
    patches = w["images"] * w["frames"] * w["grid_h"] * w["grid_w"]
    tokens, merged = patches // (MERGE * MERGE), w["context"] * MERGE * MERGE
    names = list(_compile_norm(patches, w["context"], tokens, merged, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(tokens, merged, merged, True, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(tokens, w["out_dim"], merged, False, arch, ptx_dir).kernel_info)
    return names
