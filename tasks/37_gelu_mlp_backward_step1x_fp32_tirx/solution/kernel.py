"""TIRx oracle for problem 37: backward of a tanh-GELU MLP from saved activations (Step1X-Edit), fp32.

Two TIRx kernels. ``mkb_bwd_gemm`` is built for the four GEMMs, ``mkb_colsum`` for the two bias
gradients:
  dZ = (dY W2) * gelu_tanh'(z)   (A = dY [tokens, dim], B = W2 [dim, ff], GELU-gradient epilogue)
  dW2 = dY^T act                 (A = dY read transposed, B = act [tokens, ff])
  dX = dZ W1                     (A = dZ [tokens, ff], B = W1 [ff, dim])
  dW1 = dZ^T x                   (A = dZ read transposed, B = x [tokens, dim])
  db2 = column sums of dY, db1 = column sums of dZ.

``mkb_bwd_gemm`` is a shared-memory tiled SIMT GEMM in fp32 (the reference's GEMMs are true fp32 and
judged at fp32 tolerance, so TF32 tensor cores would be far too coarse, and TIRx 0.27 has no WGMMA
path for sm_90; this is slower than the cuBLAS fp32 GEMMs of the eager reference). A 256-thread CTA
computes a 128 x 128 tile; K advances in slices of 16, held K-major in shared memory. The B operand
is always stored [K, N]: thread t loads 8 consecutive values of slice row t / 16 at columns
(t % 16) * 8 and stores them unchanged. A stored [M, K] is loaded as 8 consecutive K values of row
t / 2 (half t % 2) and transposed on the store; A read transposed (stored [K, M]) is loaded like B.
The next slice's loads are issued before the current slice is computed. Each thread accumulates an
8 x 8 block (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns tc*4 + {0..3} and 64 + tc*4 + {0..3},
ty = tid / 16, tc = tid % 16) from float4 shared-memory reads. Sums are two-level: each chunk of 128
K values is accumulated from zero and then added to the running total, which keeps the error of the
long sums (K = 2048 to 8192) near that of a blocked library GEMM. The dZ build multiplies the fp32
sum by gelu_tanh'(z) in the reference's operation order; NVRTC builds with --use_fast_math, which
would turn tanhf into tanh.approx (about 2^-11 relative), so tanh is written out: for |k| < 0.55 its
odd Taylor series (ten terms, Horner form), above sign(k) (1 - 2 / (1 + exp(2|k|))) with a precise exp
(range reduction and a degree-7 polynomial) and a Newton-corrected division (a few ulp at most, as
emulated against float64 on the CPU).

``mkb_colsum``: a 256-thread CTA owns 32 columns: lane = column (a warp reads 128 contiguous bytes of
a row), warp w takes rows w, w + 8, ...; each thread sums in chunks of 16 rows (two-level), then the 8
warp partials are added in order through shared memory.

Shapes that are not tile multiples (the small workload) are zero-padded by the host: padded rows and
columns are zero in every operand (z = 0 meets dA = 0), so they add nothing; results are sliced.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 5): 26.6 ms against the
eager reference's 25.2 ms (0.95x). Over the problem's declared arithmetic (1.10 TFLOP, its
physical_floor) that is 41.3 TFLOP/s against eager's 43.6: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion. In TIRx the
products would be mma.sync TF32 instructions written as raw PTX: its tile GEMM takes only f16 and bf16,
and it has no wgmma primitive for sm_90.
"""

import math

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=128, dim=2048, ff=8192)
BM = 128
BN = 128
BK = 16
FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
THREADS = 256
CS_COLS = 32  # columns per column-sum CTA
CS_CHUNK = 16  # rows per thread summed from zero before they are added to the total
ROOT = math.sqrt(2 / math.pi)
GELU_C = 0.044715
GELU_C3 = 3 * 0.044715  # the reference's 3 * GELU_C, folded in Python
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



TANH_SERIES = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075, -929569 / 638512875,
               6404582 / 10854718875, -443861162 / 1856156927625)  # tanh(k) = k * sum c_i k^(2i)
TANH_SPLIT = 0.55  # below: the odd series (its next term is under 1e-9 relative); above: the exp form


def tanh_precise(k):
    """tanh(k) within a few ulp: for |k| < 0.55 the Taylor series in Horner form (no cancellation near 0);
    above, sign(k) (1 - 2 / (1 + exp(2|k|))) with the precise exp and division (exp clamps at 88, so the
    denominator stays finite)."""

    def with_k(kv):
        def with_a(a):
            def with_k2(k2):
                poly = _f32(TANH_SERIES[-1])
                for coef in TANH_SERIES[-2::-1]:
                    poly = poly * k2 + _f32(coef)
                return kv * poly

            big = _f32(1.0) - div_precise(_f32(2.0), _f32(1.0) + exp_precise(_f32(2.0) * a))
            signed = _let(big, lambda b: T.if_then_else(kv < _f32(0.0), _f32(0.0) - b, b), "tb")
            return T.if_then_else(a < _f32(TANH_SPLIT), _let(kv * kv, with_k2, "k2"), signed)

        return _let(T.max(kv, _f32(0.0) - kv), with_a, "ka")

    return _let(k, with_k, "k")


