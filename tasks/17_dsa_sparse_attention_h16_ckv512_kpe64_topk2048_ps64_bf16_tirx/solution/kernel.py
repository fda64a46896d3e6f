"""TIRx oracle for problem 17: DeepSeek sparse attention in absorbed-MLA form (16 heads, latent 512 +
RoPE 64) over the 2048 (at most) cached slots each query token selects.

Each query token attends its own list of global slot ids (page * 64 + offset; -1 entries are
masked). The host views the caches as [pages * 64, 1, dim] row arrays, so a slot id is a row. The
work is split along each token's index list (split-K / flash-decoding) in two TIRx kernels run back
to back.

``mkb_dsa_sparse_split``: one CTA per (chunk of 64 index entries, query token). The CTA first finds
the last valid (>= 0) entry of its chunk (each warp scans the chunk, one entry per lane and step,
then a warp max by shuffles) and walks the entries up to it; a chunk with no valid entry does no
work and writes only its (m, l) = (-1e30, 0) marker.
- Warp w owns heads 2w and 2w + 1 (8 warps for 16 heads). Lane l holds latent dims l*16 ..
  l*16+15 (two 16-byte vector loads per row) and RoPE dims l*2, l*2+1 (one 4-byte load) of q and
  of each cached row; q is kept in fp32 registers. The warps of a CTA read the same rows, so all
  but the first read hit L1. Entries are taken 2 at a time (their slot ids and rows loaded together).
- Logit = (q_nope . ckv + q_pe . kpe) (fp32 lane partials, then ``T.cuda.warp_sum``) times
  sm_scale; online softmax per head (running max m, rescale exp(m_old - m_new)); a -1 entry, or a
  slot past the chunk's last valid entry, gets the logit -1e30 and the probability 0. The running
  sum is kept as per-lane partials (step i adds to lane i mod 32). The accumulator is sum p * ckv.
- Each warp writes its heads' unnormalised partial (m, sum, acc) for the chunk, in fp32 (acc only
  when the chunk had a valid entry).

``mkb_dsa_sparse_merge``: one CTA per (token, head), one thread per latent dim. Over the token's
chunks with a non-zero sum it takes M = max m_c, L = sum l_c exp(m_c - M), O = sum acc_c
exp(m_c - M); the output is O / L rounded to bf16 once and the base-2 log-sum-exp is
M * log2(e) + log2(L). A token with no valid entry gets 0 and -inf.

Numerics: exp uses a precise polynomial (NVRTC compiles with --use_fast_math, which would make
``T.exp`` approximate); log2 is the fast-math one, whose absolute error (~2^-22) is far below the
fp32 tolerance of an LSE of magnitude ~20; the final division is the fast-math one, whose ~2 ulp
fp32 error vanishes in the bf16 rounding.
Shapes other than 512 / 64 work too: a latent or RoPE dim that is not a multiple of 32 must be
below 32 (one dim per lane, lanes past it contribute 0 and store nothing).
"""

import math

import torch
import tvm
from tvm.script import tirx as T

HEADS_PER_WARP = 2
UNROLL = 2  # entries per warp step
CHUNK = 64  # index entries per split
NEG_INIT = -1.0e30  # running max before the first entry (exp of it underflows to 0)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


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


