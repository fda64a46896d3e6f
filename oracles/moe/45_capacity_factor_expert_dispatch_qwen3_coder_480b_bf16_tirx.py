"""TIRx oracle for problem 45: capacity-limited MoE expert execution (routing given), SwiGLU experts
with weights stored [E, in, out], bf16.

The dispatch gather, the three expert GEMMs, the SwiGLU and the weighted combine run in three TIRx
kernels; torch only sorts the (token, k) assignments and builds index tables.

- Capacity rule (glue, as the reference): the assignments flattened token-major are stably sorted
  by expert; an expert keeps its first C = floor(T k / E * 1.25) sorted assignments and drops the
  rest. The kept rows of expert e are sorted positions starts[e] .. starts[e] + min(count, C) - 1;
  they are cut into 64-row tiles listed in a fixed table of E * ceil(C / 64) entries (empty entries
  do nothing, so there is no host sync). Zero rows of the reference's padded buffer are not run:
  their outputs are never used.
- ``mkb_moe_cap_swiglu``: a CTA owns one tile (rows of one expert, each the token x[pos // k]
  gathered through an index table) and 64 gate columns with the same 64 up columns, and loops over
  K in steps of 32. bf16 operands are read as 32-bit words (two values each) and widened exactly to
  fp32 into shared memory (K-major tiles, rows padded by one word); 256 threads each keep a 4 x 8
  fp32 accumulator (rows ty + 16i, columns tx + 16j) updated by fp32 multiply-adds, so each dot
  product is an fp32 sum of exact products (a bf16 GEMM with fp32 accumulation). The epilogue
  rounds gate and up to bf16 and writes h = bf16(bf16(silu(gate)) * up).
- ``mkb_moe_cap_down``: the same CTA shape over 128 output columns of y = bf16(h W_d[e]).
- ``mkb_moe_cap_combine``: one CTA per token; per column, the token's kept contributions
  bf16(y * weight) in ascending expert order (dropped ones add zero) are summed with a bf16
  rounding after each add, as the reference.
silu uses a precise exp and a Newton-corrected division (NVRTC builds with --use_fast_math).
TIRx 0.27 has no WGMMA path on sm_90: the GEMMs are SIMT fp32 FMAs, slower than the reference's
cuBLAS bf16 GEMMs.
"""

import torch
import tvm
from tvm.script import tirx as T

CAPACITY_FACTOR = 1.25
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=5120, hidden=6144, inter=2560, experts=160, top_k=8)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA (SwiGLU: 64 gate + 64 up), K step
HALF = BN // 2
THREADS = 256
A_STRIDE = BM + 1  # shared tiles are K-major, padded by one word
B_STRIDE = BN + 1
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
    """exp(x) in fp32 within about 1 ulp from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split so n * hi is exact);
    exp(r) by a degree-7 Taylor polynomial; 2^n from exponent bits. Inputs below -87 give 0;
    inputs are clamped at 88.
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


def div_precise(num, den):
    """num / den: the fast-math quotient corrected by one Newton step on the residual."""

    def with_operands(n, d):
        def with_r(r):
            return _let(n * r, lambda q: q + (n - d * q) * r, "q")

        return _let(_f32(1.0) / d, with_r, "rcp")

    return _let(num, lambda n: _let(den, lambda d: with_operands(n, d), "den"), "num")


def silu_precise(g):
    """g / (1 + exp(-g)), torch's silu, with the precise exp and division (0 where exp overflows)."""

    def with_g(gv):
        def with_den(den):
            return T.if_then_else(den > _f32(3.0e38), _f32(0.0), div_precise(gv, den))

        return _let(_f32(1.0) + exp_precise(_f32(0.0) - gv), with_den, "den")

    return _let(g, with_g, "g")


def _lo(word):
    """The bf16 in the low half of an int32 word, as fp32 (exact)."""
    return T.reinterpret("float32", T.shift_left(word, 16))


def _hi(word):
    """The bf16 in the high half of an int32 word, as fp32 (exact)."""
    return T.reinterpret("float32", word & T.int32(-65536))


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return T.float32(T.bfloat16(x))


