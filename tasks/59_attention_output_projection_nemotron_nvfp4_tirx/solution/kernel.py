"""TIRx oracle for problem 59: NVFP4 attention output projection with the activation quantised in the call.

Five TIRx kernels (five launches).

1. ``mkb_nvfp4_amax``: partial maxima of |x| over the flat fp32 activation, 528 CTAs of 256 threads
   striding over 16-byte vectors; xor-shuffle max, then across the 8 warps in shared memory. A
   maximum is exact in any order.
2. ``mkb_nvfp4_global_scale``: one warp folds the partial maxima and writes the global decode scale
   g = amax * fl(1 / 2688). This is what eager PyTorch computes on the GPU for ``amax / (448 * 6)``:
   a tensor divided by a Python number is a multiplication by the rounded reciprocal in its CUDA
   kernel (the same holds for ``/ 6.0`` below).
3. ``mkb_nvfp4_act_quant``: one thread per 16-element block. In fp32, as the reference:
   s = e4m3(fl(amax_block * fl(1/6)) / g), unit = s * g, r = x / unit (unit 1 for a zero scale).
   NVRTC builds TIRx kernels with --use_fast_math, so both divisions are the IEEE instruction by
   name (``div.rn.f32``); ``cvt.rn.satfinite.e4m3x2.f32`` rounds the scale to e4m3 (nearest even),
   and its byte is decoded exactly from the bit fields. |r| is rounded to the E2M1 grid by
   comparisons with the midpoints, ties going to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
   1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4; above 5 the clamp to 6 changes nothing). The thread
   writes code * s as bf16, which is exact (at most 2 significant bits times e4m3's 4). Rows past
   the token count (padding to whole 128-row tiles) are written as zeros.
4. ``mkb_nvfp4_weight_decode``: one thread per 16-element weight block decodes the packed E2M1
   codes (low nibble first) and the e4m3 scale exactly from their bit fields and writes code * s
   as bf16 (exact); padding rows are zeros.
5. ``mkb_nvfp4_gemm``: C = (A_q @ W_q^T) * (g_x * g_w) on the tensor cores: warp-level ``mma.sync``
   m16n8k16 (bf16 operands, fp32 accumulation) issued through TIRx's PTX intrinsic with
   hand-written fragment maps (TIRx 0.27 has no WGMMA path for sm_90). Every product of two
   decoded (code * s) values is exact in fp32, so the sums are the reference's up to summation
   order, and the two global scales are applied once to each fp32 sum. The operands are read as
   32-bit words of bf16 pairs. A 256-thread CTA (4 x 2 warps, each 32 x 64) computes a 128 x 128
   tile; K advances in slices of 32 through two shared-memory stages (rows padded to 20 words so
   the fragment reads are conflict-free), the next slice's 16-byte loads issued before the current
   slice is multiplied.
"""

import torch
import tvm
from tvm.script import tirx as T

BLOCK = 16
INV_2688 = 0.00037202381645329297  # fl32(1 / 2688)
INV_6 = 0.1666666716337204  # fl32(1 / 6)
BM = 128
BN = 128
BK = 32
THREADS = 256
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
KW = 16  # 32-bit words (bf16 pairs) per row of one 32-wide K slice
PADW = 20  # shared-memory row stride in words (16 + 4 keeps the fragment reads conflict-free)
AMAX_CTAS = 528
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=32768, in_features=4096, out_features=2816)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


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


def e2m1_to_f32(code):
    """Signed E2M1 value of a 4-bit code (bit 3 sign, bits 0-2 magnitude index)."""
    mag = code & 7
    value = T.if_then_else(
        mag < 4,
        T.if_then_else(mag < 2, T.if_then_else(mag == 0, _f32(0.0), _f32(0.5)),
                       T.if_then_else(mag == 2, _f32(1.0), _f32(1.5))),
        T.if_then_else(mag < 6, T.if_then_else(mag == 4, _f32(2.0), _f32(3.0)),
                       T.if_then_else(mag == 6, _f32(4.0), _f32(6.0))))
    return T.if_then_else(code >= 8, value * _f32(-1.0), value)


def e2m1_round(a):
    """|r| (>= 0) rounded to the E2M1 grid, ties to the even code."""
    v = T.if_then_else(a > _f32(0.25), _f32(0.5), _f32(0.0))
    v = T.if_then_else(a >= _f32(0.75), _f32(1.0), v)
    v = T.if_then_else(a > _f32(1.25), _f32(1.5), v)
    v = T.if_then_else(a >= _f32(1.75), _f32(2.0), v)
    v = T.if_then_else(a > _f32(2.5), _f32(3.0), v)
    v = T.if_then_else(a >= _f32(3.5), _f32(4.0), v)
    return T.if_then_else(a > _f32(5.0), _f32(6.0), v)


