"""TIRx oracle for problem 33: residual add, RMSNorm and SwiGLU MLP (Hermes-4-405B), bf16.

Three TIRx kernels.

1. ``mkb_residual_rmsnorm``: one CTA per token row. Each of 256 threads keeps its strided share of
   s = bf16(residual + hidden) in fp32 registers; ``T.cuda.cta_sum`` (warp shuffles, then shared
   memory) gives the sum of squares, and x = bf16(s * rsqrt(sum / hidden + eps) * w) is formed in
   the reference's order with one rounding. The fast-math rsqrt (about 2^-22 relative) can move x
   by one bf16 unit only next to a rounding midpoint.
2. ``mkb_swiglu_gemm``: a = bf16(bf16(silu(bf16(x Wg^T))) * bf16(x Wu^T)) on the tensor cores
   through the warp-level ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation), issued as a
   TIRx PTX intrinsic with the fragments placed by hand. TIRx 0.27 has no WGMMA path for sm_90, so
   this is the Ampere-style instruction, slower than a WGMMA GEMM. A CTA owns a 128-row x 64-column
   tile of ``a``: its shared-memory B tile holds the 64 gate rows (rows 0-63) and the 64 matching up
   rows (rows 64-127) of the K slice. 8 warps (2 x 4) each compute 64 rows x 16 columns of gate and
   the same 16 columns of up (4 x 4 m16n8k16 tiles), so each lane holds the gate and up sums of the
   same outputs and the SwiGLU runs in registers. K advances in slices of 32: each thread loads two
   16-byte vectors (8 bf16) of x and one each of the gate and up weights per slice into registers
   (the next slice's loads are issued before the current slice is computed) and stores them, as
   32-bit words holding bf16 pairs, into shared-memory rows of 16 words padded to 20 (so the
   fragment reads of a warp hit 32 different banks). A lane (g = lane / 4, t = lane % 4) reads A
   words (row g | g + 8, k-word t | t + 4) and B words (column g, k-word t | t + 4), and its
   accumulators are rows g | g + 8, columns 2t, 2t + 1 of each 16 x 8 tile, as the PTX ISA lays out
   m16n8k16. Epilogue: gate and up rounded to bf16, silu(g) = g / (1 + exp(-g)) rounded to bf16,
   times up (exact in fp32), rounded to bf16. NVRTC builds TIRx kernels with --use_fast_math, so
   exp and the division are precise forms written out here (a range-reduced polynomial exp and a
   Newton-corrected quotient).
3. ``mkb_down_gemm``: y = bf16(a Wd^T), the same tensor-core GEMM with a 128 x 128 tile of one
   weight (8 warps, each 64 x 32).
Every GEMM operand value is bf16, so each product is exact and only the summation order differs
from the reference's fp32 GEMMs. Shapes that are not tile multiples (the small workload) use
zero-padded scratch operands (zero gate and up columns give a = 0, which adds nothing to the down
GEMM); the graded shapes need none.
"""

import torch
import tvm
from tvm.script import tirx as T

BM = 128
BN = 128
BN_GU = 64  # columns of a (and of each of gate, up) per swiglu CTA
BK = 32
PAD = BK // 2 + 4  # 32-bit words per shared-memory row: 16 of data and 4 of padding
THREADS = 256
NORM_THREADS = 256
NORM_WARPS = NORM_THREADS // 32
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


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return T.float32(T.bfloat16(x))


