"""TIRx oracle for problem 64: the Mamba-2 SSD chunked scan (chunk 256) with a carried state.

With a the within-chunk cumulative sum of A (per head): Y_diag[i] = sum_{j <= i} (C_i . B_j)
exp(a_i - a_j) x_j; chunk state = sum_j (x_j exp(a_end - a_j)) B_j^T; the state entering chunk z
is carried as state * exp(a_end) + chunk state from initial_states; Y_off[i] = (C_i . state_z)
exp(a_i); y = Y_diag + Y_off + D x.

Two TIRx kernels, shape-specialised:
1. ``mkb_ssd_states`` (CUDA cores, fp32): one CTA (256 threads) per (64 state columns, 64 head dims,
   batch x head) keeps its 64 x 64 block of the state in registers (thread: 4 head dims x 4 state
   columns), starting from initial_states. Per chunk it writes the state entering the chunk (fp32) to
   a scratch tensor [B*H, chunks, P, N], forms the cumulative sums a of the chunk in shared memory
   (each thread adds the steps up to its own in order), accumulates the chunk state over 64-step
   slices of x exp(a_end - a) (formed in fp32 as the reference, exp in fp64) and B, and carries
   state = state * exp(a_end) + chunk state. The last state is written as final_state (bf16).
2. ``mkb_ssd_output`` (tensor cores): one CTA of 4 warps per (64 rows of a chunk, chunk, batch x
   head), the problem-65 TIRx kernel on this layout. TIRx 0.27 has no WGMMA path for sm_90, so the
   products use the warp-level ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation) as a TIRx PTX
   intrinsic with the fragments placed by hand (lane (g, t) = (lane / 4, lane % 4) holds A words
   (row g | g + 8, k-word t | t + 4), B words (column g, k-word t | t + 4), accumulators (row
   g | g + 8, columns 2t, 2t + 1)); operands are stored as bf16-pair words in shared-memory rows
   padded to 36 words. For each 64-key block up to the diagonal: S = C B^T over 64-wide state slices,
   P = S * exp(a_i - a_j) below the diagonal and 0 above, split into bf16 hi + lo in registers, and
   Y += P x with x stored transposed (key pairs per word). Then T = C state_z^T over the same slices
   with the fp32 state (from the scratch tensor, head dim p in the key position) split into bf16 hi
   and lo, both through the MMA against the exact bf16 C. Epilogue: y = (Y + T exp(a_i)) + D x,
   rounded to bf16 once. The exponentials of this kernel are the fast-math ones NVRTC builds (a few
   ulp in fp32 on these small arguments), far below the bf16 output rounding.
Sizes: head_dim at most 64 and a multiple of 4, state a multiple of 8; x and the output go through
64-wide zero-padded scratch when head_dim < 64 and B, C through padded copies when state is not a
multiple of 64 (the small shapes); the graded shape needs none.
"""

import torch
import tvm
from tvm.script import tirx as T

BM = 64  # rows per output CTA and keys per block
KS = 64  # state slice of the output kernel's products (elements)
VW = 64  # head dims of the output kernel (padded)
PAD = 36  # 32-bit words per shared-memory row: 32 of data and 4 of padding
THREADS = 256  # state kernel
OUT_THREADS = 128  # output kernel: 4 warps
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
CHUNK = 256
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _exp(x):
    """e^x in fp64, rounded to fp32."""
    return T.float32(T.exp(T.float64(x)))


def _up(x, m):
    return (x + m - 1) // m * m


def _geometry(seqlen):
    length = min(CHUNK, seqlen)
    return length, seqlen // length


