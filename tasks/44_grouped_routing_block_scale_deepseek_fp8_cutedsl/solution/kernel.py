"""CuTe DSL oracle for problem 44: DeepSeek-V3 FP8 block-scaled MoE on one expert-parallel rank.

Four DSL kernels; torch only sorts indices between the first and the rest.

1. Routing, one warp per token: lane ``l`` holds experts ``l*E/32 ..``, so a group is 4 lanes.
   sigmoid (1 / (1 + exp(-x))), the bias, each group's top-2 sum merged by butterfly shuffles,
   the group's rank among the 8 (ties to the lower group), then 8 rounds of a warp arg-max over
   the kept groups (ties to the lower expert); weights s / (sum + 1e-20) * scale.
2. Glue (torch): the (token, slot) pairs whose expert is local are sorted by expert (stable, so
   tokens ascend within an expert); each expert's run of rows is cut into tiles of 64 rows,
   described by (expert, first row, end row) in a fixed-size table (unused entries are empty, so
   nothing is read back to the host); a per-token table lists its rows in ascending expert order.
3. Gate/up GEMM with SwiGLU: a CTA takes one 64-row tile and 64 columns j of h, i.e. the
   weight rows j (the multiplied half) and inter + j (the silu half), and loops over K in steps
   of 32. Operands are decoded from their e4m3 bytes (read four per 32-bit word, decoded exactly
   from the bit fields) and multiplied by their 128-block scale while being stored to shared
   memory, so they equal the reference's dequantised fp32 values; the gathered token rows use
   the per-(token, block) activation scale. 256 threads each hold a 4 x 8 fp32 accumulator
   (rows ty + 16i, columns tx + 16j: 4 of each half, the same h columns), plain fp32 FMAs.
   h = silu(G[:, inter + j]) * G[:, j] in fp32 is written per sorted row.
4. Down GEMM: the same CTA shape over h (fp32) and the dequantised W2 (64 rows x 128 output
   columns); the epilogue writes y * weight of the row's (token, slot) pair.
5. Combine: per token, its rows' y * weight are added in ascending expert order into an fp32
   sum starting at 0 (the reference's index_add order) and rounded once to bf16.
No tensor cores: the fp32 GEMMs run as SIMT FMAs, matching the reference's fp32 arithmetic.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 12): 48.5 ms against the
eager reference's 44.4 ms (0.91x). Run 7 read 47.9 against 44.3 ms, and the plain timing loop of run 12
47.6 against 44.3 ms. The grader's profiled call puts 98 % of the GPU time in the two GEMMs (gate/up
31.1 ms, down 14.3 ms; combine 0.34 ms, routing 0.03 ms, the torch sort 0.1 ms). At the
balanced share of routed rows (14107 tokens x 8 slots x 32 of 256 experts, about 14.1k rows; the
problem's physical_floor bounds it at half that) the GEMMs are about 1.24 TFLOP: 26 TFLOP/s here
against eager's 28, whose cuBLAS SGEMMs on the dequantised fp32 copies issue the same fp32 FMAs
faster than these tiled SIMT loops. The route that would beat eager, not taken here: the tensor
cores. An e4m3 value is exact in bf16 (3 mantissa bits of 7), so the operands can be decoded to
bf16 and multiplied by mma.sync (or WGMMA) with fp32 accumulation, each 32-wide K slice summed from
zero and scaled by its two 128-block scales before an IEEE fp32 add (as the NVFP4 oracles of 60
do), at many times the SIMT FMA rate.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

GROUPS, TOPK_GROUPS, TOPK, BLOCK = 8, 4, 8, 128
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=14107, experts=256, local_experts=32, hidden=7168, inter=2048)
BM, BN_H, BN_Y, BK = 64, 64, 128, 32  # rows per tile, h columns per CTA, y columns per CTA, K step
_THREADS = 256
_ROUTE_WARPS = 4
_NEG = float("-inf")
_COMPILED = {}


def _max(a, b):
    return cutlass.select_(a > b, a, b)


def _min(a, b):
    return cutlass.select_(a < b, a, b)


def _int(cond, a, b):
    return cutlass.Int32(cutlass.select_(cond, a, b))


def _e4m3(byte):
    """Value of an e4m3fn byte (an Int32 in 0..255; finite codes only), exact."""
    e = (byte >> 3) & 15
    m = byte & 7
    mant = _int(e == 0, m, m + 8)
    shift = _int(e == 0, 1, e)
    mag = cutlass.Float32(mant << shift) * (2.0 ** -10)
    return cutlass.Float32(cutlass.select_(byte >= 128, -mag, mag))


@cute.kernel
def moe_route_kernel(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor, w_out: cute.Tensor,
                     scaling: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    tokens = cute.size(logits, mode=[0])
    experts = cute.size(logits, mode=[1])
    per_lane = experts // 32
    lanes_per_group = experts // GROUPS // per_lane
    token = bidx * _ROUTE_WARPS + tidx // 32
    row = cutlass.select_(token < tokens, token, tokens - 1)  # the whole warp stays in step

    s = []
    v = []
    for j in cutlass.range_constexpr(per_lane):
        sj = 1.0 / (1.0 + cute.math.exp(-logits[row, lane * per_lane + j]))
        s.append(sj)
        v.append(sj + bias[lane * per_lane + j].to(cutlass.Float32))

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

    group = lane // lanes_per_group
    rank = cutlass.Int32(0)
    for g in cutlass.range_constexpr(GROUPS):
        other = cute.arch.shuffle_sync(group_score, g * lanes_per_group)
        beats = (other > group_score) | ((other == group_score) & (group > g))
        rank += cutlass.select_(beats, 1, 0)
    keep = rank < TOPK_GROUPS
    for j in cutlass.range_constexpr(per_lane):
        v[j] = cutlass.select_(keep, v[j], _NEG)

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
        for o in (16, 8, 4, 2, 1):
            ov = cute.arch.shuffle_sync_bfly(bv, offset=o)
            oi = cute.arch.shuffle_sync_bfly(bi, offset=o)
            os_ = cute.arch.shuffle_sync_bfly(bs, offset=o)
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
def moe_route(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor, w_out: cute.Tensor,
              scaling: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(logits, mode=[0])
    moe_route_kernel(logits, bias, idx_out, w_out, scaling).launch(
        grid=[(tokens + _ROUTE_WARPS - 1) // _ROUTE_WARPS, 1, 1], block=[_ROUTE_WARPS * 32, 1, 1],
        stream=stream)


def _smem_tiles():
    """Shared K x rows and K x columns fp32 tiles, rows padded by one word (no bank conflicts)."""
    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BM), stride=(BM + 1, 1)),
                               byte_alignment=16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, 2 * BN_H), stride=(2 * BN_H + 1, 1)),
                               byte_alignment=16)
    return a_s, b_s


@cute.kernel
def moe_gate_up_kernel(x_words: cute.Tensor, x_scale: cute.Tensor, w13_words: cute.Tensor,
                       w13_scale: cute.Tensor, sorted_tok: cute.Tensor, tiles: cute.Tensor,
                       h_buf: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    hidden = cute.size(x_words, mode=[1]) * 4
    inter = cute.size(h_buf, mode=[1])
    a_s, b_s = _smem_tiles()
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * BN_H
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        acc.fill(0.0)
        for k0 in range(0, hidden, BK):
            kb = k0 // BLOCK
            kw = k0 // 4
            for q in cutlass.range_constexpr(BM * BK // 4 // _THREADS):
                i = tidx + q * _THREADS
                r = i // (BK // 4)
                w = i - r * (BK // 4)
                p = row_begin + r
                if p < row_end:
                    tok = sorted_tok[p]
                    word = x_words[tok, kw + w]
                    sc = x_scale[kb, tok]
                    for b in cutlass.range_constexpr(4):
                        a_s[4 * w + b, r] = _e4m3((word >> (8 * b)) & 255) * sc
                else:
                    for b in cutlass.range_constexpr(4):
                        a_s[4 * w + b, r] = cutlass.Float32(0.0)
            for q in cutlass.range_constexpr(2 * BN_H * BK // 4 // _THREADS):
                i = tidx + q * _THREADS
                c = i // (BK // 4)
                w = i - c * (BK // 4)
                wrow = _int(c < BN_H, n0 + c, inter + n0 + c - BN_H)
                word = w13_words[expert, wrow, kw + w]
                sc = w13_scale[expert, wrow // BLOCK, kb]
                for b in cutlass.range_constexpr(4):
                    b_s[4 * w + b, c] = _e4m3((word >> (8 * b)) & 255) * sc
            cute.arch.sync_threads()
            for k in cutlass.range_constexpr(BK):
                av = []
                for ii in cutlass.range_constexpr(4):
                    av.append(a_s[k, ty + 16 * ii])
                for jj in cutlass.range_constexpr(8):
                    bv = b_s[k, tx + 16 * jj]
                    for ii in cutlass.range_constexpr(4):
                        acc[ii, jj] = acc[ii, jj] + av[ii] * bv
            cute.arch.sync_threads()
        for ii in cutlass.range_constexpr(4):
            p = row_begin + ty + 16 * ii
            if p < row_end:
                for jj in cutlass.range_constexpr(4):
                    up = acc[ii, jj]
                    gate = acc[ii, jj + 4]
                    h_buf[p, n0 + tx + 16 * jj] = gate / (1.0 + cute.math.exp(-gate)) * up


@cute.kernel
def moe_down_kernel(h_buf: cute.Tensor, w2_words: cute.Tensor, w2_scale: cute.Tensor,
                    sorted_w: cute.Tensor, tiles: cute.Tensor, y_buf: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    inter = cute.size(h_buf, mode=[1])
    a_s, b_s = _smem_tiles()
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * BN_Y
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        acc.fill(0.0)
        for k0 in range(0, inter, BK):
            kb = k0 // BLOCK
            kw = k0 // 4
            for q in cutlass.range_constexpr(BM * BK // _THREADS):
                i = tidx + q * _THREADS
                r = i // BK
                k = i - r * BK
                p = row_begin + r
                a_s[k, r] = cutlass.Float32(0.0)
                if p < row_end:
                    a_s[k, r] = h_buf[p, k0 + k]
            for q in cutlass.range_constexpr(BN_Y * BK // 4 // _THREADS):
                i = tidx + q * _THREADS
                c = i // (BK // 4)
                w = i - c * (BK // 4)
                word = w2_words[expert, n0 + c, kw + w]
                sc = w2_scale[expert, (n0 + c) // BLOCK, kb]
                for b in cutlass.range_constexpr(4):
                    b_s[4 * w + b, c] = _e4m3((word >> (8 * b)) & 255) * sc
            cute.arch.sync_threads()
            for k in cutlass.range_constexpr(BK):
                av = []
                for ii in cutlass.range_constexpr(4):
                    av.append(a_s[k, ty + 16 * ii])
                for jj in cutlass.range_constexpr(8):
                    bv = b_s[k, tx + 16 * jj]
                    for ii in cutlass.range_constexpr(4):
                        acc[ii, jj] = acc[ii, jj] + av[ii] * bv
            cute.arch.sync_threads()
        for ii in cutlass.range_constexpr(4):
            p = row_begin + ty + 16 * ii
            if p < row_end:
                wp = sorted_w[p]
                for jj in cutlass.range_constexpr(8):
                    y_buf[p, n0 + tx + 16 * jj] = acc[ii, jj] * wp


@cute.kernel
def moe_combine_kernel(y_buf: cute.Tensor, slots: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    hidden = cute.size(out, mode=[1])
    rows = []
    for r in cutlass.range_constexpr(TOPK):
        rows.append(slots[t, r])
    for c in range(tidx, hidden, _THREADS):
        total = cutlass.Float32(0.0)
        for r in cutlass.range_constexpr(TOPK):
            if rows[r] >= 0:
                total = total + y_buf[rows[r], c]
        out[t, c] = total.to(cutlass.BFloat16)


@cute.jit
def moe_gate_up(x_words: cute.Tensor, x_scale: cute.Tensor, w13_words: cute.Tensor, w13_scale: cute.Tensor,
                sorted_tok: cute.Tensor, tiles: cute.Tensor, h_buf: cute.Tensor, stream: cuda.CUstream):
    moe_gate_up_kernel(x_words, x_scale, w13_words, w13_scale, sorted_tok, tiles, h_buf).launch(
        grid=[cute.size(h_buf, mode=[1]) // BN_H, cute.size(tiles, mode=[0]), 1], block=[_THREADS, 1, 1],
        stream=stream)


@cute.jit
def moe_down(h_buf: cute.Tensor, w2_words: cute.Tensor, w2_scale: cute.Tensor, sorted_w: cute.Tensor,
             tiles: cute.Tensor, y_buf: cute.Tensor, stream: cuda.CUstream):
    moe_down_kernel(h_buf, w2_words, w2_scale, sorted_w, tiles, y_buf).launch(
        grid=[cute.size(y_buf, mode=[1]) // BN_Y, cute.size(tiles, mode=[0]), 1], block=[_THREADS, 1, 1],
        stream=stream)


@cute.jit
def moe_combine(y_buf: cute.Tensor, slots: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    moe_combine_kernel(y_buf, slots, out).launch(
        grid=[cute.size(out, mode=[0]), 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _compile_route(tokens, experts, arch=None, ptx_dir=None):
    assert experts % 32 == 0 and (experts // GROUPS) % (experts // 32) == 0
    logits = make_fake_compact_tensor(cutlass.Float32, (tokens, experts), stride_order=(1, 0), assumed_align=16)
    bias = make_fake_compact_tensor(cutlass.BFloat16, (experts,))
    idx_out = make_fake_compact_tensor(cutlass.Int64, (tokens, TOPK), stride_order=(1, 0))
    w_out = make_fake_compact_tensor(cutlass.Float32, (tokens, TOPK), stride_order=(1, 0))
    return cute.compile(moe_route, logits, bias, idx_out, w_out, 1.0, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _max_tiles(tokens, local):
    return tokens * TOPK // BM + local


def _fake(dtype, shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=16)


def _compile_experts(tokens, local, hidden, inter, arch=None, ptx_dir=None):
    """The gate/up GEMM, the down GEMM and the combine, compiled for one shape."""
    assert hidden % BLOCK == 0 and inter % BLOCK == 0
    pairs = tokens * TOPK
    tiles = _fake(cutlass.Int32, (_max_tiles(tokens, local), 3))
    h_buf = _fake(cutlass.Float32, (pairs, inter))
    y_buf = _fake(cutlass.Float32, (pairs, hidden))
    options = _options(arch, ptx_dir)
    gate_up = cute.compile(
        moe_gate_up, _fake(cutlass.Int32, (tokens, hidden // 4)), _fake(cutlass.Float32, (hidden // BLOCK, tokens)),
        _fake(cutlass.Int32, (local, 2 * inter, hidden // 4)),
        _fake(cutlass.Float32, (local, 2 * inter // BLOCK, hidden // BLOCK)), _fake(cutlass.Int32, (pairs,)),
        tiles, h_buf, make_fake_stream(), options=options)
    down = cute.compile(
        moe_down, h_buf, _fake(cutlass.Int32, (local, hidden, inter // 4)),
        _fake(cutlass.Float32, (local, hidden // BLOCK, inter // BLOCK)), _fake(cutlass.Float32, (pairs,)),
        tiles, y_buf, make_fake_stream(), options=options)
    combine = cute.compile(moe_combine, y_buf, _fake(cutlass.Int32, (tokens, TOPK)),
                           _fake(cutlass.BFloat16, (tokens, hidden)), make_fake_stream(), options=options)
    return gate_up, down, combine


def _plan(index, weight, offset, local):
    """Sorted rows, the 64-row tile table and the per-token row table (torch index glue, no host sync)."""
    tokens = index.shape[0]
    pairs = tokens * TOPK
    device = index.device
    flat = index.flatten() - offset
    flat = torch.where((flat >= 0) & (flat < local), flat, local)  # non-local pairs sort last
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    sorted_tok = (order // TOPK).to(torch.int32)
    sorted_w = weight.flatten()[order].contiguous()
    counts = torch.bincount(flat, minlength=local + 1)[:local]
    starts = torch.cumsum(counts, 0) - counts
    ntiles = (counts + BM - 1) // BM
    tile_end = torch.cumsum(ntiles, 0)
    ti = torch.arange(_max_tiles(tokens, local), device=device)
    te = torch.searchsorted(tile_end, ti, right=True)
    valid = te < local
    tec = torch.clamp(te, max=local - 1)
    row_begin = starts[tec] + (ti - (tile_end[tec] - ntiles[tec])) * BM
    row_end = torch.minimum(row_begin + BM, starts[tec] + counts[tec])
    tiles = torch.stack([tec, torch.where(valid, row_begin, 0), torch.where(valid, row_end, 0)], 1)
    key = torch.where(sorted_e < local, order // TOPK, tokens)  # each row's token; non-local -> dummy
    by_tok = torch.argsort(key, stable=True)  # rows grouped by token, ascending row = ascending expert
    tok_counts = torch.bincount(key, minlength=tokens + 1)
    tok_start = torch.cumsum(tok_counts, 0) - tok_counts
    ktok = key[by_tok]
    rank = torch.clamp(torch.arange(pairs, device=device) - tok_start[ktok], max=TOPK - 1)
    slots = torch.full((tokens + 1, TOPK), -1, dtype=torch.int32, device=device)
    slots[ktok, rank] = by_tok.to(torch.int32)
    return (sorted_tok.contiguous(), sorted_w, tiles.to(torch.int32).contiguous(),
            slots[:tokens].contiguous())


def _words(t):
    """An e4m3 tensor's bytes as int32 words (four consecutive elements each, little-endian)."""
    return t.contiguous().view(torch.uint8).view(torch.int32)