def _split_kernel(heads, rank, rope, top_k):
    """Per (chunk, token): each warp's unnormalised softmax partial for its heads."""
    hpw = HEADS_PER_WARP
    threads = heads // hpw * 32
    whole_r = rank % 32 == 0
    rpl = rank // 32 if whole_r else 1
    vec = 8 if rpl % 8 == 0 else rpl  # 16-byte loads of the latent slice where it allows
    ovec = 4 if rpl % 4 == 0 else rpl  # 16-byte stores of the fp32 partial where it allows
    whole = rope % 32 == 0
    ppl = rope // 32 if whole else 1
    nch = (top_k + CHUNK - 1) // CHUNK

    def rank_col(lane, j):
        """Latent dim j of a lane's slice (rank below 32: lane l reads dim min(l, rank - 1))."""
        return lane * rpl + j if whole_r else T.min(lane, rank - 1)

    def rope_col(lane, j):
        """RoPE dim j of a lane's slice (rope below 32: lane l reads dim min(l, rope - 1))."""
        return lane * ppl + j if whole else T.min(lane, rope - 1)

    @T.prim_func
    def mkb_dsa_sparse_split(qn_h: T.handle, qp_h: T.handle, ckv_h: T.handle, kpe_h: T.handle,
                             sparse_h: T.handle, po_h: T.handle, pm_h: T.handle, pl_h: T.handle,
                             sm_scale: T.float32):
        tokens = T.int32()
        rows_n = T.int32()
        q_nope = T.match_buffer(qn_h, (tokens, heads, rank), "bfloat16")
        q_pe = T.match_buffer(qp_h, (tokens, heads, rope), "bfloat16")
        ckv_cache = T.match_buffer(ckv_h, (rows_n, 1, rank), "bfloat16")
        kpe_cache = T.match_buffer(kpe_h, (rows_n, 1, rope), "bfloat16")
        sparse = T.match_buffer(sparse_h, (tokens, top_k), "int32")
        part_o = T.match_buffer(po_h, (tokens, nch, heads, rank), "float32")
        part_m = T.match_buffer(pm_h, (tokens, nch, heads), "float32")
        part_l = T.match_buffer(pl_h, (tokens, nch, heads), "float32")
        T.device_entry()
        c, tok = T.cta_id([nch, tokens])
        tx = T.thread_id([threads])
        span = T.alloc_buffer((1,), "int32", scope="local")  # entries of the chunk up to its last valid one
        qn = T.alloc_buffer((hpw * rpl,), "float32", scope="local")
        qp = T.alloc_buffer((hpw * ppl,), "float32", scope="local")
        acc = T.alloc_buffer((hpw * rpl,), "float32", scope="local")
        m_run = T.alloc_buffer((hpw,), "float32", scope="local")
        l_run = T.alloc_buffer((hpw,), "float32", scope="local")
        rows = T.alloc_buffer((UNROLL,), "int32", scope="local")
        live = T.alloc_buffer((UNROLL,), "int32", scope="local")
        c_raw = T.alloc_buffer((UNROLL * rpl,), "bfloat16", scope="local")
        k_raw = T.alloc_buffer((UNROLL * ppl,), "bfloat16", scope="local")
        s_reg = T.alloc_buffer((UNROLL,), "float32", scope="local")
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        beg: T.let = c * CHUNK
        span[0] = 0
        for i in T.unroll(CHUNK // 32):
            if beg + i * 32 + lane < top_k:
                if sparse[tok, beg + i * 32 + lane] >= 0:
                    span[0] = i * 32 + lane + 1
        for i in T.unroll(5):
            other: T.int32 = T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), span[0], T.shift_right(16, i), 32)
            span[0] = T.max(span[0], other)
        t_end: T.let = beg + span[0]
        for h in T.unroll(hpw):
            m_run[h] = _f32(NEG_INIT)
            l_run[h] = _f32(0.0)
            for j in T.unroll(rpl):
                qn[h * rpl + j] = T.if_then_else(lane < rank, T.float32(q_nope[tok, warp * hpw + h, rank_col(lane, j)]),
                                                 _f32(0.0))
                acc[h * rpl + j] = _f32(0.0)
            for j in T.unroll(ppl):
                qp[h * ppl + j] = T.if_then_else(lane < rope, T.float32(q_pe[tok, warp * hpw + h, rope_col(lane, j)]),
                                                 _f32(0.0))
        # online softmax over the chunk, UNROLL entries per step (every warp walks every entry)
        for it in range(T.ceildiv(t_end - beg, UNROLL)):
            pos: T.let = beg + it * UNROLL
            for u in T.unroll(UNROLL):
                slot: T.let = sparse[tok, T.min(pos + u, t_end - 1)]
                rows[u] = T.max(slot, 0)
                live[u] = T.if_then_else(pos + u < t_end, T.if_then_else(slot >= 0, 1, 0), 0)
            for u in T.unroll(UNROLL):
                if whole_r:
                    for v in T.unroll(rpl // vec):
                        for j in T.vectorized(vec):
                            c_raw[u * rpl + v * vec + j] = ckv_cache[rows[u], 0, lane * rpl + v * vec + j]
                else:
                    c_raw[u] = ckv_cache[rows[u], 0, T.min(lane, rank - 1)]
                if whole:
                    for j in T.vectorized(ppl):
                        k_raw[u * ppl + j] = kpe_cache[rows[u], 0, lane * ppl + j]
                else:
                    k_raw[u] = kpe_cache[rows[u], 0, T.min(lane, rope - 1)]
            for h in T.unroll(hpw):
                m_new: T.f32 = m_run[h]
                for u in T.unroll(UNROLL):
                    dot: T.f32 = _f32(0.0)
                    for j in T.unroll(rpl):
                        dot = dot + qn[h * rpl + j] * T.float32(c_raw[u * rpl + j])
                    for j in T.unroll(ppl):
                        dot = dot + qp[h * ppl + j] * T.float32(k_raw[u * ppl + j])
                    s_reg[u] = T.if_then_else(live[u] != 0, T.cuda.warp_sum(dot) * sm_scale, _f32(NEG_INIT))
                    m_new = T.max(m_new, s_reg[u])
                alpha: T.f32 = exp_precise(m_run[h] - m_new)
                p_sum: T.f32 = _f32(0.0)
                for j in T.unroll(rpl):
                    acc[h * rpl + j] = acc[h * rpl + j] * alpha
                for u in T.unroll(UNROLL):
                    prob: T.f32 = T.if_then_else(live[u] != 0, exp_precise(s_reg[u] - m_new), _f32(0.0))
                    p_sum = p_sum + prob
                    for j in T.unroll(rpl):
                        acc[h * rpl + j] = acc[h * rpl + j] + prob * T.float32(c_raw[u * rpl + j])
                l_run[h] = l_run[h] * alpha + T.if_then_else(it % 32 == lane, p_sum, _f32(0.0))
                m_run[h] = m_new
        # the warp's partial for each of its heads
        for h in T.unroll(hpw):
            l_warp: T.f32 = T.cuda.warp_sum(l_run[h])
            if span[0] > 0:
                if whole_r:
                    for v in T.unroll(rpl // ovec):
                        for j in T.vectorized(ovec):
                            part_o[tok, c, warp * hpw + h, lane * rpl + v * ovec + j] = acc[h * rpl + v * ovec + j]
                else:
                    if lane < rank:
                        part_o[tok, c, warp * hpw + h, lane] = acc[h]
            if lane == 0:
                part_m[tok, c, warp * hpw + h] = m_run[h]
                part_l[tok, c, warp * hpw + h] = l_warp

    return mkb_dsa_sparse_split


def _merge_kernel(heads, rank, top_k):
    """Per (token, head): merge the token's chunk partials by their maxima."""
    nch = (top_k + CHUNK - 1) // CHUNK

    @T.prim_func
    def mkb_dsa_sparse_merge(po_h: T.handle, pm_h: T.handle, pl_h: T.handle, out_h: T.handle, lse_h: T.handle):
        tokens = T.int32()
        part_o = T.match_buffer(po_h, (tokens, nch, heads, rank), "float32")
        part_m = T.match_buffer(pm_h, (tokens, nch, heads), "float32")
        part_l = T.match_buffer(pl_h, (tokens, nch, heads), "float32")
        out = T.match_buffer(out_h, (tokens, heads, rank), "bfloat16")
        lse = T.match_buffer(lse_h, (tokens, heads), "float32")
        T.device_entry()
        tok, h = T.cta_id([tokens, heads])
        d = T.thread_id([rank])
        m_all: T.f32 = _f32(NEG_INIT)
        for c in range(nch):
            if part_l[tok, c, h] > _f32(0.0):
                m_all = T.max(m_all, part_m[tok, c, h])
        l_all: T.f32 = _f32(0.0)
        acc_all: T.f32 = _f32(0.0)
        for c in range(nch):
            if part_l[tok, c, h] > _f32(0.0):
                factor: T.f32 = exp_precise(part_m[tok, c, h] - m_all)
                l_all = l_all + part_l[tok, c, h] * factor
                acc_all = acc_all + part_o[tok, c, h, d] * factor
        out[tok, h, d] = T.bfloat16(T.if_then_else(l_all > _f32(0.0), acc_all / l_all, _f32(0.0)))
        if d == 0:
            lse[tok, h] = T.if_then_else(
                l_all > _f32(0.0), m_all * _f32(1.0 / math.log(2.0)) + T.log2(l_all),
                _f32(0.0) - T.infinity("float32"))

    return mkb_dsa_sparse_merge


def _build(heads, rank, rope, top_k, arch):
    """Compile once per shape and arch: the tvm Executables of the split and the merge kernels."""
    key = (heads, rank, rope, top_k, arch)
    if key not in _EXES:
        if heads % HEADS_PER_WARP or (rank % 32 and rank >= 32) or (rope % 32 and rope >= 32):
            raise ValueError("need heads % 2 == 0, and rank and rope each a multiple of 32 or below 32")
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            split = tvm.compile(tvm.IRModule({"main": _split_kernel(heads, rank, rope, top_k)}), target=target,
                                tir_pipeline="tirx")
            merge = tvm.compile(tvm.IRModule({"main": _merge_kernel(heads, rank, top_k)}), target=target,
                                tir_pipeline="tirx")
        _EXES[key] = (split, merge)
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(heads, rank, rope, top_k):
    key = (heads, rank, rope, top_k, _device_arch())
    if key not in _FNS:
        _FNS[key] = tuple(exe.mod["main"] for exe in _build(*key))
    return _FNS[key]


def solve(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    tokens, heads, rank = q_nope.shape
    rope = q_pe.shape[2]
    num_pages, page_size, _ = ckv_cache.shape
    top_k = sparse_indices.shape[1]
    device = q_nope.device
    out = torch.empty(tokens, heads, rank, dtype=torch.bfloat16, device=device)
    lse = torch.empty(tokens, heads, dtype=torch.float32, device=device)
    if tokens > 0:
        nch = (top_k + CHUNK - 1) // CHUNK
        part_o = torch.empty(tokens, nch, heads, rank, dtype=torch.float32, device=device)
        part_m = torch.empty(tokens, nch, heads, dtype=torch.float32, device=device)
        part_l = torch.empty(tokens, nch, heads, dtype=torch.float32, device=device)
        split, merge = _kernel_fns(heads, rank, rope, top_k)
        rows = num_pages * page_size
        split(q_nope.contiguous(), q_pe.contiguous(), ckv_cache.contiguous().view(rows, 1, rank),
              kpe_cache.contiguous().view(rows, 1, rope), sparse_indices.contiguous().to(torch.int32), part_o,
              part_m, part_l, float(sm_scale))
        merge(part_o, part_m, part_l, out, lse)
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


def kernel_sources(arch="sm_90a", heads=16, rank=512, rope=64, top_k=2048):
    """{kernel symbol: generated CUDA source} at the graded shape (16 heads, latent 512, RoPE 64, 2048)."""
    sources = {}
    for exe in _build(heads, rank, rope, top_k, arch):
        source = exe.mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
