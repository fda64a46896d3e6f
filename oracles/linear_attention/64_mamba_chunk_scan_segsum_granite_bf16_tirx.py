"""TIRx oracle for problem 64: the Mamba-2 SSD chunked scan (chunk 256) with a carried state, on the
CUDA cores.

With a the within-chunk cumulative sum of A (per head): Y_diag[i] = sum_{j <= i} (C_i . B_j)
exp(a_i - a_j) x_j; chunk state = sum_j (x_j exp(a_end - a_j)) B_j^T; the state entering chunk z
is carried as state * exp(a_end) + chunk state from initial_states; Y_off[i] = (C_i . state_z)
exp(a_i); y = Y_diag + Y_off + D x.

Two TIRx kernels, shape-specialised; all products are shared-memory tiled SIMT loops with fp32
accumulation (TIRx 0.27 has no WGMMA path for sm_90, and the carried state and the decay-weighted
scores are fp32 values):
1. ``mkb_ssd_states``: one CTA (256 threads) per (64 state columns, 64 head dims, batch x head)
   keeps its 64 x 64 block of the state in registers (thread: 4 head dims x 4 state columns), starting
   from initial_states. Per chunk it writes the state entering the chunk (fp32) to a scratch tensor
   [B*H, chunks, P, N], forms the cumulative sums a of the chunk in shared memory (each thread adds
   the steps up to its own in order), then accumulates the chunk state over 64-step slices of
   x exp(a_end - a) (formed in fp32 as the reference) and B, and finally carries
   state = state * exp(a_end) + chunk state. The last state is written as final_state (bf16).
2. ``mkb_ssd_output``: one CTA (256 threads) per (64 rows of a chunk, chunk, batch x head); thread
   (ty, tc) = (tid / 16, tid % 16) owns rows ty*4 .. +3 and keys / head dims tc*4 .. +3. For each
   64-key block up to the diagonal: S = C B^T over 32-wide state slices, P = S * exp(a_i - a_j) below
   the diagonal and 0 above (the reference's order), Y += P x over 32-key slices of x. Then
   T = C state_z^T over 32-wide state slices (state from the scratch tensor), Y += T * exp(a_i), and
   Y += D x; the sum is rounded to bf16 once into output[b, s, h * P + p].
Exponentials are evaluated in fp64 and rounded to fp32 (NVRTC's fast math leaves fp64 exact).
Sizes: head_dim at most 64 and a multiple of 4, state a multiple of 8.
"""

import torch
import tvm
from tvm.script import tirx as T

