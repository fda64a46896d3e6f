"""CuTe DSL oracle for problem 60: NVFP4 x NVFP4 GEMM from pre-quantised operands.

One DSL kernel, ``nvfp4_gemm_kernel``: the NVFP4 decode is fused into the operand load of a
tensor-core GEMM, C = (A_q @ B_q^T) * (g_a * g_b), where A_q and B_q hold code value * block scale.

Why this route, and why it is exact up to summation order: an E2M1 value (at most 2 significant
bits) times an e4m3 scale (at most 4) has at most 6 significant bits and is 0 or in [2^-10, 2688],
so code * scale is exact in bf16, and the product of two such values (at most 12 bits) is exact in
fp32. The GEMM therefore runs on bf16 ``mma.sync`` m16n8k16 with fp32 accumulation (Hopper has no
FP4 MMA; the warp-level MMA rather than WGMMA because the slice sums below need registers of their
own, 4 per m16n8 tile, where a WGMMA's would double the warpgroup's whole accumulator tile) and sums
the exact products the reference's fp32 GEMM sums (its operands are fl(code * scale * g), one
rounding each). The two global scales are applied once to each fp32 sum: g_a * g_b is formed in
double on the host (exact) and rounded once to fp32, then the sum is multiplied by it, one more
rounding. The tensor core's own accumulation truncates instead of rounding to nearest, so each
32-wide K slice is summed by two mma's into zeroed registers and the slice sums are added to the
running fp32 accumulators with round-to-nearest adds (in a CPU model that truncates every mma's sum,
the output's error is then below a seventh of the eager reference's, whose operands each carry a
rounding).

Work partition: a 256-thread CTA (4 x 2 warps, each warp 2 x 8 m16n8k16 tiles: 32 x 64 outputs,
interleaved with the other warps') computes a 128 x 128 tile of C (M, N and K fixed per build, K a
multiple of 32). K advances in slices of 32 through two shared-memory stages of bf16 rows (64 bytes;
the pointer swizzle xors bits 7-8 of the byte address into bits 4-5, so 16-byte vectors stay whole
and the 8 rows an ``ldmatrix`` reads fall in different banks); ``ldmatrix`` feeds the MMA fragments.
For each slice, thread t loads, for one row of A and one row of B (row t / 2), the 8 packed bytes of
one 16-element block (block 2 * slice + t % 2, two 32-bit words, low nibble = even element) and its
e4m3 scale byte; the next slice's loads are issued before the current slice is multiplied and
decoded into the other stage afterwards (one barrier per slice). Decoding is exact integer and fp32
arithmetic: twice an E2M1 magnitude (0, 1, 2, 3, 4, 6, 8, 12 for codes 0-7) is a 4-bit field of one
32-bit constant, converted to fp32 and multiplied by (block scale / 2) or its negation (sign bit 3);
the e4m3 scale is (8 + M) * 2^(E - 10), or M * 2^-9 when E = 0, from its bit fields (no NaN code
occurs: scales are at most 448). The fp32 products, exact in bf16, are narrowed by ``cvt.rn.bf16x2``
(no rounding happens) and stored as two 16-byte vectors. Rows of A or B past the matrix repeat its
last row and their outputs are not stored: a partial tile (only the small workload has one) checks
every store's coordinates, a full tile stores whole 8-byte vectors.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

BLOCK = 16
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=8192, features=1920)
_BM, _BN, _BK = 128, 128, 32
_THREADS = 256  # 4 x 2 warps
_TWICE_E2M1 = 0xC8643210  # nibble q = twice the magnitude of E2M1 code q (0, 0.5, 1, 1.5, 2, 3, 4, 6)
_COMPILED = {}


def _int(cond, a, b):
    return cutlass.Int32(cutlass.select_(cond, a, b))


def _float(cond, a, b):
    return cutlass.Float32(cutlass.select_(cond, a, b))


def _e4m3(byte):
    """Value of an e4m3fn byte held in an Int32 (finite codes only; exact)."""
    e = (byte >> 3) & 15
    m = byte & 7
    mant = _int(e == 0, m, m + 8)
    shift = _int(e == 0, 1, e)
    mag = cutlass.Float32(mant << shift) * (2.0 ** -10)
    return _float(byte >= 128, -mag, mag)


def _decode_block(words, scale_byte, out):
    """out[0, j] = bf16(E2M1 code j * scale) for the 16 codes of two packed words (exact)."""
    half_scale = _e4m3(scale_byte) * 0.5
    neg_half_scale = -half_scale
    vals = cute.make_rmem_tensor((1, BLOCK), cutlass.Float32)
    for j in range(BLOCK):  # a plain helper: the loop unrolls while the kernel is traced
        code = cutlass.Int32(words[0, j // 8] >> (4 * (j % 8))) & 15
        twice = cutlass.Uint32(_TWICE_E2M1) >> cutlass.Uint32((code & 7) << 2)
        vals[0, j] = cutlass.Float32(twice & 15) * _float(code >= 8, neg_half_scale, half_scale)
    out.store(vals.load().to(cutlass.BFloat16))


@cute.kernel
def nvfp4_gemm_kernel(mA: cute.Tensor, mSA: cute.Tensor, mB: cute.Tensor, mSB: cute.Tensor, gs: cutlass.Float32,
                      mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = (sum_k A[m, k] B[n, k]) * gs from packed codes (as 32-bit words) and e4m3 scale bytes."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    lrow = tidx // 2
    half = tidx % 2
    arow = cutlass.Int32(cutlass.select_(bm * _BM + lrow < m, bm * _BM + lrow, m - 1))
    brow = cutlass.Int32(cutlass.select_(bn * _BN + lrow < n, bn * _BN + lrow, n - 1))
    gA = cute.local_tile(mA, (1, 2), (arow, None))  # (1, 2 words, blocks of the row)
    gB = cute.local_tile(mB, (1, 2), (brow, None))
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))

    swizzle = cute.make_swizzle(2, 4, 3)
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BM, _BK, 2), (0, 1, 2)), 1024,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BN, _BK, 2), (0, 1, 2)), 1024,
                              swizzle=swizzle)

    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((4, 2, 1)), permutation_mnk=(64, 32, 16))
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsB = thr_mma.partition_B(sB)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)  # (MMA, MMA_M, MMA_N)
    acc.fill(0.0)
    part = cute.make_rmem_tensor_like(acc[None, 0, 0])  # one MMA tile's slice sum
    part_mma = cute.append_ones(part, 3)  # (MMA, 1, 1): one m16n8k16 per gemm call

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

    # this thread's operand registers: two words of packed codes and a scale byte, for A and B
    ra = cute.make_rmem_tensor((1, 2), cutlass.Uint32)
    rb = cute.make_rmem_tensor((1, 2), cutlass.Uint32)
    ra.store(gA[None, None, half].load())
    rb.store(gB[None, None, half].load())
    sa = cutlass.Int32(mSA[arow, half])
    sb = cutlass.Int32(mSB[brow, half])
    _decode_block(ra, sa, cute.local_tile(sA[None, None, 0], (1, BLOCK), (lrow, half)))
    _decode_block(rb, sb, cute.local_tile(sB[None, None, 0], (1, BLOCK), (lrow, half)))
    cute.arch.sync_threads()
    for kt in range(k_tiles):
        stage = kt % 2
        if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
            blk = (kt + 1) * 2 + half
            ra.store(gA[None, None, blk].load())
            rb.store(gB[None, None, blk].load())
            sa = cutlass.Int32(mSA[arow, blk])
            sb = cutlass.Int32(mSB[brow, blk])
        for kb in cutlass.range_constexpr(k_blocks):
            cute.copy(s2r_A, tXsA[None, None, kb, stage], tXrA[None, None, kb])
            cute.copy(s2r_B, tXsB[None, None, kb, stage], tXrB[None, None, kb])
        for mi in cutlass.range_constexpr(cute.size(acc, mode=[1])):
            for ni in cutlass.range_constexpr(cute.size(acc, mode=[2])):
                part.fill(0.0)
                for kb in cutlass.range_constexpr(k_blocks):  # the slice's sum, from zero
                    cute.gemm(tiled_mma, part_mma, cute.append_ones(tCrA[None, mi, kb], 3),
                              cute.append_ones(tCrB[None, ni, kb], 3), part_mma)
                tile = acc[None, mi, ni]
                for v in cutlass.range_constexpr(cute.size(part)):  # round-to-nearest adds
                    tile[v] = tile[v] + part[v]
        if kt + 1 < k_tiles:  # decode into the other stage, last read before the previous barrier
            nxt = 1 - stage
            _decode_block(ra, sa, cute.local_tile(sA[None, None, nxt], (1, BLOCK), (lrow, half)))
            _decode_block(rb, sb, cute.local_tile(sB[None, None, nxt], (1, BLOCK), (lrow, half)))
        cute.arch.sync_threads()

    acc.store(acc.load() * gs)
    if bm * _BM + _BM <= m and bn * _BN + _BN <= n:
        cute.autovec_copy(acc, tCgC)
    else:  # a partial tile (only the small workload has one): store what lies inside C
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((_BM, _BN)))  # (m, n) of every accumulator
        for i in cutlass.range(cute.size(acc), unroll_full=True):
            if bm * _BM + tCcC[i][0] < m and bn * _BN + tCcC[i][1] < n:
                tCgC[i] = acc[i]


@cute.jit
def nvfp4_gemm(mA: cute.Tensor, mSA: cute.Tensor, mB: cute.Tensor, mSB: cute.Tensor, gs: cutlass.Float32,
               mC: cute.Tensor, k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    nvfp4_gemm_kernel(mA, mSA, mB, mSB, gs, mC, k // _BK).launch(
        grid=[(m + _BM - 1) // _BM, (n + _BN - 1) // _BN, 1], block=[_THREADS, 1, 1], stream=stream)


def _row_major(dtype, shape, align):
    return make_fake_compact_tensor(dtype, shape, stride_order=(1, 0), assumed_align=align)


def _compile(m, n, k, arch=None, ptx_dir=None):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    u32, u8 = cutlass.Uint32, cutlass.Uint8
    return cute.compile(nvfp4_gemm, _row_major(u32, (m, k // 8), 8), _row_major(u8, (m, k // BLOCK), 1),
                        _row_major(u32, (n, k // 8), 8), _row_major(u8, (n, k // BLOCK), 1), 1.0,
                        _row_major(cutlass.Float32, (m, n), 16), k, make_fake_stream(), options=options)


def _operand(codes, scale):
    """[..., K/2] packed codes, [..., K/16] e4m3 scales -> ([rows, K/8] uint32, [rows, K/16] uint8)."""
    half = codes.shape[-1]
    rows = codes.numel() // half
    return (codes.contiguous().view(rows, half).view(torch.uint32),
            scale.contiguous().view(torch.uint8).view(rows, half // (BLOCK // 2)))


def solve(hidden_states, hidden_states_scale, global_decode_scale_input, weight, weight_scale,
          global_decode_scale_weight):
    k = hidden_states.shape[-1] * 2
    n = weight.shape[-2]
    if k % _BK:
        raise ValueError(f"K must be a multiple of {_BK}")
    if weight.numel() != n * k // 2:
        raise ValueError("this kernel multiplies by one weight matrix")
    a32, sa = _operand(hidden_states, hidden_states_scale)
    b32, sb = _operand(weight, weight_scale)
    m = a32.shape[0]
    out = torch.empty(*hidden_states.shape[:-1], n, dtype=torch.float32, device=hidden_states.device)
    if m > 0 and n > 0:
        gs = float(global_decode_scale_input) * float(global_decode_scale_weight)  # exact in double
        key = (m, n, k)
        if key not in _COMPILED:
            _COMPILED[key] = _compile(m, n, k)
        _COMPILED[key](a32, sa, b32, sb, gs, out.view(m, n),
                       cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile the kernel for the graded workload without a GPU; return its name (PTX to ``ptx_dir``)."""
    f = WORKLOAD["features"]
    return list(_compile(WORKLOAD["tokens"], f, f, arch, ptx_dir).kernel_info)