def _swiglu_kernel(hidden, inter):
    """h[p, j] = bf16(bf16(silu(bf16(A_p . G_e[:, j]))) * bf16(A_p . U_e[:, j])) over the rows p of each tile."""
    kwords = hidden // 2
    nwords = inter // 2
    hw = HALF // 2  # words per K row of one half

    @T.prim_func
    def mkb_moe_cap_swiglu(a_h: T.handle, idx_h: T.handle, g_h: T.handle, u_h: T.handle, tiles_h: T.handle,
                           h_h: T.handle):
        tokens = T.int32()
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        a_words = T.match_buffer(a_h, (tokens, kwords), "int32")
        rowidx = T.match_buffer(idx_h, (rows,), "int32")
        g_words = T.match_buffer(g_h, (n_experts, hidden, nwords), "int32")
        u_words = T.match_buffer(u_h, (n_experts, hidden, nwords), "int32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        h_out = T.match_buffer(h_h, (rows, inter), "bfloat16")
        T.device_entry()
        nb, tb = T.cta_id([(inter + HALF - 1) // HALF, max_tiles])
        tid = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK * A_STRIDE,), "float32", scope="shared")
        b_s = T.alloc_buffer((BK * B_STRIDE,), "float32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        expert: T.let = tiles[tb, 0]
        row_begin: T.let = tiles[tb, 1]
        row_end: T.let = tiles[tb, 2]
        n0: T.let = nb * HALF
        ty: T.let = tid // 16
        tx: T.let = tid % 16
        if row_end > row_begin:  # uniform over the CTA
            for i in T.unroll(32):
                acc[i] = T.float32(0.0)
            for kt in range((hidden + BK - 1) // BK):
                for q in T.unroll(BM * BK // 2 // THREADS):
                    r: T.let = (tid + q * THREADS) // (BK // 2)
                    w: T.let = (tid + q * THREADS) % (BK // 2)
                    if row_begin + r < row_end and kt * (BK // 2) + w < kwords:
                        word: T.let = a_words[rowidx[row_begin + r], kt * (BK // 2) + w]
                        a_s[2 * w * A_STRIDE + r] = _lo(word)
                        a_s[(2 * w + 1) * A_STRIDE + r] = _hi(word)
                    else:
                        a_s[2 * w * A_STRIDE + r] = T.float32(0.0)
                        a_s[(2 * w + 1) * A_STRIDE + r] = T.float32(0.0)
                for q in T.unroll(HALF * BK // 2 // THREADS):
                    kk: T.let = (tid + q * THREADS) // hw
                    w2: T.let = (tid + q * THREADS) % hw
                    if kt * BK + kk < hidden and nb * hw + w2 < nwords:
                        gword: T.let = g_words[expert, kt * BK + kk, nb * hw + w2]
                        uword: T.let = u_words[expert, kt * BK + kk, nb * hw + w2]
                        b_s[kk * B_STRIDE + 2 * w2] = _lo(gword)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = _hi(gword)
                        b_s[kk * B_STRIDE + HALF + 2 * w2] = _lo(uword)
                        b_s[kk * B_STRIDE + HALF + 2 * w2 + 1] = _hi(uword)
                    else:
                        b_s[kk * B_STRIDE + 2 * w2] = T.float32(0.0)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = T.float32(0.0)
                        b_s[kk * B_STRIDE + HALF + 2 * w2] = T.float32(0.0)
                        b_s[kk * B_STRIDE + HALF + 2 * w2 + 1] = T.float32(0.0)
                T.cuda.cta_sync()
                for k in T.unroll(BK):
                    for jj in T.unroll(8):
                        for ii in T.unroll(4):
                            acc[ii * 8 + jj] = acc[ii * 8 + jj] + (
                                a_s[k * A_STRIDE + ty + 16 * ii] * b_s[k * B_STRIDE + tx + 16 * jj])
                T.cuda.cta_sync()
            for ii in T.unroll(4):
                if row_begin + ty + 16 * ii < row_end:
                    for jj in T.unroll(4):
                        if n0 + tx + 16 * jj < inter:
                            act: T.f32 = _bf16(silu_precise(_bf16(acc[ii * 8 + jj])))
                            h_out[row_begin + ty + 16 * ii, n0 + tx + 16 * jj] = T.bfloat16(
                                act * _bf16(acc[ii * 8 + jj + 4]))

    return mkb_moe_cap_swiglu


def _down_kernel(hidden, inter):
    """y[p, n] = bf16(sum_k h[p, k] * W_d[e, k, n]) over the rows p of each tile's expert e."""
    kwords = inter // 2
    nwords = hidden // 2
    bw = BN // 2  # words per K row of the B tile

    @T.prim_func
    def mkb_moe_cap_down(a_h: T.handle, b_h: T.handle, tiles_h: T.handle, out_h: T.handle):
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        a_words = T.match_buffer(a_h, (rows, kwords), "int32")
        b_words = T.match_buffer(b_h, (n_experts, inter, nwords), "int32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        out = T.match_buffer(out_h, (rows, hidden), "bfloat16")
        T.device_entry()
        nb, tb = T.cta_id([(hidden + BN - 1) // BN, max_tiles])
        tid = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK * A_STRIDE,), "float32", scope="shared")
        b_s = T.alloc_buffer((BK * B_STRIDE,), "float32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        expert: T.let = tiles[tb, 0]
        row_begin: T.let = tiles[tb, 1]
        row_end: T.let = tiles[tb, 2]
        n0: T.let = nb * BN
        ty: T.let = tid // 16
        tx: T.let = tid % 16
        if row_end > row_begin:  # uniform over the CTA
            for i in T.unroll(32):
                acc[i] = T.float32(0.0)
            for kt in range((inter + BK - 1) // BK):
                for q in T.unroll(BM * BK // 2 // THREADS):
                    r: T.let = (tid + q * THREADS) // (BK // 2)
                    w: T.let = (tid + q * THREADS) % (BK // 2)
                    if row_begin + r < row_end and kt * (BK // 2) + w < kwords:
                        word: T.let = a_words[row_begin + r, kt * (BK // 2) + w]
                        a_s[2 * w * A_STRIDE + r] = _lo(word)
                        a_s[(2 * w + 1) * A_STRIDE + r] = _hi(word)
                    else:
                        a_s[2 * w * A_STRIDE + r] = T.float32(0.0)
                        a_s[(2 * w + 1) * A_STRIDE + r] = T.float32(0.0)
                for q in T.unroll(BN * BK // 2 // THREADS):
                    kk: T.let = (tid + q * THREADS) // bw
                    w2: T.let = (tid + q * THREADS) % bw
                    if kt * BK + kk < inter and nb * bw + w2 < nwords:
                        bword: T.let = b_words[expert, kt * BK + kk, nb * bw + w2]
                        b_s[kk * B_STRIDE + 2 * w2] = _lo(bword)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = _hi(bword)
                    else:
                        b_s[kk * B_STRIDE + 2 * w2] = T.float32(0.0)
                        b_s[kk * B_STRIDE + 2 * w2 + 1] = T.float32(0.0)
                T.cuda.cta_sync()
                for k in T.unroll(BK):
                    for jj in T.unroll(8):
                        for ii in T.unroll(4):
                            acc[ii * 8 + jj] = acc[ii * 8 + jj] + (
                                a_s[k * A_STRIDE + ty + 16 * ii] * b_s[k * B_STRIDE + tx + 16 * jj])
                T.cuda.cta_sync()
            for ii in T.unroll(4):
                if row_begin + ty + 16 * ii < row_end:
                    for jj in T.unroll(8):
                        if n0 + tx + 16 * jj < hidden:
                            out[row_begin + ty + 16 * ii, n0 + tx + 16 * jj] = T.bfloat16(acc[ii * 8 + jj])

    return mkb_moe_cap_down


def _combine_kernel(hidden, top_k):
    @T.prim_func
    def mkb_moe_cap_combine(y_h: T.handle, sw_h: T.handle, slots_h: T.handle, out_h: T.handle):
        tokens = T.int32()
        pairs = T.int32()
        y = T.match_buffer(y_h, (pairs, hidden), "bfloat16")
        sorted_w = T.match_buffer(sw_h, (pairs,), "float32")
        slots = T.match_buffer(slots_h, (tokens, top_k), "int32")
        out = T.match_buffer(out_h, (tokens, hidden), "bfloat16")
        T.device_entry()
        t = T.cta_id([tokens])
        tid = T.thread_id([THREADS])
        rows = T.alloc_buffer((top_k,), "int32", scope="local")
        wts = T.alloc_buffer((top_k,), "float32", scope="local")
        for k in T.unroll(top_k):
            rows[k] = slots[t, k]  # -1: dropped
            wts[k] = T.float32(0.0)
            if rows[k] >= 0:
                wts[k] = sorted_w[rows[k]]
        for it in range((hidden + THREADS - 1) // THREADS):
            c: T.let = it * THREADS + tid
            if c < hidden:
                total: T.f32 = T.float32(0.0)
                for k in T.unroll(top_k):
                    if rows[k] >= 0:
                        total = _bf16(total + _bf16(T.float32(y[rows[k], c]) * wts[k]))
                out[t, c] = T.bfloat16(total)

    return mkb_moe_cap_combine


def _build(hidden, inter, top_k, arch):
    """Compile every kernel once per shape and arch; return the tvm Executable."""
    key = (hidden, inter, top_k, arch)
    if key not in _EXES:
        funcs = {"swiglu": _swiglu_kernel(hidden, inter), "down": _down_kernel(hidden, inter),
                 "combine": _combine_kernel(hidden, top_k)}
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule(funcs), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(hidden, inter, top_k):
    key = (hidden, inter, top_k, _device_arch())
    if key not in _FNS:
        mod = _build(*key).mod
        _FNS[key] = tuple(mod[name] for name in ("swiglu", "down", "combine"))
    return _FNS[key]


def _capacity(tokens, top_k, experts):
    return int(tokens * top_k / experts * CAPACITY_FACTOR)


def _max_tiles(capacity, experts):
    return experts * ((capacity + BM - 1) // BM)


def _plan(selected, weights, experts, capacity):
    """Sorted assignments, the kept rows' tile table and each token's kept rows in expert order.

    Returns the token of each sorted position, the routing weight (fp32) of each sorted position,
    the [E * ceil(C / BM), 3] tile table (expert, first row, end row) and [T, k] sorted positions
    of each token's assignments in ascending expert order, -1 where the assignment was dropped.
    """
    tokens, top_k = selected.shape
    pairs = tokens * top_k
    device = selected.device
    flat = selected.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    kept_n = torch.clamp(counts, max=capacity)
    per_e = (capacity + BM - 1) // BM
    e = torch.arange(experts, device=device).repeat_interleave(per_e)
    j = torch.arange(per_e, device=device).repeat(experts)
    begin = starts[e] + j * BM
    end = torch.minimum(begin + BM, starts[e] + kept_n[e])
    tiles = torch.stack([e, begin, torch.maximum(end, begin)], 1).to(torch.int32).contiguous()
    sorted_e = flat[order]
    position = torch.arange(pairs, device=device) - starts[sorted_e]
    rows = torch.where(position < capacity, torch.arange(pairs, device=device), -1)
    slot_of_pair = torch.empty_like(rows)
    slot_of_pair[order] = rows
    by_expert = selected.argsort(dim=-1)
    slots = slot_of_pair.view(tokens, top_k).gather(1, by_expert)
    sorted_tok = (order // top_k).to(torch.int32).contiguous()
    sorted_w = weights.flatten()[order].float().contiguous()
    return sorted_tok, sorted_w, tiles, slots.to(torch.int32).contiguous()


def _words(t):
    """A bf16 tensor's values as int32 words (two consecutive values each, low half first)."""
    return t.contiguous().view(torch.int32)


def solve(hidden_states, selected_experts, routing_weights, expert_gate_weights, expert_up_weights,
          expert_down_weights):
    tokens, hidden = hidden_states.shape
    top_k = selected_experts.shape[1]
    experts, _, inter = expert_gate_weights.shape
    pairs = tokens * top_k
    capacity = _capacity(tokens, top_k, experts)
    device = hidden_states.device
    bf16 = torch.bfloat16
    out = torch.zeros(tokens, hidden, dtype=bf16, device=device)
    if capacity == 0:
        return out
    swiglu, down, combine = _kernel_fns(hidden, inter, top_k)
    sorted_tok, sorted_w, tiles, slots = _plan(selected_experts, routing_weights, experts, capacity)
    h = torch.empty(pairs, inter, dtype=bf16, device=device)
    swiglu(_words(hidden_states), sorted_tok, _words(expert_gate_weights), _words(expert_up_weights), tiles, h)
    y = torch.empty(pairs, hidden, dtype=bf16, device=device)
    down(_words(h), _words(expert_down_weights), tiles, y)
    combine(y, sorted_w, slots, out)
    return out


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


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} at the graded workload."""
    w = WORKLOAD
    source = _build(w["hidden"], w["inter"], w["top_k"], arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
