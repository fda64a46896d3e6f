"""TIRx oracle for problem 11: variable-length vision self-attention with rotate-half RoPE
(Qwen-Image-Edit vision encoder, 16 heads of dim 72), bf16.

TIRx 0.27 has no WGMMA path for sm_90, so every product uses the warp-level
``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation), issued as a TIRx PTX intrinsic with the
fragments placed by hand as the PTX ISA lays them out: lane (g, t) = (lane / 4, lane % 4) holds A
words (row g | g + 8, k-word t | t + 4), B words (column g, k-word t | t + 4) and accumulators (row
g | g + 8, columns 2t, 2t + 1). Slower than WGMMA, and the operand loads are not asynchronous.

Four launches of three TIRx kernels.

1. ``mkb_bias_gemm`` (qkv projection, then again for the output projection): C = A W^T + bias. A
   CTA computes a 128 x 128 tile with 8 warps (2 x 4, each 64 x 32); K advances in slices of 32,
   each thread loading two 16-byte vectors of A and two of W per slice into registers (the next
   slice's loads are issued before the current slice is computed) and storing them as bf16-pair
   words into shared-memory rows of 16 words padded to 20 (conflict-free fragment reads). Every
   operand value is bf16, so each product is exact and only the summation order differs from the
   reference's fp32 GEMMs. Epilogue: the fp32 sum plus the bias (one fp32 add) rounded to bf16.
2. ``mkb_rope_pack``: one CTA per token. For q and k, x * cos + rotate_half(x) * sin in fp32 (each
   product of two bf16 values is exact, so a fused multiply-add gives the same value) rounded to
   bf16 once, as the reference; v is copied. The values go to a head-major scratch [3, heads,
   tokens, dp] (dp = head_dim rounded up to 16, 80 here) whose padding columns are zero, so that
   the attention kernel's Q K^T over dp columns adds only exact zeros.
3. ``mkb_varlen_attention``: per image (cu_seqlens), per head, tiles of 64 query rows (16 per warp
   of 4); the grid is (an upper bound on the row tiles, heads) and each CTA finds its image and row
   tile by a scan of the sequence offsets (CTAs past the last tile do nothing). Q rows stay in
   shared memory (bf16-pair words, rows of dp / 2 words padded by 4); keys come in blocks of 64,
   loaded by 16-byte vectors into the same row format, and V blocks are stored transposed (value
   column major, bf16 pairs of consecutive keys per word, rows padded to 36 words) for the B
   fragments of P V. Rows past the image's end are clamped to its last row; their keys get a -1e30
   logit. The softmax reproduces the reference's rounding of the probabilities to bf16 with two
   passes over the keys: pass 1 computes each row's maximum m and sum l = sum exp2(s - m) online in
   fp32 (base 2, s = S * scale * log2(e); row maxima and sums reduced over the 4 lanes sharing a row
   by xor shuffles); pass 2 recomputes S and forms p = bf16(exp2(s - m) * (1 / l)), packed in the
   lanes' registers as the A fragments of P V (two adjacent 8-key accumulator tiles form one 16-key
   step), and accumulates P V in fp32 (exact products, as the reference's PV). exp2 and the
   reciprocal are the fast-math ones (about 2 ulp in fp32), which can move a probability by one bf16
   unit only next to a rounding midpoint. The output rows are rounded to bf16 once and written as
   bf16 pairs into the [tokens, heads * head_dim] operand of the output projection.
Shapes that are not GEMM tile multiples (the small workload) use zero-padded scratch operands; the
graded shapes need none.
"""

import math

import torch
import tvm
from tvm.script import tirx as T

