"""TIRx oracle for problem 14: absorbed-MLA paged decode (16 heads, latent 512 + RoPE 64, page size 1).

All 16 heads read the same cached rows (ckv is both key part and value), and contexts reach ~9 K
tokens, so the work is split along the context (split-K / flash-decoding) in two TIRx kernels run
back to back.

``mkb_mla_decode_split``: the context of each sequence is cut into chunks of 128 tokens; one CTA
per chunk. Chunks are numbered sequence after sequence and the CTA finds its sequence by walking
kv_indptr; the grid holds a host-side upper bound on the chunk count (tokens // 128 + batch, no
device sync needed), and CTAs past the last chunk see an empty token range and write a partial
that nothing reads.
- Warp w owns heads 2w and 2w + 1 for every token of the chunk (8 warps for 16 heads). Lane l
  holds latent dims l*16 .. l*16+15 (two 16-byte vector loads per row) and RoPE dims l*2, l*2+1
  (one 4-byte load) of q and of each cached row; q is kept in fp32 registers. The warps of a CTA
  read the same rows, so all but the first read hit L1. Tokens are taken 2 at a time (their row
  indices and rows loaded together).
- Logit = (q_nope . ckv + q_pe . kpe) (fp32 lane partials, then ``T.cuda.warp_sum``) times
  sm_scale; online softmax per head (running max m, rescale exp(m_old - m_new)); the running sum
  is kept as per-lane partials (step i adds to lane i mod 32). Slots past the chunk's end get the
  logit -1e30. The accumulator is sum p * ckv over the chunk.
- Each warp writes its heads' unnormalised partial (m, sum, acc) for the chunk, in fp32.

``mkb_mla_decode_merge``: one CTA per (sequence, head), one thread per latent dim. It finds the
sequence's chunk range by the same walk, takes M = max m_c, L = sum l_c exp(m_c - M) and
O = sum acc_c exp(m_c - M); the output is O / L rounded to bf16 once and the base-2 log-sum-exp is
M * log2(e) + log2(L).

Numerics: exp uses a precise polynomial (NVRTC compiles with --use_fast_math, which would make
``T.exp`` approximate); log2 is the fast-math one, whose absolute error (~2^-22) is far below the
fp32 tolerance of an LSE of magnitude ~20; the final division is the fast-math one, whose ~2 ulp
fp32 error vanishes in the bf16 rounding. An empty sequence yields output 0 and LSE -inf.
Shapes other than 512 / 64 work too: the latent dim must be a multiple of 32; a RoPE dim that is
not a multiple of 32 must be below 32 (one dim per lane, lanes past it contribute 0).
"""

import math

import torch
import tvm
from tvm.script import tirx as T

HEADS_PER_WARP = 2
UNROLL = 2  # tokens per warp step
CHUNK = 128  # tokens per split
NEG_INIT = -1.0e30  # running max before the first token (exp of it underflows to 0)
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