def _norm_kernel(tokens, hidden, x_rows, x_cols):
    """One CTA per token; writes X[token, c] for c < hidden."""
    per_thread = (hidden + NORM_THREADS - 1) // NORM_THREADS

    @T.prim_func
    def mkb_residual_rmsnorm(hs_h: T.handle, res_h: T.handle, w_h: T.handle, x_h: T.handle, eps: T.float32):
        hs = T.match_buffer(hs_h, (tokens, hidden), "bfloat16")
        res = T.match_buffer(res_h, (tokens, hidden), "bfloat16")
        weight = T.match_buffer(w_h, (hidden,), "bfloat16")
        X = T.match_buffer(x_h, (x_rows, x_cols), "bfloat16")
        T.device_entry()
        token = T.cta_id([tokens])
        tx = T.thread_id([NORM_THREADS])
        scratch = T.alloc_buffer((NORM_WARPS,), "float32", scope="shared")
        vals = T.alloc_buffer((per_thread,), "float32", scope="local")
        sq: T.f32 = T.float32(0.0)
        for i in T.unroll(per_thread):
            vals[i] = T.float32(0.0)
            if i * NORM_THREADS + tx < hidden:
                vals[i] = _bf16(T.float32(res[token, i * NORM_THREADS + tx])
                                + T.float32(hs[token, i * NORM_THREADS + tx]))
                sq = sq + vals[i] * vals[i]
        total: T.f32 = T.cuda.cta_sum(sq, NORM_WARPS, scratch.ptr_to([0]))
        scale: T.f32 = T.rsqrt(total / T.float32(hidden) + eps)
        for i in T.unroll(per_thread):
            if i * NORM_THREADS + tx < hidden:
                X[token, i * NORM_THREADS + tx] = T.bfloat16(
                    vals[i] * scale * T.float32(weight[i * NORM_THREADS + tx]))

    return mkb_residual_rmsnorm


def _swiglu_kernel(m, n, k):
    """C[m, n] = bf16(bf16(silu(bf16(A G^T))) * bf16(A U^T)); m a multiple of 128, n of 64, k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN_GU

    @T.prim_func
    def mkb_swiglu_gemm(a_h: T.handle, g_h: T.handle, u_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        G = T.match_buffer(g_h, (n, k), "bfloat16")
        U = T.match_buffer(u_h, (n, k), "bfloat16")
        C = T.match_buffer(c_h, (m, n), "bfloat16")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BM, PAD), "uint32", scope="shared")
        b_s = T.alloc_buffer((2 * BN_GU, PAD), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((16,), "uint32", scope="local")
        bfr = T.alloc_buffer((8,), "uint32", scope="local")
        ra = T.alloc_buffer((16,), "bfloat16", scope="local")
        rb = T.alloc_buffer((16,), "bfloat16", scope="local")
        ra_w = T.decl_buffer((8,), "uint32", data=ra.data, scope="local")
        rb_w = T.decl_buffer((8,), "uint32", data=rb.data, scope="local")
        out = T.alloc_buffer((2,), "bfloat16", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN_GU
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = (warp // 4) * 64
        wc: T.let = (warp % 4) * 16
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        # loads: A rows (tx + h * 256) / 4 for h = 0, 1; B rows tx / 4 of the gate (h = 0) and of up (h = 1)
        for h in T.unroll(2):
            for j in T.vectorized(8):
                ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 8 + j]
        for j in T.vectorized(8):
            rb[j] = G[col0 + tx // 4, (tx % 4) * 8 + j]
        for j in T.vectorized(8):
            rb[8 + j] = U[col0 + tx // 4, (tx % 4) * 8 + j]
        for kt in range(k_tiles):
            for h in T.unroll(2):
                for j in T.vectorized(4):
                    a_s[(tx + h * THREADS) // 4, ((tx + h * THREADS) % 4) * 4 + j] = ra_w[h * 4 + j]
                for j in T.vectorized(4):
                    b_s[h * BN_GU + tx // 4, (tx % 4) * 4 + j] = rb_w[h * 4 + j]
            T.cuda.cta_sync()
            if kt + 1 < k_tiles:
                for h in T.unroll(2):
                    for j in T.vectorized(8):
                        ra[h * 8 + j] = A[row0 + (tx + h * THREADS) // 4,
                                          (kt + 1) * BK + ((tx + h * THREADS) % 4) * 8 + j]
                for j in T.vectorized(8):
                    rb[j] = G[col0 + tx // 4, (kt + 1) * BK + (tx % 4) * 8 + j]
                for j in T.vectorized(8):
                    rb[8 + j] = U[col0 + tx // 4, (kt + 1) * BK + (tx % 4) * 8 + j]
            for ks in T.unroll(2):
                for mt in T.unroll(4):
                    af[mt * 4 + 0] = a_s[wr + mt * 16 + g, ks * 8 + t]
                    af[mt * 4 + 1] = a_s[wr + mt * 16 + g + 8, ks * 8 + t]
                    af[mt * 4 + 2] = a_s[wr + mt * 16 + g, ks * 8 + t + 4]
                    af[mt * 4 + 3] = a_s[wr + mt * 16 + g + 8, ks * 8 + t + 4]
                for nt in T.unroll(4):  # nt 0, 1: gate columns wc + 8 nt; nt 2, 3: the same up columns
                    bfr[nt * 2 + 0] = b_s[(nt // 2) * BN_GU + wc + (nt % 2) * 8 + g, ks * 8 + t]
                    bfr[nt * 2 + 1] = b_s[(nt // 2) * BN_GU + wc + (nt % 2) * 8 + g, ks * 8 + t + 4]
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
            for nt in T.unroll(2):
                for hr in T.unroll(2):
                    for j in T.unroll(2):
                        out[j] = T.bfloat16(
                            _bf16(silu_precise(_bf16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])))
                            * _bf16(acc[(mt * 4 + nt + 2) * 4 + hr * 2 + j]))
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_swiglu_gemm


def _down_kernel(m, n, k):
    """C[m, n] = bf16(sum_k A[m, k] B[n, k]); m, n multiples of 128, k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_down_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        B = T.match_buffer(b_h, (n, k), "bfloat16")
        C = T.match_buffer(c_h, (m, n), "bfloat16")
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
        out = T.alloc_buffer((2,), "bfloat16", scope="local")
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
                    for j in T.unroll(2):
                        out[j] = T.bfloat16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_down_gemm


