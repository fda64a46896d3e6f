"""TIRx oracle for problem 40: Gemma-3n AltUp collapse (unembed two predicted streams, match their RMS
to stream 0, average), bf16 inputs, fp32 math, bf16 output.

Two TIRx kernels.

1. ``mkb_unembed_gemm`` (run once per predicted stream): P_i = x_i U_i^T on the tensor cores through
   the warp-level ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation), issued as a TIRx PTX
   intrinsic with the fragments placed by hand. TIRx 0.27 has no WGMMA path for sm_90, so this is
   the Ampere-style instruction, slower than a WGMMA GEMM. The CTA computes a 128 x 128 tile with 8
   warps (2 x 4, each 64 x 32, i.e. 4 x 4 m16n8k16 tiles); K advances in slices of 32. Each thread
   loads two 16-byte vectors (8 bf16) of x_i and two of U_i per slice into registers (the next
   slice's loads are issued before the current slice is computed) and stores them, as 32-bit words
   holding bf16 pairs, into shared-memory rows of 16 words padded to 20 (so the fragment reads of a
   warp hit 32 different banks). A lane (g = lane / 4, t = lane % 4) reads A words (row g | g + 8,
   k-word t | t + 4) and U words (column g, k-word t | t + 4); its accumulators are rows g | g + 8,
   columns 2t, 2t + 1 of each 16 x 8 tile, as the PTX ISA lays out m16n8k16. Every operand value is
   bf16, so each product is exact and only the summation order differs from the reference's fp32
   GEMM. The fp32 sums are stored unrounded (the reference keeps p in fp32).
2. ``mkb_collapse``: one 128-thread CTA per token. Each thread keeps its 8-column chunks of x0 (bf16
   widened to fp32), P_1 and P_2 in registers; the three sums of squares are reduced by warp shuffles
   and then across the 4 warps in order through shared memory. target = sqrt(sum x0^2 / hidden),
   current_i = sqrt(max(sum p_i^2 / hidden, eps)), and every element is formed in the reference's
   fp32 order, ((x0 + (p_1 target) / current_1) + (p_2 target) / current_2) / 3, rounded to bf16
   once. NVRTC builds with --use_fast_math, so square roots are the approximate ones corrected by a
   Newton step and divisions Newton-corrected quotients.
Shapes that are not tile multiples (the small workload) use zero-padded scratch operands: padded
columns of P are never read, padded tokens are computed and dropped. The graded shapes need none.
"""

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=3072)
EPS = 1e-5  # the epsilon make_inputs passes
STREAMS = 3
BM = 128
BN = 128
BK = 32
PAD = BK // 2 + 4  # 32-bit words per shared-memory row: 16 of data and 4 of padding
THREADS = 256
ROW_THREADS = 128
ROW_WARPS = ROW_THREADS // 32
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _let(value, body, name):
    """Bind ``value`` once (a TIR Let) so the expression tree does not repeat it."""
    var = T.Var(name, "float32")
    return T.Let(body(var), where={var: value})


def div_precise(num, den):
    """num / den: the fast-math quotient corrected by one Newton step on the residual."""

    def with_operands(n, d):
        def with_r(r):
            return _let(n * r, lambda q: q + (n - d * q) * r, "q")

        return _let(_f32(1.0) / d, with_r, "rcp")

    return _let(num, lambda n: _let(den, lambda d: with_operands(n, d), "den"), "num")


def sqrt_precise(a):
    """sqrt(a) for a >= 0: the fast-math root corrected by one Newton step (s + (a - s^2) / 2s)."""

    def with_a(av):
        def with_s(s):
            return T.if_then_else(av > _f32(0.0), s + div_precise(av - s * s, s + s), s)

        return _let(T.sqrt(av), with_s, "s")

    return _let(a, with_a, "a")