def _states_kernel(batch, seqlen, heads, head_dim, state):
    length, nc = _geometry(seqlen)
    bh = batch * heads
    n_blocks = (state + 63) // 64
    p_blocks = (head_dim + 63) // 64
    l_slices = (length + 63) // 64
    scan_its = (length + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_ssd_states(x_h: T.handle, a_h: T.handle, b_h: T.handle, init_h: T.handle, hs_h: T.handle,
                       fs_h: T.handle):
        x = T.match_buffer(x_h, (batch, seqlen, heads, head_dim), "bfloat16")
        a = T.match_buffer(a_h, (batch, heads, seqlen), "bfloat16")
        bm = T.match_buffer(b_h, (batch, seqlen, 1, state), "bfloat16")
        init = T.match_buffer(init_h, (batch, heads, head_dim, state), "bfloat16")
        hs = T.match_buffer(hs_h, (bh, nc, head_dim, state), "float32")
        fs = T.match_buffer(fs_h, (batch, heads, head_dim, state), "bfloat16")
        T.device_entry()
        nblk, pblk, z = T.cta_id([n_blocks, p_blocks, bh])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((length,), "float32", scope="shared")
        s_s = T.alloc_buffer((length,), "float32", scope="shared")
        xe_s = T.alloc_buffer((64 * 64,), "float32", scope="shared")
        b_s = T.alloc_buffer((64 * 64,), "float32", scope="shared")
        st = T.alloc_buffer((16,), "float32", scope="local")
        acc = T.alloc_buffer((16,), "float32", scope="local")
        xa = T.alloc_buffer((4,), "float32", scope="local")
        bb = T.alloc_buffer((4,), "float32", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        b: T.let = z // heads
        h: T.let = z % heads
        p0: T.let = pblk * 64
        n0: T.let = nblk * 64
        for i in T.unroll(4):
            for j in T.unroll(4):
                st[i * 4 + j] = T.if_then_else(
                    T.And(p0 + ty * 4 + i < head_dim, n0 + tc * 4 + j < state),
                    T.float32(init[b, h, T.min(p0 + ty * 4 + i, head_dim - 1), T.min(n0 + tc * 4 + j, state - 1)]),
                    _f32(0.0))
        for zc in range(nc):
            # the state entering chunk zc
            for i in T.unroll(4):
                if p0 + ty * 4 + i < head_dim and n0 + tc * 4 < state:
                    for j in T.vectorized(4):
                        hs[z, zc, p0 + ty * 4 + i, n0 + tc * 4 + j] = st[i * 4 + j]
            # cumulative sums of the chunk's log decays, each in order
            for it in T.unroll(scan_its):
                q0: T.let = it * THREADS + tx
                if q0 < length:
                    a_s[q0] = T.float32(a[b, h, zc * length + q0])
            T.cuda.cta_sync()
            for it in T.unroll(scan_its):
                q1: T.let = it * THREADS + tx
                if q1 < length:
                    run: T.f32 = _f32(0.0)
                    for q in range(q1 + 1):
                        run = run + a_s[q]
                    s_s[q1] = run
            T.cuda.cta_sync()
            for i in T.unroll(16):
                acc[i] = _f32(0.0)
            for ls in range(l_slices):
                for it in T.unroll(16):
                    u: T.let = it * THREADS + tx
                    row: T.let = ls * 64 + u // 64
                    col: T.let = u % 64
                    tok: T.let = zc * length + T.min(row, length - 1)
                    xe_s[u] = T.if_then_else(
                        T.And(row < length, p0 + col < head_dim),
                        T.float32(x[b, tok, h, T.min(p0 + col, head_dim - 1)])
                        * _exp(s_s[length - 1] - s_s[T.min(row, length - 1)]), _f32(0.0))
                    b_s[u] = T.if_then_else(T.And(row < length, n0 + col < state),
                                            T.float32(bm[b, tok, 0, T.min(n0 + col, state - 1)]), _f32(0.0))
                T.cuda.cta_sync()
                for r in T.unroll(64):
                    for i in T.vectorized(4):
                        xa[i] = xe_s[r * 64 + ty * 4 + i]
                    for j in T.vectorized(4):
                        bb[j] = b_s[r * 64 + tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            acc[i * 4 + j] = acc[i * 4 + j] + xa[i] * bb[j]
                T.cuda.cta_sync()
            for i in T.unroll(16):
                st[i] = st[i] * _exp(s_s[length - 1]) + acc[i]
            T.cuda.cta_sync()
        for i in T.unroll(4):
            if p0 + ty * 4 + i < head_dim and n0 + tc * 4 < state:
                for j in T.unroll(4):
                    fs[b, h, p0 + ty * 4 + i, n0 + tc * 4 + j] = T.bfloat16(st[i * 4 + j])

    return mkb_ssd_states


def _output_kernel(batch, seqlen, heads, head_dim, state):
    """x / out padded to 64 head dims and B / C to a multiple of 64 state columns by the host; the
    scratch states keep the problem's head_dim and state."""
    length, nc = _geometry(seqlen)
    bh = batch * heads
    n_tiles = (length + BM - 1) // BM
    l_pad = n_tiles * BM
    key_dim = _up(state, KS)
    k_slices = key_dim // KS

    @T.prim_func
    def mkb_ssd_output(x_h: T.handle, a_h: T.handle, b_h: T.handle, c_h: T.handle, d_h: T.handle, hs_h: T.handle,
                       o_h: T.handle):
        # attention roles: q = C (queries), k = B (keys), v = x (values), o = y
        v = T.match_buffer(x_h, (batch, seqlen, heads, VW), "bfloat16")
        a = T.match_buffer(a_h, (batch, heads, seqlen), "bfloat16")
        k = T.match_buffer(b_h, (batch, seqlen, 1, key_dim), "bfloat16")
        q = T.match_buffer(c_h, (batch, seqlen, 1, key_dim), "bfloat16")
        dv = T.match_buffer(d_h, (heads,), "bfloat16")
        hs = T.match_buffer(hs_h, (bh, nc, head_dim, state), "float32")
        o = T.match_buffer(o_h, (batch, seqlen, heads, VW), "bfloat16")
        T.device_entry()
        tile_rev, zc, z = T.cta_id([n_tiles, nc, bh])
        tx = T.thread_id([OUT_THREADS])
        q_s = T.alloc_buffer((BM, PAD), "uint32", scope="shared")
        k_s = T.alloc_buffer((BM, PAD), "uint32", scope="shared")
        vt_s = T.alloc_buffer((VW, PAD), "uint32", scope="shared")
        acc_s = T.alloc_buffer((32,), "float32", scope="local")
        acc_o = T.alloc_buffer((32,), "float32", scope="local")
        acc_t = T.alloc_buffer((32,), "float32", scope="local")
        fv = T.alloc_buffer((8,), "float32", scope="local")
        af = T.alloc_buffer((4,), "uint32", scope="local")
        bfr = T.alloc_buffer((16,), "uint32", scope="local")
        ph = T.alloc_buffer((16,), "uint32", scope="local")
        pl = T.alloc_buffer((16,), "uint32", scope="local")
        raw = T.alloc_buffer((8,), "bfloat16", scope="local")
        raw_w = T.decl_buffer((4,), "uint32", data=raw.data, scope="local")
        raw1 = T.alloc_buffer((8,), "bfloat16", scope="local")
        pair = T.alloc_buffer((2,), "bfloat16", scope="local")
        pair_w = T.decl_buffer((1,), "uint32", data=pair.data, scope="local")
        out = T.alloc_buffer((2,), "bfloat16", scope="local")
        tile: T.let = n_tiles - 1 - tile_rev
        r0: T.let = tile * BM
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = warp * 16
        a_s = T.alloc_buffer((l_pad,), "float32", scope="shared")
        s_s = T.alloc_buffer((l_pad,), "float32", scope="shared")
        b: T.let = z // heads
        h: T.let = z % heads
        t0: T.let = zc * length
        # per-step decays of the chunk, then each thread's cumulative sums in order
        for it0 in T.unroll((l_pad + OUT_THREADS - 1) // OUT_THREADS):
            p0: T.let = it0 * OUT_THREADS + tx
            if p0 < l_pad:
                a_s[p0] = T.if_then_else(p0 < length, T.float32(a[b, h, t0 + T.min(p0, length - 1)]), _f32(0.0))
        T.cuda.cta_sync()
        for it1 in T.unroll((l_pad + OUT_THREADS - 1) // OUT_THREADS):
            p1: T.let = it1 * OUT_THREADS + tx
            if p1 < l_pad:
                run: T.f32 = _f32(0.0)
                for qq in range(p1 + 1):
                    run = run + a_s[qq]
                s_s[p1] = run
        T.cuda.cta_sync()
        for i in T.unroll(32):
            acc_o[i] = _f32(0.0)
        for nb in range(tile + 1):
            # ---- S = Q K^T over key-dimension slices of KS
            for i in T.unroll(32):
                acc_s[i] = _f32(0.0)
            for ks in range(k_slices):
                for it in T.unroll(4):
                    u: T.let = it * OUT_THREADS + tx
                    for e in T.vectorized(8):
                        raw[e] = q[b, t0 + T.min(r0 + u // 8, length - 1), 0, ks * KS + (u % 8) * 8 + e]
                    for e in T.vectorized(4):
                        q_s[u // 8, (u % 8) * 4 + e] = raw_w[e]
                    for e in T.vectorized(8):
                        raw[e] = k[b, t0 + T.min(nb * BM + u // 8, length - 1), 0, ks * KS + (u % 8) * 8 + e]
                    for e in T.vectorized(4):
                        k_s[u // 8, (u % 8) * 4 + e] = raw_w[e]
                T.cuda.cta_sync()
                for kk in T.unroll(KS // 16):
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
                T.cuda.cta_sync()
            # ---- P = S * exp(s_i - s_j) below the diagonal; hi/lo bf16 A fragments
            for nt in T.unroll(8):
                for c in T.unroll(4):
                    row: T.let = r0 + wr + g + (c // 2) * 8
                    key: T.let = nb * BM + nt * 8 + t * 2 + c % 2
                    acc_s[nt * 4 + c] = T.if_then_else(
                        key <= row, acc_s[nt * 4 + c] * T.exp(s_s[row] - s_s[key]), _f32(0.0))
            for kb in T.unroll(4):
                for w in T.unroll(4):
                    # word w of the A fragment: tile 2kb + w // 2, accumulator pair (w % 2) * 2
                    for j in T.unroll(2):
                        pair[j] = T.bfloat16(acc_s[(kb * 2 + w // 2) * 4 + (w % 2) * 2 + j])
                    ph[kb * 4 + w] = pair_w[0]
                    for j in T.unroll(2):
                        pair[j] = T.bfloat16(acc_s[(kb * 2 + w // 2) * 4 + (w % 2) * 2 + j]
                                             - T.float32(T.bfloat16(acc_s[(kb * 2 + w // 2) * 4 + (w % 2) * 2 + j])))
                    pl[kb * 4 + w] = pair_w[0]
            # ---- V slice of the block, transposed: vt_s[column, key pair] = (v[2p, column], v[2p + 1, column])
            for it in T.unroll(VW * 32 // 8 // OUT_THREADS):
                u2: T.let = it * OUT_THREADS + tx
                kp: T.let = u2 % 32
                cc: T.let = u2 // 32
                for e in T.vectorized(8):
                    raw[e] = v[b, t0 + T.min(nb * BM + kp * 2, length - 1), h, cc * 8 + e]
                for e in T.vectorized(8):
                    raw1[e] = v[b, t0 + T.min(nb * BM + kp * 2 + 1, length - 1), h, cc * 8 + e]
                for e in T.unroll(8):
                    pair[0] = raw[e]
                    pair[1] = raw1[e]
                    vt_s[cc * 8 + e, kp] = pair_w[0]
            T.cuda.cta_sync()
            for kb in T.unroll(4):
                for nt in T.unroll(VW // 8):
                    bfr[0] = vt_s[nt * 8 + g, kb * 8 + t]
                    bfr[1] = vt_s[nt * 8 + g, kb * 8 + t + 4]
                    T.ptx[MMA](acc_o[nt * 4 + 0], acc_o[nt * 4 + 1], acc_o[nt * 4 + 2], acc_o[nt * 4 + 3],
                               ph[kb * 4 + 0], ph[kb * 4 + 1], ph[kb * 4 + 2], ph[kb * 4 + 3], bfr[0], bfr[1],
                               acc_o[nt * 4 + 0], acc_o[nt * 4 + 1], acc_o[nt * 4 + 2], acc_o[nt * 4 + 3])
                    T.ptx[MMA](acc_o[nt * 4 + 0], acc_o[nt * 4 + 1], acc_o[nt * 4 + 2], acc_o[nt * 4 + 3],
                               pl[kb * 4 + 0], pl[kb * 4 + 1], pl[kb * 4 + 2], pl[kb * 4 + 3], bfr[0], bfr[1],
                               acc_o[nt * 4 + 0], acc_o[nt * 4 + 1], acc_o[nt * 4 + 2], acc_o[nt * 4 + 3])
            T.cuda.cta_sync()
        # ---- T = C state^T (head dim p in the key position) with the fp32 state split into bf16 hi and lo
        for i in T.unroll(32):
            acc_t[i] = _f32(0.0)
        for ks2 in range(k_slices):
            for part in T.unroll(2):
                for it3 in T.unroll(4):
                    u3: T.let = it3 * OUT_THREADS + tx
                    n0: T.let = ks2 * KS + (u3 % 8) * 8
                    if part == 0:
                        for e in T.vectorized(8):
                            raw[e] = q[b, t0 + T.min(r0 + u3 // 8, length - 1), 0, n0 + e]
                        for e in T.vectorized(4):
                            q_s[u3 // 8, (u3 % 8) * 4 + e] = raw_w[e]
                    if n0 < state:
                        for e in T.vectorized(4):
                            fv[e] = hs[z, zc, T.min(u3 // 8, head_dim - 1), T.min(n0, state - 8) + e]
                        for e in T.vectorized(4):
                            fv[4 + e] = hs[z, zc, T.min(u3 // 8, head_dim - 1), T.min(n0, state - 8) + 4 + e]
                    else:
                        for e in T.unroll(8):
                            fv[e] = _f32(0.0)
                    for e in T.unroll(8):
                        if part == 0:
                            raw[e] = T.bfloat16(fv[e])
                        else:
                            raw[e] = T.bfloat16(fv[e] - T.float32(T.bfloat16(fv[e])))
                    for e in T.vectorized(4):
                        k_s[u3 // 8, (u3 % 8) * 4 + e] = raw_w[e]
                T.cuda.cta_sync()
                for kk in T.unroll(KS // 16):
                    af[0] = q_s[wr + g, kk * 8 + t]
                    af[1] = q_s[wr + g + 8, kk * 8 + t]
                    af[2] = q_s[wr + g, kk * 8 + t + 4]
                    af[3] = q_s[wr + g + 8, kk * 8 + t + 4]
                    for nt in T.unroll(8):
                        bfr[nt * 2 + 0] = k_s[nt * 8 + g, kk * 8 + t]
                        bfr[nt * 2 + 1] = k_s[nt * 8 + g, kk * 8 + t + 4]
                    for nt in T.unroll(8):
                        T.ptx[MMA](acc_t[nt * 4 + 0], acc_t[nt * 4 + 1], acc_t[nt * 4 + 2], acc_t[nt * 4 + 3],
                                   af[0], af[1], af[2], af[3], bfr[nt * 2 + 0], bfr[nt * 2 + 1],
                                   acc_t[nt * 4 + 0], acc_t[nt * 4 + 1], acc_t[nt * 4 + 2], acc_t[nt * 4 + 3])
                T.cuda.cta_sync()
        # ---- epilogue: y = (Y_diag + T exp(a_i)) + D x as bf16 pairs (row g | g + 8, columns 2t, 2t + 1)
        for hr in T.unroll(2):
            orow: T.let = r0 + wr + g + hr * 8
            if orow < length:
                for nt in T.unroll(VW // 8):
                    for j in T.unroll(2):
                        out[j] = T.bfloat16((acc_o[nt * 4 + hr * 2 + j] + acc_t[nt * 4 + hr * 2 + j] * T.exp(s_s[orow]))
                                            + T.float32(dv[h]) * T.float32(v[b, t0 + orow, h, nt * 8 + t * 2 + j]))
                    for j in T.vectorized(2):
                        o[b, t0 + orow, h, nt * 8 + t * 2 + j] = out[j]

    return mkb_ssd_output


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        func = _states_kernel(*shape) if kind == "states" else _output_kernel(*shape)
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


def _padded(t, size):
    """t with its last dimension zero-padded to size (a scratch copy only when needed)."""
    if t.shape[-1] == size:
        return t.contiguous()
    out = torch.zeros(*t.shape[:-1], size, dtype=t.dtype, device=t.device)
    out[..., :t.shape[-1]] = t
    return out


def solve(hidden_states, A, B, C, D, initial_states):
    batch, seqlen, heads, head_dim = hidden_states.shape
    state = B.shape[3]
    if head_dim > VW or head_dim % 4 or state % 8:
        raise ValueError("this kernel expects head_dim <= 64 and a multiple of 4, state a multiple of 8")
    length, nc = _geometry(seqlen)
    dev = hidden_states.device
    output = torch.empty(batch, seqlen, heads * head_dim, dtype=torch.bfloat16, device=dev)
    final = torch.empty(batch, heads, head_dim, state, dtype=torch.bfloat16, device=dev)
    states = torch.empty(batch * heads, nc, head_dim, state, dtype=torch.float32, device=dev)
    shape = (batch, seqlen, heads, head_dim, state)
    x, a, b = hidden_states.contiguous(), A.contiguous(), B.contiguous()
    _kernel_fn("states", shape)(x, a, b, initial_states.contiguous(), states, final)
    n_pad = _up(state, KS)
    xo = _padded(x, VW)
    yo = output.view(batch, seqlen, heads, head_dim) if head_dim == VW else torch.empty_like(xo)
    _kernel_fn("output", shape)(xo, a, _padded(b, n_pad), _padded(C, n_pad), D.contiguous(), states, yo)
    if head_dim != VW:  # the small shapes: the padded scratch back into the output
        output.view(batch, seqlen, heads, head_dim).copy_(yo[..., :head_dim])
    return output, final


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


def kernel_sources(arch="sm_90a", batch=8, seqlen=1024, heads=16, head_dim=64, state=256):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    sources = {}
    for kind in ("states", "output"):
        source = _build(kind, (batch, seqlen, heads, head_dim, state), arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
