"""TIRx oracle for problem 32: Parakeet gated (SwiGLU) MLP with a fused gate/up weight, fp32.

One TIRx kernel, ``mkb_mlp_gemm``, built twice: the gate/up projection with the SwiGLU epilogue, and
the down projection. It is a shared-memory tiled SIMT GEMM in fp32: the reference is an fp32 GEMM
judged at fp32 tolerance, so TF32 tensor cores would be far too coarse (and TIRx 0.27 has no WGMMA
path for sm_90 anyway); the products run as CUDA-core FMAs with fp32 accumulation, slower than the
cuBLAS fp32 GEMMs of the eager reference. A 256-thread CTA computes a 128 x 128 tile of x W^T; K
advances in slices of 16: each thread loads two 16-byte vectors (8 fp32) of the activation row and
of the weight row per slice into registers (the next slice's loads are issued before the current
slice is computed) and stores them K-major into shared memory; each thread then accumulates an
8 x 8 block (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, tile columns tc*4 + {0..3} and
64 + tc*4 + {0..3}, ty = tid / 16, tc = tid % 16) from float4 shared-memory reads. The sums are
two-level: each chunk of 8 slices (128 K values) is accumulated from zero into a second register
block and then added to the running total, which keeps the fp32 rounding error near that of a
blocked library GEMM.

Gate/up build: a CTA owns 64 output columns c0 .. c0 + 63; its weight tile rows 0-63 are the gate
rows c0 + r of W_gu and rows 64-127 the up rows ff + c0 + r, so each thread's tile columns tc*4 + j
and 64 + tc*4 + j are the gate and the up sum of the same output column c0 + tc*4 + j, and it writes
a = silu(g) * u = g / (1 + exp(-g)) * u in fp32, the reference's order. NVRTC builds TIRx kernels
with --use_fast_math, so exp and the division are precise forms written out here (a range-reduced
polynomial exp and a Newton-corrected quotient). The activation stays fp32 (the reference does not
round it). Down build: y = a W_down^T, plain fp32 stores.
Shapes that are not tile multiples (the small workload) are zero-padded by the host into scratch
tiles (gate and up halves padded separately; padded columns give a = 0 and meet zero down
weights); the graded shapes need none.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 5): 5.3 ms against the
eager reference's 4.4 ms (0.84x). Over the problem's declared arithmetic (0.21 TFLOP, its
physical_floor) that is 39.1 TFLOP/s against eager's 46.6: both issue the fp32 products as CUDA-core
FMAs (the H100 SXM's rate without tensor cores is about 67 TFLOP/s), and the cuBLAS SGEMM kernels that
eager calls issue them faster than these tiled SIMT loops; fusing the elementwise steps does not make up
the difference. The route that would beat eager, not taken here: fp32-accurate products on the tensor
cores by the 3xTF32 split (each fp32 operand as a TF32 high part plus a TF32 residual; three TF32
products summed in fp32), at several times the FMA rate, keeping this kernel's fusion. In TIRx the
products would be mma.sync TF32 instructions written as raw PTX: its tile GEMM takes only f16 and bf16,
and it has no wgmma primitive for sm_90.
"""

import torch
import tvm
from tvm.script import tirx as T

BM = 128
BN = 128
BK = 16
FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
THREADS = 256
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


