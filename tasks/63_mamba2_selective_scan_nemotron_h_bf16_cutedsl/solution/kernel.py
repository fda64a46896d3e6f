"""CuTe DSL oracle for problem 63: the complete Mamba-2 mixer layer of Nemotron-H (in_proj, causal
conv + SiLU, softplus dt, zero-state SSD scan, gated RMSNorm with the gate applied before the norm,
out_proj), bf16 module with an fp32 scan.

Five launches of four DSL kernels; torch only allocates (and zero-pads for non-tile shapes).

1. ``proj_gemm_kernel`` (in_proj): zxbcdt = bf16(hidden W_in^T) on the tensor cores (warp-level
   ``mma.sync`` m16n8k16, bf16 operands, fp32 accumulation). A CTA computes a 128 x 128 tile with 4
   warps (2 x 2, each 64 x 64); K advances in slices of 32 through a two-stage shared-memory ring
   filled by 16-byte ``cp.async`` copies (swizzled rows, read by ``ldmatrix``). Every product of
   bf16 values is exact, so only the summation order differs from the reference's fp32 GEMM.
2. ``conv_act_kernel``: one CTA per token. For each xBC channel: conv = bias + sum_k w_k x_(t-3+k)
   in fp32 (taps before the sequence start are zero), rounded to bf16; sigmoid = 1 / (1 + exp(-conv))
   rounded to bf16; xBC = bf16(conv * sigmoid). For each head: s = bf16(dt_raw + dt_bias),
   dt = clamp(bf16(softplus(s)), min, max) with softplus = s above 20, else log1p(exp(s)) (torch's
   threshold), kept in fp32.
3. ``ssd_scan_kernel``: the zero-state SSD scan as the step-by-step recurrence it regroups:
   h_t = exp(A dt_t) h_(t-1) + (x_t dt_t) B_t^T, y_t = h_t C_t, with A = -exp(A_log) and head h
   reading group h mod 8. One CTA per (head, sequence) keeps the whole state [head_dim, state] in
   fp32 registers for the sequence: a thread owns ``RP`` rows (p) and the state columns
   n = l, l + NL, ... of a lane group of NL threads (graded: 4 rows x 16 columns, 256 threads).
   Per stage of 16 steps the CTA stages B_t, C_t (widened to fp32), the head's x_t, dt_t and the
   decay exp(-exp(A_log) dt_t) (both exps in fp32, as the reference) in shared memory. Per step a
   thread updates its 64 state values with fused multiply-adds and forms its partial sums of
   y_t[p] = sum_n C_t[n] h_t[p, n]; butterfly shuffles inside the lane group finish them, and
   y = bf16(y + D x) is written. The reference's chunked form (fp32 cumulative sums of A dt, exp of
   their differences) is the same sum regrouped; it is rounded to bf16 at once, and the CPU
   emulation of this recurrence meets the grader's comparison with room, so fp32 suffices here
   (the state decays each step, so its rounding errors do not build up over the sequence).
4. ``gated_norm_kernel``: one CTA per (token, norm group of inner / 8 channels). g = y * silu(z)
   in fp32 with silu(z) = z / (1 + exp(-z)) (IEEE division), sum of g^2 by warp shuffles and then
   across warps in shared memory, r = rsqrt(sum / group + eps), normed = bf16((g r) w).
5. ``proj_gemm_kernel`` (out_proj): output = bf16(normed W_out^T), the same GEMM.
Shapes that are not tile multiples (the small workload) use zero-padded scratch GEMM operands; the
graded shapes need none.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=8, seqlen=512, hidden=8192, heads=256, head_dim=64, state=256)
GROUPS = 8
CONV = 4
_BM, _BN, _BK = 128, 128, 32
_GEMM_THREADS = 128  # 2 x 2 warps
_STAGE = 16  # scan steps staged in shared memory at once
_ACT_THREADS = 256
_COMPILED = {}


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return x.to(cutlass.BFloat16).to(cutlass.Float32)


# ---------------------------------------------------------------------------------------------- GEMM
def _smem_rows(smem, rows):
    """A two-stage (rows, 32) bf16 ring; the pointer swizzle xors bits 7-8 of the byte address into
    bits 4-5, so a cp.async vector stays whole and the 8 rows an ldmatrix reads hit different banks."""
    row_atom = cute.make_layout((8, _BK), stride=(_BK, 1))
    return smem.allocate_tensor(cutlass.BFloat16, cute.tile_to_shape(row_atom, (rows, _BK, 2), (0, 1, 2)), 16,
                                swizzle=cute.make_swizzle(2, 4, 3))


def _g2s_copy():
    """global -> shared: 32 rows x 4 threads, 8 bf16 (16 bytes) per thread and copy."""
    return cute.make_tiled_copy_tv(
        cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL),
                            cutlass.BFloat16, num_bits_per_copy=128),
        cute.make_layout((_GEMM_THREADS // (_BK // 8), _BK // 8), stride=(_BK // 8, 1)),
        cute.make_layout((1, 8)))


def _tiled_mma():
    return cute.make_tiled_mma(
        cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)),
        cute.make_layout((2, 2, 1)), permutation_mnk=(32, 32, 16))


def _ldmatrix():
    return cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), cutlass.BFloat16)


@cute.kernel
def proj_gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k_tiles: cutlass.Constexpr):
    """mC[m, n] = bf16(sum_k mA[m, k] * mB[n, k]); k_tiles slices of 32."""
    tidx, _, _ = cute.arch.thread_idx()
    bm, bn, _ = cute.arch.block_idx()
    gA = cute.local_tile(mA, (_BM, _BK), (bm, None))
    gB = cute.local_tile(mB, (_BN, _BK), (bn, None))
    gC = cute.local_tile(mC, (_BM, _BN), (bm, bn))

    smem = cutlass.memory.SmemAllocator()
    sA = _smem_rows(smem, _BM)
    sB = _smem_rows(smem, _BN)

    g2s = _g2s_copy()
    thr_g2s = g2s.get_slice(tidx)
    tAgA = thr_g2s.partition_S(gA)
    tAsA = thr_g2s.partition_D(sA)
    tBgB = thr_g2s.partition_S(gB)
    tBsB = thr_g2s.partition_D(sB)

    tiled_mma = _tiled_mma()
    thr_mma = tiled_mma.get_slice(tidx)
    tCsA = thr_mma.partition_A(sA)
    tCsB = thr_mma.partition_B(sB)
    tCgC = thr_mma.partition_C(gC)
    tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
    tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
    acc = tiled_mma.make_fragment_C(tCgC)
    acc.fill(0.0)

    s2r_A = cute.make_tiled_copy_A(_ldmatrix(), tiled_mma)
    s2r_B = cute.make_tiled_copy_B(_ldmatrix(), tiled_mma)
    thr_s2r_A = s2r_A.get_slice(tidx)
    thr_s2r_B = s2r_B.get_slice(tidx)
    tXsA = thr_s2r_A.partition_S(sA)
    tXrA = thr_s2r_A.retile(tCrA)
    tXsB = thr_s2r_B.partition_S(sB)
    tXrB = thr_s2r_B.retile(tCrB)
    k_blocks = cute.size(tCrA, mode=[2])

    cute.copy(g2s, tAgA[None, None, None, 0], tAsA[None, None, None, 0])
    cute.copy(g2s, tBgB[None, None, None, 0], tBsB[None, None, None, 0])
    cute.arch.cp_async_commit_group()
    for kt in range(k_tiles):
        if kt + 1 < k_tiles:  # prefetch the next slice into the other stage
            nxt = (kt + 1) % 2
            cute.copy(g2s, tAgA[None, None, None, kt + 1], tAsA[None, None, None, nxt])
            cute.copy(g2s, tBgB[None, None, None, kt + 1], tBsB[None, None, None, nxt])
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(1)  # this slice's group has landed
        cute.arch.sync_threads()
        stage = kt % 2
        for kb in cutlass.range_constexpr(k_blocks):
            cute.copy(s2r_A, tXsA[None, None, kb, stage], tXrA[None, None, kb])
            cute.copy(s2r_B, tXsB[None, None, kb, stage], tXrB[None, None, kb])
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        cute.arch.sync_threads()  # the stage is refilled by the next iteration's prefetch

    out = cute.make_fragment_like(acc, cutlass.BFloat16)
    for i in cutlass.range_constexpr(cute.size(acc)):
        out[i] = acc[i].to(cutlass.BFloat16)
    cute.autovec_copy(out, tCgC)


@cute.jit
def proj_gemm(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, k: cutlass.Constexpr, stream: cuda.CUstream):
    m = cute.size(mC, mode=[0])
    n = cute.size(mC, mode=[1])
    proj_gemm_kernel(mA, mB, mC, k // _BK).launch(grid=[m // _BM, n // _BN, 1], block=[_GEMM_THREADS, 1, 1],
                                                   stream=stream)


# ------------------------------------------------------------------------------- conv + activations
@cute.kernel
def conv_act_kernel(zx: cute.Tensor, conv_w: cute.Tensor, conv_b: cute.Tensor, dt_bias: cute.Tensor,
                    xbc: cute.Tensor, dt: cute.Tensor, tmin: cutlass.Float32, tmax: cutlass.Float32,
                    seqlen: cutlass.Constexpr, inner: cutlass.Constexpr, conv_dim: cutlass.Constexpr,
                    heads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    tok, _, _ = cute.arch.block_idx()
    t = tok % seqlen
    for c in cutlass.range(tidx, conv_dim, _ACT_THREADS, unroll=1):
        acc = conv_b[c].to(cutlass.Float32)
        for k in cutlass.range_constexpr(CONV):
            back = CONV - 1 - k
            if t >= back:
                acc = acc + conv_w[c, 0, k].to(cutlass.Float32) * zx[tok - back, inner + c].to(cutlass.Float32)
        cv = _bf16(acc)
        sig = _bf16(1.0 / (1.0 + cute.math.exp(-cv)))
        xbc[tok, c] = (cv * sig).to(cutlass.BFloat16)
    for hh in cutlass.range(tidx, heads, _ACT_THREADS, unroll=1):
        s = _bf16(zx[tok, inner + conv_dim + hh].to(cutlass.Float32) + dt_bias[hh].to(cutlass.Float32))
        sp = s
        if s <= 20.0:
            sp = cute.math.log1p(cute.math.exp(s))
        v = _bf16(sp)
        v = cutlass.select_(v < tmin, tmin, v)
        v = cutlass.select_(v > tmax, tmax, v)
        dt[tok, hh] = v


@cute.jit
def conv_act(zx: cute.Tensor, conv_w: cute.Tensor, conv_b: cute.Tensor, dt_bias: cute.Tensor, xbc: cute.Tensor,
             dt: cute.Tensor, tmin: cutlass.Float32, tmax: cutlass.Float32, seqlen: cutlass.Constexpr,
             inner: cutlass.Constexpr, stream: cuda.CUstream):
    tokens = cute.size(xbc, mode=[0])
    conv_dim = cute.size(xbc, mode=[1])
    heads = cute.size(dt, mode=[1])
    conv_act_kernel(zx, conv_w, conv_b, dt_bias, xbc, dt, tmin, tmax, seqlen, inner, conv_dim, heads).launch(
        grid=[tokens, 1, 1], block=[_ACT_THREADS, 1, 1], stream=stream)


# ----------------------------------------------------------------------------------------- SSD scan
def _scan_plan(head_dim, state):
    """(rows per thread RP, lanes per row group NL, state columns per lane NS, row groups, threads)."""
    nl = 1
    while nl * 2 <= 16 and state % (nl * 2) == 0:
        nl *= 2
    rp = 4 if head_dim % 4 == 0 else (2 if head_dim % 2 == 0 else 1)
    groups = head_dim // rp
    threads = (groups * nl + 31) // 32 * 32
    return rp, nl, state // nl, groups, threads


@cute.kernel
def ssd_scan_kernel(xbc: cute.Tensor, dt: cute.Tensor, a_log: cute.Tensor, d_skip: cute.Tensor, y: cute.Tensor,
                    seqlen: cutlass.Constexpr, heads: cutlass.Constexpr, head_dim: cutlass.Constexpr,
                    state: cutlass.Constexpr, rp: cutlass.Constexpr, nl: cutlass.Constexpr,
                    ns: cutlass.Constexpr, groups: cutlass.Constexpr, threads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    h, bi, _ = cute.arch.block_idx()
    inner = heads * head_dim
    g = h % GROUPS
    b_off = inner + g * state
    c_off = inner + GROUPS * state + g * state
    lane = tidx % nl
    grp_raw = tidx // nl
    valid = grp_raw < groups
    grp = cutlass.select_(valid, grp_raw, groups - 1)
    row0 = bi * seqlen

    smem = cutlass.memory.SmemAllocator()
    bs = smem.allocate_tensor(cutlass.Float32, cute.make_ordered_layout((_STAGE, state), order=(1, 0)),
                              byte_alignment=16)
    cs = smem.allocate_tensor(cutlass.Float32, cute.make_ordered_layout((_STAGE, state), order=(1, 0)),
                              byte_alignment=16)
    xs = smem.allocate_tensor(cutlass.Float32, cute.make_ordered_layout((_STAGE, head_dim), order=(1, 0)),
                              byte_alignment=16)
    dts = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_STAGE,)), byte_alignment=16)
    das = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_STAGE,)), byte_alignment=16)

    st = cute.make_rmem_tensor((rp, ns), cutlass.Float32)
    st.fill(0.0)
    yp = cute.make_rmem_tensor((rp,), cutlass.Float32)
    xd = cute.make_rmem_tensor((rp,), cutlass.Float32)
    neg_a = cute.math.exp(a_log[h].to(cutlass.Float32))
    dskip = d_skip[h].to(cutlass.Float32)

    for t0 in cutlass.range(0, seqlen, _STAGE, unroll=1):
        for idx in cutlass.range(tidx, _STAGE * state, threads, unroll=1):
            s = idx // state
            n = idx - s * state
            vb = cutlass.Float32(0.0)
            vc = cutlass.Float32(0.0)
            if t0 + s < seqlen:
                vb = xbc[row0 + t0 + s, b_off + n].to(cutlass.Float32)
                vc = xbc[row0 + t0 + s, c_off + n].to(cutlass.Float32)
            bs[s, n] = vb
            cs[s, n] = vc
        for idx in cutlass.range(tidx, _STAGE * head_dim, threads, unroll=1):
            s = idx // head_dim
            p = idx - s * head_dim
            vx = cutlass.Float32(0.0)
            if t0 + s < seqlen:
                vx = xbc[row0 + t0 + s, h * head_dim + p].to(cutlass.Float32)
            xs[s, p] = vx
        if tidx < _STAGE:
            vd = cutlass.Float32(0.0)
            if t0 + tidx < seqlen:
                vd = dt[row0 + t0 + tidx, h]
            dts[tidx] = vd
            das[tidx] = cute.math.exp((-neg_a) * vd)
        cute.arch.sync_threads()

        n_steps = cutlass.select_(seqlen - t0 < _STAGE, seqlen - t0, _STAGE)
        for s in cutlass.range(n_steps, unroll=1):
            da = das[s]
            dtv = dts[s]
            for r in cutlass.range_constexpr(rp):
                xd[r] = xs[s, grp * rp + r] * dtv
                yp[r] = 0.0
            for j in cutlass.range_constexpr(ns):
                bn = bs[s, lane + nl * j]
                cn = cs[s, lane + nl * j]
                for r in cutlass.range_constexpr(rp):
                    st[r, j] = st[r, j] * da + xd[r] * bn
                    yp[r] = yp[r] + cn * st[r, j]
            for r in cutlass.range_constexpr(rp):
                tot = cute.arch.warp_reduction(yp[r], lambda a, b: a + b, threads_in_group=nl)
                if valid and lane == 0:
                    p = grp * rp + r
                    y[row0 + t0 + s, h * head_dim + p] = (tot + dskip * xs[s, p]).to(cutlass.BFloat16)
        cute.arch.sync_threads()


@cute.jit
def ssd_scan(xbc: cute.Tensor, dt: cute.Tensor, a_log: cute.Tensor, d_skip: cute.Tensor, y: cute.Tensor,
             seqlen: cutlass.Constexpr, head_dim: cutlass.Constexpr, state: cutlass.Constexpr,
             stream: cuda.CUstream):
    tokens = cute.size(xbc, mode=[0])
    heads = cute.size(dt, mode=[1])
    rp, nl, ns, groups, threads = _scan_plan(head_dim, state)
    ssd_scan_kernel(xbc, dt, a_log, d_skip, y, seqlen, heads, head_dim, state, rp, nl, ns, groups,
                    threads).launch(grid=[heads, tokens // seqlen, 1], block=[threads, 1, 1], stream=stream)


# ------------------------------------------------------------------------------------- gated norm
def _norm_plan(width):
    threads = min(256, (width + 31) // 32 * 32)
    steps = (width + threads - 1) // threads
    return threads, steps, width % threads != 0


@cute.kernel
def gated_norm_kernel(y: cute.Tensor, zx: cute.Tensor, weight: cute.Tensor, normed: cute.Tensor,
                      eps: cutlass.Float32, width: cutlass.Constexpr, threads: cutlass.Constexpr,
                      steps: cutlass.Constexpr, bounded: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    gi, tok, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    warps = threads // 32
    base = gi * width

    smem = cutlass.memory.SmemAllocator()
    part = smem.allocate_tensor(cutlass.Float32, cute.make_layout(warps), byte_alignment=16)

    gs = cute.make_rmem_tensor((steps,), cutlass.Float32)
    gs.fill(0.0)
    sq = cutlass.Float32(0.0)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < width
        if ok:
            z = zx[tok, base + c].to(cutlass.Float32)
            gv = y[tok, base + c].to(cutlass.Float32) * (z / (1.0 + cute.math.exp(-z)))
            gs[k] = gv
            sq = sq + gv * gv
    sq = cute.arch.warp_reduction_sum(sq)
    if lane == 0:
        part[warp] = sq
    cute.arch.sync_threads()
    total = cutlass.Float32(0.0)
    for i in cutlass.range_constexpr(warps):
        total = total + part[i]
    r = cute.math.rsqrt(total / width + eps)
    for k in cutlass.range_constexpr(steps):
        c = tidx + k * threads
        ok = True
        if cutlass.const_expr(bounded):
            ok = c < width
        if ok:
            normed[tok, base + c] = ((gs[k] * r) * weight[base + c].to(cutlass.Float32)).to(cutlass.BFloat16)


@cute.jit
def gated_norm(y: cute.Tensor, zx: cute.Tensor, weight: cute.Tensor, normed: cute.Tensor, eps: cutlass.Float32,
               stream: cuda.CUstream):
    tokens = cute.size(y, mode=[0])
    width = cute.size(y, mode=[1]) // GROUPS
    threads, steps, bounded = _norm_plan(width)
    gated_norm_kernel(y, zx, weight, normed, eps, width, threads, steps, bounded).launch(
        grid=[GROUPS, tokens, 1], block=[threads, 1, 1], stream=stream)


# ------------------------------------------------------------------------------------------- host
def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(shape, dtype=cutlass.BFloat16, align=16):
    return make_fake_compact_tensor(dtype, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)),
                                    assumed_align=align)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _compile_gemm(m, n, k, arch=None, ptx_dir=None):
    a, w, c = _fake((m, k)), _fake((n, k)), _fake((m, n))
    return cute.compile(proj_gemm, a, w, c, k, make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_conv(tokens, seqlen, zx_cols, inner, conv_dim, heads, arch=None, ptx_dir=None):
    zx = _fake((tokens, zx_cols))
    w, b, dtb = _fake((conv_dim, 1, CONV), align=2), _fake((conv_dim,), align=2), _fake((heads,), align=2)
    xbc, dt = _fake((tokens, conv_dim)), _fake((tokens, heads), cutlass.Float32)
    return cute.compile(conv_act, zx, w, b, dtb, xbc, dt, 0.0, 1.0, seqlen, inner, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_scan(tokens, seqlen, conv_dim, heads, head_dim, state, arch=None, ptx_dir=None):
    xbc, dt = _fake((tokens, conv_dim)), _fake((tokens, heads), cutlass.Float32)
    a_log, d_skip = _fake((heads,), align=2), _fake((heads,), align=2)
    y = _fake((tokens, heads * head_dim))
    return cute.compile(ssd_scan, xbc, dt, a_log, d_skip, y, seqlen, head_dim, state, make_fake_stream(),
                        options=_options(arch, ptx_dir))


def _compile_norm(tokens, inner, zx_cols, normed_cols, arch=None, ptx_dir=None):
    y, zx, w = _fake((tokens, inner)), _fake((tokens, zx_cols)), _fake((inner,), align=2)
    normed = _fake((tokens, normed_cols))
    return cute.compile(gated_norm, y, zx, w, normed, 1e-5, make_fake_stream(), options=_options(arch, ptx_dir))


def _padded(w, shape):
    if tuple(w.shape) == tuple(shape):
        return w.contiguous()
    p = torch.zeros(*shape, dtype=torch.bfloat16, device=w.device)
    p[tuple(slice(0, s) for s in w.shape)] = w
    return p


def _get(key, build):
    if key not in _COMPILED:
        _COMPILED[key] = build(*key[1:])
    return _COMPILED[key]


def solve(hidden_states, in_proj_weight, conv1d_weight, conv1d_bias, dt_bias, A_log, D, norm_weight,
          out_proj_weight, time_step_limit_min, time_step_limit_max, layer_norm_epsilon):
    batch, seqlen, hidden = hidden_states.shape
    heads, inner, conv_dim = A_log.shape[0], norm_weight.shape[0], conv1d_weight.shape[0]
    head_dim, state = inner // heads, (conv_dim - inner) // (2 * GROUPS)
    proj = in_proj_weight.shape[0]
    tokens = batch * seqlen
    dev = hidden_states.device
    out = torch.empty(batch, seqlen, hidden, dtype=torch.bfloat16, device=dev)
    if tokens == 0:
        return out
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    mp, k1, n1 = _up(tokens, _BM), _up(hidden, _BK), _up(proj, _BN)
    k2, n2 = _up(inner, _BK), _up(hidden, _BN)

    a1 = _padded(hidden_states.reshape(tokens, hidden), (mp, k1))
    zx = torch.empty(mp, n1, dtype=torch.bfloat16, device=dev)
    _get(("gemm", mp, n1, k1), _compile_gemm)(a1, _padded(in_proj_weight, (n1, k1)), zx, stream)

    zx_t = zx[:tokens]
    xbc = torch.empty(tokens, conv_dim, dtype=torch.bfloat16, device=dev)
    dt = torch.empty(tokens, heads, dtype=torch.float32, device=dev)
    _get(("conv", tokens, seqlen, n1, inner, conv_dim, heads), _compile_conv)(
        zx_t, conv1d_weight.contiguous(), conv1d_bias.contiguous(), dt_bias.contiguous(), xbc, dt,
        float(time_step_limit_min), float(time_step_limit_max), stream)

    y = torch.empty(tokens, inner, dtype=torch.bfloat16, device=dev)
    _get(("scan", tokens, seqlen, conv_dim, heads, head_dim, state), _compile_scan)(
        xbc, dt, A_log.contiguous(), D.contiguous(), y, stream)

    if (mp, k2) != (tokens, inner):
        normed = torch.zeros(mp, k2, dtype=torch.bfloat16, device=dev)
    else:
        normed = torch.empty(mp, k2, dtype=torch.bfloat16, device=dev)
    _get(("norm", tokens, inner, n1, k2), _compile_norm)(y, zx_t, norm_weight.contiguous(), normed[:tokens],
                                                          float(layer_norm_epsilon), stream)

    flat = out.view(tokens, hidden)
    c = flat if (mp, n2) == (tokens, hidden) else torch.empty(mp, n2, dtype=torch.bfloat16, device=dev)
    _get(("gemm", mp, n2, k2), _compile_gemm)(normed, _padded(out_proj_weight, (n2, k2)), c, stream)
    if c.data_ptr() != flat.data_ptr():
        flat.copy_(c[:tokens, :hidden])
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the fixed workload without a GPU; return the kernel names."""
    w = WORKLOAD
    tokens, inner = w["batch"] * w["seqlen"], w["heads"] * w["head_dim"]
    conv_dim = inner + 2 * GROUPS * w["state"]
    proj = inner + conv_dim + w["heads"]
    names = list(_compile_gemm(tokens, proj, w["hidden"], arch, ptx_dir).kernel_info)
    names += list(_compile_conv(tokens, w["seqlen"], proj, inner, conv_dim, w["heads"], arch, ptx_dir).kernel_info)
    names += list(_compile_scan(tokens, w["seqlen"], conv_dim, w["heads"], w["head_dim"], w["state"], arch,
                                ptx_dir).kernel_info)
    names += list(_compile_norm(tokens, inner, proj, inner, arch, ptx_dir).kernel_info)
    names += list(_compile_gemm(tokens, w["hidden"], inner, arch, ptx_dir).kernel_info)
    return names
