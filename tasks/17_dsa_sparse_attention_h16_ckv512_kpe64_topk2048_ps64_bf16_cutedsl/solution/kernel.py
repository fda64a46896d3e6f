"""CuTe DSL oracle for problem 17: DeepSeek sparse attention in absorbed-MLA form (16 heads, latent 512 +
RoPE 64) over the 2048 (at most) cached slots each query token selects.

Each query token attends its own list of global slot ids (page * 64 + offset; -1 entries are
masked). The host views the caches as [pages * 64, 1, dim] row arrays, so a slot id is a row. The
work is split along each token's index list (split-K / flash-decoding) in two DSL kernels launched
back to back on the caller's stream.

``dsa_sparse_split_kernel``: one CTA per (chunk of ``_CHUNK`` index entries, query token). The CTA
first finds the last valid (>= 0) entry of its chunk (each warp scans the chunk, one entry per lane
and step, then a warp max) and walks the entries up to it; a chunk with no valid entry does no work
and writes only its (m, l) = (-1e30, 0) marker.
- Warp w owns heads 2w and 2w + 1 (8 warps for 16 heads). Lane l holds latent dims l*16 ..
  l*16+15 (two 16-byte vector loads per row) and RoPE dims l*2, l*2+1 of q and of each cached row,
  in fp32; the warps of a CTA read the same rows, so all but the first read hit L1. Entries are
  taken ``_UNROLL`` at a time (their slot ids and rows loaded together).
- Logit = (q_nope . ckv + q_pe . kpe) (fp32 lane partials, reduced over the warp by shuffles) times
  sm_scale * log2(e); online softmax in base 2 (running max m, rescale exp2(m_old - m_new)); a -1
  entry, or a slot past the chunk's last valid entry, gets the logit -1e30 and the probability 0.
  The running sum is kept as per-lane partials (step i adds to lane i mod 32). The accumulator is
  sum p * ckv over the chunk.
- Each warp writes its heads' unnormalised partial (m, sum, acc) for the chunk, in fp32 (acc only
  when the chunk had a valid entry).

``dsa_sparse_merge_kernel``: one CTA per (token, head), one thread per latent dim. Over the token's
chunks with a non-zero sum it takes M = max m_c, L = sum l_c exp2(m_c - M), O = sum acc_c
exp2(m_c - M); output = O / L (IEEE division) rounded to bf16 once, lse = M + log2(L), the base-2
log-sum-exp (the reference's natural LSE / ln 2). A token with no valid entry gets 0 and -inf.

Shapes other than 512 / 64 work too: a latent or RoPE dim that is not a multiple of 32 must be below
32 (one dim per lane, lanes past it contribute 0 and store nothing).
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=62, heads=16, rank=512, rope_dim=64, page_size=64, num_pages=6465, top_k=2048)
_HEADS_PER_WARP = 2
_UNROLL = 2
_CHUNK = 64  # index entries per split
_NEG = -1.0e30
_COMPILED = {}


def _max(a, b):
    return cutlass.Float32(cutlass.select_(a > b, a, b))


@cute.kernel
def dsa_sparse_split_kernel(q_nope: cute.Tensor, q_pe: cute.Tensor, ckv_cache: cute.Tensor, kpe_cache: cute.Tensor,
                            sparse: cute.Tensor, part_o: cute.Tensor, part_m: cute.Tensor, part_l: cute.Tensor,
                            scale_log2: cutlass.Float32):
    c, tok, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    top_k = cute.size(sparse, mode=[1])
    rank = cute.size(q_nope, mode=[2])
    rope = cute.size(q_pe, mode=[2])
    rpl = rank // 32 if rank % 32 == 0 else 1
    ppl = rope // 32 if rope % 32 == 0 else 1
    # slices of this lane: l*rpl.. / l*ppl.. (dims a multiple of 32), else dim l for lanes below the dim
    cidx = lane if rank % 32 == 0 else cutlass.min(lane, rank - 1)
    kidx = lane if rope % 32 == 0 else cutlass.min(lane, rope - 1)
    rank_on = lane < rank
    rope_on = lane < rope

    # entries beg .. t_end - 1 of this token's list: up to the chunk's last valid entry
    beg = c * _CHUNK
    last = cutlass.Int32(0)
    for i in cutlass.range_constexpr(_CHUNK // 32):
        e = beg + i * 32 + lane
        ok = (e < top_k) & (sparse[tok, cutlass.min(e, top_k - 1)] >= 0)
        last = cutlass.max(last, cutlass.Int32(cutlass.select_(ok, i * 32 + lane + 1, 0)))
    for off in (16, 8, 4, 2, 1):
        last = cutlass.max(last, cute.arch.shuffle_sync_bfly(last, offset=off, mask=-1, mask_and_clamp=31))
    t_end = beg + last

    qn = cute.make_rmem_tensor((_HEADS_PER_WARP, rpl), cutlass.Float32)
    qp = cute.make_rmem_tensor((_HEADS_PER_WARP, ppl), cutlass.Float32)
    for h in cutlass.range_constexpr(_HEADS_PER_WARP):
        head = warp * _HEADS_PER_WARP + h
        qn[h, None].store(cute.zipped_divide(q_nope[tok, head, None], (rpl,))[None, cidx].load()
                          .to(cutlass.Float32))
        for j in cutlass.range_constexpr(rpl):
            qn[h, j] = cutlass.Float32(cutlass.select_(rank_on, qn[h, j], 0.0))
        qp[h, None].store(cute.zipped_divide(q_pe[tok, head, None], (ppl,))[None, kidx].load()
                          .to(cutlass.Float32))
        for j in cutlass.range_constexpr(ppl):
            qp[h, j] = cutlass.Float32(cutlass.select_(rope_on, qp[h, j], 0.0))
    acc = cute.make_rmem_tensor((_HEADS_PER_WARP, rpl), cutlass.Float32)
    acc.fill(0.0)
    m_run = cute.make_rmem_tensor((_HEADS_PER_WARP,), cutlass.Float32)
    m_run.fill(_NEG)
    l_part = cute.make_rmem_tensor((_HEADS_PER_WARP,), cutlass.Float32)
    l_part.fill(0.0)
    cf = cute.make_rmem_tensor((_UNROLL, rpl), cutlass.Float32)
    kf = cute.make_rmem_tensor((_UNROLL, ppl), cutlass.Float32)

    for base in range(beg, t_end, _UNROLL):
        live = []
        for u in cutlass.range_constexpr(_UNROLL):
            slot = sparse[tok, cutlass.min(base + u, t_end - 1)]
            live.append((base + u < t_end) & (slot >= 0))
            row = cutlass.max(slot, 0)
            cf[u, None].store(cute.zipped_divide(ckv_cache[row, 0, None], (rpl,))[None, cidx].load()
                              .to(cutlass.Float32))
            kf[u, None].store(cute.zipped_divide(kpe_cache[row, 0, None], (ppl,))[None, kidx].load()
                              .to(cutlass.Float32))
        mine = ((base - beg) // _UNROLL) % 32 == lane
        for h in cutlass.range_constexpr(_HEADS_PER_WARP):
            s = []
            for u in cutlass.range_constexpr(_UNROLL):
                dot = qn[h, 0] * cf[u, 0]
                for i in cutlass.range_constexpr(1, rpl):
                    dot = dot + qn[h, i] * cf[u, i]
                for j in cutlass.range_constexpr(ppl):
                    dot = dot + qp[h, j] * kf[u, j]
                dot = cute.arch.warp_reduction_sum(dot)
                s.append(cutlass.Float32(cutlass.select_(live[u], dot * scale_log2, _NEG)))
            m_old = m_run[h]
            m_new = m_old
            for u in cutlass.range_constexpr(_UNROLL):
                m_new = _max(m_new, s[u])
            alpha = cute.math.exp2(m_old - m_new)
            p = []
            for u in cutlass.range_constexpr(_UNROLL):
                p.append(cutlass.Float32(cutlass.select_(live[u], cute.math.exp2(s[u] - m_new), 0.0)))
            p_sum = p[0]
            for u in cutlass.range_constexpr(1, _UNROLL):
                p_sum = p_sum + p[u]
            l_part[h] = l_part[h] * alpha + cutlass.Float32(cutlass.select_(mine, p_sum, 0.0))
            for i in cutlass.range_constexpr(rpl):
                a = acc[h, i] * alpha
                for u in cutlass.range_constexpr(_UNROLL):
                    a = a + p[u] * cf[u, i]
                acc[h, i] = a
            m_run[h] = m_new

    for h in cutlass.range_constexpr(_HEADS_PER_WARP):
        head = warp * _HEADS_PER_WARP + h
        l_warp = cute.arch.warp_reduction_sum(l_part[h])
        if (last > 0) & rank_on:
            cute.zipped_divide(part_o[tok, c, head, None], (rpl,))[None, cidx].store(acc[h, None].load())
        if lane == 0:
            part_m[tok, c, head] = m_run[h]
            part_l[tok, c, head] = l_warp


@cute.kernel
def dsa_sparse_merge_kernel(part_o: cute.Tensor, part_m: cute.Tensor, part_l: cute.Tensor, out: cute.Tensor,
                            lse: cute.Tensor):
    d, _, _ = cute.arch.thread_idx()
    tok, h, _ = cute.arch.block_idx()
    nch = cute.size(part_m, mode=[1])

    m_all = cutlass.Float32(_NEG)
    for c in range(nch):
        if part_l[tok, c, h] > 0.0:
            m_all = _max(m_all, part_m[tok, c, h])
    l_all = cutlass.Float32(0.0)
    o_all = cutlass.Float32(0.0)
    for c in range(nch):
        l_c = part_l[tok, c, h]
        if l_c > 0.0:
            f = cute.math.exp2(part_m[tok, c, h] - m_all)
            l_all = l_all + l_c * f
            o_all = o_all + part_o[tok, c, h, d] * f
    if l_all > 0.0:
        out[tok, h, d] = (o_all / l_all).to(cutlass.BFloat16)
        if d == 0:
            lse[tok, h] = m_all + cute.math.log2(l_all)
    else:
        out[tok, h, d] = cutlass.Float32(0.0).to(cutlass.BFloat16)
        if d == 0:
            lse[tok, h] = -cutlass.Float32(math.inf)


@cute.jit
def dsa_sparse_split(q_nope: cute.Tensor, q_pe: cute.Tensor, ckv_cache: cute.Tensor, kpe_cache: cute.Tensor,
                     sparse: cute.Tensor, part_o: cute.Tensor, part_m: cute.Tensor, part_l: cute.Tensor,
                     scale_log2: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(q_nope, mode=[0])
    heads = cute.size(q_nope, mode=[1])
    nch = cute.size(part_m, mode=[1])
    dsa_sparse_split_kernel(q_nope, q_pe, ckv_cache, kpe_cache, sparse, part_o, part_m, part_l, scale_log2).launch(
        grid=[nch, tokens, 1], block=[heads // _HEADS_PER_WARP * 32, 1, 1], stream=stream)


@cute.jit
def dsa_sparse_merge(part_o: cute.Tensor, part_m: cute.Tensor, part_l: cute.Tensor, out: cute.Tensor,
                     lse: cute.Tensor, stream: cuda.CUstream):
    tokens = cute.size(out, mode=[0])
    heads = cute.size(out, mode=[1])
    rank = cute.size(out, mode=[2])
    dsa_sparse_merge_kernel(part_o, part_m, part_l, out, lse).launch(
        grid=[tokens, heads, 1], block=[rank, 1, 1], stream=stream)


def _compile(tokens, heads, rank, rope_dim, rows, top_k, arch=None, ptx_dir=None):
    """The split and the merge executors for static shapes."""
    assert heads % _HEADS_PER_WARP == 0 and (rank % 32 == 0 or rank < 32) and (rope_dim % 32 == 0 or rope_dim < 32)
    nch = (top_k + _CHUNK - 1) // _CHUNK
    q_nope = make_fake_compact_tensor(cutlass.BFloat16, (tokens, heads, rank), stride_order=(2, 1, 0),
                                      assumed_align=16)
    q_pe = make_fake_compact_tensor(cutlass.BFloat16, (tokens, heads, rope_dim), stride_order=(2, 1, 0),
                                    assumed_align=4)
    ckv = make_fake_compact_tensor(cutlass.BFloat16, (rows, 1, rank), stride_order=(2, 1, 0), assumed_align=16)
    kpe = make_fake_compact_tensor(cutlass.BFloat16, (rows, 1, rope_dim), stride_order=(2, 1, 0), assumed_align=4)
    sparse = make_fake_compact_tensor(cutlass.Int32, (tokens, top_k), stride_order=(1, 0))
    part_o = make_fake_compact_tensor(cutlass.Float32, (tokens, nch, heads, rank), stride_order=(3, 2, 1, 0),
                                      assumed_align=16)
    part_m = make_fake_compact_tensor(cutlass.Float32, (tokens, nch, heads), stride_order=(2, 1, 0))
    part_l = make_fake_compact_tensor(cutlass.Float32, (tokens, nch, heads), stride_order=(2, 1, 0))
    out = make_fake_compact_tensor(cutlass.BFloat16, (tokens, heads, rank), stride_order=(2, 1, 0),
                                   assumed_align=16)
    lse = make_fake_compact_tensor(cutlass.Float32, (tokens, heads), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    split = cute.compile(dsa_sparse_split, q_nope, q_pe, ckv, kpe, sparse, part_o, part_m, part_l, 1.0,
                         make_fake_stream(), options=options)
    merge = cute.compile(dsa_sparse_merge, part_o, part_m, part_l, out, lse, make_fake_stream(), options=options)
    return split, merge


def solve(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    tokens, heads, rank = q_nope.shape
    rope_dim = q_pe.shape[2]
    num_pages, page_size, _ = ckv_cache.shape
    top_k = sparse_indices.shape[1]
    device = q_nope.device
    out = torch.empty(tokens, heads, rank, dtype=torch.bfloat16, device=device)
    lse = torch.empty(tokens, heads, dtype=torch.float32, device=device)
    if tokens == 0:
        return out, lse
    nch = (top_k + _CHUNK - 1) // _CHUNK
    part_o = torch.empty(tokens, nch, heads, rank, dtype=torch.float32, device=device)
    part_m = torch.empty(tokens, nch, heads, dtype=torch.float32, device=device)
    part_l = torch.empty(tokens, nch, heads, dtype=torch.float32, device=device)
    rows = num_pages * page_size
    key = (tokens, heads, rank, rope_dim, rows, top_k)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    split, merge = _COMPILED[key]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    split(q_nope.contiguous(), q_pe.contiguous(), ckv_cache.contiguous().view(rows, 1, rank),
          kpe_cache.contiguous().view(rows, 1, rope_dim), sparse_indices.contiguous().to(torch.int32), part_o,
          part_m, part_l, float(sm_scale) * math.log2(math.e), stream)
    merge(part_o, part_m, part_l, out, lse, stream)
    return out, lse


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    built = _compile(w["tokens"], w["heads"], w["rank"], w["rope_dim"], w["num_pages"] * w["page_size"],
                     w["top_k"], arch, ptx_dir)
    return [name for executor in built for name in executor.kernel_info]