def _kernel(m, n, k, swiglu):
    """swiglu: C [m, n] = silu(A G^T) * (A U^T) with W = [G; U] [2 n, k]; else C [m, n] = A W [n, k]^T.
    m a multiple of 128, n of 128 (64 for swiglu), k of 128."""
    k_tiles = k // BK
    tile_n = BN // 2 if swiglu else BN  # output columns per CTA
    tiles_n = n // tile_n
    w_rows = 2 * n if swiglu else n

    @T.prim_func
    def mkb_mlp_gemm(a_h: T.handle, b_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "float32")
        B = T.match_buffer(b_h, (w_rows, k), "float32")
        C = T.match_buffer(c_h, (m, n), "float32")
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
        out = T.alloc_buffer((4,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * tile_n
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 8
        # swiglu: tile rows 0-63 are the gate rows col0 + r, rows 64-127 the up rows n + col0 + r - 64
        b_row: T.let = col0 + lrow + (lrow // 64) * (n - 64) if swiglu else col0 + lrow
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for h in T.unroll(2):
            for j in T.vectorized(4):
                ra[h * 4 + j] = A[row0 + lrow, lk + h * 4 + j]
            for j in T.vectorized(4):
                rb[h * 4 + j] = B[b_row, lk + h * 4 + j]
        for kc in range(k_tiles // FOLD):
            for i in T.unroll(64):
                part[i] = T.float32(0.0)
            for ks in range(FOLD):
                for j in T.unroll(8):
                    a_s[lk + j, lrow] = ra[j]
                    b_s[lk + j, lrow] = rb[j]
                T.cuda.cta_sync()
                if kc * FOLD + ks + 1 < k_tiles:  # next slice's loads fly while this slice is computed
                    for h in T.unroll(2):
                        for j in T.vectorized(4):
                            ra[h * 4 + j] = A[row0 + lrow, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
                        for j in T.vectorized(4):
                            rb[h * 4 + j] = B[b_row, (kc * FOLD + ks + 1) * BK + lk + h * 4 + j]
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
            if swiglu:  # gate column tc*4 + j is acc[.. + j], the same up column acc[.. + 4 + j]
                for j in T.unroll(4):
                    out[j] = silu_precise(acc[i * 8 + j]) * acc[i * 8 + 4 + j]
                for j in T.vectorized(4):
                    C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + tc * 4 + j] = out[j]
            else:
                for jh in T.unroll(2):
                    for j in T.vectorized(4):
                        C[row0 + (i // 4) * 64 + ty * 4 + i % 4, col0 + jh * 64 + tc * 4 + j] = acc[i * 8 + jh * 4 + j]

    return mkb_mlp_gemm


def _build(shape, arch):
    """Compile once per (m, n, k, swiglu, arch) and return the tvm Executable."""
    key = (shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _kernel(*shape)}), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(shape):
    key = (shape, _device_arch())
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


def solve(hidden_states, gate_up_weight, down_weight):
    batch, seq, dim = hidden_states.shape
    ff = down_weight.shape[1]
    tokens = batch * seq
    dev = hidden_states.device
    out = torch.empty(batch, seq, dim, dtype=torch.float32, device=dev)
    if tokens == 0:
        return out
    fold = BK * FOLD
    mp, kp, fp, np_ = _up(tokens, BM), _up(dim, fold), _up(ff, fold), _up(dim, BN)
    x = _padded(hidden_states.reshape(tokens, dim), (mp, kp))
    if (fp, kp) == (ff, dim):
        w_gu = gate_up_weight.contiguous()
    else:  # gate rows at 0 .., up rows at fp ..
        w_gu = torch.zeros(2 * fp, kp, dtype=torch.float32, device=dev)
        w_gu[:ff, :dim] = gate_up_weight[:ff]
        w_gu[fp:fp + ff, :dim] = gate_up_weight[ff:]
    act = torch.empty(mp, fp, dtype=torch.float32, device=dev)
    if (mp, np_) == (tokens, dim):
        c = out.view(tokens, dim)
    else:
        c = torch.empty(mp, np_, dtype=torch.float32, device=dev)
    _kernel_fn((mp, fp, kp, True))(x, w_gu, act)
    _kernel_fn((mp, np_, fp, False))(act, _padded(down_weight, (np_, fp)), c)
    if c.data_ptr() != out.data_ptr():
        out.view(tokens, dim).copy_(c[:tokens, :dim])
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


def kernel_sources(arch="sm_90a", batch=64, seq=128, dim=1024, ff=4096, swiglu=True):
    """{kernel symbol: generated CUDA source} at the graded workload: the gate/up build (SwiGLU epilogue)
    by default, the down build with swiglu=False."""
    m = batch * seq
    shape = (m, ff, dim, True) if swiglu else (m, dim, ff, False)
    source = _build(shape, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    names = list(kernel_sources(arch, swiglu=True))
    kernel_sources(arch, swiglu=False)
    return names
