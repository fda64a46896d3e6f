"""TIRx oracle for problem 51: gpt-oss sparse MoE expert dispatch and combine (clamped GLU with
biases, weights stored [E, in, out]), fp32.

The gathers, both expert GEMMs, the GLU, the routing-weight scaling and the combine run in three TIRx
kernels; torch only sorts the (token, k) assignments by expert and builds index tables.

- ``mkb_moe_glu``: a CTA owns one tile of up to 64 rows of one expert (sorted assignments, each the
  token's row of x gathered through an index table) and 64 GLU columns j, i.e. the 128 contiguous
  gate_up columns 2 n0 .. 2 n0 + 127, de-interleaved while staging (gate columns 2j to the first
  half of the shared tile, up columns 2j + 1 to the second). K advances in steps of 32; 256 threads
  each keep a 4 x 8 fp32 accumulator (rows ty + 16i, columns tx + 16j); each K step's 32 products
  are summed by fp32 multiply-adds from zero and the step sum is added to the accumulator (fp32
  accumulation, no TF32; the two levels keep the rounding error well below one running sum's).
  Epilogue, rounding like the reference:
  gu = acc + bias; gate = min(gu_gate, 7), up = clamp(gu_up, -7, 7);
  h = (up + 1) * (gate * sigmoid(1.702 gate)), sigmoid = 1 / (1 + exp(-z)).
- ``mkb_moe_down``: the same CTA shape over 128 output columns: y = acc + bias, and the stored
  contribution is y * routing_weights[t, e] (rounded on its own, as the reference's product).
- ``mkb_moe_combine``: one CTA per token; per column the token's contributions are summed in
  ascending expert order from zero (the reference's index_add_ order).
exp and division use the precise forms below (NVRTC builds with --use_fast_math). fp32 GEMMs
without TF32 have no tensor-core instruction on sm_90 (and TIRx 0.27 has no WGMMA path), so the
GEMMs are SIMT fp32 FMAs.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 20): 114.0 ms against
the eager reference's 93.2 ms (0.82x). The grader's profiled call puts 99.8 % of the GPU time in DSL
kernels: the gathered gate/up GEMM with the GLU 73.3 ms, the down GEMM 37.9 ms, the combine 0.30 ms
(the torch sort and index tables 0.2 ms). The 65,536 routed rows make 3.26 TFLOP: these SIMT loops
issue them at 29 TFLOP/s, while the reference's strict fp32 cuBLAS GEMMs, one expert at a time, reach
35 TFLOP/s, about half the H100's fp32 FMA peak (67 TFLOP/s). The route that would beat eager, not
taken here: 3xTF32 on the tensor cores (each fp32 operand split into a TF32 high part and a TF32
remainder, three tensor-core products accumulated in fp32, with about fp32's error; TIRx 0.27 has no
WGMMA path, so mma.sync), or short of that a SIMT GEMM built like cuBLAS's (8 x 8 outputs per thread,
128-row tiles, double-buffered shared-memory staging) on the same expert-sorted tiles.
"""

import torch
import tvm
from tvm.script import tirx as T

LIMIT, ALPHA = 7.0, 1.702
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=16384, hidden=2880, inter=2880, experts=128, top_k=4)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA (GLU: 64 gate + 64 up), K step
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


