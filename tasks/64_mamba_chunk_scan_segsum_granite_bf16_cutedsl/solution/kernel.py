"""CuTe DSL oracle for problem 64: the Mamba-2 SSD chunked scan (chunk 256) with a carried state.

With a the within-chunk cumulative sum of A (per head): Y_diag[i] = sum_{j <= i} (C_i . B_j)
exp(a_i - a_j) x_j; chunk state = sum_j (x_j exp(a_end - a_j)) B_j^T; the state entering chunk z
is carried as state * exp(a_end) + chunk state from initial_states; Y_off[i] = (C_i . state_z)
exp(a_i); y = Y_diag + Y_off + D x.

Two DSL kernels.
1. ``ssd_states_kernel`` (CUDA cores, fp32): one CTA (256 threads) per (64 state columns, 64 head
   dims, batch x head) keeps its 64 x 64 block of the state in registers (thread: 4 head dims x 4 state
   columns), starting from initial_states. Per chunk it writes the state entering the chunk (fp32) to
   a scratch tensor [B*H, chunks, P, N], forms the cumulative sums a of the chunk in shared memory
   (each thread adds the steps up to its own in order), accumulates the chunk state over 64-step
   slices of x exp(a_end - a) (formed in fp32 as the reference) and B, and carries
   state = state * exp(a_end) + chunk state. The last state is written as final_state (bf16).
2. ``ssd_output_kernel`` (tensor cores): one CTA of 4 warps per (64 rows of a chunk, head, batch x
   chunk), the problem-65 diagonal-block kernel: C rows and, per 64-key block up to the diagonal, B
   and x rows copied to swizzled shared memory by 16-byte ``cp.async``; S = C B^T and Y += P x as
   warp-level ``mma.sync`` m16n8k16 (bf16 operands from ``ldmatrix``, x through ``ldmatrix.trans``,
   fp32 accumulators); P = S * exp(a_i - a_j) below the diagonal, 0 above, split into bf16 hi + lo
   for the second product. Then T = C state_z^T on the tensor cores with the fp32 state split into
   bf16 hi and lo (both through the MMA against the exact bf16 C), Y = (Y + T exp(a_i)) + D x, rounded
   to bf16 once and written through shared memory with 16-byte stores into output[b, s, h * P + p].
Exponentials are the accurate expf. Sizes: head_dim at most 64 (a head_dim that is not a multiple of
8, the small workload, goes through zero-padded scratch copies of x and y), state a multiple of 8.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=8, seqlen=1024, heads=16, head_dim=64, state=256)
CHUNK = 256
_BM = 64  # query rows per output CTA (4 warps x 16) and keys per block
_THREADS = 128
ST_THREADS = 256
_STATES_COMPILED = {}
_OUTPUT_COMPILED = {}


def _up(x, m):
    return (x + m - 1) // m * m


def _mn_view(t):
    """An MMA accumulator fragment ((2, 2), MMA_M, MMA_N) viewed as (rows, columns) of the thread."""
    lay = cute.make_layout(t.layout.shape)
    mn = cute.make_layout(((lay.shape[0][1], lay.shape[1]), (lay.shape[0][0], lay.shape[2])),
                          stride=((lay.stride[0][1], lay.stride[1]), (lay.stride[0][0], lay.stride[2])))
    return cute.make_tensor(t.iterator, cute.composition(t.layout, mn))


def _as_a_operand(t):
    """A bf16 copy of an S accumulator ((2, 2), MMA_M, MMA_N) as the A operand of P x:
    ((2, 2, 2), MMA_M, MMA_N / 2) (two n8 accumulator tiles form one k16 A tile)."""
    div = cute.logical_divide(t.layout, (None, None, 2))
    lay = cute.make_layout(((div.shape[0], div.shape[2][0]), div.shape[1], div.shape[2][1]),
                           stride=((div.stride[0], div.stride[2][0]), div.stride[1], div.stride[2][1]))
    return cute.make_tensor(t.iterator, lay)


@cute.jit
def _load_rows(g2s, dst, src, bc, first, length, idx, width, rows_per_pass, my_row, my_chunk):
    """cp.async of rows first.. (clamped to the chunk) of src[bc, row, idx, :width] into dst (a g2s
    partition); 8-column chunks past width are skipped (zero-filled once by the caller)."""
    for m in cutlass.range_constexpr(cute.size(dst, mode=[1])):
        r = cutlass.min(first + m * rows_per_pass + my_row, length - 1)
        for kk in cutlass.range_constexpr(cute.size(dst, mode=[2])):
            col = kk * 64 + my_chunk * 8
            if col < width:
                cute.copy(g2s, cute.local_tile(src[bc, r, idx, None], (8,), (kk * 8 + my_chunk,)),
                          dst[None, m, kk])


@cute.jit
def _zero_pad(dst, width, my_chunk):
    """Zero the 8-column chunks of a g2s partition that lie past width."""
    for m in cutlass.range_constexpr(cute.size(dst, mode=[1])):
        for kk in cutlass.range_constexpr(cute.size(dst, mode=[2])):
            if kk * 64 + my_chunk * 8 >= width:
                z = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                z.fill(0.0)
                dst[None, m, kk].store(z.load())


@cute.kernel
def ssd_states_kernel(x: cute.Tensor, a: cute.Tensor, bm: cute.Tensor, init: cute.Tensor, hs: cute.Tensor,
                      fs: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    nblk, pblk, z = cute.arch.block_idx()
    heads = cute.size(x, mode=[2])
    head_dim = cute.size(x, mode=[3])
    state = cute.size(bm, mode=[3])
    nc = cute.size(hs, mode=[1])
    length = cute.size(a, mode=[3])
    ty = tidx // 16
    tc = tidx % 16
    b = z // heads
    h = z % heads
    p0 = pblk * 64
    n0 = nblk * 64
    zero = cutlass.Float32(0.0)

    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((length,)), 16)
    s_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((length,)), 16)
    xe_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((64 * 64,)), 16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((64 * 64,)), 16)
    st = cute.make_rmem_tensor((16,), cutlass.Float32)
    acc = cute.make_rmem_tensor((16,), cutlass.Float32)
    for i in cutlass.range_constexpr(4):
        for j in cutlass.range_constexpr(4):
            p = p0 + ty * 4 + i
            n = n0 + tc * 4 + j
            val = init[b, h, cutlass.min(p, head_dim - 1), cutlass.min(n, state - 1)].to(cutlass.Float32)
            st[i * 4 + j] = cutlass.Float32(cutlass.select_((p < head_dim) & (n < state), val, zero))

    for zc in range(nc):
        # the state entering chunk zc
        for i in cutlass.range_constexpr(4):
            p = p0 + ty * 4 + i
            for j in cutlass.range_constexpr(4):
                n = n0 + tc * 4 + j
                if (p < head_dim) & (n < state):
                    hs[z, zc, p, n] = st[i * 4 + j]
        # cumulative sums of the chunk's log decays, each in order
        if tidx < length:
            a_s[tidx] = a[b, h, zc, tidx].to(cutlass.Float32)
        cute.arch.sync_threads()
        if tidx < length:
            run = cutlass.Float32(0.0)
            for q in range(tidx + 1):
                run = run + a_s[q]
            s_s[tidx] = run
        cute.arch.sync_threads()
        a_end = s_s[length - 1]
        acc.fill(0.0)
        for ls in range((length + 63) // 64):
            for it in cutlass.range_constexpr(64 * 64 // ST_THREADS):
                u = it * ST_THREADS + tidx
                row = ls * 64 + u // 64
                col = u % 64
                rc = cutlass.min(row, length - 1)
                tok = zc * length + rc
                xv = x[b, tok, h, cutlass.min(p0 + col, head_dim - 1)].to(cutlass.Float32) * cute.math.exp(
                    a_end - s_s[rc])
                xe_s[u] = cutlass.Float32(cutlass.select_((row < length) & (p0 + col < head_dim), xv, zero))
                bv = bm[b, tok, 0, cutlass.min(n0 + col, state - 1)].to(cutlass.Float32)
                b_s[u] = cutlass.Float32(cutlass.select_((row < length) & (n0 + col < state), bv, zero))
            cute.arch.sync_threads()
            for r in range(64):
                for i in cutlass.range_constexpr(4):
                    xa = xe_s[r * 64 + ty * 4 + i]
                    for j in cutlass.range_constexpr(4):
                        acc[i * 4 + j] = acc[i * 4 + j] + xa * b_s[r * 64 + tc * 4 + j]
            cute.arch.sync_threads()
        total = cute.math.exp(a_end)
        for i in cutlass.range_constexpr(16):
            st[i] = st[i] * total + acc[i]
        cute.arch.sync_threads()
    for i in cutlass.range_constexpr(4):
        p = p0 + ty * 4 + i
        for j in cutlass.range_constexpr(4):
            n = n0 + tc * 4 + j
            if (p < head_dim) & (n < state):
                fs[b, h, p, n] = st[i * 4 + j].to(cutlass.BFloat16)


@cute.kernel
def ssd_output_kernel(x: cute.Tensor, a: cute.Tensor, bm: cute.Tensor, cm: cute.Tensor, dv: cute.Tensor,
                      hs: cute.Tensor, y: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    tile, h, bc = cute.arch.block_idx()  # bc = batch * chunks + chunk
    length = cute.size(x, mode=[1])
    heads = cute.size(x, mode=[2])
    head_dim = cute.size(x, mode=[3])
    groups = cute.size(bm, mode=[2])
    state = cute.size(bm, mode=[3])
    chunks = cute.size(a, mode=[2])
    n_pad = _up(state, 64)
    p_pad = _up(head_dim, 64)
    l_pad = _up(length, 64)
    g = h // (heads // groups)  # 0: B and C are shared by all heads
    r0 = tile * _BM
    cols = 8  # threads per 64-column slab of a row in the copies
    rows_per_pass = _THREADS // cols
    my_row = tidx // cols
    my_chunk = tidx % cols

    smem = cutlass.memory.SmemAllocator()
    atom = cute.make_layout((8, 64), stride=(64, 1))
    # the pointer swizzle acts on byte addresses: bits 7-9 (row % 8) are xor-ed into bits 4-6 (the 16-byte
    # chunk of a 128-byte row), so cp.async vectors and ldmatrix rows stay whole (M = 3 would split them)
    swizzle = cute.make_swizzle(3, 4, 3)
    sC = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, n_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sB = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, n_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sX = smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(atom, (_BM, p_pad), (0, 1)), 1024,
                              swizzle=swizzle)
    sXt = cute.composition(sX, cute.make_layout((p_pad, _BM), stride=(_BM, 1)))  # (p, key)
    sA = smem.allocate_tensor(cutlass.Float32, cute.make_layout((l_pad,)), 16)
    sS = smem.allocate_tensor(cutlass.Float32, cute.make_layout((l_pad,)), 16)

    g2s = cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((rows_per_pass, cols), stride=(cols, 1)), cute.make_layout((1, 8)))
    thr_g2s = g2s.get_slice(tidx)
    tCsC = thr_g2s.partition_D(sC)  # ((8, 1), BM / 16, n_pad / 64)
    tBsB = thr_g2s.partition_D(sB)
    tXsX = thr_g2s.partition_D(sX)

    n_blocks = tile + 1
    _load_rows(g2s, tCsC, cm, bc, r0, length, g, state, rows_per_pass, my_row, my_chunk)
    _load_rows(g2s, tBsB, bm, bc, 0, length, g, state, rows_per_pass, my_row, my_chunk)
    cute.arch.cp_async_commit_group()
    if cutlass.const_expr(n_pad != state):
        _zero_pad(tCsC, state, my_chunk)
        _zero_pad(tBsB, state, my_chunk)

    # per-step decays of the chunk, then each thread's cumulative sums s[p] = a[0] + ... + a[p] in order
    b_idx = bc // chunks
    c_idx = bc % chunks
    for p in range(tidx, l_pad, _THREADS):
        sA[p] = cutlass.Float32(0.0)
        if p < length:
            sA[p] = a[b_idx, h, c_idx, p].to(cutlass.Float32)
    cute.arch.sync_threads()
    for p in range(tidx, l_pad, _THREADS):
        run = cutlass.Float32(0.0)
        for q in cutlass.range_constexpr(l_pad):
            run = run + cutlass.Float32(cutlass.select_(q <= p, sA[q], cutlass.Float32(0.0)))
        sS[p] = run

    tiled_mma = cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((_THREADS // 32, 1, 1)), permutation_mnk=(_BM, 16, 16))
    thr_mma = tiled_mma.get_slice(tidx)
    tSrC = thr_mma.make_fragment_A(thr_mma.partition_A(sC))
    tSrB = thr_mma.make_fragment_B(thr_mma.partition_B(sB))
    tOrXt = thr_mma.make_fragment_B(thr_mma.partition_B(sXt))
    acc_o = cute.make_rmem_tensor(thr_mma.partition_shape_C((_BM, p_pad)), cutlass.Float32)
    acc_o.fill(0.0)

    s2r_c = cute.make_tiled_copy_A(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_b = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma)
    s2r_x = cute.make_tiled_copy_B(
        cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(True, 4), cutlass.BFloat16), tiled_mma)
    thr_s2r_c = s2r_c.get_slice(tidx)
    thr_s2r_b = s2r_b.get_slice(tidx)
    thr_s2r_x = s2r_x.get_slice(tidx)
    tXsC = thr_s2r_c.partition_S(sC)
    tXrC = thr_s2r_c.retile(tSrC)
    tXsB = thr_s2r_b.partition_S(sB)
    tXrB = thr_s2r_b.retile(tSrB)
    tXsXt = thr_s2r_x.partition_S(sXt)
    tXrXt = thr_s2r_x.retile(tOrXt)

    # coordinates (row in tile, key in block) of each S accumulator element
    tScS = _mn_view(thr_mma.partition_C(cute.make_identity_tensor((_BM, _BM))))
    acc_s_shape = thr_mma.partition_shape_C((_BM, _BM))
    n_rows = cute.size(tScS, mode=[0])  # rows per thread (2)
    n_cols = cute.size(tScS, mode=[1])

    for nb in range(n_blocks):
        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()  # B(nb) (and C, the cumulative sums) landed; every warp is done with x(nb - 1)
        _load_rows(g2s, tXsX, x, bc, nb * _BM, length, h, head_dim, rows_per_pass, my_row, my_chunk)
        cute.arch.cp_async_commit_group()

        acc_s = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
        acc_s.fill(0.0)
        for kb in cutlass.range_constexpr(cute.size(tSrC, mode=[2])):
            cute.copy(s2r_c, tXsC[None, None, kb], tXrC[None, None, kb])
            cute.copy(s2r_b, tXsB[None, None, kb], tXrB[None, None, kb])
            cute.gemm(tiled_mma, acc_s, tSrC[None, None, kb], tSrB[None, None, kb], acc_s)

        cute.arch.cp_async_wait_group(0)
        cute.arch.sync_threads()  # x(nb) landed; every warp is done with B(nb)
        if nb + 1 < n_blocks:
            _load_rows(g2s, tBsB, bm, bc, (nb + 1) * _BM, length, g, state, rows_per_pass, my_row, my_chunk)
            cute.arch.cp_async_commit_group()

        s_mn = _mn_view(acc_s)
        for i in cutlass.range_constexpr(n_rows):
            row = r0 + tScS[i, 0][0]
            s_row = sS[cutlass.min(row, l_pad - 1)]
            for c in cutlass.range_constexpr(n_cols):
                key = nb * _BM + tScS[0, c][1]
                seg = cutlass.Float32(cutlass.select_(key <= row, s_row - sS[key], -cutlass.Float32.inf))
                s_mn[i, c] = s_mn[i, c] * cute.math.exp(seg)

        p_hi = cute.make_fragment_like(acc_s, cutlass.BFloat16)
        p_hi.store(acc_s.load().to(cutlass.BFloat16))
        p_lo = cute.make_fragment_like(acc_s, cutlass.BFloat16)
        p_lo.store((acc_s.load() - p_hi.load().to(cutlass.Float32)).to(cutlass.BFloat16))
        a_hi = _as_a_operand(p_hi)
        a_lo = _as_a_operand(p_lo)
        for kb in cutlass.range_constexpr(cute.size(a_hi, mode=[2])):
            cute.copy(s2r_x, tXsXt[None, None, kb], tXrXt[None, None, kb])
            cute.gemm(tiled_mma, acc_o, a_hi[None, None, kb], tOrXt[None, None, kb], acc_o)
            cute.gemm(tiled_mma, acc_o, a_lo[None, None, kb], tOrXt[None, None, kb], acc_o)

    # Y_off: T = C state^T with the fp32 state entering the chunk split into bf16 hi and lo (head dim p
    # in the key position of sB), then Y += T * exp(s_i) and Y += D x
    cute.arch.sync_threads()  # every warp is done with sB and sX
    acc_t = cute.make_rmem_tensor(acc_s_shape, cutlass.Float32)
    acc_t.fill(0.0)
    for part in cutlass.range_constexpr(2):
        for m in cutlass.range_constexpr(cute.size(tBsB, mode=[1])):
            p = cutlass.min(m * rows_per_pass + my_row, cute.size(hs, mode=[2]) - 1)
            for kk in cutlass.range_constexpr(cute.size(tBsB, mode=[2])):
                if kk * 64 + my_chunk * 8 < state:
                    f = cute.make_rmem_tensor((8,), cutlass.Float32)
                    cute.autovec_copy(cute.local_tile(hs[b_idx * heads + h, c_idx, p, None], (8,),
                                                      (kk * 8 + my_chunk,)), f)
                    hi = f.load().to(cutlass.BFloat16)
                    if cutlass.const_expr(part == 0):
                        tBsB[None, m, kk].store(hi)
                    else:
                        tBsB[None, m, kk].store((f.load() - hi.to(cutlass.Float32)).to(cutlass.BFloat16))
        cute.arch.sync_threads()  # the state part landed
        for kb in cutlass.range_constexpr(cute.size(tSrC, mode=[2])):
            cute.copy(s2r_c, tXsC[None, None, kb], tXrC[None, None, kb])
            cute.copy(s2r_b, tXsB[None, None, kb], tXrB[None, None, kb])
            cute.gemm(tiled_mma, acc_t, tSrC[None, None, kb], tSrB[None, None, kb], acc_t)
        cute.arch.sync_threads()  # every warp is done with this part
    t_mn = _mn_view(acc_t)
    o_mn = _mn_view(acc_o)
    d_h = dv[h].to(cutlass.Float32)
    for i in cutlass.range_constexpr(n_rows):
        row = r0 + tScS[i, 0][0]
        e_row = cute.math.exp(sS[cutlass.min(row, l_pad - 1)])
        row_c = cutlass.min(row, length - 1)
        for c in cutlass.range_constexpr(n_cols):
            p = tScS[0, c][1]
            dx = d_h * x[bc, row_c, h, cutlass.min(p, head_dim - 1)].to(cutlass.Float32)
            o_mn[i, c] = (o_mn[i, c] + t_mn[i, c] * e_row) + dx

    # epilogue: bf16 Y staged through shared memory (the x tile) for 16-byte stores
    r_o = cute.make_fragment_like(acc_o, cutlass.BFloat16)
    r_o.store(acc_o.load().to(cutlass.BFloat16))
    r2s = cute.make_tiled_copy_C(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16), tiled_mma)
    thr_r2s = r2s.get_slice(tidx)
    cute.copy(r2s, thr_r2s.retile(r_o), thr_r2s.partition_D(sX))
    cute.arch.sync_threads()
    for m in cutlass.range_constexpr(cute.size(tXsX, mode=[1])):
        r = r0 + m * rows_per_pass + my_row
        if r < length:
            for kk in cutlass.range_constexpr(cute.size(tXsX, mode=[2])):
                if kk * 64 + my_chunk * 8 < head_dim:
                    dst = cute.local_tile(y[bc, r, h, None], (8,), (kk * cols + my_chunk,))
                    frag = cute.make_rmem_tensor((8,), cutlass.BFloat16)
                    frag.store(tXsX[None, m, kk].load())
                    cute.autovec_copy(frag, dst)


@cute.jit
def ssd_states(x: cute.Tensor, a: cute.Tensor, bm: cute.Tensor, init: cute.Tensor, hs: cute.Tensor, fs: cute.Tensor,
               stream: cuda.CUstream):
    ssd_states_kernel(x, a, bm, init, hs, fs).launch(
        grid=[(cute.size(bm, mode=[3]) + 63) // 64, (cute.size(x, mode=[3]) + 63) // 64, cute.size(hs, mode=[0])],
        block=[ST_THREADS, 1, 1], stream=stream)


@cute.jit
def ssd_output(x: cute.Tensor, a: cute.Tensor, bm: cute.Tensor, cm: cute.Tensor, dv: cute.Tensor, hs: cute.Tensor,
               y: cute.Tensor, stream: cuda.CUstream):
    length = cute.size(x, mode=[1])
    ssd_output_kernel(x, a, bm, cm, dv, hs, y).launch(
        grid=[(length + _BM - 1) // _BM, cute.size(x, mode=[2]), cute.size(x, mode=[0])],
        block=[_THREADS, 1, 1], stream=stream)


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


def _geometry(seqlen):
    length = min(CHUNK, seqlen)
    return length, seqlen // length


def _compile(batch, seqlen, heads, head_dim, state, arch=None, ptx_dir=None):
    """(states, output) compiled kernels for one shape."""
    assert head_dim <= 64 and state % 8 == 0
    length, nc = _geometry(seqlen)
    hp = _up(head_dim, 8)  # x and y of the output kernel, zero-padded by the host if needed
    bf16, f32 = cutlass.BFloat16, cutlass.Float32
    x = _row_major(bf16, (batch, seqlen, heads, head_dim))
    a = _row_major(bf16, (batch, heads, nc, length))
    b = _row_major(bf16, (batch, seqlen, 1, state))
    init = _row_major(bf16, (batch, heads, head_dim, state))
    hs = _row_major(f32, (batch * heads, nc, head_dim, state))
    fs = _row_major(bf16, (batch, heads, head_dim, state))
    states = cute.compile(ssd_states, x, a, b, init, hs, fs, make_fake_stream(), options=_options(arch, ptx_dir))
    xc = _row_major(bf16, (batch * nc, length, heads, hp))
    bc = [_row_major(bf16, (batch * nc, length, 1, state)) for _ in range(2)]
    dv = make_fake_compact_tensor(bf16, (heads,))
    y = _row_major(bf16, (batch * nc, length, heads, hp))
    output = cute.compile(ssd_output, xc, a, *bc, dv, hs, y, make_fake_stream(), options=_options(arch, ptx_dir))
    return states, output


def solve(hidden_states, A, B, C, D, initial_states):
    batch, seqlen, heads, head_dim = hidden_states.shape
    state = B.shape[3]
    length, nc = _geometry(seqlen)
    dev = hidden_states.device
    output = torch.empty(batch, seqlen, heads * head_dim, dtype=torch.bfloat16, device=dev)
    final = torch.empty(batch, heads, head_dim, state, dtype=torch.bfloat16, device=dev)
    key = (batch, seqlen, heads, head_dim, state)
    if key not in _STATES_COMPILED:
        _STATES_COMPILED[key], _OUTPUT_COMPILED[key] = _compile(*key)
    states = torch.empty(batch * heads, nc, head_dim, state, dtype=torch.float32, device=dev)
    x, b, c = hidden_states.contiguous(), B.contiguous(), C.contiguous()
    a = A.contiguous().view(batch, heads, nc, length)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    _STATES_COMPILED[key](x, a, b, initial_states.contiguous(), states, final, stream)
    hp = _up(head_dim, 8)
    if hp == head_dim:
        xo, yo = x, output.view(batch, seqlen, heads, head_dim)
    else:  # 16-byte rows for the copies: zero-padded scratch (not the graded shape)
        xo = torch.zeros(batch, seqlen, heads, hp, dtype=x.dtype, device=dev)
        xo[..., :head_dim] = x
        yo = torch.empty(batch, seqlen, heads, hp, dtype=torch.bfloat16, device=dev)
    _OUTPUT_COMPILED[key](xo.view(batch * nc, length, heads, hp), a, b.view(batch * nc, length, 1, state),
                          c.view(batch * nc, length, 1, state), D.contiguous(), states,
                          yo.view(batch * nc, length, heads, hp), stream)
    if hp != head_dim:
        output.view(batch, seqlen, heads, head_dim).copy_(yo[..., :head_dim])
    return output, final


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    names = []
    for compiled in _compile(**WORKLOAD, arch=arch, ptx_dir=ptx_dir):
        names += list(compiled.kernel_info)
    return names
