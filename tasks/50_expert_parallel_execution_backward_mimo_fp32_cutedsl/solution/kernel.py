"""CuTe DSL oracle for problem 50: backward of routed SwiGLU experts with a weighted combine (fp32).

The (token, slot) pairs are sorted by expert on the host (a stable argsort of the expert ids, the
per-expert counts and offsets, each sorted row's token and routing weight: small index glue); every
intermediate is kept in that sorted row order. All arithmetic runs in DSL kernels on the CUDA cores
(the reference is strict fp32; TF32 tensor cores would be far too coarse). Every long sum multiplies
the fp32 operands exactly in fp64 and accumulates in fp64, rounding once to fp32: the gradients are
checked row by row against a float64 anchor, and rows fed by an expert's few tokens leave little
slack, so the sums are made nearly exact (an emulation with fp32 chunk sums failed that row check,
the fp64 sums pass it). The SwiGLU epilogues also run in fp64 (exp by a polynomial, IEEE
division) on the unrounded sums, so each stored value is rounded once.

``moe_rows_kernel``: per expert e, its sorted rows times the expert's weight, one CTA per (32-row
tile, 64-column tile, expert); 256 threads, each 2 rows x 4 columns (fp64 accumulators). K advances
in slices of 32 staged K-major in shared memory (coalesced global reads, padded rows). The A rows
are gathered through a row map (the token of each sorted pair) and optionally scaled by a per-row
factor as they are staged (d_out = w * dY, one fp32 product as in the reference). The weight is read
either as [N, K] (x W^T) or as [K, N] (x W). Built four ways:
- gate/up: g = x W_g^T and up = x W_u^T (two accumulators), epilogue sig = 1 / (1 + exp(-g)),
  inter = g sig up; g, up and inter are stored (fp32);
- down: out = inter W_d^T;
- d_inter = d_out W_d, epilogue d_up = d_inter g sig, d_g = d_inter up sig (1 + g (1 - sig)) (the
  stored g and up re-read, sig recomputed from them);
- d_x = d_g W_g + d_up W_u (the two fp64 sums added, then rounded).

``moe_wgrad_kernel``: per expert, G[e] = P^T Q over the expert's rows (dW_g = d_g^T x,
dW_u = d_up^T x, dW_d = d_out^T inter), one CTA per (64 x 64 output tile, expert), each thread a
4 x 4 block of fp64 sums; the expert's rows are staged 16 at a time. Experts without rows get zeros.

``moe_combine_kernel``: one CTA per token: grad_hidden[t] = sum over the slots in slot order of the
pair rows of d_x (fp32), and grad_topk_weights[t, k] = dY[t] . out[pair] (fp64 per-thread partial
sums, warp shuffles, then the 8 warp totals in shared memory, rounded once).

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 21): 357.1 ms against
the eager reference's 93.6 ms (0.26x). The grader's profiled call puts 99.97 % of the GPU time in DSL
kernels: the four row-GEMM passes (gate/up, down, d_inter, d_x; six GEMMs) 267.9 ms, the weight
gradients 87.1 ms, the combine 0.72 ms. The 49,152 routed pairs make nine GEMMs of 0.41 TFLOP each,
3.71 TFLOP in all: the row passes issue theirs at 9.2 TFLOP/s and the weight gradients at 14.2 TFLOP/s
as fp64 FMAs (exact fp32 products, fp64 sums), while the reference's fp32 bmm's run at 40 TFLOP/s of
useful work. The H100's fp64 FMA peak (34 TFLOP/s) would need 109 ms, so no fp64 SIMT form reaches
eager, and the fp32 chunk sums that would were too coarse for the float64 anchor's row check (above).
The route that would beat eager, not taken here: the fp64 tensor cores (DMMA, mma.sync m8n8k4, 67
TFLOP/s on the H100, 55 ms for these GEMMs at peak) with the same exact products and fp64 sums, over
the same expert-sorted tiles, or 3xTF32 if its error proves small enough for those rows.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=6144, hidden=4096, inter=1024, experts=128, top_k=8)
_BM, _BN, _BK = 32, 64, 32
_THREADS = 256
_WT = 64  # weight-gradient tile (64 x 64)
_WR = 16  # rows staged per step in the weight-gradient kernel
_MODE_PLAIN, _MODE_GATE_UP, _MODE_DINTER, _MODE_DX = 0, 1, 2, 3
_COMPILED = {}


_LN2_HI = 0.6931471803691238  # ln 2 split so that n * _LN2_HI is exact for |n| < 2^20
_LN2_LO = 1.9082149292705877e-10
_INV_LN2 = 1.4426950408889634


def _exp64(x):
    """exp(x) in fp64 (|x| clamped to 60; relative error ~1e-15): 2^n exp(r), n = round(x / ln 2),
    exp(r) by its degree-13 Taylor polynomial on |r| <= ln2/2, 2^n as an exact product of powers of two."""
    hi = cutlass.Float64(60.0)
    lo = cutlass.Float64(-60.0)
    xc = cutlass.Float64(cutlass.select_(x > hi, hi, cutlass.Float64(cutlass.select_(x < lo, lo, x))))
    nf = cute.math.floor(xc * _INV_LN2 + 0.5)
    r = (xc - nf * _LN2_HI) - nf * _LN2_LO
    poly = cutlass.Float64(1.0 / 6227020800.0)
    for k in range(12, -1, -1):
        poly = poly * r + cutlass.Float64(1.0 / math.factorial(k))
    n = cutlass.Int32(nf)
    m = cutlass.Int32(cutlass.select_(n < 0, -n, n))
    p2 = cutlass.Float64(1.0)
    for b in range(7):
        p2 = p2 * cutlass.Float64(cutlass.select_((m >> b) & 1 == 1, cutlass.Float64(2.0 ** (2 ** b)),
                                                  cutlass.Float64(1.0)))
    p2 = cutlass.Float64(cutlass.select_(n < 0, cutlass.Float64(1.0) / p2, p2))
    return poly * p2


def _sigmoid64(g):
    """1 / (1 + exp(-g)) in fp64 (IEEE division)."""
    return cutlass.Float64(1.0) / (cutlass.Float64(1.0) + _exp64(-g))


@cute.kernel
def moe_rows_kernel(a1: cute.Tensor, a2: cute.Tensor, rowmap: cute.Tensor, rowscale: cute.Tensor,
                    w1: cute.Tensor, w2: cute.Tensor, offs: cute.Tensor, c1: cute.Tensor, c2: cute.Tensor,
                    c3: cute.Tensor, e1: cute.Tensor, e2: cute.Tensor, mode: cutlass.Constexpr,
                    nn: cutlass.Constexpr, gather: cutlass.Constexpr, scaled: cutlass.Constexpr,
                    dual: cutlass.Constexpr):
    """C[off_e + m, n] = sum_k A[row(off_e + m), k] * W[e](k, n) for the expert's rows (see the module doc)."""
    tidx, _, _ = cute.arch.thread_idx()
    mt, nt, e = cute.arch.block_idx()
    k_dim = cute.size(a1, mode=[1])
    n_dim = cute.size(c1, mode=[1])
    row0 = offs[e]
    rows = offs[e + 1] - row0
    m0 = mt * _BM
    n0 = nt * _BN
    if m0 < rows:
        smem = cutlass.memory.SmemAllocator()
        sa1 = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BM), stride=(_BM + 1, 1)), 16)
        sa2 = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BM), stride=(_BM + 1, 1)), 16)
        sw1 = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BN), stride=(_BN + 1, 1)), 16)
        sw2 = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BN), stride=(_BN + 1, 1)), 16)
        ty = tidx // 16
        tx = tidx % 16
        tot1 = cute.make_rmem_tensor((8,), cutlass.Float64)
        tot2 = cute.make_rmem_tensor((8,), cutlass.Float64)
        tot1.fill(0.0)
        tot2.fill(0.0)
        k_tiles = (k_dim + _BK - 1) // _BK
        for kt in range(k_tiles):
            k0 = kt * _BK
            cute.arch.sync_threads()
            # A tile: 32 rows x 32 k, 4 per thread, coalesced along k; stored K-major
            for j in cutlass.range_constexpr(_BM * _BK // _THREADS):
                idx = tidx + j * _THREADS
                r = idx // _BK
                kk = idx % _BK
                ok = (m0 + r < rows) & (k0 + kk < k_dim)
                srow = row0 + cutlass.min(m0 + r, rows - 1)
                arow = srow
                if cutlass.const_expr(gather):
                    arow = rowmap[srow]
                kc = cutlass.min(k0 + kk, k_dim - 1)
                v1 = a1[arow, kc]
                if cutlass.const_expr(scaled):
                    v1 = v1 * rowscale[srow]
                sa1[kk, r] = cutlass.Float32(cutlass.select_(ok, v1, 0.0))
                if cutlass.const_expr(dual):
                    v2 = a2[arow, kc]
                    sa2[kk, r] = cutlass.Float32(cutlass.select_(ok, v2, 0.0))
            # W tile: 32 k x 64 n, 8 per thread, coalesced along the weight's contiguous dim
            for j in cutlass.range_constexpr(_BN * _BK // _THREADS):
                idx = tidx + j * _THREADS
                if cutlass.const_expr(nn):
                    kk = idx // _BN
                    n = idx % _BN
                else:
                    n = idx // _BK
                    kk = idx % _BK
                ok = (n0 + n < n_dim) & (k0 + kk < k_dim)
                nc = cutlass.min(n0 + n, n_dim - 1)
                kc = cutlass.min(k0 + kk, k_dim - 1)
                if cutlass.const_expr(nn):
                    sw1[kk, n] = cutlass.Float32(cutlass.select_(ok, w1[e, kc, nc], 0.0))
                    if cutlass.const_expr(dual):
                        sw2[kk, n] = cutlass.Float32(cutlass.select_(ok, w2[e, kc, nc], 0.0))
                else:
                    sw1[kk, n] = cutlass.Float32(cutlass.select_(ok, w1[e, nc, kc], 0.0))
                    if cutlass.const_expr(dual):
                        sw2[kk, n] = cutlass.Float32(cutlass.select_(ok, w2[e, nc, kc], 0.0))
            cute.arch.sync_threads()
            for kk in cutlass.range_constexpr(_BK):
                for i in cutlass.range_constexpr(2):
                    av1 = sa1[kk, ty * 2 + i]
                    av2 = av1
                    if cutlass.const_expr(dual and mode == _MODE_DX):
                        av2 = sa2[kk, ty * 2 + i]
                    for c in cutlass.range_constexpr(4):
                        tot1[i * 4 + c] = tot1[i * 4 + c] + cutlass.Float64(av1) * cutlass.Float64(sw1[kk, tx * 4 + c])
                        if cutlass.const_expr(dual):
                            tot2[i * 4 + c] = tot2[i * 4 + c] + (cutlass.Float64(av2)
                                                                 * cutlass.Float64(sw2[kk, tx * 4 + c]))
        # epilogue
        for i in cutlass.range_constexpr(2):
            m = m0 + ty * 2 + i
            for c in cutlass.range_constexpr(4):
                n = n0 + tx * 4 + c
                if (m < rows) & (n < n_dim):
                    s = row0 + m
                    if cutlass.const_expr(mode == _MODE_PLAIN):
                        c1[s, n] = cutlass.Float32(tot1[i * 4 + c])
                    if cutlass.const_expr(mode == _MODE_GATE_UP):
                        g = tot1[i * 4 + c]
                        u = tot2[i * 4 + c]
                        c1[s, n] = cutlass.Float32(g)
                        c2[s, n] = cutlass.Float32(u)
                        c3[s, n] = cutlass.Float32(g * _sigmoid64(g) * u)
                    if cutlass.const_expr(mode == _MODE_DINTER):
                        d = tot1[i * 4 + c]
                        g = cutlass.Float64(e1[s, n])
                        u = cutlass.Float64(e2[s, n])
                        sig = _sigmoid64(g)
                        c2[s, n] = cutlass.Float32(d * (g * sig))
                        one = cutlass.Float64(1.0)
                        c1[s, n] = cutlass.Float32(d * u * sig * (one + g * (one - sig)))
                    if cutlass.const_expr(mode == _MODE_DX):
                        c1[s, n] = cutlass.Float32(tot1[i * 4 + c] + tot2[i * 4 + c])


@cute.kernel
def moe_wgrad_kernel(p: cute.Tensor, pmap: cute.Tensor, pscale: cute.Tensor, q: cute.Tensor, qmap: cute.Tensor,
                     offs: cute.Tensor, grad: cute.Tensor, pgather: cutlass.Constexpr, qgather: cutlass.Constexpr):
    """grad[e, i, j] = sum over the expert's sorted rows s of P(s, i) * Q(s, j), in row order."""
    tidx, _, _ = cute.arch.thread_idx()
    it, jt, e = cute.arch.block_idx()
    n1 = cute.size(grad, mode=[1])
    n2 = cute.size(grad, mode=[2])
    row0 = offs[e]
    rows = offs[e + 1] - row0
    i0 = it * _WT
    j0 = jt * _WT
    smem = cutlass.memory.SmemAllocator()
    sp = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_WR, _WT), stride=(_WT, 1)), 16)
    sq = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_WR, _WT), stride=(_WT, 1)), 16)
    ti = tidx // 16
    tj = tidx % 16
    acc = cute.make_rmem_tensor((16,), cutlass.Float64)
    acc.fill(0.0)
    for r0 in range(0, rows, _WR):
        cute.arch.sync_threads()
        for j in cutlass.range_constexpr(_WR * _WT // _THREADS):
            idx = tidx + j * _THREADS
            r = idx // _WT
            c = idx % _WT
            ok_r = r0 + r < rows
            s = row0 + cutlass.min(r0 + r, rows - 1)
            prow = s
            if cutlass.const_expr(pgather):
                prow = pmap[s]
            qrow = s
            if cutlass.const_expr(qgather):
                qrow = qmap[s]
            pv = p[prow, cutlass.min(i0 + c, n1 - 1)] * pscale[s]
            qv = q[qrow, cutlass.min(j0 + c, n2 - 1)]
            sp[r, c] = cutlass.Float32(cutlass.select_(ok_r & (i0 + c < n1), pv, 0.0))
            sq[r, c] = cutlass.Float32(cutlass.select_(ok_r & (j0 + c < n2), qv, 0.0))
        cute.arch.sync_threads()
        for r in cutlass.range_constexpr(_WR):
            for a in cutlass.range_constexpr(4):
                pa = sp[r, ti * 4 + a]
                for b in cutlass.range_constexpr(4):
                    acc[a * 4 + b] = acc[a * 4 + b] + cutlass.Float64(pa) * cutlass.Float64(sq[r, tj * 4 + b])
    for a in cutlass.range_constexpr(4):
        for b in cutlass.range_constexpr(4):
            i = i0 + ti * 4 + a
            jj = j0 + tj * 4 + b
            if (i < n1) & (jj < n2):
                grad[e, i, jj] = cutlass.Float32(acc[a * 4 + b])


@cute.kernel
def moe_combine_kernel(dx: cute.Tensor, out: cute.Tensor, dy: cute.Tensor, pos: cute.Tensor, grad_x: cute.Tensor,
                       grad_w: cute.Tensor, top_k: cutlass.Constexpr):
    """grad_x[t] = sum_k dx[pos[t, k]] (slot order); grad_w[t, k] = dy[t] . out[pos[t, k]]."""
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    hidden = cute.size(dy, mode=[1])
    smem = cutlass.memory.SmemAllocator()
    red = smem.allocate_tensor(cutlass.Float64, cute.make_layout((_THREADS // 32,)), 16)
    for c in range(tidx, hidden, _THREADS):
        total = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(top_k):
            total = total + dx[pos[t, k], c]
        grad_x[t, c] = total
    for k in cutlass.range_constexpr(top_k):
        s = pos[t, k]
        part = cutlass.Float64(0.0)
        for c in range(tidx, hidden, _THREADS):
            part = part + cutlass.Float64(dy[t, c]) * cutlass.Float64(out[s, c])
        part = cute.arch.warp_reduction_sum(part)
        cute.arch.sync_threads()
        if lane == 0:
            red[warp] = part
        cute.arch.sync_threads()
        if tidx == 0:
            total = red[0]
            for i in cutlass.range_constexpr(1, _THREADS // 32):
                total = total + red[i]
            grad_w[t, k] = cutlass.Float32(total)


@cute.jit
def moe_rows(a1: cute.Tensor, a2: cute.Tensor, rowmap: cute.Tensor, rowscale: cute.Tensor, w1: cute.Tensor,
             w2: cute.Tensor, offs: cute.Tensor, c1: cute.Tensor, c2: cute.Tensor, c3: cute.Tensor, e1: cute.Tensor,
             e2: cute.Tensor, m_tiles: cutlass.Int32, mode: cutlass.Constexpr, nn: cutlass.Constexpr,
             gather: cutlass.Constexpr, scaled: cutlass.Constexpr, dual: cutlass.Constexpr, stream: cuda.CUstream):
    experts = cute.size(offs, mode=[0]) - 1
    n_dim = cute.size(c1, mode=[1])
    smem_bytes = 2 * _BK * ((_BM + 1) + (_BN + 1)) * 4 + 256
    moe_rows_kernel(a1, a2, rowmap, rowscale, w1, w2, offs, c1, c2, c3, e1, e2, mode, nn, gather, scaled,
                    dual).launch(grid=[m_tiles, (n_dim + _BN - 1) // _BN, experts], block=[_THREADS, 1, 1],
                                 smem=smem_bytes, stream=stream)


@cute.jit
def moe_wgrad(p: cute.Tensor, pmap: cute.Tensor, pscale: cute.Tensor, q: cute.Tensor, qmap: cute.Tensor,
              offs: cute.Tensor, grad: cute.Tensor, pgather: cutlass.Constexpr, qgather: cutlass.Constexpr,
              stream: cuda.CUstream):
    experts = cute.size(grad, mode=[0])
    n1 = cute.size(grad, mode=[1])
    n2 = cute.size(grad, mode=[2])
    moe_wgrad_kernel(p, pmap, pscale, q, qmap, offs, grad, pgather, qgather).launch(
        grid=[(n1 + _WT - 1) // _WT, (n2 + _WT - 1) // _WT, experts], block=[_THREADS, 1, 1],
        smem=2 * _WR * _WT * 4 + 64, stream=stream)


@cute.jit
def moe_combine(dx: cute.Tensor, out: cute.Tensor, dy: cute.Tensor, pos: cute.Tensor, grad_x: cute.Tensor,
                grad_w: cute.Tensor, top_k: cutlass.Constexpr, stream: cuda.CUstream):
    tokens = cute.size(dy, mode=[0])
    moe_combine_kernel(dx, out, dy, pos, grad_x, grad_w, top_k).launch(
        grid=[tokens, 1, 1], block=[_THREADS, 1, 1], smem=_THREADS // 32 * 8 + 64, stream=stream)


def _rm(shape):
    return make_fake_compact_tensor(cutlass.Float32, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)))


def _ri(shape):
    return make_fake_compact_tensor(cutlass.Int32, shape, stride_order=tuple(range(len(shape) - 1, -1, -1)))


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


# (mode, nn, gather, scaled, dual): A operand, its K and N (as "hidden" / "inter"), weight layout
_ROWS = {
    "gate_up": ((_MODE_GATE_UP, False, True, False, True), "x", "hidden", "inter"),
    "down": ((_MODE_PLAIN, False, False, False, False), "inter", "inter", "hidden"),
    "d_inter": ((_MODE_DINTER, True, True, True, False), "dy", "hidden", "inter"),
    "d_x": ((_MODE_DX, True, False, False, True), "inter", "inter", "hidden"),
}


def _compile(kind, tokens, hidden, inter, experts, top_k, arch=None, ptx_dir=None):
    pairs = tokens * top_k
    dims = {"hidden": hidden, "inter": inter}
    opts = _options(arch, ptx_dir)
    if kind in _ROWS:
        flags, a_kind, k_name, n_name = _ROWS[kind]
        mode, nn, gather, scaled, dual = flags
        k, n = dims[k_name], dims[n_name]
        a_rows = tokens if a_kind in ("x", "dy") else pairs
        w_shape = (experts, k, n) if nn else (experts, n, k)
        return cute.compile(moe_rows, _rm((a_rows, k)), _rm((a_rows, k)), _ri((pairs,)), _rm((pairs,)), _rm(w_shape),
                            _rm(w_shape), _ri((experts + 1,)), _rm((pairs, n)), _rm((pairs, n)), _rm((pairs, n)),
                            _rm((pairs, n)), _rm((pairs, n)), 1, mode, nn, gather, scaled, dual, make_fake_stream(),
                            options=opts)
    if kind in ("wgrad_gate", "wgrad_down"):
        if kind == "wgrad_gate":  # d_g^T x (also d_up^T x): P sorted rows, Q gathered tokens
            p, q, g_shape, pg, qg = _rm((pairs, inter)), _rm((tokens, hidden)), (experts, inter, hidden), False, True
        else:  # (w dY)^T inter: P gathered tokens scaled by w, Q sorted rows
            p, q, g_shape, pg, qg = _rm((tokens, hidden)), _rm((pairs, inter)), (experts, hidden, inter), True, False
        return cute.compile(moe_wgrad, p, _ri((pairs,)), _rm((pairs,)), q, _ri((pairs,)), _ri((experts + 1,)),
                            _rm(g_shape), pg, qg, make_fake_stream(), options=opts)
    return cute.compile(moe_combine, _rm((pairs, hidden)), _rm((pairs, hidden)), _rm((tokens, hidden)),
                        _ri((tokens, top_k)), _rm((tokens, hidden)), _rm((tokens, top_k)), top_k, make_fake_stream(),
                        options=opts)


_KINDS = ("gate_up", "down", "d_inter", "d_x", "wgrad_gate", "wgrad_down", "combine")


def solve(grad_output, hidden_states, topk_indices, topk_weights, gate_weights, up_weights, down_weights):
    tokens, top_k = topk_indices.shape
    experts, inter, hidden = gate_weights.shape
    pairs = tokens * top_k
    dev = hidden_states.device
    f32 = torch.float32
    shape = (tokens, hidden, inter, experts, top_k)
    fns = {}
    for kind in _KINDS:
        if (kind, shape) not in _COMPILED:
            _COMPILED[(kind, shape)] = _compile(kind, *shape)
        fns[kind] = _COMPILED[(kind, shape)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)

    # index glue: pairs sorted by expert (stable), per-expert offsets, each sorted row's token and weight
    flat = topk_indices.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    offs = torch.zeros(experts + 1, dtype=torch.int32, device=dev)
    offs[1:] = torch.cumsum(counts, 0).to(torch.int32)
    tok = (order // top_k).to(torch.int32)
    w_sorted = topk_weights.reshape(-1).to(f32)[order].contiguous()
    pos = torch.empty(pairs, dtype=torch.int32, device=dev)
    pos[order] = torch.arange(pairs, dtype=torch.int32, device=dev)
    ones = torch.ones(pairs, dtype=f32, device=dev)
    m_tiles = max(1, (int(counts.max()) + _BM - 1) // _BM)

    x = hidden_states.contiguous()
    dy = grad_output.contiguous()
    wg, wu, wd = gate_weights.contiguous(), up_weights.contiguous(), down_weights.contiguous()
    g = torch.empty(pairs, inter, dtype=f32, device=dev)
    up = torch.empty(pairs, inter, dtype=f32, device=dev)
    act_up = torch.empty(pairs, inter, dtype=f32, device=dev)
    out = torch.empty(pairs, hidden, dtype=f32, device=dev)
    d_g = torch.empty(pairs, inter, dtype=f32, device=dev)
    d_up = torch.empty(pairs, inter, dtype=f32, device=dev)
    d_x = torch.empty(pairs, hidden, dtype=f32, device=dev)
    fns["gate_up"](x, x, tok, ones, wg, wu, offs, g, up, act_up, g, g, m_tiles, stream)
    fns["down"](act_up, act_up, tok, ones, wd, wd, offs, out, out, out, out, out, m_tiles, stream)
    fns["d_inter"](dy, dy, tok, w_sorted, wd, wd, offs, d_g, d_up, d_g, g, up, m_tiles, stream)
    fns["d_x"](d_g, d_up, tok, ones, wg, wu, offs, d_x, d_x, d_x, d_x, d_x, m_tiles, stream)
    grad_gate = torch.empty(experts, inter, hidden, dtype=f32, device=dev)
    grad_up = torch.empty(experts, inter, hidden, dtype=f32, device=dev)
    grad_down = torch.empty(experts, hidden, inter, dtype=f32, device=dev)
    fns["wgrad_gate"](d_g, tok, ones, x, tok, offs, grad_gate, stream)
    fns["wgrad_gate"](d_up, tok, ones, x, tok, offs, grad_up, stream)
    fns["wgrad_down"](dy, tok, w_sorted, act_up, tok, offs, grad_down, stream)
    grad_x = torch.empty(tokens, hidden, dtype=f32, device=dev)
    grad_w = torch.empty(tokens, top_k, dtype=f32, device=dev)
    fns["combine"](d_x, out, dy, pos.view(tokens, top_k), grad_x, grad_w, stream)
    return grad_x, grad_w, grad_gate, grad_up, grad_down


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names."""
    w = WORKLOAD
    names = []
    for kind in _KINDS:
        names += list(_compile(kind, w["tokens"], w["hidden"], w["inter"], w["experts"], w["top_k"], arch,
                               ptx_dir).kernel_info)
    return names
