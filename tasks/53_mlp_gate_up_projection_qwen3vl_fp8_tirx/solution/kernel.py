"""TIRx oracle for problem 53: FP8 gate/up projection with SiLU gating on pre-quantised operands (Qwen3-VL).

One TIRx kernel, ``mkb_fp8_gate_up_gemm``, a tensor-core GEMM over the row-interleaved weight W'
(row 2j = gate row j, row 2j + 1 = up row j), built on the fly from the two e4m3 weights: warp-level
``mma.sync`` m16n8k16 (bf16 operands, fp32 accumulation) issued through TIRx's PTX intrinsic with
hand-written fragment maps (TIRx 0.27 has no WGMMA path for sm_90).

A 256-thread CTA (4 x 2 warps, each 32 x 64) computes a 128-row x 128-column tile of x @ W'^T,
i.e. 64 output columns; K advances in slices of 32 through two shared-memory stages (rows padded
to 20 words so the 32-bit fragment reads are conflict-free). Each thread loads 16 e4m3 bytes of x
and 16 of its W' row (from the gate or the up weight by the row's parity) per slice with one
16-byte load each (the next slice's loads are issued before the current slice is multiplied),
decodes them exactly from their bit fields and stores them as bf16 pairs (every e4m3 value is a
bf16 value). Every product of two e4m3 values is exact in fp32, so the raw sums of one 128-wide K
block are accumulated in separate fp32 registers, then multiplied by the row's x scale times the
gate block scale (even W' columns) or the up block scale (odd columns) and added to the fp32
accumulator: the reference's dequantised fp32 GEMMs up to summation order. Rows past the token
count load zeros and are not stored. An m16n8 accumulator holds W' columns (2t, 2t + 1) of a row in
one thread, which are gate and up of one output column j, so each thread writes
bf16(silu(gate) * up) with silu(g) = g / (1 + exp(-g)) in fp32. NVRTC builds TIRx kernels with
--use_fast_math, so exp and the division are the precise forms below (a range-reduced polynomial
exp and a Newton-corrected quotient).
"""

import torch
import tvm
from tvm.script import tirx as T

QBLOCK = 128
BM = 128
BN = 128  # W' columns per CTA (64 output columns)
BK = 32  # K slice (bytes of e4m3 per row)
PADW = 20  # shared-memory row stride in 32-bit words (16 + 4 keeps the fragment reads conflict-free)
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
THREADS = 256
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=8704, hidden=3584, intermediate=18944)
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


def e4m3_to_f32(code):
    """The fp32 value of a finite e4m3fn byte given as an int32 in [0, 255] (exact)."""
    sign = T.shift_left(T.shift_right(code, 7), 31)
    exponent = T.bitwise_and(T.shift_right(code, 3), 15)
    mantissa = T.bitwise_and(code, 7)
    normal = T.reinterpret("float32", T.bitwise_or(
        sign, T.bitwise_or(T.shift_left(exponent + 120, 23), T.shift_left(mantissa, 20))))
    tiny = T.float32(mantissa) * T.float32(0.001953125)  # mantissa * 2^-9
    subnormal = T.if_then_else(code >= 128, tiny * T.float32(-1.0), tiny)
    return T.if_then_else(exponent == 0, subnormal, normal)


def _bf16_pair(lo, hi):
    """A 32-bit word of two bf16 values given as fp32 values that are bf16-exact (lo in the low half)."""
    return T.bitwise_or(T.shift_right(T.reinterpret("uint32", lo), T.uint32(16)),
                        T.bitwise_and(T.reinterpret("uint32", hi), T.uint32(0xFFFF0000)))


