"""TIRx oracle for problem 69: gated linear attention (GLA) with per-key-channel decay, in the
reference's exact chunked form (chunks of 64 steps), on the CUDA cores.

With G the within-chunk cumulative sum of gk, q_up = (q d_k^-0.5) e^G, k_down = k e^-G and h_n the
state entering chunk n: o = tril(q_up k_down^T) v + q_up h_n, and
h_{n+1} = e^G_end h_n + (k_down e^G_end)^T v.

Two TIRx kernels, shape-specialised; all products are shared-memory tiled SIMT loops with fp32
accumulation (TIRx 0.27 has no WGMMA path for sm_90, and the operands q_up, k_down, P and h are fp32
values that bf16 tensor-core operands would round):
1. ``mkb_gla_states``: one CTA (256 threads) per (32 key channels, 64 value columns, batch x head)
   walks the chunks in order, keeping its 32 x 64 block of h in registers (thread: 2 channels x 4
   columns). Per chunk it first writes h_n (fp32) to a scratch tensor [B*H, chunks, d_k, d_v]; then
   it loads the chunk's gk, k and v (steps past the sequence as zeros, as the reference pads), forms
   G per channel by adding the steps in order (one thread per channel), k_end = (k e^-G) e^G_end,
   and updates h = e^G_end h + k_end^T v, the product summed over the 64 steps before it is added.
2. ``mkb_gla_output``: one CTA (256 threads) per (128 value columns, chunk, batch x head); thread
   (ty, tx) = (tid / 16, tid % 16) owns rows ty*4 .. +3, keys tx*4 .. +3 of the 64 x 64 score block
   and value columns gg*64 + tx*4 .. +3. The key dimension advances in slices of 32: G of the slice
   (in-order sums per channel), q_up and k_down are formed in fp32 and stored channel-major; the
   slice of h_n is read from the scratch tensor; both the score block and q_up h_n accumulate. Then
   the scores above the diagonal are zeroed and the block is multiplied by v (staged in fp32 in two
   32-step slices) into the same accumulators. Output rounded to bf16 once.
Exponentials are evaluated in fp64 and rounded to fp32 (NVRTC's fast math leaves fp64 exact), each
product in the reference's order. Steps past the sequence are clamped to its last step in the output
kernel (they only reach rows that are not written). Value sizes must be multiples of 4.
"""

import torch
import tvm
from tvm.script import tirx as T

CHUNK = 64
THREADS = 256
DB = 32  # key channels per state CTA and per output slice
CB = 64  # value columns per state CTA
W = 128  # value columns per output CTA
QP = 68  # padded row (64 steps + 4) of the channel-major q_up / k_down slices
GP = 33  # padded row (32 channels + 1) of the G slice
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _exp(x):
    """e^x in fp64, rounded to fp32."""
    return T.float32(T.exp(T.float64(x)))


