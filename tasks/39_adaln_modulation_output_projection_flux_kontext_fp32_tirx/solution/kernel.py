"""TIRx oracle for problem 39: FLUX final layer (adaptive LayerNorm modulated by the timestep
embedding, then proj_out), fp32.

Two TIRx kernels, all arithmetic in fp32 on the CUDA cores: the reference's matmuls are true fp32,
so TF32 tensor cores would be far too coarse (and TIRx 0.27 has no WGMMA path for sm_90); these are
SIMT GEMMs, slower per FLOP than the cuBLAS fp32 GEMMs of the eager reference.

``mkb_mod_gemm``: mod = SiLU(temb) W^T + b for every sample. A 64-thread CTA computes a 32 x 32 tile
(32 samples x 32 modulation columns; each thread a 4 x 4 block, rows ty*4 + {0..3} with ty = tid / 8,
columns tc*4 + {0..3} with tc = tid % 8). K advances in slices of 32: each thread loads 16
consecutive values of one temb row and of one weight row (row tid / 2, half tid % 2) into registers,
the next slice's loads are issued before the current slice is computed, and the temb values pass
through SiLU while being stored K-major into shared memory. NVRTC builds with --use_fast_math, so
SiLU's x / (1 + exp(-x)) uses a precise exp written out here (range reduction and a degree-7
polynomial) and a Newton-corrected quotient. Sums are two-level: each chunk of 128 K values is
accumulated from zero and then added to the running total, which keeps the fp32 error of the
3072-long sums near that of a blocked library GEMM. Epilogue: sum + b (the reference's separate bias
add). The shift half of mod sits in columns [0, dim), the scale half in [Kp, Kp + dim) (Kp = dim
rounded up to 128; equal to dim at the graded shape).

``mkb_ln_proj``: output = (norm * (1 + scale) + shift) W_out^T + b_out. A 256-thread CTA owns 64
tokens and 64 output columns. First each warp computes LayerNorm statistics for 8 of the tokens: a
lane holds every 32nd float4 of the row in registers, sums them in order, the warp adds the lane sums
by a butterfly of shuffles; mean = sum * (1/dim); the centred squares are summed the same way
(var = sum * (1/dim), rstd = rsqrt(var + eps), the fast-math rsqrt being the same approximate
instruction as the eager reference's rsqrtf), and mean/rstd go to shared memory. Then the GEMM runs as
in the first kernel (K slices of 32, register prefetch, two-level 128-value sums, each thread a 4 x 4
block: rows ty*4 + {0..3}, ty = tid / 16, columns tc*4 + {0..3}, tc = tid % 16), with the
normalisation and modulation fused into the operand staging: each thread loads 8 consecutive values
of its token row plus the matching shift and scale of the token's sample, and stores
x = ((h - mean) * rstd) * (1 + scale) + shift, in the reference's fp32 order, into shared memory.
Epilogue: sum + b_out. The normalised activation never goes to global memory.

Shapes that are not tile multiples (the small workload) are zero-padded by the host: padded K columns
of the activations meet zero weights (the statistics loop skips them), padded tokens and samples are
computed and dropped. The graded shapes need no padding.
"""

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, seq=256, dim=3072, out_dim=64)
EPS = 1e-6  # the eps make_inputs passes
MBM, MBN, MTHREADS = 32, 32, 64  # mod GEMM tile and CTA size
PBM, PBN, PTHREADS = 64, 64, 256  # LayerNorm + proj_out tile and CTA size
BK = 32  # K slice
FOLD = 4  # K slices (128 values) summed from zero before they are added to the total
KQ = 128  # K padding quantum
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


def silu_precise(x):
    """x / (1 + exp(-x)) with the precise exp and division (torch's SiLU)."""
    return _let(x, lambda xv: div_precise(xv, _f32(1.0) + exp_precise(-xv)), "sx")


