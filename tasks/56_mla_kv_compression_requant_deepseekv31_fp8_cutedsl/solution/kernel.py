"""CuTe DSL oracle for problem 56: FP8 block-quantised MLA kv_a / kv_b projections with a mid-chain RMSNorm.

Five DSL kernel launches (four kernels).

1. ``fp8_act_quant_kernel``: the activation's 1 x 128 blocks, one warp per block (4 values per
   lane), absmax by a butterfly max over the warp. As in the reference, in fp32:
   scale = max(absmax / 448, 1e-12) and q = clamp(x / scale, -448, 448) with correctly rounded
   divisions (``div.rn.f32``), then rounded to e4m3 to nearest even by the hardware
   ``cvt.rn.satfinite`` (the clamp keeps saturation from triggering). The e4m3 value is written
   back as bf16 (every e4m3 value is a bf16 value, so this is exact) with the fp32 scale per block.
   Rows past the token count (padding to whole 128-row GEMM tiles) get zeros.
2. ``fp8_weight_quant_kernel``: the same for the weight's 128 x 128 blocks, one 256-thread CTA per
   block (64 contiguous values per thread; warp max, then across the 8 warps in shared memory).
3. ``fp8_block_gemm_kernel``: C = bf16(sum over K blocks of (qa . qw) * (scale_a[m] * scale_w)) on
   the tensor cores: warp-level ``mma.sync`` m16n8k16 with bf16 operands (the exact e4m3 values)
   and fp32 accumulation. A 256-thread CTA (4 x 2 warps) computes a 128 x 128 tile; K advances in
   slices of 32 through a two-stage shared-memory ring filled by 16-byte ``cp.async`` copies and
   read by ``ldmatrix``. Every product of two e4m3 values is exact in fp32, so the raw sums of one
   128-wide K block are accumulated in a separate fp32 fragment, which is then multiplied by the
   row's activation scale times the tile's weight scale (staged per K block in shared memory) and
   added to the fp32 accumulator: the reference's dequantised fp32 GEMM up to summation order.
   kv_b's sum is rounded to bf16 once (the output); kv_a's stays fp32 for the RMSNorm.
4. ``rms_requant_kernel``: one CTA per token row of the first GEMM's fp32 output (a thread per 4 of
   the kv_lora values, so a warp per 128-wide quantisation block). The fp32 sum of squares is
   reduced over the CTA; r = 1 / sqrt(mean + eps) with IEEE operations; (x * r) * weight in fp32,
   re-quantised per 1 x 128 block exactly as in kernel 1 (each warp owns one block). The reference
   rounds x, x * r and the product to bf16 before its quantiser; the float64 anchor does not (the
   problem's grading note), and those roundings move e4m3 codes and block scales away from the
   anchor's: the TIRx oracle with them missed the 3x allowance by up to 1.03x on the H200, while an
   emulation of the fp32 path on 4096 tokens stayed at 0.25x of the allowance (0.39x with the
   roundings). The same kernel writes k_pe (columns kv_lora .. kv_lora + 63) rounded to bf16.
The first GEMM (kv_a) runs over the weight's 640 rows (576 live plus 64 padding rows, which only
affect k_pe's block scale, as in the reference); the second (kv_b) writes kv_expanded directly.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

FP8_MAX = 448.0
MIN_SCALE = 1e-12
QBLOCK = 128
ROPE_DIM = 64
HEAD_PAIR = 256
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=7168, kv_lora=512, heads=128)
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 256  # 4 x 2 warps
_ACT_WARPS = 4
_COMPILED = {}


def _max(a, b):
    return cutlass.Float32(cutlass.select_(a > b, a, b))


def _min(a, b):
    return cutlass.Float32(cutlass.select_(a < b, a, b))


def _add(a, b):
    return a + b


@cute.jit
def _quantize_vals(vals: cute.Tensor, amax: cutlass.Float32, n: cutlass.Constexpr):
    """vals[:] (fp32) -> their e4m3 values (still fp32) for the block absmax ``amax``; returns the scale."""
    scale = _max(amax / FP8_MAX, MIN_SCALE)
    for j in cutlass.range_constexpr(n):
        vals[j] = _max(_min(vals[j] / scale, FP8_MAX), -FP8_MAX)
    codes = cute.make_rmem_tensor((n,), cutlass.Float8E4M3FN)
    codes.store(vals.load().to(cutlass.Float8E4M3FN))
    vals.store(codes.load().to(cutlass.Float32))
    return scale


@cute.kernel
def fp8_act_quant_kernel(x: cute.Tensor, q: cute.Tensor, s: cute.Tensor, rows: cutlass.Int32):
    """q[r, :] / s[r, kb]: e4m3 values (as bf16) and scales of x's 1 x 128 blocks; zeros for r >= rows."""
    tidx, _, _ = cute.arch.thread_idx()
    row, by, _ = cute.arch.block_idx()
    warp = tidx // 32
    lane = tidx % 32
    kb = by * _ACT_WARPS + warp
    nkb = cute.size(s, mode=[1])
    if kb < nkb:
        vals = cute.make_rmem_tensor((4,), cutlass.Float32)
        vals.fill(0.0)
        chunk = kb * (QBLOCK // 4) + lane
        if row < rows:
            vals.store(cute.zipped_divide(x[row, None], (4,))[None, chunk].load().to(cutlass.Float32))
        amax = cutlass.Float32(0.0)
        for j in cutlass.range_constexpr(4):
            amax = _max(amax, _max(vals[j], -vals[j]))
        amax = cute.arch.warp_reduction(amax, _max)
        scale = _quantize_vals(vals, amax, 4)
        cute.zipped_divide(q[row, None], (4,))[None, chunk].store(vals.load().to(cutlass.BFloat16))
        if lane == 0:
            s[row, kb] = scale


@cute.kernel
def fp8_weight_quant_kernel(w: cute.Tensor, q: cute.Tensor, s: cute.Tensor):
    """q / s: e4m3 values (as bf16) and scales of w's 128 x 128 blocks; one CTA per block."""
    tidx, _, _ = cute.arch.thread_idx()
    bn, bk, _ = cute.arch.block_idx()
    warp = tidx // 32
    lane = tidx % 32
    row = bn * QBLOCK + tidx // 2
    chunk = bk * 2 + tidx % 2  # 64-value chunks along K
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((8,)), 16)
    vals = cute.make_rmem_tensor((64,), cutlass.Float32)
    vals.store(cute.zipped_divide(w[row, None], (64,))[None, chunk].load().to(cutlass.Float32))
    amax = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(64):
        amax = _max(amax, _max(vals[j], -vals[j]))
    amax = cute.arch.warp_reduction(amax, _max)
    if lane == 0:
        red[warp] = amax
    cute.arch.sync_threads()
    amax = red[0]
    for j in cutlass.range_constexpr(1, 8):
        amax = _max(amax, red[j])
    scale = _quantize_vals(vals, amax, 64)
    cute.zipped_divide(q[row, None], (64,))[None, chunk].store(vals.load().to(cutlass.BFloat16))
    if tidx == 0:
        s[bn, bk] = scale


