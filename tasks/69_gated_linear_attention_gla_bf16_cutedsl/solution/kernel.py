"""CuTe DSL oracle for problem 69: gated linear attention (GLA) with per-key-channel decay, in the
reference's exact chunked form (chunks of 64 steps), on the CUDA cores.

With G the within-chunk cumulative sum of gk, q_up = (q d_k^-0.5) e^G, k_down = k e^-G and h_n the
state entering chunk n: o = tril(q_up k_down^T) v + q_up h_n, and
h_{n+1} = e^G_end h_n + (k_down e^G_end)^T v.

Two DSL kernels; all products are shared-memory tiled SIMT loops with fp32 accumulation: the
operands q_up, k_down, the masked scores and h are fp32 values that bf16 tensor-core operands would
round (a hi/lo split of both operands would triple the tensor-core work and the register traffic).
1. ``gla_states_kernel``: one CTA (256 threads) per (32 key channels, 64 value columns, batch x
   head) walks the chunks in order, keeping its 32 x 64 block of h in registers (thread: 2 channels
   x 4 columns). Per chunk it first writes h_n (fp32) to a scratch tensor [B*H, chunks, d_k, d_v];
   then it loads the chunk's gk, k and v (steps past the sequence as zeros, as the reference pads),
   forms G per channel by adding the steps in order (one thread per channel), k_end = (k e^-G) e^G_end,
   and updates h = e^G_end h + k_end^T v, the product summed over the 64 steps before it is added.
2. ``gla_output_kernel``: one CTA (256 threads) per (128 value columns, chunk, batch x head); thread
   (ty, tx) = (tid / 16, tid % 16) owns rows ty*4 .. +3, keys tx*4 .. +3 of the 64 x 64 score block
   and value columns gg*64 + tx*4 .. +3. The key dimension advances in slices of 32: G of the slice
   (in-order sums per channel), q_up and k_down are formed in fp32 and stored channel-major; the
   slice of h_n is read from the scratch tensor; both the score block and q_up h_n accumulate. Then
   the scores above the diagonal are zeroed and the block is multiplied by v (staged in fp32 in two
   32-step slices) into the same accumulators. Output rounded to bf16 once.
Exponentials are the accurate expf, each product in the reference's order. Steps past the sequence
are clamped to its last step in the output kernel (they only reach rows that are not written).
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=8, seqlen=1024, heads=4, key_dim=256, value_dim=512)
CHUNK = 64
THREADS = 256
DB = 32  # key channels per state CTA and per output slice
CB = 64  # value columns per state CTA
W = 128  # value columns per output CTA
QP = 68  # padded row (64 steps + 4) of the channel-major q_up / k_down slices
GP = 33  # padded row (32 channels + 1) of the G slice
_STATES_COMPILED = {}
_OUTPUT_COMPILED = {}


@cute.kernel
def gla_states_kernel(k: cute.Tensor, v: cute.Tensor, gk: cute.Tensor, hs: cute.Tensor, heads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    db, cb, z = cute.arch.block_idx()
    seqlen = cute.size(k, mode=[1])
    key_dim = cute.size(k, mode=[3])
    value_dim = cute.size(v, mode=[3])
    n_chunks = cute.size(hs, mode=[1])
    ty = tidx // 16
    tc = tidx % 16
    b = z // heads
    h = z % heads
    d0 = db * DB
    c0 = cb * CB

    smem = cutlass.memory.SmemAllocator()
    g_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((CHUNK * DB,)), 16)
    k_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((CHUNK * DB,)), 16)
    v_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((CHUNK * CB,)), 16)
    st = cute.make_rmem_tensor((8,), cutlass.Float32)
    st.fill(0.0)
    acc = cute.make_rmem_tensor((8,), cutlass.Float32)

    for n in range(n_chunks):
        # h entering chunk n
        for a in cutlass.range_constexpr(2):
            d = d0 + ty * 2 + a
            if (d < key_dim) & (c0 + tc * 4 < value_dim):
                for e in cutlass.range_constexpr(4):
                    hs[z, n, d, c0 + tc * 4 + e] = st[a * 4 + e]
        if n + 1 < n_chunks:
            for it in cutlass.range_constexpr(CHUNK * DB // THREADS):
                u = it * THREADS + tidx
                t = n * CHUNK + u // DB
                dd = d0 + u % DB
                ok = (t < seqlen) & (dd < key_dim)
                tt = cutlass.min(t, seqlen - 1)
                dc = cutlass.min(dd, key_dim - 1)
                zero = cutlass.Float32(0.0)
                g_s[u] = cutlass.Float32(cutlass.select_(ok, gk[b, tt, h, dc].to(cutlass.Float32), zero))
                k_s[u] = cutlass.Float32(cutlass.select_(ok, k[b, tt, h, dc].to(cutlass.Float32), zero))
            for it in cutlass.range_constexpr(CHUNK * CB // THREADS):
                u2 = it * THREADS + tidx
                t2 = n * CHUNK + u2 // CB
                cc = c0 + u2 % CB
                ok2 = (t2 < seqlen) & (cc < value_dim)
                val = v[b, cutlass.min(t2, seqlen - 1), h, cutlass.min(cc, value_dim - 1)].to(cutlass.Float32)
                v_s[u2] = cutlass.Float32(cutlass.select_(ok2, val, cutlass.Float32(0.0)))
            cute.arch.sync_threads()
            if tidx < DB:  # G = in-order cumulative sum over the chunk's steps, one thread per channel
                run = cutlass.Float32(0.0)
                for r in cutlass.range_constexpr(CHUNK):
                    run = run + g_s[r * DB + tidx]
                    g_s[r * DB + tidx] = run
            cute.arch.sync_threads()
            for it in cutlass.range_constexpr(CHUNK * DB // THREADS):
                u3 = it * THREADS + tidx
                k_s[u3] = (k_s[u3] * cute.math.exp(-g_s[u3])) * cute.math.exp(g_s[(CHUNK - 1) * DB + u3 % DB])
            cute.arch.sync_threads()
            acc.fill(0.0)
            for r in range(CHUNK):
                for a in cutlass.range_constexpr(2):
                    kv = k_s[r * DB + ty * 2 + a]
                    for e in cutlass.range_constexpr(4):
                        acc[a * 4 + e] = acc[a * 4 + e] + kv * v_s[r * CB + tc * 4 + e]
            for a in cutlass.range_constexpr(2):
                dec = cute.math.exp(g_s[(CHUNK - 1) * DB + ty * 2 + a])
                for e in cutlass.range_constexpr(4):
                    st[a * 4 + e] = dec * st[a * 4 + e] + acc[a * 4 + e]
            cute.arch.sync_threads()


@cute.kernel
def gla_output_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, gk: cute.Tensor, hs: cute.Tensor,
                      o: cute.Tensor, scale: cutlass.Float32, heads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    cb, n, z = cute.arch.block_idx()
    seqlen = cute.size(q, mode=[1])
    key_dim = cute.size(q, mode=[3])
    value_dim = cute.size(v, mode=[3])
    n_slices = (key_dim + DB - 1) // DB
    ty = tidx // 16
    tc = tidx % 16
    b = z // heads
    h = z % heads
    c0 = cb * W
    q_off = 0
    k_off = DB * QP
    h_off = 2 * DB * QP

    smem = cutlass.memory.SmemAllocator()
    pool = smem.allocate_tensor(cutlass.Float32, cute.make_layout((2 * DB * QP + DB * W,)), 16)
    g_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((CHUNK * GP,)), 16)
    acc_a = cute.make_rmem_tensor((16,), cutlass.Float32)
    acc_a.fill(0.0)
    acc_o = cute.make_rmem_tensor((32,), cutlass.Float32)
    acc_o.fill(0.0)
    af = cute.make_rmem_tensor((4,), cutlass.Float32)
    bf = cute.make_rmem_tensor((4,), cutlass.Float32)

    for sl in range(n_slices):
        d0 = sl * DB
        for it in cutlass.range_constexpr(CHUNK * DB // THREADS):
            u = it * THREADS + tidx
            t = cutlass.min(n * CHUNK + u // DB, seqlen - 1)
            dd = d0 + u % DB
            val = gk[b, t, h, cutlass.min(dd, key_dim - 1)].to(cutlass.Float32)
            g_s[(u // DB) * GP + u % DB] = cutlass.Float32(cutlass.select_(dd < key_dim, val, cutlass.Float32(0.0)))
        cute.arch.sync_threads()
        if tidx < DB:  # G = in-order cumulative sum over the chunk's steps, one thread per channel
            run = cutlass.Float32(0.0)
            for r in cutlass.range_constexpr(CHUNK):
                run = run + g_s[r * GP + tidx]
                g_s[r * GP + tidx] = run
        cute.arch.sync_threads()
        for it in cutlass.range_constexpr(CHUNK * DB // THREADS):
            u2 = it * THREADS + tidx
            r2 = u2 // DB
            ch = u2 % DB
            t2 = cutlass.min(n * CHUNK + r2, seqlen - 1)
            dd2 = cutlass.min(d0 + ch, key_dim - 1)
            ok = d0 + ch < key_dim
            g = g_s[r2 * GP + ch]
            qv = (q[b, t2, h, dd2].to(cutlass.Float32) * scale) * cute.math.exp(g)
            kv = k[b, t2, h, dd2].to(cutlass.Float32) * cute.math.exp(-g)
            pool[q_off + ch * QP + r2] = cutlass.Float32(cutlass.select_(ok, qv, cutlass.Float32(0.0)))
            pool[k_off + ch * QP + r2] = cutlass.Float32(cutlass.select_(ok, kv, cutlass.Float32(0.0)))
        for it in cutlass.range_constexpr(DB * W // THREADS):
            u3 = it * THREADS + tidx
            dr = u3 // W
            col = u3 % W
            ok3 = (d0 + dr < key_dim) & (c0 + col < value_dim)
            val3 = hs[z, n, cutlass.min(d0 + dr, key_dim - 1), cutlass.min(c0 + col, value_dim - 1)]
            pool[h_off + dr * W + col] = cutlass.Float32(cutlass.select_(ok3, val3, cutlass.Float32(0.0)))
        cute.arch.sync_threads()
        for d in cutlass.range_constexpr(DB):
            for i in cutlass.range_constexpr(4):
                af[i] = pool[q_off + d * QP + ty * 4 + i]
                bf[i] = pool[k_off + d * QP + tc * 4 + i]
            for i in cutlass.range_constexpr(4):
                for j in cutlass.range_constexpr(4):
                    acc_a[i * 4 + j] = acc_a[i * 4 + j] + af[i] * bf[j]
            for gg in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(4):
                    hv = pool[h_off + d * W + gg * 64 + tc * 4 + j]
                    for i in cutlass.range_constexpr(4):
                        acc_o[i * 8 + gg * 4 + j] = acc_o[i * 8 + gg * 4 + j] + af[i] * hv
        cute.arch.sync_threads()

    # scores below the diagonal (the reference's tril) to shared memory [row, key]
    for i in cutlass.range_constexpr(4):
        for j in cutlass.range_constexpr(4):
            keep = tc * 4 + j <= ty * 4 + i
            pool[(ty * 4 + i) * CHUNK + tc * 4 + j] = cutlass.Float32(
                cutlass.select_(keep, acc_a[i * 4 + j], cutlass.Float32(0.0)))
    for vs in cutlass.range_constexpr(2):
        for it in cutlass.range_constexpr(32 * W // THREADS):
            u4 = it * THREADS + tidx
            key = u4 // W
            col4 = u4 % W
            val4 = v[b, cutlass.min(n * CHUNK + vs * 32 + key, seqlen - 1), h,
                     cutlass.min(c0 + col4, value_dim - 1)].to(cutlass.Float32)
            pool[CHUNK * CHUNK + key * W + col4] = cutlass.Float32(
                cutlass.select_(c0 + col4 < value_dim, val4, cutlass.Float32(0.0)))
        cute.arch.sync_threads()
        for kj in cutlass.range_constexpr(32):
            for i in cutlass.range_constexpr(4):
                af[i] = pool[(ty * 4 + i) * CHUNK + vs * 32 + kj]
            for gg in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(4):
                    vv = pool[CHUNK * CHUNK + kj * W + gg * 64 + tc * 4 + j]
                    for i in cutlass.range_constexpr(4):
                        acc_o[i * 8 + gg * 4 + j] = acc_o[i * 8 + gg * 4 + j] + af[i] * vv
        cute.arch.sync_threads()
    for i in cutlass.range_constexpr(4):
        row = n * CHUNK + ty * 4 + i
        if row < seqlen:
            for gg in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(4):
                    col5 = c0 + gg * 64 + tc * 4 + j
                    if col5 < value_dim:
                        o[b, row, h, col5] = acc_o[i * 8 + gg * 4 + j].to(cutlass.BFloat16)


@cute.jit
def gla_states(k: cute.Tensor, v: cute.Tensor, gk: cute.Tensor, hs: cute.Tensor, heads: cutlass.Constexpr,
               stream: cuda.CUstream):
    gla_states_kernel(k, v, gk, hs, heads).launch(
        grid=[(cute.size(k, mode=[3]) + DB - 1) // DB, (cute.size(v, mode=[3]) + CB - 1) // CB,
              cute.size(hs, mode=[0])],
        block=[THREADS, 1, 1], stream=stream)


@cute.jit
def gla_output(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, gk: cute.Tensor, hs: cute.Tensor, o: cute.Tensor,
               scale: cutlass.Float32, heads: cutlass.Constexpr, stream: cuda.CUstream):
    gla_output_kernel(q, k, v, gk, hs, o, scale, heads).launch(
        grid=[(cute.size(v, mode=[3]) + W - 1) // W, cute.size(hs, mode=[1]), cute.size(hs, mode=[0])],
        block=[THREADS, 1, 1], stream=stream)


def _row_major(dtype, shape):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=16)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _compile(batch, seqlen, heads, key_dim, value_dim, arch=None, ptx_dir=None):
    """(states, output) compiled kernels for one shape."""
    n_chunks = (seqlen + CHUNK - 1) // CHUNK
    qk = [_row_major(cutlass.BFloat16, (batch, seqlen, heads, key_dim)) for _ in range(3)]
    v = _row_major(cutlass.BFloat16, (batch, seqlen, heads, value_dim))
    hs = _row_major(cutlass.Float32, (batch * heads, n_chunks, key_dim, value_dim))
    o = _row_major(cutlass.BFloat16, (batch, seqlen, heads, value_dim))
    states = cute.compile(gla_states, qk[1], v, qk[2], hs, heads, make_fake_stream(), options=_options(arch, ptx_dir))
    output = cute.compile(gla_output, qk[0], qk[1], v, qk[2], hs, o, 1.0, heads, make_fake_stream(),
                          options=_options(arch, ptx_dir))
    return states, output


def solve(q, k, v, gk):
    batch, seqlen, heads, key_dim = q.shape
    value_dim = v.shape[3]
    o = torch.empty(batch, seqlen, heads, value_dim, dtype=torch.bfloat16, device=q.device)
    if o.numel() == 0:
        return o
    key = (batch, seqlen, heads, key_dim, value_dim)
    if key not in _STATES_COMPILED:
        _STATES_COMPILED[key], _OUTPUT_COMPILED[key] = _compile(*key)
    n_chunks = (seqlen + CHUNK - 1) // CHUNK
    states = torch.empty(batch * heads, n_chunks, key_dim, value_dim, dtype=torch.float32, device=q.device)
    q, k, v, gk = q.contiguous(), k.contiguous(), v.contiguous(), gk.contiguous()
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    _STATES_COMPILED[key](k, v, gk, states, stream)
    _OUTPUT_COMPILED[key](q, k, v, gk, states, o, float(key_dim ** -0.5), stream)
    return o


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    names = []
    for compiled in _compile(**WORKLOAD, arch=arch, ptx_dir=ptx_dir):
        names += list(compiled.kernel_info)
    return names