def _gemm_kernel(m, n, k):
    """OUT[m, j] = bf16(silu(G[m, j]) * U[m, j]) with G = dequant(X) @ dequant(WG)^T and U likewise."""
    k_tiles = k // BK
    tiles_n = 2 * n // BN
    tiles_m = (m + BM - 1) // BM
    nkb = k // QBLOCK
    per_block = QBLOCK // BK

    @T.prim_func
    def mkb_fp8_gate_up_gemm(x_h: T.handle, sx_h: T.handle, g_h: T.handle, sg_h: T.handle, u_h: T.handle,
                             su_h: T.handle, out_h: T.handle):
        X = T.match_buffer(x_h, (m, k), "uint8")
        SX = T.match_buffer(sx_h, (m, nkb), "float32")
        WG = T.match_buffer(g_h, (n, k), "uint8")
        SG = T.match_buffer(sg_h, (n // QBLOCK, nkb), "float32")
        WU = T.match_buffer(u_h, (n, k), "uint8")
        SU = T.match_buffer(su_h, (n // QBLOCK, nkb), "float32")
        OUT = T.match_buffer(out_h, (m, n), "bfloat16")
        T.device_entry()
        cta = T.cta_id([tiles_m * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((2, BM, PADW), "uint32", scope="shared")
        b_s = T.alloc_buffer((2, BN, PADW), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "uint32", scope="local")
        bfr = T.alloc_buffer((16,), "uint32", scope="local")
        ra = T.alloc_buffer((16,), "uint8", scope="local")
        rb = T.alloc_buffer((16,), "uint8", scope="local")
        sc = T.alloc_buffer((8,), "float32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        bn: T.let = cta % tiles_n
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wm: T.let = (warp % 4) * 32
        wn: T.let = (warp // 4) * 64
        lrow: T.let = tx // 2
        lk: T.let = (tx % 2) * 16
        arow: T.let = row0 + lrow
        wrow: T.let = bn * (BN // 2) + lrow // 2  # gate row (even lrow) or up row (odd lrow)
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
            part[i] = T.float32(0.0)
        for j in T.unroll(16):
            ra[j] = T.uint8(0)
        if arow < m:
            for j in T.vectorized(16):
                ra[j] = X[arow, lk + j]
        if lrow % 2 == 0:
            for j in T.vectorized(16):
                rb[j] = WG[wrow, lk + j]
        else:
            for j in T.vectorized(16):
                rb[j] = WU[wrow, lk + j]
        for j in T.unroll(8):
            a_s[0, lrow, lk // 2 + j] = _bf16_pair(e4m3_to_f32(T.Cast("int32", ra[2 * j])),
                                                   e4m3_to_f32(T.Cast("int32", ra[2 * j + 1])))
            b_s[0, lrow, lk // 2 + j] = _bf16_pair(e4m3_to_f32(T.Cast("int32", rb[2 * j])),
                                                   e4m3_to_f32(T.Cast("int32", rb[2 * j + 1])))
        T.cuda.cta_sync()
        for kt in range(k_tiles):
            st: T.let = kt % 2
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
                if arow < m:
                    for j in T.vectorized(16):
                        ra[j] = X[arow, (kt + 1) * BK + lk + j]
                if lrow % 2 == 0:
                    for j in T.vectorized(16):
                        rb[j] = WG[wrow, (kt + 1) * BK + lk + j]
                else:
                    for j in T.vectorized(16):
                        rb[j] = WU[wrow, (kt + 1) * BK + lk + j]
            for ks in T.unroll(2):
                # fragments: a(mi) = rows g / g + 8 x words t / t + 4 of the warp's 16-row tile mi; b(ni) = row g
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        for q in T.unroll(2):
                            af[mi * 4 + q * 2 + h] = a_s[st, wm + mi * 16 + h * 8 + g, ks * 8 + q * 4 + t]
                for ni in T.unroll(8):
                    for q in T.unroll(2):
                        bfr[ni * 2 + q] = b_s[st, wn + ni * 8 + g, ks * 8 + q * 4 + t]
                for mi in T.unroll(2):
                    for ni in T.unroll(8):
                        T.ptx[MMA](part[mi * 32 + ni * 4], part[mi * 32 + ni * 4 + 1], part[mi * 32 + ni * 4 + 2],
                                   part[mi * 32 + ni * 4 + 3], af[mi * 4], af[mi * 4 + 1], af[mi * 4 + 2],
                                   af[mi * 4 + 3], bfr[ni * 2], bfr[ni * 2 + 1], part[mi * 32 + ni * 4],
                                   part[mi * 32 + ni * 4 + 1], part[mi * 32 + ni * 4 + 2], part[mi * 32 + ni * 4 + 3])
            if kt % per_block == per_block - 1:  # end of a 128-wide K block: scale the raw sums and fold them in
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        sx: T.let = SX[T.min(row0 + wm + mi * 16 + h * 8 + g, m - 1), kt // per_block]
                        sc[mi * 4 + h * 2] = sx * SG[bn // 2, kt // per_block]  # even W' columns: gate
                        sc[mi * 4 + h * 2 + 1] = sx * SU[bn // 2, kt // per_block]  # odd W' columns: up
                for mi in T.unroll(2):
                    for ni in T.unroll(8):
                        for r in T.unroll(4):
                            acc[mi * 32 + ni * 4 + r] = acc[mi * 32 + ni * 4 + r] + part[mi * 32 + ni * 4 + r] * sc[
                                mi * 4 + r]
                            part[mi * 32 + ni * 4 + r] = T.float32(0.0)
            if kt + 1 < k_tiles:  # the other stage was last read before the previous barrier
                for j in T.unroll(8):
                    a_s[1 - st, lrow, lk // 2 + j] = _bf16_pair(e4m3_to_f32(T.Cast("int32", ra[2 * j])),
                                                                e4m3_to_f32(T.Cast("int32", ra[2 * j + 1])))
                    b_s[1 - st, lrow, lk // 2 + j] = _bf16_pair(e4m3_to_f32(T.Cast("int32", rb[2 * j])),
                                                                e4m3_to_f32(T.Cast("int32", rb[2 * j + 1])))
            T.cuda.cta_sync()
        for mi in T.unroll(2):
            for h in T.unroll(2):
                orow: T.let = row0 + wm + mi * 16 + h * 8 + g
                if orow < m:
                    for ni in T.unroll(8):  # accumulators 2h, 2h + 1: W' columns 2t, 2t + 1 = (gate, up) of one j
                        OUT[orow, bn * (BN // 2) + wn // 2 + ni * 4 + t] = T.bfloat16(
                            silu_precise(acc[mi * 32 + ni * 4 + 2 * h]) * acc[mi * 32 + ni * 4 + 2 * h + 1])

    return mkb_fp8_gate_up_gemm


def _build(shape, arch):
    """Compile the kernel once per (shape, arch) and return the tvm Executable."""
    key = (shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _gemm_kernel(*shape)}), target=target,
                                     tir_pipeline="tirx")
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


def solve(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up):
    rows, k = x.shape
    n = gate_proj_weight.shape[0]
    out = torch.empty(rows, n, dtype=torch.bfloat16, device=x.device)
    if rows > 0:
        _kernel_fn((rows, n, k))(x.contiguous().view(torch.uint8), scale_x.contiguous(),
                                 gate_proj_weight.contiguous().view(torch.uint8), scale_gate.contiguous(),
                                 up_proj_weight.contiguous().view(torch.uint8), scale_up.contiguous(), out)
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


def kernel_sources(arch="sm_90a", tokens=WORKLOAD["tokens"], hidden=WORKLOAD["hidden"],
                   intermediate=WORKLOAD["intermediate"]):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    source = _build((tokens, intermediate, hidden), arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