def _gemm_kernel(m, n, k):
    """C[m, n] = sum_k A[m, k] B[n, k] in fp32 (bf16 operands); m, n multiples of 128, k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_unembed_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        B = T.match_buffer(b_h, (n, k), "bfloat16")
        C = T.match_buffer(c_h, (m, n), "float32")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BM, PAD), "uint32", scope="shared")
        b_s = T.alloc_buffer((BN, PAD), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((16,), "uint32", scope="local")
        bfr = T.alloc_buffer((8,), "uint32", scope="local")
        ra = T.alloc_buffer((16,), "bfloat16", scope="local")
        rb = T.alloc_buffer((16,), "bfloat16", scope="local")
        ra_w = T.decl_buffer((8,), "uint32", data=ra.data, scope="local")
        rb_w = T.decl_buffer((8,), "uint32", data=rb.data, scope="local")
        out = T.alloc_buffer((2,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = (warp // 4) * 64
        wc: T.let = (warp % 4) * 32
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(8):
                ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
            for j in T.vectorized(8):
                rb[h * 8 + j] = B[col0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
        for kt in range(k_tiles):
            for h in T.unroll(2):
                for j in T.vectorized(4):
                    a_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = ra_w[h * 4 + j]
                for j in T.vectorized(4):
                    b_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = rb_w[h * 4 + j]
            T.cuda.cta_sync()
            if kt + 1 < k_tiles:
                for h in T.unroll(2):
                    for j in T.vectorized(8):
                        ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
                    for j in T.vectorized(8):
                        rb[h * 8 + j] = B[col0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
            for ks in T.unroll(2):
                for mt in T.unroll(4):
                    af[mt * 4 + 0] = a_s[wr + mt * 16 + g, ks * 8 + t]
                    af[mt * 4 + 1] = a_s[wr + mt * 16 + g + 8, ks * 8 + t]
                    af[mt * 4 + 2] = a_s[wr + mt * 16 + g, ks * 8 + t + 4]
                    af[mt * 4 + 3] = a_s[wr + mt * 16 + g + 8, ks * 8 + t + 4]
                for nt in T.unroll(4):
                    bfr[nt * 2 + 0] = b_s[wc + nt * 8 + g, ks * 8 + t]
                    bfr[nt * 2 + 1] = b_s[wc + nt * 8 + g, ks * 8 + t + 4]
                for mt in T.unroll(4):
                    for nt in T.unroll(4):
                        T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"](
                            acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                            acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3],
                            af[mt * 4 + 0], af[mt * 4 + 1], af[mt * 4 + 2], af[mt * 4 + 3],
                            bfr[nt * 2 + 0], bfr[nt * 2 + 1],
                            acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                            acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3])
            T.cuda.cta_sync()
        for mt in T.unroll(4):
            for nt in T.unroll(4):
                for hr in T.unroll(2):
                    for j in T.unroll(2):  # the fp32 sums, unrounded (the reference keeps p in fp32)
                        out[j] = acc[(mt * 4 + nt) * 4 + hr * 2 + j]
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_unembed_gemm


def _collapse_kernel(tokens, hidden, mp, np_, eps):
    """x0 [tokens, hidden] bf16, P_1, P_2 [mp, np] fp32 -> out [tokens, hidden] bf16."""
    chunks = hidden // 8
    steps = (chunks + ROW_THREADS - 1) // ROW_THREADS
    bounded = chunks % ROW_THREADS != 0

    @T.prim_func
    def mkb_collapse(x_h: T.handle, p1_h: T.handle, p2_h: T.handle, o_h: T.handle):
        X = T.match_buffer(x_h, (tokens, hidden), "bfloat16")
        P1 = T.match_buffer(p1_h, (mp, np_), "float32")
        P2 = T.match_buffer(p2_h, (mp, np_), "float32")
        Out = T.match_buffer(o_h, (tokens, hidden), "bfloat16")
        T.device_entry()
        token = T.cta_id([tokens])
        tx = T.thread_id([ROW_THREADS])
        part = T.alloc_buffer((3, ROW_WARPS), "float32", scope="shared")
        xb = T.alloc_buffer((8,), "bfloat16", scope="local")
        xs = T.alloc_buffer((steps, 8), "float32", scope="local")
        p1 = T.alloc_buffer((steps, 8), "float32", scope="local")
        p2 = T.alloc_buffer((steps, 8), "float32", scope="local")
        ob = T.alloc_buffer((8,), "bfloat16", scope="local")
        lane: T.let = tx % 32
        warp: T.let = tx // 32
        s0: T.f32 = T.float32(0.0)
        s1: T.f32 = T.float32(0.0)
        s2: T.f32 = T.float32(0.0)
        for k in T.unroll(steps):
            for j in T.unroll(8):
                xs[k, j] = T.float32(0.0)
                p1[k, j] = T.float32(0.0)
                p2[k, j] = T.float32(0.0)
            if not bounded or tx + k * ROW_THREADS < chunks:
                for j in T.vectorized(8):
                    xb[j] = X[token, (tx + k * ROW_THREADS) * 8 + j]
                for j in T.unroll(8):
                    xs[k, j] = T.float32(xb[j])
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        p1[k, h * 4 + j] = P1[token, (tx + k * ROW_THREADS) * 8 + h * 4 + j]
                    for j in T.vectorized(4):
                        p2[k, h * 4 + j] = P2[token, (tx + k * ROW_THREADS) * 8 + h * 4 + j]
        for k in T.unroll(steps):
            for j in T.unroll(8):
                s0 = s0 + xs[k, j] * xs[k, j]
                s1 = s1 + p1[k, j] * p1[k, j]
                s2 = s2 + p2[k, j] * p2[k, j]
        for o in T.unroll(5):
            s0 = s0 + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s0, T.shift_right(16, o), 32)
            s1 = s1 + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s1, T.shift_right(16, o), 32)
            s2 = s2 + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s2, T.shift_right(16, o), 32)
        if lane == 0:
            part[0, warp] = s0
            part[1, warp] = s1
            part[2, warp] = s2
        T.cuda.cta_sync()
        t0: T.f32 = part[0, 0]
        t1: T.f32 = part[1, 0]
        t2: T.f32 = part[2, 0]
        for w in T.unroll(ROW_WARPS - 1):
            t0 = t0 + part[0, w + 1]
            t1 = t1 + part[1, w + 1]
            t2 = t2 + part[2, w + 1]
        target: T.f32 = sqrt_precise(div_precise(t0, _f32(hidden)))
        cur1: T.f32 = sqrt_precise(T.max(div_precise(t1, _f32(hidden)), _f32(eps)))
        cur2: T.f32 = sqrt_precise(T.max(div_precise(t2, _f32(hidden)), _f32(eps)))
        for k in T.unroll(steps):
            if not bounded or tx + k * ROW_THREADS < chunks:
                for j in T.unroll(8):
                    ob[j] = T.bfloat16(div_precise(
                        (xs[k, j] + div_precise(p1[k, j] * target, cur1)) + div_precise(p2[k, j] * target, cur2),
                        _f32(3.0)))
                for j in T.vectorized(8):
                    Out[token, (tx + k * ROW_THREADS) * 8 + j] = ob[j]

    return mkb_collapse


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        func = _gemm_kernel(*shape) if kind == "gemm" else _collapse_kernel(*shape)
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(kind, shape):
    key = (kind, shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def solve(hidden_states, unembed_proj_1, unembed_proj_2, epsilon):
    _, batch, seq, hidden = hidden_states.shape
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0 or hidden == 0:
        return out
    assert hidden % 8 == 0, "rows are handled in 16-byte chunks"
    streams = hidden_states.reshape(STREAMS, tokens, hidden)
    mp, kp, np_ = _up(tokens, BM), _up(hidden, BK), _up(hidden, BN)
    gemm = _kernel_fn("gemm", (mp, np_, kp))
    projected = []
    for i, proj in ((1, unembed_proj_1), (2, unembed_proj_2)):
        p = torch.empty(mp, np_, dtype=torch.float32, device=dev)
        gemm(_padded(streams[i], (mp, kp)), _padded(proj, (np_, kp)), p)
        projected.append(p)
    _kernel_fn("collapse", (tokens, hidden, mp, np_, float(epsilon)))(
        streams[0].contiguous(), projected[0], projected[1], out.view(tokens, hidden))
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


def kernel_sources(arch="sm_90a", batch=64, seq=256, hidden=3072):
    """{kernel symbol: generated CUDA source} of both kernels at the graded workload."""
    tokens = batch * seq
    sources = {}
    for kind, shape in (("gemm", (tokens, hidden, hidden)), ("collapse", (tokens, hidden, tokens, hidden, EPS))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