_MAKERS = {"norm": _norm_kernel, "swiglu": _swiglu_kernel, "down": _down_kernel}


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        func = _MAKERS[kind](*shape)
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


def _padded(w, rows, cols):
    if tuple(w.shape) == (rows, cols):
        return w.contiguous()
    p = torch.zeros(rows, cols, dtype=torch.bfloat16, device=w.device)
    p[:w.shape[0], :w.shape[1]] = w
    return p


def solve(hidden_states, residual, norm_weight, gate_proj_weight, up_proj_weight, down_proj_weight, eps):
    batch, seq, hidden = hidden_states.shape
    inter = gate_proj_weight.shape[0]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    mp, ip, kp, np_ = _up(tokens, BM), _up(inter, BN_GU), _up(hidden, BK), _up(hidden, BN)
    if (mp, kp) != (tokens, hidden):
        x = torch.zeros(mp, kp, dtype=torch.bfloat16, device=dev)
    else:
        x = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=dev)
    a = torch.empty(mp, ip, dtype=torch.bfloat16, device=dev)
    if (mp, np_) == (tokens, hidden):
        c = out.view(tokens, hidden)
    else:
        c = torch.empty(mp, np_, dtype=torch.bfloat16, device=dev)
    _kernel_fn("norm", (tokens, hidden, mp, kp))(
        hidden_states.reshape(tokens, hidden).contiguous(), residual.reshape(tokens, hidden).contiguous(),
        norm_weight.contiguous(), x, float(eps))
    _kernel_fn("swiglu", (mp, ip, kp))(x, _padded(gate_proj_weight, ip, kp), _padded(up_proj_weight, ip, kp), a)
    _kernel_fn("down", (mp, np_, ip))(a, _padded(down_proj_weight, np_, ip), c)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, hidden).copy_(c[:tokens, :hidden])
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


def kernel_sources(arch="sm_90a", batch=64, seq=128, hidden=16384, intermediate=53248):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    tokens = batch * seq
    sources = {}
    for kind, shape in (("norm", (tokens, hidden, tokens, hidden)), ("swiglu", (tokens, intermediate, hidden)),
                        ("down", (tokens, hidden, intermediate))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
