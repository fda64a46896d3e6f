"""CuTe DSL oracle for problem 14: absorbed-MLA paged decode (16 heads, latent 512 + RoPE 64, page size 1).

All 16 heads read the same cached rows (ckv is both key part and value), and contexts reach ~9 K
tokens, so the work is split along the context (split-K / flash-decoding) in two DSL kernels
launched back to back on the caller's stream.

``mla_decode_split_kernel``: the context of each sequence is cut into chunks of ``_CHUNK`` tokens;
one CTA per chunk. Chunks are numbered sequence after sequence and the CTA finds its sequence by
walking kv_indptr; the grid holds a host-side upper bound on the chunk count (tokens // _CHUNK +
batch, no device sync needed), and CTAs past the last chunk see an empty token range and write a
partial that nothing reads.
- Warp w owns heads 2w and 2w + 1 for every token of the chunk (8 warps for 16 heads). Lane l holds
  latent dims l*16 .. l*16+15 (two 16-byte vector loads per row) and RoPE dims l*2, l*2+1 of q and
  of each cached row, in fp32; the warps of a CTA read the same rows, so all but the first read hit
  L1. Tokens are taken ``_UNROLL`` at a time (their row indices and rows loaded together).
- Logit = (q_nope . ckv + q_pe . kpe) (fp32 lane partials, reduced over the warp by shuffles) times
  sm_scale * log2(e); online softmax in base 2 (running max m, rescale exp2(m_old - m_new)); the
  running sum is kept as per-lane partials (step i adds to lane i mod 32). Slots past the chunk's
  end get the logit -1e30 (exp2 of it is 0). The accumulator is sum p * ckv over the chunk.
- Each warp writes its heads' unnormalised partial (m, sum, acc) for the chunk, in fp32.

``mla_decode_merge_kernel``: one CTA per (sequence, head), one thread per latent dim. It finds the
sequence's chunk range by the same walk, takes M = max m_c, L = sum l_c exp2(m_c - M) and
O = sum acc_c exp2(m_c - M); output = O / L (IEEE division) rounded to bf16 once, and
lse = M + log2(L), the base-2 log-sum-exp (the reference's natural LSE / ln 2).

Shapes other than 512 / 64 work too: the latent dim must be a multiple of 32; a RoPE dim that is not
a multiple of 32 must be below 32 (one dim per lane, lanes past it contribute 0).
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, heads=16, rank=512, rope_dim=64, num_pages=989669)
_HEADS_PER_WARP = 2
_UNROLL = 2
_CHUNK = 128  # tokens per split
_NEG = -1.0e30
_COMPILED = {}


def _max(a, b):
    return cutlass.Float32(cutlass.select_(a > b, a, b))


@cute.kernel
def mla_decode_split_kernel(q_nope: cute.Tensor, q_pe: cute.Tensor, ckv_cache: cute.Tensor,
                            kpe_cache: cute.Tensor, kv_indptr: cute.Tensor, kv_indices: cute.Tensor,
                            part_o: cute.Tensor, part_m: cute.Tensor, part_l: cute.Tensor,
                            scale_log2: cutlass.Float32):
    cid, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    batch = cute.size(q_nope, mode=[0])
    rank = cute.size(q_nope, mode=[2])
    rope = cute.size(q_pe, mode=[2])
    rpl = rank // 32
    ppl = rope // 32 if rope % 32 == 0 else 1
    # RoPE slice of this lane: l*ppl.. (rope a multiple of 32), else dim l for lanes below rope
    kidx = lane if rope % 32 == 0 else cutlass.min(lane, rope - 1)
    rope_on = lane < rope

    # which sequence and token range this chunk covers (empty past the last chunk)
    seq = cutlass.Int32(0)
    t_beg = cutlass.Int32(0)
    t_end = cutlass.Int32(0)
    cum = cutlass.Int32(0)
    for b in cutlass.range_constexpr(batch):
        ntok = kv_indptr[b + 1] - kv_indptr[b]
        nch = (ntok + (_CHUNK - 1)) // _CHUNK
        rel = cid - cum
        hit = (rel >= 0) & (rel < nch)
        seq = cutlass.Int32(cutlass.select_(hit, b, seq))
        t_beg = cutlass.Int32(cutlass.select_(hit, rel * _CHUNK, t_beg))
        t_end = cutlass.Int32(cutlass.select_(hit, cutlass.min(rel * _CHUNK + _CHUNK, ntok), t_end))
        cum = cum + nch
    pbeg = kv_indptr[seq]

    qn = cute.make_rmem_tensor((_HEADS_PER_WARP, rpl), cutlass.Float32)
    qp = cute.make_rmem_tensor((_HEADS_PER_WARP, ppl), cutlass.Float32)
    for h in cutlass.range_constexpr(_HEADS_PER_WARP):
        head = warp * _HEADS_PER_WARP + h
        qn[h, None].store(cute.zipped_divide(q_nope[seq, head, None], (rpl,))[None, lane].load()
                          .to(cutlass.Float32))
        qp[h, None].store(cute.zipped_divide(q_pe[seq, head, None], (ppl,))[None, kidx].load()
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

    for base in range(t_beg, t_end, _UNROLL):
        for u in cutlass.range_constexpr(_UNROLL):
            tok = cutlass.Int32(cutlass.select_(base + u < t_end, base + u, t_end - 1))
            row = kv_indices[pbeg + tok]
            cf[u, None].store(cute.zipped_divide(ckv_cache[row, 0, None], (rpl,))[None, lane].load()
                              .to(cutlass.Float32))
            kf[u, None].store(cute.zipped_divide(kpe_cache[row, 0, None], (ppl,))[None, kidx].load()
                              .to(cutlass.Float32))
        mine = ((base - t_beg) // _UNROLL) % 32 == lane
        for h in cutlass.range_constexpr(_HEADS_PER_WARP):
            s = []
            for u in cutlass.range_constexpr(_UNROLL):
                dot = qn[h, 0] * cf[u, 0]
                for i in cutlass.range_constexpr(1, rpl):
                    dot = dot + qn[h, i] * cf[u, i]
                for j in cutlass.range_constexpr(ppl):
                    dot = dot + qp[h, j] * kf[u, j]
                dot = cute.arch.warp_reduction_sum(dot)
                s.append(cutlass.Float32(cutlass.select_(base + u < t_end, dot * scale_log2, _NEG)))
            m_old = m_run[h]
            m_new = m_old
            for u in cutlass.range_constexpr(_UNROLL):
                m_new = _max(m_new, s[u])
            alpha = cute.math.exp2(m_old - m_new)
            p = []
            for u in cutlass.range_constexpr(_UNROLL):
                p.append(cute.math.exp2(s[u] - m_new))
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
        cute.zipped_divide(part_o[cid, head, None], (rpl,))[None, lane].store(acc[h, None].load())
        if lane == 0:
            part_m[cid, head] = m_run[h]
            part_l[cid, head] = l_warp


@cute.kernel
def mla_decode_merge_kernel(kv_indptr: cute.Tensor, part_o: cute.Tensor, part_m: cute.Tensor,
                            part_l: cute.Tensor, out: cute.Tensor, lse: cute.Tensor):
    d, _, _ = cute.arch.thread_idx()
    seq, h, _ = cute.arch.block_idx()
    batch = cute.size(out, mode=[0])

    first = cutlass.Int32(0)  # chunks of the sequences before this one
    for b in cutlass.range_constexpr(batch):
        ntok = kv_indptr[b + 1] - kv_indptr[b]
        first = first + cutlass.Int32(cutlass.select_(b < seq, (ntok + (_CHUNK - 1)) // _CHUNK, 0))
    stop = first + (kv_indptr[seq + 1] - kv_indptr[seq] + (_CHUNK - 1)) // _CHUNK

    m_all = cutlass.Float32(_NEG)
    for c in range(first, stop):
        m_all = _max(m_all, part_m[c, h])
    l_all = cutlass.Float32(0.0)
    o_all = cutlass.Float32(0.0)
    for c in range(first, stop):
        f = cute.math.exp2(part_m[c, h] - m_all)
        l_all = l_all + part_l[c, h] * f
        o_all = o_all + part_o[c, h, d] * f
    out[seq, h, d] = (o_all / l_all).to(cutlass.BFloat16)
    if d == 0:
        lse[seq, h] = m_all + cute.math.log2(l_all)


@cute.jit
def mla_paged_decode_split(q_nope: cute.Tensor, q_pe: cute.Tensor, ckv_cache: cute.Tensor,
                           kpe_cache: cute.Tensor, kv_indptr: cute.Tensor, kv_indices: cute.Tensor,
                           part_o: cute.Tensor, part_m: cute.Tensor, part_l: cute.Tensor,
                           scale_log2: cutlass.Float32, stream: cuda.CUstream):
    heads = cute.size(q_nope, mode=[1])
    chunks = cute.size(part_m, mode=[0])
    mla_decode_split_kernel(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, part_o, part_m, part_l,
                            scale_log2).launch(grid=[chunks, 1, 1], block=[heads // _HEADS_PER_WARP * 32, 1, 1],
                                               stream=stream)


@cute.jit
def mla_paged_decode_merge(kv_indptr: cute.Tensor, part_o: cute.Tensor, part_m: cute.Tensor,
                           part_l: cute.Tensor, out: cute.Tensor, lse: cute.Tensor, stream: cuda.CUstream):
    batch = cute.size(out, mode=[0])
    heads = cute.size(out, mode=[1])
    rank = cute.size(out, mode=[2])
    mla_decode_merge_kernel(kv_indptr, part_o, part_m, part_l, out, lse).launch(
        grid=[batch, heads, 1], block=[rank, 1, 1], stream=stream)


def _compile(batch, heads, rank, rope_dim, num_pages, arch=None, ptx_dir=None):
    """The split and the merge executors: static shapes except the row list and the chunk count."""
    assert heads % _HEADS_PER_WARP == 0 and rank % 32 == 0 and (rope_dim % 32 == 0 or rope_dim < 32)
    q_nope = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, rank), stride_order=(2, 1, 0),
                                      assumed_align=16)
    q_pe = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, rope_dim), stride_order=(2, 1, 0),
                                    assumed_align=4)
    ckv = make_fake_compact_tensor(cutlass.BFloat16, (num_pages, 1, rank), stride_order=(2, 1, 0),
                                   assumed_align=16)
    kpe = make_fake_compact_tensor(cutlass.BFloat16, (num_pages, 1, rope_dim), stride_order=(2, 1, 0),
                                   assumed_align=4)
    indptr = make_fake_compact_tensor(cutlass.Int32, (batch + 1,))
    indices = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),))
    chunks = cute.sym_int()
    part_o = make_fake_compact_tensor(cutlass.Float32, (chunks, heads, rank), stride_order=(2, 1, 0),
                                      assumed_align=16)
    part_m = make_fake_compact_tensor(cutlass.Float32, (chunks, heads), stride_order=(1, 0))
    part_l = make_fake_compact_tensor(cutlass.Float32, (chunks, heads), stride_order=(1, 0))
    out = make_fake_compact_tensor(cutlass.BFloat16, (batch, heads, rank), stride_order=(2, 1, 0),
                                   assumed_align=16)
    lse = make_fake_compact_tensor(cutlass.Float32, (batch, heads), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    split = cute.compile(mla_paged_decode_split, q_nope, q_pe, ckv, kpe, indptr, indices, part_o, part_m, part_l,
                         1.0, make_fake_stream(), options=options)
    merge = cute.compile(mla_paged_decode_merge, indptr, part_o, part_m, part_l, out, lse, make_fake_stream(),
                         options=options)
    return split, merge


def solve(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, rank = q_nope.shape
    rope_dim = q_pe.shape[2]
    num_pages, page_size, _ = ckv_cache.shape
    assert page_size == 1
    out = torch.empty(batch, heads, rank, dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q_nope.device)
    # an upper bound on the number of chunks (sum over sequences of ceil(tokens / _CHUNK))
    chunks = kv_indices.numel() // _CHUNK + batch
    part_o = torch.empty(chunks, heads, rank, dtype=torch.float32, device=q_nope.device)
    part_m = torch.empty(chunks, heads, dtype=torch.float32, device=q_nope.device)
    part_l = torch.empty(chunks, heads, dtype=torch.float32, device=q_nope.device)
    key = (batch, heads, rank, rope_dim, num_pages)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    split, merge = _COMPILED[key]
    indices = kv_indices if kv_indices.numel() > 0 else torch.zeros(1, dtype=torch.int32, device=q_nope.device)
    indptr = kv_indptr.contiguous()
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    split(q_nope.contiguous(), q_pe.contiguous(), ckv_cache.contiguous(), kpe_cache.contiguous(), indptr,
          indices.contiguous(), part_o, part_m, part_l, float(sm_scale) * math.log2(math.e), stream)
    merge(indptr, part_o, part_m, part_l, out, lse, stream)
    return out, lse


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    built = _compile(w["batch"], w["heads"], w["rank"], w["rope_dim"], w["num_pages"], arch, ptx_dir)
    return [name for executor in built for name in executor.kernel_info]