BM = 128  # GEMM tile
BN = 128
BK = 32
PAD = BK // 2 + 4  # 32-bit words per GEMM shared-memory row: 16 of data and 4 of padding
THREADS = 256  # GEMM threads (8 warps)
AM = 64  # query rows per attention CTA (4 warps x 16) and keys per block
ATHREADS = 128
VPAD = 36  # words per transposed-V row: 32 key pairs and 4 of padding
NEG = -1.0e30  # the logit of a masked key (exp2 of it is 0)
ROPE_THREADS = 128
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _gemm_kernel(m, n, k):
    """C[m, n] = bf16(sum_k A[m, k] B[n, k] + bias[n]); m, n multiples of 128, k of 32."""
    k_tiles = k // BK
    tiles_n = n // BN

    @T.prim_func
    def mkb_bias_gemm(a_h: T.handle, b_h: T.handle, bias_h: T.handle, c_h: T.handle):
        A = T.match_buffer(a_h, (m, k), "bfloat16")
        B = T.match_buffer(b_h, (n, k), "bfloat16")
        bias = T.match_buffer(bias_h, (n,), "bfloat16")
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
                        out[j] = T.bfloat16(acc[(mt * 4 + nt) * 4 + hr * 2 + j]
                                            + T.float32(bias[col0 + wc + nt * 8 + t * 2 + j]))
                    for j in T.vectorized(2):
                        C[row0 + wr + mt * 16 + hr * 8 + g, col0 + wc + nt * 8 + t * 2 + j] = out[j]

    return mkb_bias_gemm


