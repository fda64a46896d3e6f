"""TIRx oracle for problem 60: NVFP4 x NVFP4 GEMM from pre-quantised operands.

One TIRx kernel, ``mkb_nvfp4_gemm``: the NVFP4 decode is fused into the operand load of a
tensor-core GEMM, C = (A_q @ B_q^T) * (g_a * g_b), where A_q and B_q hold code value * block scale.

Why this is exact up to summation order: an E2M1 value (at most 2 significant bits) times an e4m3
scale (at most 4) has at most 6 significant bits and is 0 or in [2^-10, 2688], so code * scale is
exact in bf16, and the product of two such values (at most 12 bits) is exact in fp32. The GEMM
therefore runs on bf16 ``mma.sync`` m16n8k16 with fp32 accumulation (issued through TIRx's PTX
intrinsic with hand-written fragment maps; TIRx 0.27 has no WGMMA path for sm_90, and Hopper has
no FP4 MMA) and sums the exact products the reference's fp32 GEMM sums (its operands are
fl(code * scale * g), one rounding each). The two global scales are applied once to each fp32 sum:
g_a * g_b is formed in double on the host (exact) and rounded once to fp32, then the sum is
multiplied by it, one more rounding. The tensor core's own accumulation truncates instead of
rounding to nearest, so each 32-wide K slice is summed by two mma's into zeroed registers and the
slice sums are added to the running fp32 accumulators with round-to-nearest adds (in a CPU model
that truncates every mma's sum, the output's error is then below a seventh of the eager
reference's, whose operands each carry a rounding).

Work partition: a 256-thread CTA (4 x 2 warps, each 32 x 64 outputs) computes a 128 x 128 tile of
C (rows symbolic; N and K fixed per build, K a multiple of 32). K advances in slices of 32 through
two shared-memory stages of bf16 pairs (32-bit words; rows padded to 20 words so the fragment reads
are conflict-free). For each slice, thread t loads, for one row of A and one row of B, the 8 packed
bytes of one 16-element block (two 32-bit words: row t / 2, block 2 * slice + t % 2) and its e4m3
scale byte; those loads for the next slice are issued before the current slice is multiplied, and
decoded into the other stage afterwards. Decoding: a 256-entry shared table, filled at kernel
start, maps a packed byte to the bf16 bits of its two signed E2M1 values (low nibble = even
element = low half-word); each half is widened to fp32, multiplied by the block scale (decoded from
its bit fields, subnormals included) and narrowed back by dropping the 16 low bits, which are zero
because the product is exact in bf16. Rows (and B rows) past the matrix repeat the last one and are
not stored.
"""

import torch
import tvm
from tvm.script import tirx as T

BLOCK = 16
BM = 128
BN = 128
BK = 32
THREADS = 256
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
PADW = 20  # shared-memory row stride in words (16 + 4 keeps the fragment reads conflict-free)
HIGH_HALF = 0xFFFF0000
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=8192, features=1920)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


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


def e2m1_pair_bits(byte):
    """A packed byte (int32 in [0, 255]) -> uint32 of two bf16: low nibble's value in bits 0-15."""
    low = T.shift_right(T.reinterpret("uint32", e2m1_to_f32(byte & 15)), T.uint32(16))
    high = T.bitwise_and(T.reinterpret("uint32", e2m1_to_f32(T.shift_right(byte, 4))),
                         T.uint32(HIGH_HALF))
    return T.bitwise_or(low, high)


def scale_pair(pair, scale):
    """Both bf16 halves of ``pair`` times the fp32 ``scale``, as a bf16 pair (exact for E2M1 x e4m3)."""
    low = T.reinterpret("float32", T.shift_left(pair, T.uint32(16))) * scale
    high = T.reinterpret("float32", T.bitwise_and(pair, T.uint32(HIGH_HALF))) * scale
    return T.bitwise_or(T.shift_right(T.reinterpret("uint32", low), T.uint32(16)),
                        T.bitwise_and(T.reinterpret("uint32", high), T.uint32(HIGH_HALF)))