def _glu_kernel(hidden, inter):
    """h[p, j] = clamped GLU of (x[rowidx[p]] W_gu[e] + b_gu[e]) at columns 2j, 2j + 1."""

    @T.prim_func
    def mkb_moe_glu(x_h: T.handle, idx_h: T.handle, w_h: T.handle, b_h: T.handle, tiles_h: T.handle,
                    h_h: T.handle):
        tokens = T.int32()
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        x = T.match_buffer(x_h, (tokens, hidden), "float32")
        rowidx = T.match_buffer(idx_h, (rows,), "int32")
        w_gu = T.match_buffer(w_h, (n_experts, hidden, 2 * inter), "float32")
        b_gu = T.match_buffer(b_h, (n_experts, 2 * inter), "float32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        h_out = T.match_buffer(h_h, (rows, inter), "float32")
        T.device_entry()
        nb, tb = T.cta_id([(inter + HALF - 1) // HALF, max_tiles])
        tid = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK * A_STRIDE,), "float32", scope="shared")
        b_s = T.alloc_buffer((BK * B_STRIDE,), "float32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        part = T.alloc_buffer((32,), "float32", scope="local")
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
                for q in T.unroll(BM * BK // THREADS):
                    r: T.let = (tid + q * THREADS) // BK
                    kk: T.let = (tid + q * THREADS) % BK
                    if row_begin + r < row_end and kt * BK + kk < hidden:
                        a_s[kk * A_STRIDE + r] = x[rowidx[row_begin + r], kt * BK + kk]
                    else:
                        a_s[kk * A_STRIDE + r] = T.float32(0.0)
                for q in T.unroll(BN * BK // THREADS):
                    kb: T.let = (tid + q * THREADS) // BN
                    c: T.let = (tid + q * THREADS) % BN  # gate_up column 2 n0 + c; gate if c is even
                    if kt * BK + kb < hidden and n0 + c // 2 < inter:
                        b_s[kb * B_STRIDE + c // 2 + (c % 2) * HALF] = w_gu[expert, kt * BK + kb, 2 * n0 + c]
                    else:
                        b_s[kb * B_STRIDE + c // 2 + (c % 2) * HALF] = T.float32(0.0)
                T.cuda.cta_sync()
                for i in T.unroll(32):
                    part[i] = T.float32(0.0)
                for k in T.unroll(BK):
                    for jj in T.unroll(8):
                        for ii in T.unroll(4):
                            part[ii * 8 + jj] = part[ii * 8 + jj] + (
                                a_s[k * A_STRIDE + ty + 16 * ii] * b_s[k * B_STRIDE + tx + 16 * jj])
                for i in T.unroll(32):
                    acc[i] = acc[i] + part[i]
                T.cuda.cta_sync()
            for jj in T.unroll(4):
                if n0 + tx + 16 * jj < inter:
                    for ii in T.unroll(4):
                        if row_begin + ty + 16 * ii < row_end:
                            gate: T.f32 = T.min(acc[ii * 8 + jj] + b_gu[expert, 2 * (n0 + tx + 16 * jj)],
                                                T.float32(LIMIT))
                            up: T.f32 = T.max(T.min(acc[ii * 8 + jj + 4] + b_gu[expert, 2 * (n0 + tx + 16 * jj) + 1],
                                                    T.float32(LIMIT)), T.float32(-LIMIT))
                            sig: T.f32 = div_precise(T.float32(1.0), T.float32(1.0) + exp_precise(
                                T.float32(0.0) - gate * T.float32(ALPHA)))
                            h_out[row_begin + ty + 16 * ii, n0 + tx + 16 * jj] = (up + T.float32(1.0)) * (gate * sig)

    return mkb_moe_glu


def _down_kernel(hidden, inter):
    """out[p, n] = (h[p] W_d[e][:, n] + b_d[e, n]) * pair_w[p] over the rows p of each tile's expert e."""

    @T.prim_func
    def mkb_moe_down(h_h: T.handle, w_h: T.handle, b_h: T.handle, pw_h: T.handle, tiles_h: T.handle,
                     out_h: T.handle):
        rows = T.int32()
        n_experts = T.int32()
        max_tiles = T.int32()
        h = T.match_buffer(h_h, (rows, inter), "float32")
        w_d = T.match_buffer(w_h, (n_experts, inter, hidden), "float32")
        b_d = T.match_buffer(b_h, (n_experts, hidden), "float32")
        pair_w = T.match_buffer(pw_h, (rows,), "float32")
        tiles = T.match_buffer(tiles_h, (max_tiles, 3), "int32")
        out = T.match_buffer(out_h, (rows, hidden), "float32")
        T.device_entry()
        nb, tb = T.cta_id([(hidden + BN - 1) // BN, max_tiles])
        tid = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK * A_STRIDE,), "float32", scope="shared")
        b_s = T.alloc_buffer((BK * B_STRIDE,), "float32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        part = T.alloc_buffer((32,), "float32", scope="local")
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
                for q in T.unroll(BM * BK // THREADS):
                    r: T.let = (tid + q * THREADS) // BK
                    kk: T.let = (tid + q * THREADS) % BK
                    if row_begin + r < row_end and kt * BK + kk < inter:
                        a_s[kk * A_STRIDE + r] = h[row_begin + r, kt * BK + kk]
                    else:
                        a_s[kk * A_STRIDE + r] = T.float32(0.0)
                for q in T.unroll(BN * BK // THREADS):
                    kb: T.let = (tid + q * THREADS) // BN
                    c: T.let = (tid + q * THREADS) % BN
                    if kt * BK + kb < inter and n0 + c < hidden:
                        b_s[kb * B_STRIDE + c] = w_d[expert, kt * BK + kb, n0 + c]
                    else:
                        b_s[kb * B_STRIDE + c] = T.float32(0.0)
                T.cuda.cta_sync()
                for i in T.unroll(32):
                    part[i] = T.float32(0.0)
                for k in T.unroll(BK):
                    for jj in T.unroll(8):
                        for ii in T.unroll(4):
                            part[ii * 8 + jj] = part[ii * 8 + jj] + (
                                a_s[k * A_STRIDE + ty + 16 * ii] * b_s[k * B_STRIDE + tx + 16 * jj])
                for i in T.unroll(32):
                    acc[i] = acc[i] + part[i]
                T.cuda.cta_sync()
            for jj in T.unroll(8):
                if n0 + tx + 16 * jj < hidden:
                    for ii in T.unroll(4):
                        if row_begin + ty + 16 * ii < row_end:
                            y: T.f32 = acc[ii * 8 + jj] + b_d[expert, n0 + tx + 16 * jj]
                            out[row_begin + ty + 16 * ii, n0 + tx + 16 * jj] = y * pair_w[row_begin + ty + 16 * ii]

    return mkb_moe_down


def _combine_kernel(hidden, top_k):
    @T.prim_func
    def mkb_moe_combine(c_h: T.handle, slots_h: T.handle, out_h: T.handle):
        tokens = T.int32()
        pairs = T.int32()
        contrib = T.match_buffer(c_h, (pairs, hidden), "float32")
        slots = T.match_buffer(slots_h, (tokens, top_k), "int32")
        out = T.match_buffer(out_h, (tokens, hidden), "float32")
        T.device_entry()
        t = T.cta_id([tokens])
        tid = T.thread_id([THREADS])
        rows = T.alloc_buffer((top_k,), "int32", scope="local")
        for k in T.unroll(top_k):
            rows[k] = slots[t, k]
        for it in range((hidden + THREADS - 1) // THREADS):
            c: T.let = it * THREADS + tid
            if c < hidden:
                total: T.f32 = T.float32(0.0)
                for k in T.unroll(top_k):
                    total = total + contrib[rows[k], c]
                out[t, c] = total

    return mkb_moe_combine


def _exported(funcs):
    """An IRModule whose functions are exported under their keys (a prim_func otherwise exports its
    own global_symbol, and the runtime module would have no function by the key's name); the device
    kernels are then named ``<key>_kernel``."""
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})


def _build(hidden, inter, top_k, arch):
    """Compile every kernel once per shape and arch; return the tvm Executable."""
    key = (hidden, inter, top_k, arch)
    if key not in _EXES:
        funcs = {"glu": _glu_kernel(hidden, inter), "down": _down_kernel(hidden, inter),
                 "combine": _combine_kernel(hidden, top_k)}
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(_exported(funcs), target=target, tir_pipeline="tirx")
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
        _FNS[key] = tuple(mod[name] for name in ("glu", "down", "combine"))
    return _FNS[key]


def _max_tiles(pairs, experts):
    return pairs // BM + experts


def _plan(index, routing_weights, experts):
    """Rows sorted by expert (stable), their routing weights, 64-row tiles, each token's rows in expert order."""
    tokens, top_k = index.shape
    pairs = tokens * top_k
    device = index.device
    flat = index.flatten()
    order = torch.argsort(flat, stable=True)
    sorted_tok = order // top_k
    pair_w = routing_weights[sorted_tok, flat[order]].float().contiguous()
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    ntiles = (counts + BM - 1) // BM
    tile_end = torch.cumsum(ntiles, 0)
    ti = torch.arange(_max_tiles(pairs, experts), device=device)
    te = torch.searchsorted(tile_end, ti, right=True)
    valid = te < experts
    tec = torch.clamp(te, max=experts - 1)
    row_begin = starts[tec] + (ti - (tile_end[tec] - ntiles[tec])) * BM
    row_end = torch.minimum(row_begin + BM, starts[tec] + counts[tec])
    tiles = torch.stack([tec, torch.where(valid, row_begin, 0), torch.where(valid, row_end, 0)], 1)
    slots = torch.argsort(sorted_tok, stable=True).view(tokens, top_k)  # a token's rows, ascending expert
    return (sorted_tok.to(torch.int32).contiguous(), pair_w, tiles.to(torch.int32).contiguous(),
            slots.to(torch.int32).contiguous())


def solve(hidden_states, router_indices, routing_weights, gate_up_proj, gate_up_proj_bias, down_proj,
          down_proj_bias):
    tokens, hidden = hidden_states.shape
    top_k = router_indices.shape[1]
    experts, _, inter2 = gate_up_proj.shape
    inter = inter2 // 2
    pairs = tokens * top_k
    device = hidden_states.device
    f32 = torch.float32
    glu, down, combine = _kernel_fns(hidden, inter, top_k)
    sorted_tok, pair_w, tiles, slots = _plan(router_indices, routing_weights, experts)
    h = torch.empty(pairs, inter, dtype=f32, device=device)
    glu(hidden_states.contiguous(), sorted_tok, gate_up_proj.contiguous(), gate_up_proj_bias.contiguous(), tiles, h)
    contrib = torch.empty(pairs, hidden, dtype=f32, device=device)
    down(h, down_proj.contiguous(), down_proj_bias.contiguous(), pair_w, tiles, contrib)
    out = torch.empty(tokens, hidden, dtype=f32, device=device)
    combine(contrib, slots, out)
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