def _rope_kernel(tokens, heads, head_dim):
    """packed[s, h, t, d] = rope(qkv[t, s, h, :])[d] for q, k (s = 0, 1), qkv[t, 2, h, d] for v, 0 for d >= head_dim."""
    dp = _up(head_dim, 16)
    hidden = heads * head_dim
    half = head_dim // 2
    total = 3 * heads * dp
    steps = (total + ROPE_THREADS - 1) // ROPE_THREADS

    @T.prim_func
    def mkb_rope_pack(qkv_h: T.handle, cos_h: T.handle, sin_h: T.handle, p_h: T.handle):
        qkv = T.match_buffer(qkv_h, (tokens, 3 * hidden), "bfloat16")
        cos = T.match_buffer(cos_h, (tokens, heads, head_dim), "bfloat16")
        sin = T.match_buffer(sin_h, (tokens, heads, head_dim), "bfloat16")
        packed = T.match_buffer(p_h, (3, heads, tokens, dp), "bfloat16")
        T.device_entry()
        tok = T.cta_id([tokens])
        tx = T.thread_id([ROPE_THREADS])
        for it in range(steps):
            e: T.let = it * ROPE_THREADS + tx
            if e < total:
                s: T.let = e // (heads * dp)
                h: T.let = (e // dp) % heads
                d: T.let = e % dp
                if d >= head_dim:
                    packed[s, h, tok, d] = T.bfloat16(0.0)
                elif s == 2:
                    packed[s, h, tok, d] = qkv[tok, 2 * hidden + h * head_dim + d]
                else:
                    lower: T.let = d < half
                    part: T.let = T.float32(qkv[tok, s * hidden + h * head_dim + T.if_then_else(lower, d + half,
                                                                                                 d - half)])
                    packed[s, h, tok, d] = T.bfloat16(
                        T.float32(qkv[tok, s * hidden + h * head_dim + d]) * T.float32(cos[tok, h, d])
                        + T.if_then_else(lower, -part, part) * T.float32(sin[tok, h, d]))

    return mkb_rope_pack


def _attention_kernel(tokens, heads, head_dim, images):
    dp = _up(head_dim, 16)
    hidden = heads * head_dim
    kw = dp // 2  # bf16-pair words per row
    qpad = kw + 4
    vpr = dp // 8  # 16-byte vectors per row
    ksteps = dp // 16  # k16 steps of Q K^T
    nv = dp // 8  # n8 tiles of P V
    n_tiles = (tokens + AM - 1) // AM + images  # each image wastes less than one tile
    row_iters = (AM * vpr + ATHREADS - 1) // ATHREADS
    v_iters = (AM // 2 * vpr + ATHREADS - 1) // ATHREADS

    @T.prim_func
    def mkb_varlen_attention(p_h: T.handle, ip_h: T.handle, o_h: T.handle, scale_log2: T.float32):
        packed = T.match_buffer(p_h, (3, heads, tokens, dp), "bfloat16")
        indptr = T.match_buffer(ip_h, (images + 1,), "int32")
        out = T.match_buffer(o_h, (tokens, hidden), "bfloat16")
        T.device_entry()
        tile, head = T.cta_id([n_tiles, heads])
        tx = T.thread_id([ATHREADS])
        q_s = T.alloc_buffer((AM, qpad), "uint32", scope="shared")
        k_s = T.alloc_buffer((AM, qpad), "uint32", scope="shared")
        vt_s = T.alloc_buffer((dp, VPAD), "uint32", scope="shared")
        info = T.alloc_buffer((2,), "int32", scope="local")
        acc_s = T.alloc_buffer((32,), "float32", scope="local")
        acc_o = T.alloc_buffer((nv * 4,), "float32", scope="local")
        m_run = T.alloc_buffer((2,), "float32", scope="local")
        l_run = T.alloc_buffer((2,), "float32", scope="local")
        inv = T.alloc_buffer((2,), "float32", scope="local")
        af = T.alloc_buffer((4,), "uint32", scope="local")
        bfr = T.alloc_buffer((16,), "uint32", scope="local")
        ph = T.alloc_buffer((16,), "uint32", scope="local")
        raw = T.alloc_buffer((8,), "bfloat16", scope="local")
        raw_w = T.decl_buffer((4,), "uint32", data=raw.data, scope="local")
        raw1 = T.alloc_buffer((8,), "bfloat16", scope="local")
        pair = T.alloc_buffer((2,), "bfloat16", scope="local")
        pair_w = T.decl_buffer((1,), "uint32", data=pair.data, scope="local")
        out2 = T.alloc_buffer((2,), "bfloat16", scope="local")
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = warp * 16
        # the image and first row of this CTA's tile
        info[0] = -1
        info[1] = 0
        first: T.i32 = 0
        for b in range(images):
            nt_b: T.let = (indptr[b + 1] - indptr[b] + AM - 1) // AM
            if tile >= first and tile < first + nt_b:
                info[0] = b
                info[1] = (tile - first) * AM
            first = first + nt_b
        if info[0] >= 0:
            seq: T.let = info[0]
            r0: T.let = info[1]
            beg: T.let = indptr[seq]
            length: T.let = indptr[seq + 1] - beg
            n_blocks: T.let = (length + AM - 1) // AM
            # Q rows of the tile (clamped to the image), kept for both passes
            for it in T.unroll(row_iters):
                u: T.let = it * ATHREADS + tx
                if u < AM * vpr:
                    for e in T.vectorized(8):
                        raw[e] = packed[0, head, beg + T.min(r0 + u // vpr, length - 1), (u % vpr) * 8 + e]
                    for e in T.vectorized(4):
                        q_s[u // vpr, (u % vpr) * 4 + e] = raw_w[e]
            for hr in T.unroll(2):
                m_run[hr] = _f32(NEG)
                l_run[hr] = _f32(0.0)
            for i in T.unroll(nv * 4):
                acc_o[i] = _f32(0.0)
            for ps in range(2):
                # pass 0: row maxima and sums; pass 1: bf16 probabilities and P V
                for nb in range(n_blocks):
                    for it in T.unroll(row_iters):
                        u1: T.let = it * ATHREADS + tx
                        if u1 < AM * vpr:
                            for e in T.vectorized(8):
                                raw[e] = packed[1, head, beg + T.min(nb * AM + u1 // vpr, length - 1),
                                                (u1 % vpr) * 8 + e]
                            for e in T.vectorized(4):
                                k_s[u1 // vpr, (u1 % vpr) * 4 + e] = raw_w[e]
                    if ps == 1:
                        # V block transposed: vt_s[column, key pair] = (v[2p, column], v[2p + 1, column])
                        for it in T.unroll(v_iters):
                            u2: T.let = it * ATHREADS + tx
                            if u2 < AM // 2 * vpr:
                                kp: T.let = u2 % (AM // 2)
                                cc: T.let = u2 // (AM // 2)
                                for e in T.vectorized(8):
                                    raw[e] = packed[2, head, beg + T.min(nb * AM + kp * 2, length - 1), cc * 8 + e]
                                for e in T.vectorized(8):
                                    raw1[e] = packed[2, head, beg + T.min(nb * AM + kp * 2 + 1, length - 1),
                                                     cc * 8 + e]
                                for e in T.unroll(8):
                                    pair[0] = raw[e]
                                    pair[1] = raw1[e]
                                    vt_s[cc * 8 + e, kp] = pair_w[0]
                    T.cuda.cta_sync()
                    # ---- S = Q K^T (8 tiles of 16 x 8 per warp)
                    for i in T.unroll(32):
                        acc_s[i] = _f32(0.0)
                    for kk in T.unroll(ksteps):
                        af[0] = q_s[wr + g, kk * 8 + t]
                        af[1] = q_s[wr + g + 8, kk * 8 + t]
                        af[2] = q_s[wr + g, kk * 8 + t + 4]
                        af[3] = q_s[wr + g + 8, kk * 8 + t + 4]
                        for nt in T.unroll(8):
                            bfr[nt * 2 + 0] = k_s[nt * 8 + g, kk * 8 + t]
                            bfr[nt * 2 + 1] = k_s[nt * 8 + g, kk * 8 + t + 4]
                        for nt in T.unroll(8):
                            T.ptx[MMA](acc_s[nt * 4 + 0], acc_s[nt * 4 + 1], acc_s[nt * 4 + 2], acc_s[nt * 4 + 3],
                                       af[0], af[1], af[2], af[3], bfr[nt * 2 + 0], bfr[nt * 2 + 1],
                                       acc_s[nt * 4 + 0], acc_s[nt * 4 + 1], acc_s[nt * 4 + 2], acc_s[nt * 4 + 3])
                    # scaled base-2 logits, masked past the image's end
                    for nt in T.unroll(8):
                        for c in T.unroll(4):
                            acc_s[nt * 4 + c] = T.if_then_else(nb * AM + nt * 8 + t * 2 + c % 2 < length,
                                                               acc_s[nt * 4 + c] * scale_log2, _f32(NEG))
                    if ps == 0:
                        for hr in T.unroll(2):
                            mx: T.f32 = acc_s[hr * 2]
                            for nt in T.unroll(8):
                                for j in T.unroll(2):
                                    mx = T.max(mx, acc_s[nt * 4 + hr * 2 + j])
                            for sh in T.unroll(2):
                                mx = T.max(mx, T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), mx, T.shift_left(1, sh),
                                                                       32))
                            m_new: T.f32 = T.max(m_run[hr], mx)
                            p_sum: T.f32 = _f32(0.0)
                            for nt in T.unroll(8):
                                for j in T.unroll(2):
                                    p_sum = p_sum + T.exp2(acc_s[nt * 4 + hr * 2 + j] - m_new)
                            l_run[hr] = l_run[hr] * T.exp2(m_run[hr] - m_new) + p_sum
                            m_run[hr] = m_new
                    else:
                        # p = bf16(exp2(s - m) / l) as bf16-pair A fragments: word w of 16-key step kb is
                        # tile 2 kb + w // 2, accumulator pair (w % 2) * 2 (rows g | g + 8)
                        for kb in T.unroll(4):
                            for w in T.unroll(4):
                                for j in T.unroll(2):
                                    pair[j] = T.bfloat16(
                                        T.exp2(acc_s[(kb * 2 + w // 2) * 4 + (w % 2) * 2 + j] - m_run[w % 2])
                                        * inv[w % 2])
                                ph[kb * 4 + w] = pair_w[0]
                        for kb in T.unroll(4):
                            for nt in T.unroll(nv):
                                bfr[0] = vt_s[nt * 8 + g, kb * 8 + t]
                                bfr[1] = vt_s[nt * 8 + g, kb * 8 + t + 4]
                                T.ptx[MMA](acc_o[nt * 4 + 0], acc_o[nt * 4 + 1], acc_o[nt * 4 + 2],
                                           acc_o[nt * 4 + 3], ph[kb * 4 + 0], ph[kb * 4 + 1], ph[kb * 4 + 2],
                                           ph[kb * 4 + 3], bfr[0], bfr[1], acc_o[nt * 4 + 0], acc_o[nt * 4 + 1],
                                           acc_o[nt * 4 + 2], acc_o[nt * 4 + 3])
                    T.cuda.cta_sync()
                if ps == 0:
                    for hr in T.unroll(2):
                        tot: T.f32 = l_run[hr]
                        for sh in T.unroll(2):
                            tot = tot + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), tot, T.shift_left(1, sh), 32)
                        inv[hr] = _f32(1.0) / tot
            # ---- epilogue: bf16 pairs (row g | g + 8, columns 2t, 2t + 1 of each 8-column tile)
            for hr in T.unroll(2):
                orow: T.let = r0 + wr + g + hr * 8
                if orow < length:
                    for nt in T.unroll(nv):
                        if nt * 8 + t * 2 < head_dim:
                            for j in T.unroll(2):
                                out2[j] = T.bfloat16(acc_o[nt * 4 + hr * 2 + j])
                            for j in T.vectorized(2):
                                out[beg + orow, head * head_dim + nt * 8 + t * 2 + j] = out2[j]

    return mkb_varlen_attention


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        make = {"gemm": _gemm_kernel, "rope": _rope_kernel, "attention": _attention_kernel}[kind]
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": make(*shape)}), target=target, tir_pipeline="tirx")
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


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def _gemm(a, w, bias):
    """bf16(a @ w^T + bias) for a tile-padded a [mp, kp]; returns the [mp, np] result (np = n padded)."""
    mp, kp, n_p = a.shape[0], a.shape[1], _up(w.shape[0], BN)
    c = torch.empty(mp, n_p, dtype=torch.bfloat16, device=a.device)
    _kernel_fn("gemm", (mp, n_p, kp))(a, _padded(w, (n_p, kp)), _padded(bias, (n_p,)), c)
    return c


def solve(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight, proj_bias):
    tokens, hidden = hidden_states.shape
    heads, head_dim = cos.shape[1], cos.shape[2]
    images = cu_seqlens.numel()
    dev = hidden_states.device
    assert heads * head_dim == hidden and head_dim % 8 == 0
    if tokens == 0:
        return torch.empty(tokens, hidden, dtype=torch.bfloat16, device=dev)
    mp, kp = _up(tokens, BM), _up(hidden, BK)
    qkv = _gemm(_padded(hidden_states, (mp, kp)), qkv_weight, qkv_bias)  # [mp, >= 3 hidden]
    qkv = qkv[:tokens] if qkv.shape[1] == 3 * hidden else qkv[:tokens, :3 * hidden].contiguous()

    packed = torch.empty(3, heads, tokens, _up(head_dim, 16), dtype=torch.bfloat16, device=dev)
    _kernel_fn("rope", (tokens, heads, head_dim))(qkv, cos.contiguous(), sin.contiguous(), packed)

    indptr = torch.zeros(images + 1, dtype=torch.int32, device=dev)
    indptr[1:] = cu_seqlens.to(torch.int32)
    attn = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=dev)  # every element written
    _kernel_fn("attention", (tokens, heads, head_dim, images))(packed, indptr, attn,
                                                                float(head_dim ** -0.5 * math.log2(math.e)))

    c = _gemm(_padded(attn, (mp, kp)), proj_weight, proj_bias)
    if tuple(c.shape) == (tokens, hidden):
        return c
    return c[:tokens, :hidden].contiguous()


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


def _builds(images=28, tokens=7168, min_len=85, max_len=680, heads=16, head_dim=72):
    """The (kind, shape) builds of the graded workload (the problem's defaults), in launch order."""
    hidden = heads * head_dim
    return (("gemm", (tokens, 3 * hidden, hidden)), ("rope", (tokens, heads, head_dim)),
            ("attention", (tokens, heads, head_dim, images)), ("gemm", (tokens, hidden, hidden)))


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} of every kernel at the graded workload."""
    sources = {}
    for kind, shape in _builds():
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
