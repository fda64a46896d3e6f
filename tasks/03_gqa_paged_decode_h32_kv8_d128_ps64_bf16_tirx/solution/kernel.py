"""TIRx oracle for problem 03: paged GQA decode (32 query heads on 8 KV heads, dim 128, page size 64).

Contexts reach ~170 K tokens, so the work is split along the context (split-K / flash-decoding) in
two TIRx kernels run back to back.

``mkb_gqa_decode_split``: the context of each sequence is cut into chunks of 1024 tokens (whole
pages: 16 pages of 64); one CTA of 8 warps per (chunk, KV head), serving the KV head's group of 4
query heads. Chunks are numbered sequence after sequence; the CTA finds its sequence by walking the
batch (a sequence of n pages has 64 * (n - 1) + kv_last_page_len tokens). The grid holds a host-side
upper bound on the chunk count (pages // 16 + batch, no device sync needed); CTAs past the last
chunk see an empty token range and write a partial that nothing reads.
- Token t of the sequence lives in page kv_indices[kv_indptr[b] + t // 64], slot t % 64. Warp w
  takes the chunk's tokens in blocks of 4 (blocks w, w + 8, ...): it loads the block's 4 page
  indices, then the 4 K and 4 V rows, so several loads are in flight. Each lane owns head_dim / 32
  = 4 consecutive dimensions (one 8-byte vector load per row) and holds q of the group's heads in
  fp32 registers; a warp reduction (``T.cuda.warp_sum``) gives each logit q.k, scaled by sm_scale.
  Slots past the chunk's end get the logit -1e30.
- Every warp runs an online softmax per head (running max m, the weighted v accumulator, and the
  running sum kept as per-lane partials: block i adds to lane i mod 32). The 8 warp states are
  merged through shared memory (rescaled by exp(m_w - M)) and the chunk's unnormalised partial
  (m, sum, acc) is written in fp32 per query head.

``mkb_gqa_decode_merge``: one CTA per (sequence, query head), one thread per dim. It finds the
sequence's chunk range by the same walk, takes M = max m_c, L = sum l_c exp(m_c - M) and
O = sum acc_c exp(m_c - M); the output is O / L rounded to bf16 once and the base-2 log-sum-exp is
M * log2(e) + log2(L).

Numerics: exp uses a precise polynomial (NVRTC compiles with --use_fast_math, which would make
``T.exp`` approximate); log2 is the fast-math one, whose absolute error (~2^-22) is far below the
fp32 tolerance of an LSE of magnitude ~18; the final division is the fast-math one, whose ~2 ulp
fp32 error vanishes in the bf16 rounding. An empty sequence yields output 0 and LSE -inf.

Offsets: a K/V element's offset (page * 65536 + slot * 1024 + kv head * 128 + dim) is computed in
int32; the graded pools hold 29441 x 64 x 8 x 128 = 1.93e9 elements, below 2^31 (pools up to
32767 pages fit). The byte address is formed in 64 bits.
"""

import math

import torch
import tvm
from tvm.script import tirx as T