@cute.kernel
def fp8_block_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mSA: cute.Tensor, mSB: cute.Tensor, mC: cute.Tensor,
                          k_blocks: cutlass.Constexpr):
    """mC[m, n] = sum_kb (sum_{k in kb} mA[m, k] mB[n, k]) * mSA[m, kb] * mSB[n // 128, kb], rounded once to
    mC's type (bf16, or fp32: unrounded)."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    slices = QBLOCK // _BK  # K slices per quantisation block
    k_tiles = k_blocks * slices
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))  # (BM, BK, k tiles)
    gB = cute.local_tile(mB, (_BN, _BK), (bn, None))  # (BN, BK, k tiles)
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))  # (BM, BN)

    # two stages of K-contiguous rows of 32 bf16 (64 bytes). The pointer swizzle acts on byte addresses:
    # bits 7-8 (row / 2) are xor-ed into bits 4-5 (the 16-byte chunk of the row), so a cp.async vector
    # stays whole (M = 3 would split it) and the 8 rows an ldmatrix reads land in different banks
    swizzle = cute.make_swizzle(2, 4, 3)
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BM, _BK, 2), (0, 1, 2)), 1024,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BN, _BK, 2), (0, 1, 2)), 1024,
                              swizzle=swizzle)
    sS = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BM, 2), stride=(1, _BM)), 16)

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
    tCcC = thr_mma.partition_C(cute.make_identity_tensor((_BM, _BN)))  # (m, n) of every accumulator
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)
    part = tiled_mma.make_fragment_C(tCgC)
    acc.fill(0.0)
    part.fill(0.0)

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
    kk_blocks = cute.size(tCrA, mode=[2])

    cute.copy(g2s, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kb in range(k_blocks):
        parity = kb % 2
        if tidx < _BM:  # this K block's combined scale per tile row
            sS[tidx, parity] = mSA[bm * _BM + tidx, kb] * mSB[bn, kb]
        for ks in cutlass.range_constexpr(slices):
            kt = kb * slices + ks
            if kt + 1 < k_tiles:  # prefetch the next slice into the other stage
                nxt = (kt + 1) % 2
                cute.copy(g2s, tAgA[None, None, None, kt + 1], tAsA[None, None, None, nxt])
                cute.copy(g2s, tBgB[None, None, None, kt + 1], tBsB[None, None, None, nxt])
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(1)  # this slice's group has landed
            cute.arch.sync_threads()
            stage = kt % 2
            for kk in cutlass.range_constexpr(kk_blocks):
                cute.copy(s2r_A, tXsA[None, None, kk, stage], tXrA[None, None, kk])
                cute.copy(s2r_B, tXsB[None, None, kk, stage], tXrB[None, None, kk])
                cute.gemm(tiled_mma, part, tCrA[None, None, kk], tCrB[None, None, kk], part)
            cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = acc[i] + part[i] * sS[tCcC[i][0], parity]
            part[i] = cutlass.Float32(0.0)

    out = cute.make_fragment_like(acc, mC.element_type)
    out.store(acc.load().to(mC.element_type))
    cute.autovec_copy(out, tCgC)


@cute.kernel
def rms_requant_kernel(comp: cute.Tensor, w: cute.Tensor, eps: cutlass.Float32, q: cute.Tensor, s: cute.Tensor,
                       kpe: cute.Tensor, rows: cutlass.Int32, kv_lora: cutlass.Constexpr):
    """RMSNorm of the fp32 comp[r, :kv_lora] in fp32 (no bf16 rounding before the quantiser, as the float64
    anchor), re-quantised per 1 x 128 block; k_pe = bf16(comp[r, kv_lora : kv_lora + 64]). Rows r >= rows
    are zero padding (quantised to zeros)."""
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    warp = tidx // 32
    lane = tidx % 32
    nwarps = kv_lora // QBLOCK
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((4,)), 16)
    vals = cute.make_rmem_tensor((4,), cutlass.Float32)
    vals.store(cute.zipped_divide(comp[row, None], (4,))[None, tidx].load())
    sq = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(4):
        sq = sq + vals[j] * vals[j]
    sq = cute.arch.warp_reduction(sq, _add)
    if lane == 0:
        red[warp] = sq
    cute.arch.sync_threads()
    total = red[0]
    for j in cutlass.range_constexpr(1, nwarps):
        total = total + red[j]
    r = cutlass.Float32(1.0) / cute.math.sqrt(total / kv_lora + eps)
    wv = cute.make_rmem_tensor((4,), cutlass.Float32)
    wv.store(cute.zipped_divide(w, (4,))[None, tidx].load().to(cutlass.Float32))
    for j in cutlass.range_constexpr(4):
        vals[j] = vals[j] * r * wv[j]  # (x * r) * w in fp32
    amax = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(4):
        amax = _max(amax, _max(vals[j], -vals[j]))
    amax = cute.arch.warp_reduction(amax, _max)
    scale = _quantize_vals(vals, amax, 4)
    cute.zipped_divide(q[row, None], (4,))[None, tidx].store(vals.load().to(cutlass.BFloat16))
    if lane == 0:
        s[row, warp] = scale
    if row < rows:
        for j in range(tidx, ROPE_DIM, kv_lora // 4):
            kpe[row, j] = cutlass.BFloat16(comp[row, kv_lora + j])


@cute.jit
def act_quant(x: cute.Tensor, q: cute.Tensor, s: cute.Tensor, rows: cutlass.Int32, stream: cuda.CUstream):
    padded = cute.size(q, mode=[0])
    nkb = cute.size(s, mode=[1])
    fp8_act_quant_kernel(x, q, s, rows).launch(
        grid=[padded, (nkb + _ACT_WARPS - 1) // _ACT_WARPS, 1], block=[32 * _ACT_WARPS, 1, 1], stream=stream)


@cute.jit
def weight_quant(w: cute.Tensor, q: cute.Tensor, s: cute.Tensor, stream: cuda.CUstream):
    fp8_weight_quant_kernel(w, q, s).launch(
        grid=[cute.size(s, mode=[0]), cute.size(s, mode=[1]), 1], block=[256, 1, 1], stream=stream)


@cute.jit
def block_gemm(mA: cute.Tensor, mB: cute.Tensor, mSA: cute.Tensor, mSB: cute.Tensor, mC: cute.Tensor,
               k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    fp8_block_gemm_kernel(mA, mB, mSA, mSB, mC, k // QBLOCK).launch(
        grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


@cute.jit
def rms_requant(comp: cute.Tensor, w: cute.Tensor, eps: cutlass.Float32, q: cute.Tensor, s: cute.Tensor,
                kpe: cute.Tensor, rows: cutlass.Int32, kv_lora: cutlass.Constexpr, stream: cuda.CUstream):
    padded = cute.size(q, mode=[0])
    rms_requant_kernel(comp, w, eps, q, s, kpe, rows, kv_lora).launch(
        grid=[padded, 1, 1], block=[kv_lora // 4, 1, 1], stream=stream)


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
    """Compile one kernel for static shapes; ``shape`` is the kind's key tuple."""
    bf16, f32 = cutlass.BFloat16, cutlass.Float32
    opts = _options(arch, ptx_dir)
    if kind == "act":
        rows, padded, k = shape
        return cute.compile(act_quant, _row_major(bf16, (rows, k)), _row_major(bf16, (padded, k)),
                            _row_major(f32, (padded, k // QBLOCK), 4), rows, make_fake_stream(),
                            options=opts)
    if kind == "weight":
        n, k = shape
        return cute.compile(weight_quant, _row_major(bf16, (n, k)), _row_major(bf16, (n, k)),
                            _row_major(f32, (n // QBLOCK, k // QBLOCK), 4), make_fake_stream(), options=opts)
    if kind == "gemm":
        m, n, k, out_fp32 = shape
        return cute.compile(block_gemm, _row_major(bf16, (m, k)), _row_major(bf16, (n, k)),
                            _row_major(f32, (m, k // QBLOCK), 4), _row_major(f32, (n // QBLOCK, k // QBLOCK), 4),
                            _row_major(f32 if out_fp32 else bf16, (m, n)), k, make_fake_stream(), options=opts)
    rows, padded, width, kv_lora = shape
    return cute.compile(rms_requant, _row_major(f32, (padded, width)), _row_major(bf16, (kv_lora,)),
                        1e-6, _row_major(bf16, (padded, kv_lora)),
                        _row_major(f32, (padded, kv_lora // QBLOCK), 4), _row_major(bf16, (rows, ROPE_DIM)),
                        rows, kv_lora, make_fake_stream(), options=opts)


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, shape)
    return _COMPILED[key]


def _quant_weight(w, stream):
    n, k = w.shape
    q = torch.empty(n, k, dtype=torch.bfloat16, device=w.device)
    s = torch.empty(n // QBLOCK, k // QBLOCK, dtype=torch.float32, device=w.device)
    _fn("weight", (n, k))(w.contiguous(), q, s, stream)
    return q, s


def _gemm(qa, sa, qw, sw, stream, out_fp32=False):
    m, k = qa.shape
    n = qw.shape[0]
    c = torch.empty(m, n, dtype=torch.float32 if out_fp32 else torch.bfloat16, device=qa.device)
    _fn("gemm", (m, n, k, out_fp32))(qa, qw, sa, sw, c, stream)
    return c


def solve(hidden_states, kv_a_proj_weight, kv_a_layernorm_weight, kv_b_proj_weight, rms_norm_eps):
    batch, seq, hidden = hidden_states.shape
    kv_lora = kv_a_layernorm_weight.shape[0]
    a_rows = kv_a_proj_weight.shape[0]
    b_rows = kv_b_proj_weight.shape[0]
    rows = batch * seq
    dev = hidden_states.device
    if rows == 0:
        return (torch.empty(batch, seq, b_rows // HEAD_PAIR, HEAD_PAIR, dtype=torch.bfloat16, device=dev),
                torch.empty(batch, seq, 1, ROPE_DIM, dtype=torch.bfloat16, device=dev))
    padded = (rows + _BM - 1) // _BM * _BM
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)

    qa = torch.empty(padded, hidden, dtype=torch.bfloat16, device=dev)
    sa = torch.empty(padded, hidden // QBLOCK, dtype=torch.float32, device=dev)
    _fn("act", (rows, padded, hidden))(hidden_states.reshape(rows, hidden).contiguous(), qa, sa, rows, stream)
    qwa, swa = _quant_weight(kv_a_proj_weight, stream)
    comp = _gemm(qa, sa, qwa, swa, stream, out_fp32=True)  # fp32 for the RMSNorm; k_pe is rounded there

    qn = torch.empty(padded, kv_lora, dtype=torch.bfloat16, device=dev)
    sn = torch.empty(padded, kv_lora // QBLOCK, dtype=torch.float32, device=dev)
    k_pe = torch.empty(rows, ROPE_DIM, dtype=torch.bfloat16, device=dev)
    _fn("rms", (rows, padded, a_rows, kv_lora))(comp, kv_a_layernorm_weight.contiguous(), float(rms_norm_eps),
                                                qn, sn, k_pe, rows, stream)
    qwb, swb = _quant_weight(kv_b_proj_weight, stream)
    kv = _gemm(qn, sn, qwb, swb, stream)
    if padded != rows:
        kv = kv[:rows].contiguous()
    return kv.view(batch, seq, b_rows // HEAD_PAIR, HEAD_PAIR), k_pe.view(batch, seq, 1, ROPE_DIM)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names."""
    w = WORKLOAD
    rows = w["batch"] * w["seq"]
    padded = (rows + _BM - 1) // _BM * _BM
    a_rows = w["kv_lora"] + 2 * ROPE_DIM
    b_rows = w["heads"] * HEAD_PAIR
    names = []
    for kind, shape in (("act", (rows, padded, w["hidden"])), ("weight", (a_rows, w["hidden"])),
                        ("gemm", (padded, a_rows, w["hidden"], True)), ("rms", (rows, padded, a_rows, w["kv_lora"])),
                        ("weight", (b_rows, w["kv_lora"])), ("gemm", (padded, b_rows, w["kv_lora"], False))):
        names += list(_compile(kind, shape, arch, ptx_dir).kernel_info)
    return names