def solve(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
          gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset,
          routed_scaling_factor):
    tokens, hidden = hidden_states.shape
    experts = routing_logits.shape[1]
    local, inter = gemm1_weights.shape[0], gemm2_weights.shape[2]
    device = hidden_states.device
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    out = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=device)
    if tokens == 0:
        return out
    index = torch.empty(tokens, TOPK, dtype=torch.int64, device=device)
    weight = torch.empty(tokens, TOPK, dtype=torch.float32, device=device)
    key = ("route", tokens, experts)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_route(tokens, experts)
    _COMPILED[key](routing_logits.float().contiguous(), routing_bias.contiguous(), index, weight,
                   float(routed_scaling_factor), stream)

    sorted_tok, sorted_w, tiles, slots = _plan(index, weight, int(local_expert_offset), local)
    pairs = tokens * TOPK
    h_buf = torch.empty(pairs, inter, dtype=torch.float32, device=device)
    y_buf = torch.empty(pairs, hidden, dtype=torch.float32, device=device)
    key = ("experts", tokens, local, hidden, inter)
    if key not in _COMPILED:
        _COMPILED[key] = _compile_experts(tokens, local, hidden, inter)
    gate_up, down, combine = _COMPILED[key]
    gate_up(_words(hidden_states), hidden_states_scale.float().contiguous(), _words(gemm1_weights),
            gemm1_weights_scale.float().contiguous(), sorted_tok, tiles, h_buf, stream)
    down(h_buf, _words(gemm2_weights), gemm2_weights_scale.float().contiguous(), sorted_w, tiles, y_buf, stream)
    combine(y_buf, slots, out, stream)
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    names = list(_compile_route(w["tokens"], w["experts"], arch, ptx_dir).kernel_info)
    for compiled in _compile_experts(w["tokens"], w["local_experts"], w["hidden"], w["inter"], arch, ptx_dir):
        names += list(compiled.kernel_info)
    return names
