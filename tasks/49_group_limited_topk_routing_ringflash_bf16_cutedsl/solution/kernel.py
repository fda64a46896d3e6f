"""CuTe DSL oracle for problem 49: group-limited top-8 MoE routing over 256 experts.

Two DSL kernels (two launches): the router GEMM, then the routing.

1. ``router_gemm_kernel``: logits = x W^T in fp32 on the tensor cores, written to an fp32 [tokens,
   256] buffer. x and W are bf16, so every product x_k * w_k is exact in fp32 and the reference's
   fp32 GEMM (TF32 off) differs from this one only in how the sums are rounded; bf16 ``mma.sync``
   m16n8k16 with fp32 accumulation computes those same exact products. The warp-level MMA rather
   than Hopper's WGMMA: the slice sums below need registers of their own, 4 per m16n8 tile here,
   where a WGMMA's would double the warpgroup's whole accumulator tile. The tensor core's own
   accumulation truncates instead of rounding to nearest, so each 32-wide K slice is summed by two
   mma's into zeroed registers and the slice sums are added to the running fp32 accumulators with
   ordinary round-to-nearest adds: the truncation then only touches a slice sum (about 1/11 of a
   logit's size at K = 4096), and the 128 slice additions round like the reference's own fp32 sums
   (in a CPU model that truncates every mma's sum, the weights' error is 1.2x the eager reference's
   this way, and 13x with all of K accumulated in the mma). A 256-thread CTA (4 x 2 warps, each warp
   2 x 8 m16n8k16 tiles: 32 tokens x 64 experts, interleaved with the other warps') computes a 128 x
   128 tile; K advances in slices of 32 through a two-stage shared-memory ring filled by 16-byte
   ``cp.async`` copies (the next slice's copies in flight while the current one is multiplied), with
   rows of 64 bytes whose pointer swizzle xors bits 7-8 of the byte address into bits 4-5, so a
   16-byte vector stays whole and the 8 rows an ``ldmatrix`` reads fall in different banks;
   ``ldmatrix`` feeds the MMA fragments. The last row tile ends at the last token, overlapping its
   neighbour (whose rows it recomputes with the same operations), so nothing is read or written past
   the tensors; fewer tokens than one tile (the small workload) are zero-padded to 128 rows on the
   host.
2. ``group_topk_route_kernel``: one warp per token. Lane ``l`` holds experts ``l*8 .. l*8+7`` in
   registers, so a group of 32 experts lives on 4 neighbouring lanes:

   a. sigmoid (1 / (1 + exp(-x)), as torch computes it) and the expert bias, per lane;
   b. each group's two largest biased scores: a per-lane top-2, merged over the group's 4 lanes
      with butterfly shuffles; the group score is their sum;
   c. each lane ranks its group among the 8 group scores (gathered by shuffles; ties go to the
      lower group) and masks its experts when the rank is 4 or more;
   d. 8 rounds of warp arg-max over the remaining biased scores (ties to the lower expert index);
      the winner's lane removes it, and the unbiased score travels with the arg-max;
   e. lane 0 writes the 8 indices (descending biased score) and weights s / (sum + 1e-20) * scale.

The selections only depend on orderings that make_inputs keeps at least 1e-4 apart, far above the
logits' summation error (a few 1e-6).
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

EXPERTS, GROUPS, TOPK_GROUPS, TOPK = 256, 8, 4, 8
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=16384, hidden=4096)
_WARPS = 4
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 256  # 4 x 2 warps
_NEG = float("-inf")
_COMPILED = {}


def _max(a, b):
    return cutlass.select_(a > b, a, b)


def _min(a, b):
    return cutlass.select_(a < b, a, b)


@cute.kernel
def router_gemm_kernel(mX: cute.Tensor, mW: cute.Tensor, mL: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mL[t, e] = sum_k mX[t, k] mW[e, k] in fp32; each 32-wide K slice summed from zero, then added."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    tokens = cute.size(mX, mode=[0])
    # the last row tile ends at the last token (overlapping its neighbour, whose rows it recomputes
    # with the same operations), so no load or store leaves the tensors
    row0 = cutlass.Int32(cutlass.select_(bm * _BM + _BM > tokens, tokens - _BM, bm * _BM))
    gA = cute.local_tile(cute.domain_offset((row0, 0), mX), (_BM, _BK), (0, None))  # (BM, BK, k tiles)
    gB = cute.local_tile(mW, (_BN, _BK), (bn, None))  # (BN, BK, k tiles)
    gC = cute.local_tile(cute.domain_offset((row0, 0), mL), (_BM, _BN), (0, bn))  # (BM, BN)

    # two stages of K-contiguous rows of 32 bf16 (64 bytes). The pointer swizzle acts on byte
    # addresses: bits 7-8 (row / 2) are xor-ed into bits 4-5 (the 16-byte chunk of the row), so a
    # cp.async vector stays whole and the 8 rows an ldmatrix reads land in different banks
    swizzle = cute.make_swizzle(2, 4, 3)
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BM, _BK, 2), (0, 1, 2)), 1024,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (_BN, _BK, 2), (0, 1, 2)), 1024,
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

    # 4 x 2 warps; each warp holds 2 (M) x 8 (N) m16n8k16 tiles of the 128 x 128 output
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
        for mi in cutlass.range_constexpr(cute.size(acc, mode=[1])):
            for ni in cutlass.range_constexpr(cute.size(acc, mode=[2])):
                part.fill(0.0)
                for kb in cutlass.range_constexpr(k_blocks):  # the slice's sum, from zero
                    cute.gemm(tiled_mma, part_mma, cute.append_ones(tCrA[None, mi, kb], 3),
                              cute.append_ones(tCrB[None, ni, kb], 3), part_mma)
                tile = acc[None, mi, ni]
                for v in cutlass.range_constexpr(cute.size(part)):  # round-to-nearest adds
                    tile[v] = tile[v] + part[v]
        cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch

    cute.autovec_copy(acc, tCgC)


@cute.jit
def router_gemm(mX: cute.Tensor, mW: cute.Tensor, mL: cute.Tensor, hidden: cutlass.Constexpr,
                stream: cuda.CUstream):
    tokens = cute.size(mL, mode=[0])
    experts = cute.size(mL, mode=[1])
    router_gemm_kernel(mX, mW, mL, hidden // _BK).launch(
        grid=[(tokens + _BM - 1) // _BM, experts // _BN, 1], block=[_GEMM_THREADS, 1, 1], stream=stream)


@cute.kernel
def group_topk_route_kernel(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor,
                            w_out: cute.Tensor, scaling: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    tokens = cute.size(logits, mode=[0])
    experts = cute.size(logits, mode=[1])
    per_lane = experts // 32
    lanes_per_group = experts // GROUPS // per_lane
    token = bidx * _WARPS + tidx // 32
    row = cutlass.select_(token < tokens, token, tokens - 1)  # whole warp stays in step

    x = cute.make_rmem_tensor((per_lane,), cutlass.Float32)
    x.store(cute.zipped_divide(logits[row, None], (per_lane,))[None, lane].load())
    s = []
    v = []
    for j in cutlass.range_constexpr(per_lane):
        sj = 1.0 / (1.0 + cute.math.exp(-x[j]))
        s.append(sj)
        v.append(sj + bias[lane * per_lane + j].to(cutlass.Float32))

    # Top-2 of the group: per lane, then merged across the group's lanes.
    t1 = v[0]
    t2 = cutlass.Float32(_NEG)
    for j in cutlass.range_constexpr(1, per_lane):
        t2 = _max(t2, _min(t1, v[j]))
        t1 = _max(t1, v[j])
    off = 1
    while off < lanes_per_group:
        o1 = cute.arch.shuffle_sync_bfly(t1, offset=off)
        o2 = cute.arch.shuffle_sync_bfly(t2, offset=off)
        t2 = _max(_min(t1, o1), _max(t2, o2))
        t1 = _max(t1, o1)
        off *= 2
    group_score = t1 + t2

    # Rank of this lane's group among all groups; keep the best TOPK_GROUPS.
    group = lane // lanes_per_group
    rank = cutlass.Int32(0)
    for g in cutlass.range_constexpr(GROUPS):
        other = cute.arch.shuffle_sync(group_score, g * lanes_per_group)
        beats = (other > group_score) | ((other == group_score) & (group > g))
        rank += cutlass.select_(beats, 1, 0)
    keep = rank < TOPK_GROUPS
    for j in cutlass.range_constexpr(per_lane):
        v[j] = cutlass.select_(keep, v[j], _NEG)

    # TOPK rounds of warp arg-max; the unbiased score travels with the winner.
    sel_idx = []
    sel_score = []
    for _ in cutlass.range_constexpr(TOPK):
        bv = v[0]
        bi = lane * per_lane
        bs = s[0]
        for j in cutlass.range_constexpr(1, per_lane):
            take = v[j] > bv
            bv = cutlass.select_(take, v[j], bv)
            bi = cutlass.select_(take, lane * per_lane + j, bi)
            bs = cutlass.select_(take, s[j], bs)
        for off in (16, 8, 4, 2, 1):
            ov = cute.arch.shuffle_sync_bfly(bv, offset=off)
            oi = cute.arch.shuffle_sync_bfly(bi, offset=off)
            os_ = cute.arch.shuffle_sync_bfly(bs, offset=off)
            take = (ov > bv) | ((ov == bv) & (oi < bi))
            bv = cutlass.select_(take, ov, bv)
            bi = cutlass.select_(take, oi, bi)
            bs = cutlass.select_(take, os_, bs)
        sel_idx.append(bi)
        sel_score.append(bs)
        for j in cutlass.range_constexpr(per_lane):
            v[j] = cutlass.select_(bi == lane * per_lane + j, _NEG, v[j])

    total = sel_score[0]
    for k in cutlass.range_constexpr(1, TOPK):
        total = total + sel_score[k]
    denom = total + 1e-20
    if token < tokens:
        if lane == 0:
            for k in cutlass.range_constexpr(TOPK):
                idx_out[token, k] = cutlass.Int64(sel_idx[k])
                w_out[token, k] = sel_score[k] / denom * scaling


@cute.jit
def group_topk_route(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor, w_out: cute.Tensor,
                     scaling: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(logits, mode=[0])
    group_topk_route_kernel(logits, bias, idx_out, w_out, scaling).launch(
        grid=[(tokens + _WARPS - 1) // _WARPS, 1, 1], block=[_WARPS * 32, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _row_major(dtype, shape):
    return make_fake_compact_tensor(dtype, shape, stride_order=(1, 0), assumed_align=16)


def _compile(kind, shape, arch=None, ptx_dir=None):
    """Compile one launcher for static shapes: ("gemm", (rows, experts, hidden)) or ("route", (tokens, experts))."""
    opts = _options(arch, ptx_dir)
    if kind == "gemm":
        rows, experts, hidden = shape
        return cute.compile(router_gemm, _row_major(cutlass.BFloat16, (rows, hidden)),
                            _row_major(cutlass.BFloat16, (experts, hidden)),
                            _row_major(cutlass.Float32, (rows, experts)), hidden, make_fake_stream(), options=opts)
    tokens, experts = shape
    assert experts % (32 * GROUPS) == 0, "lanes of a group must share whole groups"
    logits = _row_major(cutlass.Float32, (tokens, experts))
    bias = make_fake_compact_tensor(cutlass.BFloat16, (experts,))
    idx_out = make_fake_compact_tensor(cutlass.Int64, (tokens, TOPK), stride_order=(1, 0))
    w_out = make_fake_compact_tensor(cutlass.Float32, (tokens, TOPK), stride_order=(1, 0))
    return cute.compile(group_topk_route, logits, bias, idx_out, w_out, 1.0, make_fake_stream(), options=opts)


def _fn(kind, shape):
    key = (kind, shape)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, shape)
    return _COMPILED[key]


def solve(hidden_states, weight, expert_bias, routed_scaling_factor):
    tokens, hidden = hidden_states.shape
    experts = weight.shape[0]
    if experts % _BN or hidden % _BK:
        raise ValueError(f"experts must be a multiple of {_BN} and hidden of {_BK}")
    dev = hidden_states.device
    idx = torch.empty(tokens, TOPK, dtype=torch.int64, device=dev)
    w = torch.empty(tokens, TOPK, dtype=torch.float32, device=dev)
    if tokens == 0:
        return idx, w
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    x = hidden_states.contiguous()
    rows = max(tokens, _BM)
    if rows != tokens:  # fewer tokens than one row tile (the small workload): zero rows, never read back
        x = torch.cat([x, x.new_zeros(rows - tokens, hidden)])
    logits = torch.empty(rows, experts, dtype=torch.float32, device=dev)
    _fn("gemm", (rows, experts, hidden))(x, weight.contiguous(), logits, stream)
    _fn("route", (tokens, experts))(logits[:tokens], expert_bias.contiguous(), idx, w,
                                    float(routed_scaling_factor), stream)
    return idx, w


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile both kernels for the fixed workload without a GPU; return their names (PTX to ``ptx_dir``)."""
    tokens, hidden = WORKLOAD["tokens"], WORKLOAD["hidden"]
    names = []
    for kind, shape in (("gemm", (tokens, EXPERTS, hidden)), ("route", (tokens, EXPERTS))):
        names += list(_compile(kind, shape, arch, ptx_dir).kernel_info)
    return names