def _split_kernel(heads, rank, rope):
    """Per chunk: each warp's unnormalised softmax partial for its heads."""
    hpw = HEADS_PER_WARP
    threads = heads // hpw * 32
    rpl = rank // 32
    vec = 8 if rpl % 8 == 0 else rpl  # 16-byte loads of the latent slice where it allows
    ovec = 4 if rpl % 4 == 0 else rpl  # 16-byte stores of the fp32 partial where it allows
    whole = rope % 32 == 0
    ppl = rope // 32 if whole else 1

    def rope_col(lane, j):
        """RoPE dim j of a lane's slice (rope below 32: lane l reads dim min(l, rope - 1))."""
        return lane * ppl + j if whole else T.min(lane, rope - 1)

    @T.prim_func
    def mkb_mla_decode_split(qn_h: T.handle, qp_h: T.handle, ckv_h: T.handle, kpe_h: T.handle,
                             indptr_h: T.handle, indices_h: T.handle, po_h: T.handle, pm_h: T.handle,
                             pl_h: T.handle, sm_scale: T.float32):
        batch = T.int32()
        num_pages = T.int32()
        nnz = T.int32()
        chunks = T.int32()
        q_nope = T.match_buffer(qn_h, (batch, heads, rank), "bfloat16")
        q_pe = T.match_buffer(qp_h, (batch, heads, rope), "bfloat16")
        ckv_cache = T.match_buffer(ckv_h, (num_pages, 1, rank), "bfloat16")
        kpe_cache = T.match_buffer(kpe_h, (num_pages, 1, rope), "bfloat16")
        kv_indptr = T.match_buffer(indptr_h, (batch + 1,), "int32")
        kv_indices = T.match_buffer(indices_h, (nnz,), "int32")
        part_o = T.match_buffer(po_h, (chunks, heads, rank), "float32")
        part_m = T.match_buffer(pm_h, (chunks, heads), "float32")
        part_l = T.match_buffer(pl_h, (chunks, heads), "float32")
        T.device_entry()
        cid = T.cta_id([chunks])
        tx = T.thread_id([threads])
        span = T.alloc_buffer((4,), "int32", scope="local")  # seq, first token, end token, chunks so far
        qn = T.alloc_buffer((hpw * rpl,), "float32", scope="local")
        qp = T.alloc_buffer((hpw * ppl,), "float32", scope="local")
        acc = T.alloc_buffer((hpw * rpl,), "float32", scope="local")
        m_run = T.alloc_buffer((hpw,), "float32", scope="local")
        l_run = T.alloc_buffer((hpw,), "float32", scope="local")
        rows = T.alloc_buffer((UNROLL,), "int32", scope="local")
        c_raw = T.alloc_buffer((UNROLL * rpl,), "bfloat16", scope="local")
        k_raw = T.alloc_buffer((UNROLL * ppl,), "bfloat16", scope="local")
        s_reg = T.alloc_buffer((UNROLL,), "float32", scope="local")
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        # which sequence and token range this chunk covers (empty past the last chunk)
        for i in T.unroll(4):
            span[i] = 0
        for b in range(batch):
            ntok: T.let = kv_indptr[b + 1] - kv_indptr[b]
            rel: T.let = cid - span[3]
            if rel >= 0:
                if rel < (ntok + (CHUNK - 1)) // CHUNK:
                    span[0] = b
                    span[1] = rel * CHUNK
                    span[2] = T.min(rel * CHUNK + CHUNK, ntok)
            span[3] = span[3] + (ntok + (CHUNK - 1)) // CHUNK
        seq: T.let = span[0]
        t_beg: T.let = span[1]
        t_end: T.let = span[2]
        pbeg: T.let = kv_indptr[seq]
        for h in T.unroll(hpw):
            m_run[h] = _f32(NEG_INIT)
            l_run[h] = _f32(0.0)
            for j in T.unroll(rpl):
                qn[h * rpl + j] = T.float32(q_nope[seq, warp * hpw + h, lane * rpl + j])
                acc[h * rpl + j] = _f32(0.0)
            for j in T.unroll(ppl):
                qp[h * ppl + j] = T.if_then_else(lane < rope, T.float32(q_pe[seq, warp * hpw + h, rope_col(lane, j)]),
                                                 _f32(0.0))
        # online softmax over the chunk, UNROLL tokens per step (every warp walks every token)
        for it in range(T.ceildiv(t_end - t_beg, UNROLL)):
            pos: T.let = t_beg + it * UNROLL
            for u in T.unroll(UNROLL):
                rows[u] = kv_indices[pbeg + T.min(pos + u, t_end - 1)]
            for u in T.unroll(UNROLL):
                for v in T.unroll(rpl // vec):
                    for j in T.vectorized(vec):
                        c_raw[u * rpl + v * vec + j] = ckv_cache[rows[u], 0, lane * rpl + v * vec + j]
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
                    s_reg[u] = T.if_then_else(pos + u < t_end, T.cuda.warp_sum(dot) * sm_scale, _f32(NEG_INIT))
                    m_new = T.max(m_new, s_reg[u])
                alpha: T.f32 = exp_precise(m_run[h] - m_new)
                p_sum: T.f32 = _f32(0.0)
                for j in T.unroll(rpl):
                    acc[h * rpl + j] = acc[h * rpl + j] * alpha
                for u in T.unroll(UNROLL):
                    prob: T.f32 = exp_precise(s_reg[u] - m_new)
                    p_sum = p_sum + prob
                    for j in T.unroll(rpl):
                        acc[h * rpl + j] = acc[h * rpl + j] + prob * T.float32(c_raw[u * rpl + j])
                l_run[h] = l_run[h] * alpha + T.if_then_else(it % 32 == lane, p_sum, _f32(0.0))
                m_run[h] = m_new
        # the warp's partial for each of its heads
        for h in T.unroll(hpw):
            l_warp: T.f32 = T.cuda.warp_sum(l_run[h])
            for v in T.unroll(rpl // ovec):
                for j in T.vectorized(ovec):
                    part_o[cid, warp * hpw + h, lane * rpl + v * ovec + j] = acc[h * rpl + v * ovec + j]
            if lane == 0:
                part_m[cid, warp * hpw + h] = m_run[h]
                part_l[cid, warp * hpw + h] = l_warp

    return mkb_mla_decode_split


def _merge_kernel(heads, rank):
    """Per (sequence, head): merge the sequence's chunk partials by their maxima."""

    @T.prim_func
    def mkb_mla_decode_merge(indptr_h: T.handle, po_h: T.handle, pm_h: T.handle, pl_h: T.handle,
                             out_h: T.handle, lse_h: T.handle):
        batch = T.int32()
        chunks = T.int32()
        kv_indptr = T.match_buffer(indptr_h, (batch + 1,), "int32")
        part_o = T.match_buffer(po_h, (chunks, heads, rank), "float32")
        part_m = T.match_buffer(pm_h, (chunks, heads), "float32")
        part_l = T.match_buffer(pl_h, (chunks, heads), "float32")
        out = T.match_buffer(out_h, (batch, heads, rank), "bfloat16")
        lse = T.match_buffer(lse_h, (batch, heads), "float32")
        T.device_entry()
        seq, h = T.cta_id([batch, heads])
        d = T.thread_id([rank])
        span = T.alloc_buffer((1,), "int32", scope="local")  # chunks of the sequences before this one
        span[0] = 0
        for b in range(batch):
            if b < seq:
                span[0] = span[0] + (kv_indptr[b + 1] - kv_indptr[b] + (CHUNK - 1)) // CHUNK
        first: T.let = span[0]
        count: T.let = (kv_indptr[seq + 1] - kv_indptr[seq] + (CHUNK - 1)) // CHUNK
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

    return mkb_mla_decode_merge


def _build(heads, rank, rope, arch):
    """Compile once per shape and arch: the tvm Executables of the split and the merge kernels."""
    key = (heads, rank, rope, arch)
    if key not in _EXES:
        if heads % HEADS_PER_WARP or rank % 32 or (rope % 32 and rope >= 32):
            raise ValueError("need heads % 2 == 0, rank % 32 == 0 and rope % 32 == 0 or rope < 32")
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            split = tvm.compile(tvm.IRModule({"main": _split_kernel(heads, rank, rope)}), target=target,
                                tir_pipeline="tirx")
            merge = tvm.compile(tvm.IRModule({"main": _merge_kernel(heads, rank)}), target=target,
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


def _kernel_fns(heads, rank, rope):
    key = (heads, rank, rope, _device_arch())
    if key not in _FNS:
        _FNS[key] = tuple(exe.mod["main"] for exe in _build(*key))
    return _FNS[key]


def solve(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, rank = q_nope.shape
    rope = q_pe.shape[2]
    if ckv_cache.shape[1] != 1:
        raise ValueError("this kernel expects page size 1")
    out = torch.empty(batch, heads, rank, dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q_nope.device)
    if batch > 0:
        # an upper bound on the number of chunks (sum over sequences of ceil(tokens / CHUNK))
        chunks = kv_indices.numel() // CHUNK + batch
        part_o = torch.empty(chunks, heads, rank, dtype=torch.float32, device=q_nope.device)
        part_m = torch.empty(chunks, heads, dtype=torch.float32, device=q_nope.device)
        part_l = torch.empty(chunks, heads, dtype=torch.float32, device=q_nope.device)
        indices = kv_indices.contiguous()
        if indices.numel() == 0:  # keep a valid buffer for the (unused) index array
            indices = torch.zeros(1, dtype=torch.int32, device=q_nope.device)
        split, merge = _kernel_fns(heads, rank, rope)
        indptr = kv_indptr.contiguous()
        split(q_nope.contiguous(), q_pe.contiguous(), ckv_cache.contiguous(), kpe_cache.contiguous(), indptr,
              indices, part_o, part_m, part_l, float(sm_scale))
        merge(indptr, part_o, part_m, part_l, out, lse)
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


def kernel_sources(arch="sm_90a", heads=16, rank=512, rope=64):
    """{kernel symbol: generated CUDA source} at the graded shape (16 heads, latent 512, RoPE 64)."""
    sources = {}
    for exe in _build(heads, rank, rope, arch):
        source = exe.mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