def _shfl_xor(value, mask):
    return T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), value, mask, 32)


def _amax_kernel(n):
    """P[cta] = max |X| over the 4-element vectors the CTA strides over (n % 4 == 0)."""
    n4 = n // 4
    iters = (n4 + AMAX_CTAS * THREADS - 1) // (AMAX_CTAS * THREADS)

    @T.prim_func
    def mkb_nvfp4_amax(x_h: T.handle, p_h: T.handle):
        X = T.match_buffer(x_h, (n,), "float32")
        P = T.match_buffer(p_h, (AMAX_CTAS,), "float32")
        T.device_entry()
        cta = T.cta_id([AMAX_CTAS])
        tx = T.thread_id([THREADS])
        red = T.alloc_buffer((THREADS // 32,), "float32", scope="shared")
        vals = T.alloc_buffer((4,), "float32", scope="local")
        amax: T.f32 = T.float32(0.0)
        for it in T.serial(iters):
            v4: T.let = (it * AMAX_CTAS + cta) * THREADS + tx
            if v4 < n4:
                for j in T.vectorized(4):
                    vals[j] = X[v4 * 4 + j]
                for j in T.unroll(4):
                    amax = T.max(amax, T.abs(vals[j]))
        for i in T.unroll(5):
            amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
        if tx % 32 == 0:
            red[tx // 32] = amax
        T.cuda.cta_sync()
        if tx == 0:
            for i in T.unroll(THREADS // 32):
                amax = T.max(amax, red[i])
            P[cta] = amax

    return mkb_nvfp4_amax


def _global_scale_kernel():
    """G[0] = max(P) * fl(1/2688), one warp."""

    @T.prim_func
    def mkb_nvfp4_global_scale(p_h: T.handle, g_h: T.handle):
        P = T.match_buffer(p_h, (AMAX_CTAS,), "float32")
        G = T.match_buffer(g_h, (1,), "float32")
        T.device_entry()
        T.cta_id([1])
        tx = T.thread_id([32])
        amax: T.f32 = T.float32(0.0)
        for it in T.serial((AMAX_CTAS + 31) // 32):
            if it * 32 + tx < AMAX_CTAS:
                amax = T.max(amax, P[it * 32 + tx])
        for i in T.unroll(5):
            amax = T.max(amax, _shfl_xor(amax, T.shift_right(16, i)))
        if tx == 0:
            G[0] = amax * _f32(INV_2688)

    return mkb_nvfp4_global_scale


def _act_quant_kernel(rows, padded, k):
    """Q[r, 16b : 16b + 16] = code * s (bf16) of X's block (r, b); zeros for r >= rows."""
    blocks = k // BLOCK
    total = padded * blocks

    @T.prim_func
    def mkb_nvfp4_act_quant(x_h: T.handle, g_h: T.handle, q_h: T.handle):
        X = T.match_buffer(x_h, (rows, k), "float32")
        G = T.match_buffer(g_h, (1,), "float32")
        Q = T.match_buffer(q_h, (padded, k), "bfloat16")
        T.device_entry()
        bx = T.cta_id([(total + THREADS - 1) // THREADS])
        tx = T.thread_id([THREADS])
        vals = T.alloc_buffer((BLOCK,), "float32", scope="local")
        outv = T.alloc_buffer((BLOCK,), "bfloat16", scope="local")
        tmp = T.alloc_buffer((4,), "float32", scope="local")
        rr = T.alloc_buffer((2,), "float32", scope="local")
        pair = T.alloc_buffer((1,), "uint16", scope="local")
        idx: T.let = bx * THREADS + tx
        if idx < total:
            r: T.let = idx // blocks
            b: T.let = idx % blocks
            for j in T.unroll(BLOCK):
                outv[j] = T.bfloat16(0.0)
            if r < rows:
                for c in T.unroll(4):
                    for j in T.vectorized(4):
                        vals[c * 4 + j] = X[r, b * BLOCK + c * 4 + j]
                g: T.let = G[0]
                amax: T.f32 = T.float32(0.0)
                for j in T.unroll(BLOCK):
                    amax = T.max(amax, T.abs(vals[j]))
                tmp[0] = amax * _f32(INV_6)
                T.ptx["div.rn.f32"](tmp[1], tmp[0], g)
                T.ptx["cvt.rn.satfinite.e4m3x2.f32"](pair[0], tmp[1], _f32(0.0))  # first operand: high byte
                tmp[2] = e4m3_to_f32(T.Cast("int32", T.shift_right(pair[0], T.uint16(8))))
                tmp[3] = tmp[2] * g
                tmp[3] = T.if_then_else(tmp[3] > _f32(0.0), tmp[3], _f32(1.0))
                for j in T.unroll(BLOCK):
                    T.ptx["div.rn.f32"](rr[0], vals[j], tmp[3])
                    rr[1] = e2m1_round(T.abs(rr[0]))
                    outv[j] = T.bfloat16(T.if_then_else(rr[0] < _f32(0.0), rr[1] * _f32(-1.0), rr[1]) * tmp[2])
            for c in T.unroll(2):
                for j in T.vectorized(8):
                    Q[r, b * BLOCK + c * 8 + j] = outv[c * 8 + j]

    return mkb_nvfp4_act_quant


def _weight_decode_kernel(rows, padded, k):
    """Q[r, 16b : 16b + 16] = code * s (bf16) of the weight's block (r, b); zeros for padding rows."""
    blocks = k // BLOCK
    total = padded * blocks

    @T.prim_func
    def mkb_nvfp4_weight_decode(c_h: T.handle, s_h: T.handle, q_h: T.handle):
        CODES = T.match_buffer(c_h, (rows, k // 2), "uint8")
        SCALES = T.match_buffer(s_h, (rows, blocks), "uint8")
        Q = T.match_buffer(q_h, (padded, k), "bfloat16")
        T.device_entry()
        bx = T.cta_id([(total + THREADS - 1) // THREADS])
        tx = T.thread_id([THREADS])
        raw = T.alloc_buffer((BLOCK // 2,), "uint8", scope="local")
        outv = T.alloc_buffer((BLOCK,), "bfloat16", scope="local")
        idx: T.let = bx * THREADS + tx
        if idx < total:
            r: T.let = idx // blocks
            b: T.let = idx % blocks
            for j in T.unroll(BLOCK):
                outv[j] = T.bfloat16(0.0)
            if r < rows:
                for j in T.vectorized(BLOCK // 2):
                    raw[j] = CODES[r, b * (BLOCK // 2) + j]
                s: T.let = e4m3_to_f32(T.int32(SCALES[r, b]))
                for j in T.unroll(BLOCK // 2):
                    outv[2 * j] = T.bfloat16(e2m1_to_f32(T.int32(raw[j]) & 15) * s)
                    outv[2 * j + 1] = T.bfloat16(e2m1_to_f32(T.shift_right(T.int32(raw[j]), 4)) * s)
            for c in T.unroll(2):
                for j in T.vectorized(8):
                    Q[r, b * BLOCK + c * 8 + j] = outv[c * 8 + j]

    return mkb_nvfp4_weight_decode


def _gemm_kernel(out_dtype, m, n, k):
    """C[m, n] = (sum_k A[m, k] B[n, k]) * (G[0] * w_scale): bf16 operands given as 32-bit words of bf16 pairs
    (A32 [m, k / 2], B32 [n, k / 2]); m, n multiples of 128, k of 32."""
    k_tiles = k // 32
    tiles_n = n // 128
    tiles_m = m // 128

    @T.prim_func
    def mkb_nvfp4_gemm(a_h: T.handle, b_h: T.handle, g_h: T.handle, w_scale: T.float32, c_h: T.handle):
        A32 = T.match_buffer(a_h, (m, k // 2), "uint32")
        B32 = T.match_buffer(b_h, (n, k // 2), "uint32")
        G = T.match_buffer(g_h, (1,), "float32")
        C = T.match_buffer(c_h, (m, n), out_dtype)
        T.device_entry()
        cta = T.cta_id([tiles_m * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((2, 128, PADW), "uint32", scope="shared")
        b_s = T.alloc_buffer((2, 128, PADW), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        af = T.alloc_buffer((8,), "uint32", scope="local")
        bfr = T.alloc_buffer((16,), "uint32", scope="local")
        ra = T.alloc_buffer((8,), "uint32", scope="local")
        rb = T.alloc_buffer((8,), "uint32", scope="local")
        row0: T.let = (cta // tiles_n) * 128
        col0: T.let = (cta % tiles_n) * 128
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wm: T.let = (warp % 4) * 32
        wn: T.let = (warp // 4) * 64
        lrow: T.let = tx // 2
        lw: T.let = (tx % 2) * 8
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for c in T.unroll(2):
            for j in T.vectorized(4):
                ra[c * 4 + j] = A32[row0 + lrow, lw + c * 4 + j]
            for j in T.vectorized(4):
                rb[c * 4 + j] = B32[col0 + lrow, lw + c * 4 + j]
        for j in T.unroll(8):
            a_s[0, lrow, lw + j] = ra[j]
            b_s[0, lrow, lw + j] = rb[j]
        T.cuda.cta_sync()
        for kt in range(k_tiles):
            st: T.let = kt % 2
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
                for c in T.unroll(2):
                    for j in T.vectorized(4):
                        ra[c * 4 + j] = A32[row0 + lrow, (kt + 1) * KW + lw + c * 4 + j]
                    for j in T.vectorized(4):
                        rb[c * 4 + j] = B32[col0 + lrow, (kt + 1) * KW + lw + c * 4 + j]
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
                        T.ptx[MMA](acc[mi * 32 + ni * 4], acc[mi * 32 + ni * 4 + 1], acc[mi * 32 + ni * 4 + 2],
                                   acc[mi * 32 + ni * 4 + 3], af[mi * 4], af[mi * 4 + 1], af[mi * 4 + 2],
                                   af[mi * 4 + 3], bfr[ni * 2], bfr[ni * 2 + 1], acc[mi * 32 + ni * 4],
                                   acc[mi * 32 + ni * 4 + 1], acc[mi * 32 + ni * 4 + 2], acc[mi * 32 + ni * 4 + 3])
            if kt + 1 < k_tiles:  # the other stage was last read before the previous barrier
                for j in T.unroll(8):
                    a_s[1 - st, lrow, lw + j] = ra[j]
                    b_s[1 - st, lrow, lw + j] = rb[j]
            T.cuda.cta_sync()
        gs: T.let = G[0] * w_scale
        for mi in T.unroll(2):
            for h in T.unroll(2):
                for ni in T.unroll(8):
                    for c in T.unroll(2):  # accumulators 2h, 2h + 1: row g (+ 8), columns 2t, 2t + 1
                        C[row0 + wm + mi * 16 + h * 8 + g, col0 + wn + ni * 8 + 2 * t + c] = T.Cast(
                            out_dtype, acc[mi * 32 + ni * 4 + 2 * h + c] * gs)

    if out_dtype == "float32":
        return mkb_nvfp4_gemm
    return mkb_nvfp4_gemm.with_attr("global_symbol", "mkb_nvfp4_gemm_bf16")


def _make(kind, shape):
    if kind == "amax":
        return _amax_kernel(*shape)
    if kind == "gscale":
        return _global_scale_kernel()
    if kind == "act":
        return _act_quant_kernel(*shape)
    if kind == "weight":
        return _weight_decode_kernel(*shape)
    return _gemm_kernel("float32", *shape)


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _make(kind, shape)}), target=target,
                                     tir_pipeline="tirx")
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


def _shapes(m, n, k):
    mp, np_ = _up(m, BM), _up(n, BN)
    return (("amax", (m * k,)), ("gscale", ()), ("act", (m, mp, k)), ("weight", (n, np_, k)),
            ("gemm", (mp, np_, k)))


def solve(hidden_states, weight_fp4, weight_scale_fp8, weight_global_decode_scale):
    m, k = hidden_states.shape
    n = weight_fp4.shape[0]
    dev = hidden_states.device
    if m == 0 or n == 0 or k == 0:
        return torch.zeros(m, n, dtype=torch.float32, device=dev)
    assert k % BK == 0
    shapes = dict(_shapes(m, n, k))
    mp, np_ = _up(m, BM), _up(n, BN)
    x = hidden_states.contiguous()
    partial = torch.empty(AMAX_CTAS, dtype=torch.float32, device=dev)
    gbuf = torch.empty(1, dtype=torch.float32, device=dev)
    _kernel_fn("amax", shapes["amax"])(x.view(m * k), partial)
    _kernel_fn("gscale", ())(partial, gbuf)
    qa = torch.empty(mp, k, dtype=torch.bfloat16, device=dev)
    _kernel_fn("act", shapes["act"])(x, gbuf, qa)
    qw = torch.empty(np_, k, dtype=torch.bfloat16, device=dev)
    _kernel_fn("weight", shapes["weight"])(weight_fp4.contiguous(),
                                           weight_scale_fp8.contiguous().view(torch.uint8), qw)
    out = torch.empty(mp, np_, dtype=torch.float32, device=dev)
    _kernel_fn("gemm", shapes["gemm"])(qa.view(torch.uint32), qw.view(torch.uint32), gbuf,
                                       float(weight_global_decode_scale), out)
    if mp != m or np_ != n:
        out = out[:m, :n].contiguous()
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
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    sources = {}
    for kind, shape in _shapes(WORKLOAD["tokens"], WORKLOAD["out_features"], WORKLOAD["in_features"]):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