WARPS = 8
THREADS = WARPS * 32
UNROLL = 4  # tokens per warp step
CHUNK_TOKENS = 1024  # tokens per split (rounded down to whole pages, at least one page)
NEG_INIT = -1.0e30  # running max before the first token (exp of it underflows to 0)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def chunk_pages(page_size):
    return max(1, CHUNK_TOKENS // page_size)


def _f32(value):
    return T.float32(value)


def _let(value, body, name):
    """Bind ``value`` once (a TIR Let) so the expression tree does not repeat it."""
    var = T.Var(name, "float32")
    return T.Let(body(var), where={var: value})


def exp_precise(x):
    """exp(x) in fp32 within about 1 ulp, from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split so n * hi is exact);
    exp(r) by a degree-7 Taylor polynomial on |r| <= ln2/2; 2^n from exponent bits. Inputs
    below -87 give 0; inputs are clamped at 88.
    """

    def with_xc(xc):
        def with_n(n):
            def with_r(r):
                poly = _f32(1.0 / 5040.0)
                for coef in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
                    poly = poly * r + _f32(coef)
                scale = T.reinterpret("float32", T.shift_left(T.int32(n) + 127, 23))
                return poly * scale

            reduced = xc - n * _f32(0.693145751953125) - n * _f32(1.428606765330187e-06)
            return _let(reduced, with_r, "r")

        return _let(T.floor(xc * _f32(1.4426950408889634) + _f32(0.5)), with_n, "n")

    def with_x(xv):
        clamped = T.max(T.min(xv, _f32(88.0)), _f32(-87.0))
        return T.if_then_else(xv < _f32(-87.0), _f32(0.0), _let(clamped, with_xc, "xc"))

    return _let(x, with_x, "x")


def _split_kernel(heads, kv_heads, head_dim, page_size):
    """Per (chunk, KV head): the chunk's unnormalised softmax partial for the group's query heads."""
    group = heads // kv_heads
    per_lane = head_dim // 32
    chunk = chunk_pages(page_size) * page_size

    @T.prim_func
    def mkb_gqa_decode_split(q_h: T.handle, k_h: T.handle, v_h: T.handle, indptr_h: T.handle,
                             indices_h: T.handle, last_h: T.handle, po_h: T.handle, pm_h: T.handle,
                             pl_h: T.handle, sm_scale: T.float32):
        batch = T.int32()
        num_pages = T.int32()
        nnz = T.int32()
        chunks = T.int32()
        q = T.match_buffer(q_h, (batch, heads, head_dim), "bfloat16")
        k_cache = T.match_buffer(k_h, (num_pages, page_size, kv_heads, head_dim), "bfloat16")
        v_cache = T.match_buffer(v_h, (num_pages, page_size, kv_heads, head_dim), "bfloat16")
        kv_indptr = T.match_buffer(indptr_h, (batch + 1,), "int32")
        kv_indices = T.match_buffer(indices_h, (nnz,), "int32")
        last_len = T.match_buffer(last_h, (batch,), "int32")
        part_o = T.match_buffer(po_h, (chunks, heads, head_dim), "float32")
        part_m = T.match_buffer(pm_h, (chunks, heads), "float32")
        part_l = T.match_buffer(pl_h, (chunks, heads), "float32")
        T.device_entry()
        cid, kvh = T.cta_id([chunks, kv_heads])
        tx = T.thread_id([THREADS])
        m_part = T.alloc_buffer((WARPS * group,), "float32", scope="shared")
        l_part = T.alloc_buffer((WARPS * group,), "float32", scope="shared")
        acc_part = T.alloc_buffer((WARPS * group * head_dim,), "float32", scope="shared")
        span = T.alloc_buffer((4,), "int32", scope="local")  # seq, first token, end token, chunks so far
        q_reg = T.alloc_buffer((group * per_lane,), "float32", scope="local")
        acc = T.alloc_buffer((group * per_lane,), "float32", scope="local")
        m_run = T.alloc_buffer((group,), "float32", scope="local")
        l_run = T.alloc_buffer((group,), "float32", scope="local")
        pages = T.alloc_buffer((UNROLL,), "int32", scope="local")
        slots = T.alloc_buffer((UNROLL,), "int32", scope="local")
        k_raw = T.alloc_buffer((UNROLL * per_lane,), "bfloat16", scope="local")
        v_raw = T.alloc_buffer((UNROLL * per_lane,), "bfloat16", scope="local")
        s_reg = T.alloc_buffer((UNROLL,), "float32", scope="local")
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        # which sequence and token range this chunk covers (empty past the last chunk)
        for i in T.unroll(4):
            span[i] = 0
        for b in range(batch):
            npg: T.let = kv_indptr[b + 1] - kv_indptr[b]
            ntok: T.let = T.if_then_else(npg > 0, (npg - 1) * page_size + last_len[b], 0)
            nch: T.let = (ntok + (chunk - 1)) // chunk
            rel: T.let = cid - span[3]
            if rel >= 0:
                if rel < nch:
                    span[0] = b
                    span[1] = rel * chunk
                    span[2] = T.min(rel * chunk + chunk, ntok)
            span[3] = span[3] + nch
        seq: T.let = span[0]
        t_beg: T.let = span[1]
        t_end: T.let = span[2]
        pbeg: T.let = kv_indptr[seq]
        for h in T.unroll(group):
            m_run[h] = _f32(NEG_INIT)
            l_run[h] = _f32(0.0)
            for j in T.unroll(per_lane):
                q_reg[h * per_lane + j] = T.float32(q[seq, kvh * group + h, lane * per_lane + j])
                acc[h * per_lane + j] = _f32(0.0)
        # per-warp online softmax over token blocks warp, warp + WARPS, ... (UNROLL tokens each)
        for it in range(T.ceildiv(t_end - t_beg, WARPS * UNROLL)):
            pos: T.let = t_beg + (it * WARPS + warp) * UNROLL
            if pos < t_end:  # uniform over the warp: warp_sum below is safe
                for u in T.unroll(UNROLL):
                    tok: T.let = T.min(pos + u, t_end - 1)
                    pages[u] = kv_indices[pbeg + tok // page_size]
                    slots[u] = tok % page_size
                for u in T.unroll(UNROLL):
                    for j in T.vectorized(per_lane):
                        k_raw[u * per_lane + j] = k_cache[pages[u], slots[u], kvh, lane * per_lane + j]
                    for j in T.vectorized(per_lane):
                        v_raw[u * per_lane + j] = v_cache[pages[u], slots[u], kvh, lane * per_lane + j]
                for hg in T.unroll(group):
                    m_new: T.f32 = m_run[hg]
                    for u in T.unroll(UNROLL):
                        dot: T.f32 = _f32(0.0)
                        for j in T.unroll(per_lane):
                            dot = dot + q_reg[hg * per_lane + j] * T.float32(k_raw[u * per_lane + j])
                        s_reg[u] = T.if_then_else(pos + u < t_end, T.cuda.warp_sum(dot) * sm_scale,
                                                  _f32(NEG_INIT))
                        m_new = T.max(m_new, s_reg[u])
                    alpha: T.f32 = exp_precise(m_run[hg] - m_new)
                    p_sum: T.f32 = _f32(0.0)
                    for j in T.unroll(per_lane):
                        acc[hg * per_lane + j] = acc[hg * per_lane + j] * alpha
                    for u in T.unroll(UNROLL):
                        prob: T.f32 = exp_precise(s_reg[u] - m_new)
                        p_sum = p_sum + prob
                        for j in T.unroll(per_lane):
                            acc[hg * per_lane + j] = (acc[hg * per_lane + j]
                                                      + prob * T.float32(v_raw[u * per_lane + j]))
                    l_run[hg] = l_run[hg] * alpha + T.if_then_else(it % 32 == lane, p_sum, _f32(0.0))
                    m_run[hg] = m_new
        # publish the warp's partial state, then merge the WARPS states into the chunk's partial
        for h in T.unroll(group):
            l_warp: T.f32 = T.cuda.warp_sum(l_run[h])
            if lane == 0:
                m_part[warp * group + h] = m_run[h]
                l_part[warp * group + h] = l_warp
            for j in T.unroll(per_lane):
                acc_part[(warp * group + h) * head_dim + lane * per_lane + j] = acc[h * per_lane + j]
        T.cuda.cta_sync()
        for it2 in range(T.ceildiv(group * head_dim, THREADS)):
            o: T.let = it2 * THREADS + tx
            if o < group * head_dim:
                hh: T.let = o // head_dim
                d: T.let = o % head_dim
                m_all: T.f32 = _f32(NEG_INIT)
                for w in T.unroll(WARPS):
                    m_all = T.max(m_all, m_part[w * group + hh])
                l_all: T.f32 = _f32(0.0)
                acc_all: T.f32 = _f32(0.0)
                for w in T.unroll(WARPS):
                    factor: T.f32 = exp_precise(m_part[w * group + hh] - m_all)
                    l_all = l_all + l_part[w * group + hh] * factor
                    acc_all = acc_all + acc_part[(w * group + hh) * head_dim + d] * factor
                part_o[cid, kvh * group + hh, d] = acc_all
                if d == 0:
                    part_m[cid, kvh * group + hh] = m_all
                    part_l[cid, kvh * group + hh] = l_all

    return mkb_gqa_decode_split


def _merge_kernel(heads, head_dim, page_size):
    """Per (sequence, query head): merge the sequence's chunk partials by their maxima."""
    chunk = chunk_pages(page_size) * page_size

    @T.prim_func
    def mkb_gqa_decode_merge(indptr_h: T.handle, last_h: T.handle, po_h: T.handle, pm_h: T.handle,
                             pl_h: T.handle, out_h: T.handle, lse_h: T.handle):
        batch = T.int32()
        chunks = T.int32()
        kv_indptr = T.match_buffer(indptr_h, (batch + 1,), "int32")
        last_len = T.match_buffer(last_h, (batch,), "int32")
        part_o = T.match_buffer(po_h, (chunks, heads, head_dim), "float32")
        part_m = T.match_buffer(pm_h, (chunks, heads), "float32")
        part_l = T.match_buffer(pl_h, (chunks, heads), "float32")
        out = T.match_buffer(out_h, (batch, heads, head_dim), "bfloat16")
        lse = T.match_buffer(lse_h, (batch, heads), "float32")
        T.device_entry()
        seq, h = T.cta_id([batch, heads])
        d = T.thread_id([head_dim])
        span = T.alloc_buffer((2,), "int32", scope="local")  # first chunk, chunk count
        span[0] = 0
        span[1] = 0
        for b in range(batch):
            npg: T.let = kv_indptr[b + 1] - kv_indptr[b]
            ntok: T.let = T.if_then_else(npg > 0, (npg - 1) * page_size + last_len[b], 0)
            nch: T.let = (ntok + (chunk - 1)) // chunk
            if b < seq:
                span[0] = span[0] + nch
            if b == seq:
                span[1] = nch
        first: T.let = span[0]
        count: T.let = span[1]
        m_all: T.f32 = _f32(NEG_INIT)
        for c in range(count):
            m_all = T.max(m_all, part_m[first + c, h])
        l_all: T.f32 = _f32(0.0)
        acc_all: T.f32 = _f32(0.0)
        for c in range(count):
            factor: T.f32 = exp_precise(part_m[first + c, h] - m_all)
            l_all = l_all + part_l[first + c, h] * factor
            acc_all = acc_all + part_o[first + c, h, d] * factor
        out[seq, h, d] = T.bfloat16(T.if_then_else(l_all > _f32(0.0), acc_all / l_all, _f32(0.0)))
        if d == 0:
            lse[seq, h] = T.if_then_else(
                l_all > _f32(0.0), m_all * _f32(1.0 / math.log(2.0)) + T.log2(l_all),
                _f32(0.0) - T.infinity("float32"))

    return mkb_gqa_decode_merge


def _build(heads, kv_heads, head_dim, page_size, arch):
    """Compile once per shape and arch: the tvm Executables of the split and the merge kernels."""
    key = (heads, kv_heads, head_dim, page_size, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            split = tvm.compile(tvm.IRModule({"main": _split_kernel(heads, kv_heads, head_dim, page_size)}),
                                target=target, tir_pipeline="tirx")
            merge = tvm.compile(tvm.IRModule({"main": _merge_kernel(heads, head_dim, page_size)}),
                                target=target, tir_pipeline="tirx")
        _EXES[key] = (split, merge)
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(heads, kv_heads, head_dim, page_size):
    key = (heads, kv_heads, head_dim, page_size, _device_arch())
    if key not in _FNS:
        _FNS[key] = tuple(exe.mod["main"] for exe in _build(*key))
    return _FNS[key]


def solve(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    batch, heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    if head_dim % 32 != 0 or heads % kv_heads != 0:
        raise ValueError("this kernel expects head_dim % 32 == 0 and heads % kv_heads == 0")
    out = torch.empty(batch, heads, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q.device)
    if batch > 0:
        # an upper bound on the number of chunks (sum over sequences of ceil(pages / chunk pages))
        chunks = kv_indices.numel() // chunk_pages(page_size) + batch
        part_o = torch.empty(chunks, heads, head_dim, dtype=torch.float32, device=q.device)
        part_m = torch.empty(chunks, heads, dtype=torch.float32, device=q.device)
        part_l = torch.empty(chunks, heads, dtype=torch.float32, device=q.device)
        indices = kv_indices.contiguous()
        if indices.numel() == 0:  # keep a valid buffer for the (unused) index array
            indices = torch.zeros(1, dtype=torch.int32, device=q.device)
        split, merge = _kernel_fns(heads, kv_heads, head_dim, page_size)
        indptr, last = kv_indptr.contiguous(), kv_last_page_len.contiguous()
        split(q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), indptr, indices, last, part_o, part_m,
              part_l, float(sm_scale))
        merge(indptr, last, part_o, part_m, part_l, out, lse)
    return out, lse


def _symbols(source):
    """Kernel names declared in a generated CUDA source (``<global_symbol>_kernel``)."""
    names = []
    for part in source.split("__global__ void ")[1:]:
        if part.startswith("__launch_bounds__"):
            part = part[part.index(")") + 1:]
        name = part[:part.index("(")].strip()
        if name not in names:
            names.append(name)
    return names


def kernel_sources(arch="sm_90a", heads=32, kv_heads=8, head_dim=128, page_size=64):
    """{kernel symbol: generated CUDA source} at the graded shape (32 heads, 8 KV heads, d 128, pages of 64)."""
    sources = {}
    for exe in _build(heads, kv_heads, head_dim, page_size, arch):
        source = exe.mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