BM = 64  # rows per output CTA and keys per block
DC = 32  # state slice of the S and T loops
THREADS = 256
POOL = 4096  # fp32 words of the shared staging pool
CHUNK = 256
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _exp(x):
    """e^x in fp64, rounded to fp32."""
    return T.float32(T.exp(T.float64(x)))


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
    length, nc = _geometry(seqlen)
    bh = batch * heads
    n_tiles = (length + BM - 1) // BM
    l_pad = n_tiles * BM
    n_slices = (state + DC - 1) // DC
    vk = POOL // 64  # keys per x slice (64 head dims, padded)
    scan_its = (l_pad + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_ssd_output(x_h: T.handle, a_h: T.handle, b_h: T.handle, c_h: T.handle, d_h: T.handle, hs_h: T.handle,
                       o_h: T.handle):
        x = T.match_buffer(x_h, (batch, seqlen, heads, head_dim), "bfloat16")
        a = T.match_buffer(a_h, (batch, heads, seqlen), "bfloat16")
        bm = T.match_buffer(b_h, (batch, seqlen, 1, state), "bfloat16")
        cm = T.match_buffer(c_h, (batch, seqlen, 1, state), "bfloat16")
        dv = T.match_buffer(d_h, (heads,), "bfloat16")
        hs = T.match_buffer(hs_h, (bh, nc, head_dim, state), "float32")
        out = T.match_buffer(o_h, (batch, seqlen, heads * head_dim), "bfloat16")
        T.device_entry()
        tile, zc, z = T.cta_id([n_tiles, nc, bh])
        tx = T.thread_id([THREADS])
        pool = T.alloc_buffer((POOL,), "float32", scope="shared")
        p_s = T.alloc_buffer((BM * BM,), "float32", scope="shared")
        a_s = T.alloc_buffer((l_pad,), "float32", scope="shared")
        s_s = T.alloc_buffer((l_pad,), "float32", scope="shared")
        acc_s = T.alloc_buffer((16,), "float32", scope="local")
        acc_o = T.alloc_buffer((16,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((4,), "float32", scope="local")
        s_row = T.alloc_buffer((4,), "float32", scope="local")
        raw = T.alloc_buffer((8,), "bfloat16", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx % 64
        ld8: T.let = (tx // 64) * 8
        b: T.let = z // heads
        h: T.let = z % heads
        r0: T.let = tile * BM
        t0: T.let = zc * length
        # per-step decays, then cumulative sums in order
        for it in T.unroll(scan_its):
            p: T.let = it * THREADS + tx
            if p < l_pad:
                a_s[p] = T.if_then_else(p < length, T.float32(a[b, h, t0 + T.min(p, length - 1)]), _f32(0.0))
        T.cuda.cta_sync()
        for it in T.unroll(scan_its):
            p2: T.let = it * THREADS + tx
            if p2 < l_pad:
                run: T.f32 = _f32(0.0)
                for q in range(p2 + 1):
                    run = run + a_s[q]
                s_s[p2] = run
        T.cuda.cta_sync()
        for i in T.unroll(4):
            s_row[i] = s_s[r0 + ty * 4 + i]
        for i in T.unroll(16):
            acc_o[i] = _f32(0.0)
        crow: T.let = t0 + T.min(r0 + lrow, length - 1)
        for nb in range(tile + 1):
            # ---- S = C B^T over state slices of DC
            for i in T.unroll(16):
                acc_s[i] = _f32(0.0)
            brow: T.let = t0 + T.min(nb * BM + lrow, length - 1)
            for dc in T.unroll(n_slices):
                if dc * DC + ld8 < state:
                    for e in T.vectorized(8):
                        raw[e] = cm[b, crow, 0, T.min(dc * DC + ld8, state - 8) + e]
                    for e in T.unroll(8):
                        pool[(ld8 + e) * BM + lrow] = T.float32(raw[e])
                    for e in T.vectorized(8):
                        raw[e] = bm[b, brow, 0, T.min(dc * DC + ld8, state - 8) + e]
                    for e in T.unroll(8):
                        pool[DC * BM + (ld8 + e) * BM + lrow] = T.float32(raw[e])
                else:
                    for e in T.unroll(8):
                        pool[(ld8 + e) * BM + lrow] = _f32(0.0)
                        pool[DC * BM + (ld8 + e) * BM + lrow] = _f32(0.0)
                T.cuda.cta_sync()
                for d in T.unroll(DC):
                    for i in T.vectorized(4):
                        af[i] = pool[d * BM + ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = pool[DC * BM + d * BM + tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            acc_s[i * 4 + j] = acc_s[i * 4 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            # ---- P = S * exp(a_i - a_j) below the diagonal, 0 above
            for i in T.unroll(4):
                for j in T.unroll(4):
                    key: T.let = nb * BM + tc * 4 + j
                    acc_s[i * 4 + j] = T.if_then_else(key <= r0 + ty * 4 + i,
                                                      acc_s[i * 4 + j] * _exp(s_row[i] - s_s[key]), _f32(0.0))
                for j in T.vectorized(4):
                    p_s[(ty * 4 + i) * BM + tc * 4 + j] = acc_s[i * 4 + j]
            # ---- Y += P x over key slices of vk (x head dims padded to 64 with zeros)
            for it2 in T.unroll(vk * 64 // THREADS):
                u: T.let = it2 * THREADS + tx
                vkey: T.let = u // 64
                vd: T.let = u % 64
                pool[u] = T.if_then_else(
                    vd < head_dim,
                    T.float32(x[b, t0 + T.min(nb * BM + vkey, length - 1), h, T.min(vd, head_dim - 1)]), _f32(0.0))
            T.cuda.cta_sync()
            for kj in T.unroll(vk):
                for i in T.unroll(4):
                    af[i] = p_s[(ty * 4 + i) * BM + kj]
                for j in T.vectorized(4):
                    bf[j] = pool[kj * 64 + tc * 4 + j]
                for i in T.unroll(4):
                    for j in T.unroll(4):
                        acc_o[i * 4 + j] = acc_o[i * 4 + j] + af[i] * bf[j]
            T.cuda.cta_sync()
        # ---- T = C state^T over state slices (head dim p in the key position), Y += T * exp(a_i)
        for i in T.unroll(16):
            acc_s[i] = _f32(0.0)
        prow: T.let = T.min(lrow, head_dim - 1)
        for dc in T.unroll(n_slices):
            if dc * DC + ld8 < state:
                for e in T.vectorized(8):
                    raw[e] = cm[b, crow, 0, T.min(dc * DC + ld8, state - 8) + e]
                for e in T.unroll(8):
                    pool[(ld8 + e) * BM + lrow] = T.float32(raw[e])
                for e in T.unroll(8):
                    pool[DC * BM + (ld8 + e) * BM + lrow] = T.if_then_else(
                        lrow < head_dim, hs[z, zc, prow, T.min(dc * DC + ld8, state - 8) + e], _f32(0.0))
            else:
                for e in T.unroll(8):
                    pool[(ld8 + e) * BM + lrow] = _f32(0.0)
                    pool[DC * BM + (ld8 + e) * BM + lrow] = _f32(0.0)
            T.cuda.cta_sync()
            for d in T.unroll(DC):
                for i in T.vectorized(4):
                    af[i] = pool[d * BM + ty * 4 + i]
                for j in T.vectorized(4):
                    bf[j] = pool[DC * BM + d * BM + tc * 4 + j]
                for i in T.unroll(4):
                    for j in T.unroll(4):
                        acc_s[i * 4 + j] = acc_s[i * 4 + j] + af[i] * bf[j]
            T.cuda.cta_sync()
        # ---- epilogue: y = (Y_diag + T exp(a_i)) + D x, rounded to bf16 once
        for i in T.unroll(4):
            r: T.let = r0 + ty * 4 + i
            if r < length and tc * 4 < head_dim:
                for j in T.unroll(4):
                    acc_o[i * 4 + j] = (acc_o[i * 4 + j] + acc_s[i * 4 + j] * _exp(s_row[i])) + (
                        T.float32(dv[h]) * T.float32(x[b, t0 + r, h, T.min(tc * 4 + j, head_dim - 1)]))
                for j in T.vectorized(4):
                    out[b, t0 + r, h * head_dim + T.min(tc * 4, head_dim - 4) + j] = T.bfloat16(acc_o[i * 4 + j])

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


def solve(hidden_states, A, B, C, D, initial_states):
    batch, seqlen, heads, head_dim = hidden_states.shape
    state = B.shape[3]
    if head_dim > 64 or head_dim % 4 or state % 8:
        raise ValueError("this kernel expects head_dim <= 64 and a multiple of 4, state a multiple of 8")
    length, nc = _geometry(seqlen)
    output = torch.empty(batch, seqlen, heads * head_dim, dtype=torch.bfloat16, device=hidden_states.device)
    final = torch.empty(batch, heads, head_dim, state, dtype=torch.bfloat16, device=hidden_states.device)
    states = torch.empty(batch * heads, nc, head_dim, state, dtype=torch.float32, device=hidden_states.device)
    shape = (batch, seqlen, heads, head_dim, state)
    x, a, b, c = hidden_states.contiguous(), A.contiguous(), B.contiguous(), C.contiguous()
    _kernel_fn("states", shape)(x, a, b, initial_states.contiguous(), states, final)
    _kernel_fn("output", shape)(x, a, b, c, D.contiguous(), states, output)
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