def _states_kernel(batch, seqlen, heads, key_dim, value_dim):
    bh = batch * heads
    n_chunks = (seqlen + CHUNK - 1) // CHUNK
    d_blocks = (key_dim + DB - 1) // DB
    c_blocks = (value_dim + CB - 1) // CB

    @T.prim_func
    def mkb_gla_states(k_h: T.handle, v_h: T.handle, g_h: T.handle, hs_h: T.handle):
        k = T.match_buffer(k_h, (batch, seqlen, heads, key_dim), "bfloat16")
        v = T.match_buffer(v_h, (batch, seqlen, heads, value_dim), "bfloat16")
        gk = T.match_buffer(g_h, (batch, seqlen, heads, key_dim), "bfloat16")
        hs = T.match_buffer(hs_h, (bh, n_chunks, key_dim, value_dim), "float32")
        T.device_entry()
        db, cb, z = T.cta_id([d_blocks, c_blocks, bh])
        tx = T.thread_id([THREADS])
        g_s = T.alloc_buffer((CHUNK * DB,), "float32", scope="shared")
        k_s = T.alloc_buffer((CHUNK * DB,), "float32", scope="shared")
        v_s = T.alloc_buffer((CHUNK * CB,), "float32", scope="shared")
        st = T.alloc_buffer((8,), "float32", scope="local")
        acc = T.alloc_buffer((8,), "float32", scope="local")
        kv = T.alloc_buffer((2,), "float32", scope="local")
        vv = T.alloc_buffer((4,), "float32", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        b: T.let = z // heads
        h: T.let = z % heads
        d0: T.let = db * DB
        c0: T.let = cb * CB
        for i in T.unroll(8):
            st[i] = _f32(0.0)
        for n in range(n_chunks):
            # h entering chunk n
            for a in T.unroll(2):
                if d0 + ty * 2 + a < key_dim and c0 + tc * 4 < value_dim:
                    for e in T.vectorized(4):
                        hs[z, n, d0 + ty * 2 + a, c0 + tc * 4 + e] = st[a * 4 + e]
            if n + 1 < n_chunks:
                for it in T.unroll(CHUNK * DB // THREADS):
                    u: T.let = it * THREADS + tx
                    t: T.let = n * CHUNK + u // DB
                    ok: T.let = T.And(t < seqlen, d0 + u % DB < key_dim)
                    tt: T.let = T.min(t, seqlen - 1)
                    dd: T.let = T.min(d0 + u % DB, key_dim - 1)
                    g_s[u] = T.if_then_else(ok, T.float32(gk[b, tt, h, dd]), _f32(0.0))
                    k_s[u] = T.if_then_else(ok, T.float32(k[b, tt, h, dd]), _f32(0.0))
                for it in T.unroll(CHUNK * CB // THREADS):
                    u2: T.let = it * THREADS + tx
                    t2: T.let = n * CHUNK + u2 // CB
                    v_s[u2] = T.if_then_else(
                        T.And(t2 < seqlen, c0 + u2 % CB < value_dim),
                        T.float32(v[b, T.min(t2, seqlen - 1), h, T.min(c0 + u2 % CB, value_dim - 1)]), _f32(0.0))
                T.cuda.cta_sync()
                if tx < DB:  # G = in-order cumulative sum over the chunk's steps, one thread per channel
                    run: T.f32 = _f32(0.0)
                    for r in range(CHUNK):
                        run = run + g_s[r * DB + tx]
                        g_s[r * DB + tx] = run
                T.cuda.cta_sync()
                for it in T.unroll(CHUNK * DB // THREADS):
                    u3: T.let = it * THREADS + tx
                    k_s[u3] = (k_s[u3] * _exp(-g_s[u3])) * _exp(g_s[(CHUNK - 1) * DB + u3 % DB])
                T.cuda.cta_sync()
                for i in T.unroll(8):
                    acc[i] = _f32(0.0)
                for r in range(CHUNK):
                    for a in T.unroll(2):
                        kv[a] = k_s[r * DB + ty * 2 + a]
                    for e in T.vectorized(4):
                        vv[e] = v_s[r * CB + tc * 4 + e]
                    for a in T.unroll(2):
                        for e in T.unroll(4):
                            acc[a * 4 + e] = acc[a * 4 + e] + kv[a] * vv[e]
                for a in T.unroll(2):
                    for e in T.unroll(4):
                        st[a * 4 + e] = _exp(g_s[(CHUNK - 1) * DB + ty * 2 + a]) * st[a * 4 + e] + acc[a * 4 + e]
                T.cuda.cta_sync()

    return mkb_gla_states


def _output_kernel(batch, seqlen, heads, key_dim, value_dim):
    bh = batch * heads
    n_chunks = (seqlen + CHUNK - 1) // CHUNK
    c_blocks = (value_dim + W - 1) // W
    n_slices = (key_dim + DB - 1) // DB
    scale = key_dim ** -0.5
    q_off, k_off, h_off = 0, DB * QP, 2 * DB * QP
    pool_size = 2 * DB * QP + DB * W

    @T.prim_func
    def mkb_gla_output(q_h: T.handle, k_h: T.handle, v_h: T.handle, g_h: T.handle, hs_h: T.handle, o_h: T.handle):
        q = T.match_buffer(q_h, (batch, seqlen, heads, key_dim), "bfloat16")
        k = T.match_buffer(k_h, (batch, seqlen, heads, key_dim), "bfloat16")
        v = T.match_buffer(v_h, (batch, seqlen, heads, value_dim), "bfloat16")
        gk = T.match_buffer(g_h, (batch, seqlen, heads, key_dim), "bfloat16")
        hs = T.match_buffer(hs_h, (bh, n_chunks, key_dim, value_dim), "float32")
        o = T.match_buffer(o_h, (batch, seqlen, heads, value_dim), "bfloat16")
        T.device_entry()
        cb, n, z = T.cta_id([c_blocks, n_chunks, bh])
        tx = T.thread_id([THREADS])
        pool = T.alloc_buffer((pool_size,), "float32", scope="shared")
        g_s = T.alloc_buffer((CHUNK * GP,), "float32", scope="shared")
        acc_a = T.alloc_buffer((16,), "float32", scope="local")
        acc_o = T.alloc_buffer((32,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((4,), "float32", scope="local")
        hb = T.alloc_buffer((4,), "float32", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        b: T.let = z // heads
        h: T.let = z % heads
        c0: T.let = cb * W
        for i in T.unroll(16):
            acc_a[i] = _f32(0.0)
        for i in T.unroll(32):
            acc_o[i] = _f32(0.0)
        for sl in range(n_slices):
            d0: T.let = sl * DB
            for it in T.unroll(CHUNK * DB // THREADS):
                u: T.let = it * THREADS + tx
                t: T.let = T.min(n * CHUNK + u // DB, seqlen - 1)
                g_s[(u // DB) * GP + u % DB] = T.if_then_else(
                    d0 + u % DB < key_dim, T.float32(gk[b, t, h, T.min(d0 + u % DB, key_dim - 1)]), _f32(0.0))
            T.cuda.cta_sync()
            if tx < DB:  # G = in-order cumulative sum over the chunk's steps, one thread per channel
                run: T.f32 = _f32(0.0)
                for r in range(CHUNK):
                    run = run + g_s[r * GP + tx]
                    g_s[r * GP + tx] = run
            T.cuda.cta_sync()
            for it in T.unroll(CHUNK * DB // THREADS):
                u2: T.let = it * THREADS + tx
                r2: T.let = u2 // DB
                ch: T.let = u2 % DB
                t2: T.let = T.min(n * CHUNK + r2, seqlen - 1)
                dd: T.let = T.min(d0 + ch, key_dim - 1)
                ok: T.let = d0 + ch < key_dim
                pool[q_off + ch * QP + r2] = T.if_then_else(
                    ok, (T.float32(q[b, t2, h, dd]) * _f32(scale)) * _exp(g_s[r2 * GP + ch]), _f32(0.0))
                pool[k_off + ch * QP + r2] = T.if_then_else(
                    ok, T.float32(k[b, t2, h, dd]) * _exp(-g_s[r2 * GP + ch]), _f32(0.0))
            for it in T.unroll(DB * W // 4 // THREADS):
                u3: T.let = it * THREADS + tx
                dr: T.let = u3 // (W // 4)
                c4: T.let = (u3 % (W // 4)) * 4
                if d0 + dr < key_dim and c0 + c4 < value_dim:
                    for e in T.vectorized(4):
                        pool[h_off + dr * W + c4 + e] = hs[z, n, T.min(d0 + dr, key_dim - 1),
                                                           T.min(c0 + c4, value_dim - 4) + e]
                else:
                    for e in T.vectorized(4):
                        pool[h_off + dr * W + c4 + e] = _f32(0.0)
            T.cuda.cta_sync()
            for d in T.unroll(DB):
                for i in T.vectorized(4):
                    af[i] = pool[q_off + d * QP + ty * 4 + i]
                for j in T.vectorized(4):
                    bf[j] = pool[k_off + d * QP + tc * 4 + j]
                for i in T.unroll(4):
                    for j in T.unroll(4):
                        acc_a[i * 4 + j] = acc_a[i * 4 + j] + af[i] * bf[j]
                for gg in T.unroll(2):
                    for j in T.vectorized(4):
                        hb[j] = pool[h_off + d * W + gg * 64 + tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            acc_o[i * 8 + gg * 4 + j] = acc_o[i * 8 + gg * 4 + j] + af[i] * hb[j]
            T.cuda.cta_sync()
        # scores below the diagonal (the reference's tril) to shared memory [row, key]
        for i in T.unroll(4):
            for j in T.unroll(4):
                acc_a[i * 4 + j] = T.if_then_else(tc * 4 + j <= ty * 4 + i, acc_a[i * 4 + j], _f32(0.0))
            for j in T.vectorized(4):
                pool[(ty * 4 + i) * CHUNK + tc * 4 + j] = acc_a[i * 4 + j]
        for vs in T.unroll(2):
            for it in T.unroll(32 * W // THREADS):
                u4: T.let = it * THREADS + tx
                key: T.let = u4 // W
                col: T.let = u4 % W
                pool[CHUNK * CHUNK + key * W + col] = T.if_then_else(
                    c0 + col < value_dim,
                    T.float32(v[b, T.min(n * CHUNK + vs * 32 + key, seqlen - 1), h, T.min(c0 + col, value_dim - 1)]),
                    _f32(0.0))
            T.cuda.cta_sync()
            for kj in T.unroll(32):
                for i in T.unroll(4):
                    af[i] = pool[(ty * 4 + i) * CHUNK + vs * 32 + kj]
                for gg in T.unroll(2):
                    for j in T.vectorized(4):
                        hb[j] = pool[CHUNK * CHUNK + kj * W + gg * 64 + tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            acc_o[i * 8 + gg * 4 + j] = acc_o[i * 8 + gg * 4 + j] + af[i] * hb[j]
            T.cuda.cta_sync()
        for i in T.unroll(4):
            row: T.let = n * CHUNK + ty * 4 + i
            if row < seqlen:
                for gg in T.unroll(2):
                    if c0 + gg * 64 + tc * 4 < value_dim:
                        for j in T.vectorized(4):
                            o[b, row, h, T.min(c0 + gg * 64 + tc * 4, value_dim - 4) + j] = T.bfloat16(
                                acc_o[i * 8 + gg * 4 + j])

    return mkb_gla_output


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


def solve(q, k, v, gk):
    batch, seqlen, heads, key_dim = q.shape
    value_dim = v.shape[3]
    if value_dim % 4:
        raise ValueError("this kernel expects value_dim % 4 == 0")
    o = torch.empty(batch, seqlen, heads, value_dim, dtype=torch.bfloat16, device=q.device)
    if o.numel() == 0:
        return o
    n_chunks = (seqlen + CHUNK - 1) // CHUNK
    states = torch.empty(batch * heads, n_chunks, key_dim, value_dim, dtype=torch.float32, device=q.device)
    shape = (batch, seqlen, heads, key_dim, value_dim)
    q, k, v, gk = q.contiguous(), k.contiguous(), v.contiguous(), gk.contiguous()
    _kernel_fn("states", shape)(k, v, gk, states)
    _kernel_fn("output", shape)(q, k, v, gk, states, o)
    return o


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


def kernel_sources(arch="sm_90a", batch=8, seqlen=1024, heads=4, key_dim=256, value_dim=512):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    sources = {}
    for kind in ("states", "output"):
        source = _build(kind, (batch, seqlen, heads, key_dim, value_dim), arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