def gelu_tanh_grad(z):
    """0.5 (1 + t) + 0.5 z (1 - t^2) root (1 + 3c z^2), t = tanh(root z (1 + c z^2)), in the reference's order."""

    def with_z(zv):
        def with_z2(z2):
            def with_t(t):
                return (_f32(0.5) * (_f32(1.0) + t)
                        + _f32(0.5) * zv * (_f32(1.0) - t * t) * _f32(ROOT) * (_f32(1.0) + _f32(GELU_C3) * z2))

            return _let(tanh_precise(_f32(ROOT) * zv * (_f32(1.0) + _f32(GELU_C) * z2)), with_t, "t")

        return _let(zv * zv, with_z2, "z2")

    return _let(z, with_z, "z")


def _gemm_kernel(m, n, k, a_km, gelu_grad):
    """C [m, n] = A B (A stored [m, k], or [k, m] when a_km; B stored [k, n]), times gelu_tanh'(Z) for
    gelu_grad; m, n multiples of 128, k of 128."""
    k_tiles = k // BK
    tiles_n = n // BN
    a_shape = (k, m) if a_km else (m, k)

    @T.prim_func
    def mkb_bwd_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle, z_h: T.handle):
        A = T.match_buffer(a_h, a_shape, "float32")
        B = T.match_buffer(b_h, (k, n), "float32")
        C = T.match_buffer(c_h, (m, n), "float32")
        Z = T.match_buffer(z_h, (m, n), "float32")
        T.device_entry()
        cta = T.cta_id([(m // BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "float32", scope="local")
        bf = T.alloc_buffer((8,), "float32", scope="local")
        ra = T.alloc_buffer((8,), "float32", scope="local")
        rb = T.alloc_buffer((8,), "float32", scope="local")
        zv = T.alloc_buffer((4,), "float32", scope="local")
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 8
        kr: T.let = tx // 16
        xo: T.let = (tx % 16) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            if a_km:
                for j in T.vectorized(4):
                    ra[h * 4 + j] = A[kr, row0 + xo + h * 4 + j]
            else:
                for j in T.vectorized(4):
                    ra[h * 4 + j] = A[row0 + lrow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rb[h * 4 + j] = B[kr, col0 + xo + h * 4 + j]
        for kc in range(k_tiles // FOLD):
            for i in T.unroll(64):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                if a_km:
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            a_s[kr, xo + h * 4 + j] = ra[h * 4 + j]
                else:
                    for j in T.unroll(8):
                        a_s[lk + j, lrow] = ra[j]
                for h in T.unroll(2):
                    for j in T.vectorized(4):
                        b_s[kr, xo + h * 4 + j] = rb[h * 4 + j]
                T.cuda.cta_sync()
                if kc * FOLD + ks + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                    for h in T.unroll(2):
                        if a_km:
                            for j in T.vectorized(4):
                                ra[h * 4 + j] = A[(kc * FOLD + ks + 1) * BK + kr, row0 + xo + h * 4 + j]
                        else:
                            for j in T.vectorized(4):
                                ra[h * 4 + j] = A[row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rb[h * 4 + j] = B[(kc * FOLD + ks + 1) * BK + kr, col0 + xo + h * 4 + j]
                for kk in T.unroll(BK):
                    for i in T.vectorized(4):
                        af[i] = a_s[kk, ty * 4 + i]
                    for i in T.vectorized(4):
                        af[4 + i] = a_s[kk, 64 + ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = b_s[kk, tc * 4 + j]
                    for j in T.vectorized(4):
                        bf[4 + j] = b_s[kk, 64 + tc * 4 + j]
                    for i in T.unroll(8):
                        for j in T.unroll(8):
                            part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            for i in T.unroll(64):  # fold the chunk's partial sums into the total
                acc[i] = acc[i] + part[i]
        for i in T.unroll(8):
            for jh in T.unroll(2):
                if gelu_grad:
                    for j in T.vectorized(4):
                        zv[j] = Z[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j]
                    for j in T.unroll(4):
                        out[j] = acc[i * 8 + jh * 4 + j] * gelu_tanh_grad(zv[j])
                else:
                    for j in T.unroll(4):
                        out[j] = acc[i * 8 + jh * 4 + j]
                for j in T.vectorized(4):
                    C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = out[j]

    return mkb_bwd_gemm


def _colsum_kernel(rows_p, n, rows):
    """X [rows_p, n] -> out [n]: the sums of the first ``rows`` rows, column by column."""
    iters = (rows + 7) // 8
    chunks = (iters + CS_CHUNK - 1) // CS_CHUNK

    @T.prim_func
    def mkb_colsum(x_h: T.handle, o_h: T.handle):
        X = T.match_buffer(x_h, (rows_p, n), "float32")
        Out = T.match_buffer(o_h, (n,), "float32")
        T.device_entry()
        cta = T.cta_id([n // CS_COLS])
        tx = T.thread_id([THREADS])
        red = T.alloc_buffer((8, 32), "float32", scope="shared")
        c: T.let = cta * CS_COLS + tx % 32
        phase: T.let = tx // 32
        tot: T.f32 = T.float32(0.0)
        for ci in range(chunks):
            part: T.f32 = T.float32(0.0)
            for i in T.unroll(CS_CHUNK):
                if phase + 8 * (ci * CS_CHUNK + i) < rows:
                    part = part + X[phase + 8 * (ci * CS_CHUNK + i), c]
            tot = tot + part
        red[phase, tx % 32] = tot
        T.cuda.cta_sync()
        if tx < 32:
            s: T.f32 = red[0, tx]
            for r in T.unroll(7):
                s = s + red[r + 1, tx]
            Out[c] = s

    return mkb_colsum


def _build(name, shape, arch):
    """Compile once per (kernel, shape, arch) and return the tvm Executable."""
    key = (name, shape, arch)
    if key not in _EXES:
        func = _gemm_kernel(*shape) if name == "gemm" else _colsum_kernel(*shape)
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


def solve(grad_output, hidden_states, weight1, weight2, intermediate, intermediate_activated):
    dim, ff = weight2.shape
    tokens = grad_output.numel() // dim if dim else 0
    dev = grad_output.device
    tp, dp, fp = _up(max(tokens, 1), BM), _up(max(dim, 1), BN), _up(max(ff, 1), BN)
    dy = _padded(grad_output.reshape(tokens, dim), (tp, dp))
    x = _padded(hidden_states.reshape(tokens, dim), (tp, dp))
    z = _padded(intermediate.reshape(tokens, ff), (tp, fp))
    act = _padded(intermediate_activated.reshape(tokens, ff), (tp, fp))
    w1 = _padded(weight1, (fp, dp))
    w2 = _padded(weight2, (dp, fp))
    dz = torch.empty(tp, fp, dtype=torch.float32, device=dev)
    dx = torch.empty(tp, dp, dtype=torch.float32, device=dev)
    dw1 = torch.empty(fp, dp, dtype=torch.float32, device=dev)
    dw2 = torch.empty(dp, fp, dtype=torch.float32, device=dev)
    db1 = torch.empty(fp, dtype=torch.float32, device=dev)
    db2 = torch.empty(dp, dtype=torch.float32, device=dev)
    _kernel_fn("gemm", (tp, fp, dp, False, True))(dy, w2, dz, z)
    _kernel_fn("gemm", (dp, fp, tp, True, False))(dy, act, dw2, dw2)  # Z unread: C passed
    _kernel_fn("gemm", (tp, dp, fp, False, False))(dz, w1, dx, dx)
    _kernel_fn("gemm", (fp, dp, tp, True, False))(dz, x, dw1, dw1)
    _kernel_fn("colsum", (tp, fp, tokens))(dz, db1)
    _kernel_fn("colsum", (tp, dp, tokens))(dy, db2)
    return (dx[:tokens, :dim].reshape(grad_output.shape).contiguous(), dw1[:ff, :dim].contiguous(),
            db1[:ff].contiguous(), dw2[:dim, :ff].contiguous(), db2[:dim].contiguous())


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


def _graded_builds(batch, seq, dim, ff):
    t = batch * seq
    return {"dz": ("gemm", (t, ff, dim, False, True)), "dw2": ("gemm", (dim, ff, t, True, False)),
            "dx": ("gemm", (t, dim, ff, False, False)), "dw1": ("gemm", (ff, dim, t, True, False)),
            "db1": ("colsum", (t, ff, t)), "db2": ("colsum", (t, dim, t))}


def kernel_sources(arch="sm_90a", builds=("dz", "db1")):
    """{kernel symbol: generated CUDA source} at the graded workload for the named builds (by default the dZ
    GEMM with its GELU-gradient epilogue and the dZ column sum)."""
    sources = {}
    graded = _graded_builds(**WORKLOAD)
    for build in builds:
        source = _build(*graded[build], arch).mod.imports[0].inspect_source()
        sources.update({symbol: source for symbol in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    names = list(kernel_sources(arch))
    kernel_sources(arch, ("dw2", "dx", "dw1", "db2"))
    return names