def _byte(words, j):
    """Byte j (0-7, little-endian) of two 32-bit words, as an int32."""
    return T.Cast("int32", T.bitwise_and(T.shift_right(words[j // 4], T.uint32(8 * (j % 4))),
                                         T.uint32(255)))


def _gemm_kernel(n, k):
    """C[m, n] = (sum_k A[m, k] B[n, k]) * gs from packed NVFP4 operands (m symbolic, k % 32 == 0).

    A32 [m, k / 8] and B32 [n, k / 8]: the packed codes as 32-bit words; SA [m, k / 16] and
    SB [n, k / 16]: the e4m3 scale bytes; gs: the product of the two global decode scales.
    """
    k_tiles = k // BK
    tiles_n = (n + BN - 1) // BN
    kw = k // 8
    kb = k // BLOCK

    @T.prim_func
    def mkb_nvfp4_gemm(a_h: T.handle, sa_h: T.handle, b_h: T.handle, sb_h: T.handle, gs: T.float32,
                       c_h: T.handle):
        m = T.int32()
        A32 = T.match_buffer(a_h, (m, kw), "uint32")
        SA = T.match_buffer(sa_h, (m, kb), "uint8")
        B32 = T.match_buffer(b_h, (n, kw), "uint32")
        SB = T.match_buffer(sb_h, (n, kb), "uint8")
        C = T.match_buffer(c_h, (m, n), "float32")
        T.device_entry()
        cta = T.cta_id([T.ceildiv(m, BM) * tiles_n])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((2, BM, PADW), "uint32", scope="shared")
        b_s = T.alloc_buffer((2, BN, PADW), "uint32", scope="shared")
        lut = T.alloc_buffer((256,), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((4,), "float32", scope="local")
        af = T.alloc_buffer((16,), "uint32", scope="local")
        bfr = T.alloc_buffer((4,), "uint32", scope="local")
        ra = T.alloc_buffer((2,), "uint32", scope="local")
        rb = T.alloc_buffer((2,), "uint32", scope="local")
        rs = T.alloc_buffer((2,), "int32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wm: T.let = (warp % 4) * 32
        wn: T.let = (warp // 4) * 64
        lrow: T.let = tx // 2
        half: T.let = tx % 2
        lw: T.let = half * 8
        arow: T.let = T.min(row0 + lrow, m - 1)  # rows past the matrix repeat its last row, unstored
        brow: T.let = T.min(col0 + lrow, n - 1)
        lut[tx] = e2m1_pair_bits(tx)
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for j in T.vectorized(2):
            ra[j] = A32[arow, half * 2 + j]
        for j in T.vectorized(2):
            rb[j] = B32[brow, half * 2 + j]
        rs[0] = T.int32(SA[arow, half])
        rs[1] = T.int32(SB[brow, half])
        T.cuda.cta_sync()  # the table is complete
        sa0: T.let = e4m3_to_f32(rs[0])
        sb0: T.let = e4m3_to_f32(rs[1])
        for j in T.unroll(8):
            a_s[0, lrow, lw + j] = scale_pair(lut[_byte(ra, j)], sa0)
            b_s[0, lrow, lw + j] = scale_pair(lut[_byte(rb, j)], sb0)
        T.cuda.cta_sync()
        for kt in range(k_tiles):
            st: T.let = kt % 2
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
                for j in T.vectorized(2):
                    ra[j] = A32[arow, (kt + 1) * 4 + half * 2 + j]
                for j in T.vectorized(2):
                    rb[j] = B32[brow, (kt + 1) * 4 + half * 2 + j]
                rs[0] = T.int32(SA[arow, (kt + 1) * 2 + half])
                rs[1] = T.int32(SB[brow, (kt + 1) * 2 + half])
            # A fragments of both 16-wide halves of the slice: rows g / g + 8 x words t / t + 4
            for ks in T.unroll(2):
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        for q in T.unroll(2):
                            af[ks * 8 + mi * 4 + q * 2 + h] = a_s[st, wm + mi * 16 + h * 8 + g,
                                                                  ks * 8 + q * 4 + t]
            for ni in T.unroll(8):
                for ks in T.unroll(2):
                    for q in T.unroll(2):  # B fragment: row g of the warp's 8 columns, words t / t + 4
                        bfr[ks * 2 + q] = b_s[st, wn + ni * 8 + g, ks * 8 + q * 4 + t]
                for mi in T.unroll(2):
                    for i in T.unroll(4):
                        part[i] = T.float32(0.0)
                    for ks in T.unroll(2):  # the slice's sum, from zero
                        T.ptx[MMA](part[0], part[1], part[2], part[3], af[ks * 8 + mi * 4],
                                   af[ks * 8 + mi * 4 + 1], af[ks * 8 + mi * 4 + 2],
                                   af[ks * 8 + mi * 4 + 3], bfr[ks * 2], bfr[ks * 2 + 1],
                                   part[0], part[1], part[2], part[3])
                    for i in T.unroll(4):  # round-to-nearest add into the running sums
                        acc[mi * 32 + ni * 4 + i] = acc[mi * 32 + ni * 4 + i] + part[i]
            if kt + 1 < k_tiles:  # decode into the other stage, last read before the previous barrier
                sa: T.let = e4m3_to_f32(rs[0])
                sb: T.let = e4m3_to_f32(rs[1])
                for j in T.unroll(8):
                    a_s[1 - st, lrow, lw + j] = scale_pair(lut[_byte(ra, j)], sa)
                    b_s[1 - st, lrow, lw + j] = scale_pair(lut[_byte(rb, j)], sb)
            T.cuda.cta_sync()
        for mi in T.unroll(2):
            for h in T.unroll(2):
                row: T.let = row0 + wm + mi * 16 + h * 8 + g
                if row < m:
                    for ni in T.unroll(8):
                        for c in T.unroll(2):  # accumulators 2h, 2h + 1: row g (+ 8), columns 2t, 2t + 1
                            col: T.let = col0 + wn + ni * 8 + 2 * t + c
                            if col < n:
                                C[row, col] = acc[mi * 32 + ni * 4 + 2 * h + c] * gs

    return mkb_nvfp4_gemm


def _build(n, k, arch):
    """Compile once per (N, K, arch) and return the tvm Executable."""
    key = (n, k, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _gemm_kernel(n, k)}), target=target,
                                     tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(n, k):
    key = (n, k, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _operand(codes, scale):
    """[..., K/2] packed codes, [..., K/16] e4m3 scales -> ([rows, K/8] uint32, [rows, K/16] uint8)."""
    half = codes.shape[-1]
    rows = codes.numel() // half
    return (codes.contiguous().view(rows, half).view(torch.uint32),
            scale.contiguous().view(torch.uint8).view(rows, half // (BLOCK // 2)))


def solve(hidden_states, hidden_states_scale, global_decode_scale_input, weight, weight_scale,
          global_decode_scale_weight):
    k = hidden_states.shape[-1] * 2
    n = weight.shape[-2]
    if k % BK:
        raise ValueError(f"K must be a multiple of {BK}")
    if weight.numel() != n * k // 2:
        raise ValueError("this kernel multiplies by one weight matrix")
    a32, sa = _operand(hidden_states, hidden_states_scale)
    b32, sb = _operand(weight, weight_scale)
    m = a32.shape[0]
    out = torch.empty(*hidden_states.shape[:-1], n, dtype=torch.float32, device=hidden_states.device)
    if m > 0 and n > 0:
        gs = float(global_decode_scale_input) * float(global_decode_scale_weight)  # exact in double
        _kernel_fn(n, k)(a32, sa, b32, sb, gs, out.view(m, n))
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


def kernel_sources(arch="sm_90a", features=WORKLOAD["features"]):
    """{kernel symbol: generated CUDA source} at the graded N = K (1920)."""
    source = _build(features, features, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