def _mod_kernel(bp, kp):
    """temb [bp, kp], W [2kp, kp], b [2kp] -> mod [bp, 2kp] = SiLU(temb) W^T + b."""
    n = 2 * kp
    k_tiles = kp // BK
    tiles_n = n // MBN

    @T.prim_func
    def mkb_mod_gemm(a_h: T.handle, b_h: T.handle, bias_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (bp, kp), "float32")
        B = T.match_buffer(b_h, (n, kp), "float32")
        bias = T.match_buffer(bias_h, (n,), "float32")
        C = T.match_buffer(c_h, (bp, n), "float32")
        T.device_entry()
        cta = T.cta_id([(bp // MBM) * tiles_n])
        tx = T.thread_id([MTHREADS])
        a_s = T.alloc_buffer((BK, MBM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, MBN), "float32", scope="shared")
        acc = T.alloc_buffer((16,), "float32", scope="local")
        part = T.alloc_buffer((16,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((4,), "float32", scope="local")
        ra = T.alloc_buffer((16,), "float32", scope="local")
        rb = T.alloc_buffer((16,), "float32", scope="local")
        bv = T.alloc_buffer((4,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * MBM
        col0: T.let = (cta % tiles_n) * MBN
        ty: T.let = tx // 8
        tc: T.let = tx % 8
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 16
        for i in T.unroll(16):
            acc[i] = T.float32(0.0)
        for h in T.unroll(4):
            for j in T.vectorized(4):
                ra[h * 4 + j] = A[row0 + lrow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rb[h * 4 + j] = B[col0 + lrow, lk + h * 4 + j]
        for kc in range(k_tiles // FOLD):
            for i in T.unroll(16):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                for j in T.unroll(16):
                    a_s[lk + j, lrow] = silu_precise(ra[j])
                    b_s[lk + j, lrow] = rb[j]
                T.cuda.cta_sync()
                if kc * FOLD + ks + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                    for h in T.unroll(4):
                        for j in T.vectorized(4):
                            ra[h * 4 + j] = A[row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rb[h * 4 + j] = B[col0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                for kk in T.unroll(BK):
                    for i in T.vectorized(4):
                        af[i] = a_s[kk, ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = b_s[kk, tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            part[i * 4 + j] = part[i * 4 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            for i in T.unroll(16):  # fold the chunk's partial sums into the total
                acc[i] = acc[i] + part[i]
        for j in T.vectorized(4):
            bv[j] = bias[col0 + tc * 4 + j]
        for i in T.unroll(4):
            for j in T.unroll(4):
                out[j] = acc[i * 4 + j] + bv[j]
            for j in T.vectorized(4):
                C[row0 + ty * 4 + i, col0 + tc * 4 + j] = out[j]

    return mkb_mod_gemm


def _proj_kernel(mp, np_, kp, bp, dim, seq, batch, eps):
    """hidden [mp, kp], mod [bp, 2kp], W_out [np, kp], b_out [np] -> out [mp, np]."""
    k_tiles = kp // BK
    tiles_n = np_ // PBN
    groups = kp // 128  # float4 groups per lane in the statistics pass
    rows_per_warp = PBM // 8
    inv_dim = 1.0 / dim

    @T.prim_func
    def mkb_ln_proj(h_h: T.handle, m_h: T.handle, w_h: T.handle, bias_h: T.handle, c_h: T.handle):
        H = T.match_buffer(h_h, (mp, kp), "float32")
        M = T.match_buffer(m_h, (bp, 2 * kp), "float32")
        W = T.match_buffer(w_h, (np_, kp), "float32")
        bias = T.match_buffer(bias_h, (np_,), "float32")
        C = T.match_buffer(c_h, (mp, np_), "float32")
        T.device_entry()
        cta = T.cta_id([(mp // PBM) * tiles_n])
        tx = T.thread_id([PTHREADS])
        a_s = T.alloc_buffer((BK, PBM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, PBN), "float32", scope="shared")
        mean_s = T.alloc_buffer((PBM,), "float32", scope="shared")
        rstd_s = T.alloc_buffer((PBM,), "float32", scope="shared")
        hv = T.alloc_buffer((groups * 4,), "float32", scope="local")
        acc = T.alloc_buffer((16,), "float32", scope="local")
        part = T.alloc_buffer((16,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((4,), "float32", scope="local")
        rh = T.alloc_buffer((8,), "float32", scope="local")
        rsh = T.alloc_buffer((8,), "float32", scope="local")
        rsc = T.alloc_buffer((8,), "float32", scope="local")
        rw = T.alloc_buffer((8,), "float32", scope="local")
        bv = T.alloc_buffer((4,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * PBM
        col0: T.let = (cta % tiles_n) * PBN
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        # LayerNorm statistics: warp w owns tokens w*8 .. w*8 + 7; lane l holds float4 groups l, l + 32, ...
        for r in T.unroll(rows_per_warp):
            for i in T.unroll(groups):
                for j in T.vectorized(4):
                    hv[i * 4 + j] = H[row0 + warp * rows_per_warp + r, (i * 32 + lane) * 4 + j]
            s: T.f32 = T.float32(0.0)
            for i in T.unroll(groups * 4):  # padded columns hold zeros
                s = s + hv[i]
            for o in T.unroll(5):
                s = s + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), s, T.shift_right(16, o), 32)
            mean: T.f32 = s * T.float32(inv_dim)
            q: T.f32 = T.float32(0.0)
            for i in T.unroll(groups):
                for j in T.unroll(4):
                    if dim == groups * 128:
                        q = q + (hv[i * 4 + j] - mean) * (hv[i * 4 + j] - mean)
                    else:  # skip padded columns
                        q = q + T.if_then_else((i * 32 + lane) * 4 < dim,
                                               (hv[i * 4 + j] - mean) * (hv[i * 4 + j] - mean), T.float32(0.0))
            for o in T.unroll(5):
                q = q + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), q, T.shift_right(16, o), 32)
            if lane == 0:
                mean_s[warp * rows_per_warp + r] = mean
                rstd_s[warp * rows_per_warp + r] = T.rsqrt(q * T.float32(inv_dim) + T.float32(eps))
        T.cuda.cta_sync()

        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 4
        lk: T.let = (tx % 4) * 8
        sample: T.let = T.min((row0 + lrow) // seq, batch - 1)
        my_mean: T.f32 = mean_s[lrow]
        my_rstd: T.f32 = rstd_s[lrow]
        for i in T.unroll(16):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(4):
                rh[h * 4 + j] = H[row0 + lrow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rsh[h * 4 + j] = M[sample, lk + h * 4 + j]
            for j in T.vectorized(4):
                rsc[h * 4 + j] = M[sample, kp + lk + h * 4 + j]
            for j in T.vectorized(4):
                rw[h * 4 + j] = W[col0 + lrow, lk + h * 4 + j]
        for kc in range(k_tiles // FOLD):
            for i in T.unroll(16):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                for j in T.unroll(8):
                    a_s[lk + j, lrow] = ((rh[j] - my_mean) * my_rstd) * (T.float32(1.0) + rsc[j]) + rsh[j]
                    b_s[lk + j, lrow] = rw[j]
                T.cuda.cta_sync()
                if kc * FOLD + ks + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            rh[h * 4 + j] = H[row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rsh[h * 4 + j] = M[sample, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rsc[h * 4 + j] = M[sample, kp + (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rw[h * 4 + j] = W[col0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                for kk in T.unroll(BK):
                    for i in T.vectorized(4):
                        af[i] = a_s[kk, ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = b_s[kk, tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            part[i * 4 + j] = part[i * 4 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            for i in T.unroll(16):  # fold the chunk's partial sums into the total
                acc[i] = acc[i] + part[i]
        for j in T.vectorized(4):
            bv[j] = bias[col0 + tc * 4 + j]
        for i in T.unroll(4):
            for j in T.unroll(4):
                out[j] = acc[i * 4 + j] + bv[j]
            for j in T.vectorized(4):
                C[row0 + ty * 4 + i, col0 + tc * 4 + j] = out[j]

    return mkb_ln_proj


def _build(name, shape, arch):
    """Compile once per (kernel, shape, arch) and return the tvm Executable."""
    key = (name, shape, arch)
    if key not in _EXES:
        func = _mod_kernel(*shape) if name == "mod" else _proj_kernel(*shape)
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


def _kernel_fn(name, shape):
    key = (name, shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, shape):
    if tuple(t.shape) == tuple(shape):
        return t.contiguous()
    p = torch.zeros(*shape, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def _halves(t, dim, kp):
    """[2 dim, ...] -> [2 kp, ...]: shift rows at 0, scale rows at kp (zero rows between)."""
    if dim == kp:
        return t.contiguous()
    p = torch.zeros((2 * kp,) + tuple(t.shape[1:]), dtype=torch.float32, device=t.device)
    p[:dim] = t[:dim]
    p[kp:kp + dim] = t[dim:]
    return p


def solve(hidden_states, temb, linear_weight, linear_bias, proj_out_weight, proj_out_bias, eps):
    batch, seq, dim = hidden_states.shape
    out_dim = proj_out_weight.shape[0]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, out_dim, dtype=torch.float32, device=dev)
    if tokens == 0 or out_dim == 0:
        return out
    kp, bp, mp, np_ = _up(dim, KQ), _up(batch, MBM), _up(tokens, PBM), _up(out_dim, PBN)
    weight = _halves(linear_weight, dim, kp)
    if dim != kp:
        weight = _padded(weight, (2 * kp, kp))
    mod = torch.empty(bp, 2 * kp, dtype=torch.float32, device=dev)
    _kernel_fn("mod", (bp, kp))(_padded(temb, (bp, kp)), weight, _halves(linear_bias, dim, kp), mod)
    if (mp, np_) == (tokens, out_dim):
        c = out.view(tokens, out_dim)
    else:
        c = torch.empty(mp, np_, dtype=torch.float32, device=dev)
    _kernel_fn("proj", (mp, np_, kp, bp, dim, seq, batch, float(eps)))(
        _padded(hidden_states.reshape(tokens, dim), (mp, kp)), mod, _padded(proj_out_weight, (np_, kp)),
        _padded(proj_out_bias, (np_,)), c)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, out_dim).copy_(c[:tokens, :out_dim])
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


def kernel_sources(arch="sm_90a", batch=32, seq=256, dim=3072, out_dim=64):
    """{kernel symbol: generated CUDA source} of both kernels at the graded workload."""
    sources = {}
    for name, shape in (("mod", (batch, dim)), ("proj", (batch * seq, out_dim, dim, batch, dim, seq, batch, EPS))):
        source = _build(name, shape, arch).mod.imports[0].inspect_source()
        sources.update({symbol: source for symbol in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
