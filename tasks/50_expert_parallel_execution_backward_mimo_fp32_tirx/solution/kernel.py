"""TIRx oracle for problem 50: backward of routed SwiGLU experts with a weighted combine (fp32).

The (token, slot) pairs are sorted by expert on the host (a stable argsort of the expert ids, the
per-expert counts and offsets, each sorted row's token and routing weight: small index glue); every
intermediate is kept in that sorted row order. All arithmetic runs in TIRx kernels on the CUDA cores
(the reference is strict fp32; tensor cores in TIRx 0.27 take bf16/f16 operands, far too coarse).
Every long sum multiplies the fp32 operands exactly in fp64 and accumulates in fp64, rounding once
to fp32: the gradients are checked row by row against a float64 anchor, and rows fed by an expert's
few tokens leave little slack, so the sums are made nearly exact (an emulation with fp32 chunk sums
failed that row check, the fp64 sums pass it). The SwiGLU epilogues also run in fp64 (exp by a
polynomial, IEEE division) on the unrounded sums, so each stored value is rounded once.

``mkb_moe_rows_<build>``: per expert e, its sorted rows times the expert's weight, one CTA per
(32-row tile, 64-column tile, expert); 256 threads, each 2 rows x 4 columns (fp64 accumulators).
K advances in slices of 32 staged K-major in shared memory (coalesced global reads, padded rows).
The A rows are gathered through a row map (the token of each sorted pair) and optionally scaled by a
per-row factor as they are staged (d_out = w * dY, one fp32 product as in the reference). The weight
is read either as [N, K] (x W^T) or as [K, N] (x W). Builds:
- gate_up: g = x W_g^T and up = x W_u^T (two accumulators), epilogue sig = 1 / (1 + exp(-g)),
  inter = g sig up; g, up and inter are stored (fp32);
- down: out = inter W_d^T;
- d_inter = d_out W_d, epilogue d_up = d_inter g sig, d_g = d_inter up sig (1 + g (1 - sig)) (the
  stored g and up re-read, sig recomputed from them);
- d_x = d_g W_g + d_up W_u (the two fp64 sums added, then rounded).
(NVRTC's --use_fast_math relaxes only fp32 division and exp; the fp64 ones are exact IEEE.)

``mkb_moe_wgrad_<build>``: per expert, G[e] = P^T Q over the expert's rows (dW_g = d_g^T x,
dW_u = d_up^T x, dW_d = d_out^T inter), one CTA per (64 x 64 output tile, expert), each thread a
4 x 4 block of fp64 sums; the expert's rows are staged 16 at a time. Experts without rows get zeros.

``mkb_moe_combine``: one CTA per token: grad_hidden[t] = sum over the slots in slot order of the pair
rows of d_x (fp32), and grad_topk_weights[t, k] = dY[t] . out[pair] (fp64 per-thread partial sums,
xor shuffles, then the 8 warp totals in shared memory, rounded once).
"""

import math

import torch
import tvm
from tvm.script import tirx as T

BM, BN, BK = 32, 64, 32
THREADS = 256
WT = 64  # weight-gradient tile (64 x 64)
WR = 16  # rows staged per step in the weight-gradient kernel
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=6144, hidden=4096, inter=1024, experts=128, top_k=8)
# build: (epilogue, weight read as [K, N], gather A rows, scale A rows, two products), A rows, K, N
ROWS = {
    "gate_up": (("gate_up", False, True, False, True), "tokens", "hidden", "inter"),
    "down": (("plain", False, False, False, False), "pairs", "inter", "hidden"),
    "d_inter": (("d_inter", True, True, True, False), "tokens", "hidden", "inter"),
    "d_x": (("d_x", True, False, False, True), "pairs", "inter", "hidden"),
}
KINDS = ("gate_up", "down", "d_inter", "d_x", "wgrad_gate", "wgrad_down", "combine")
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


LN2_HI = 0.6931471803691238  # ln 2 split so that n * LN2_HI is exact for |n| < 2^20
LN2_LO = 1.9082149292705877e-10
INV_LN2 = 1.4426950408889634


def _f64(value):
    return T.float64(value)


def _poly_exp(r):
    """exp(r) for |r| <= ln2/2 by its degree-13 Taylor polynomial, in fp64."""
    poly = _f64(1.0 / math.factorial(13))
    for k in range(12, -1, -1):
        poly = poly * r + _f64(1.0 / math.factorial(k))
    return poly


def _pow2(n):
    """2^n (|n| < 128) in fp64 as an exact product of powers of two."""
    m = T.if_then_else(n < 0, 0 - n, n)
    prod = _f64(1.0)
    for b in range(7):
        prod = prod * T.if_then_else(T.bitwise_and(T.shift_right(m, b), 1) == 1, _f64(2.0 ** (2 ** b)), _f64(1.0))
    return T.if_then_else(n < 0, _f64(1.0) / prod, prod)


def _rows_kernel(build, tokens, hidden, inter, experts, top_k):
    (mode, nn, gather, scaled, dual), a_name, k_name, n_name = ROWS[build]
    pairs = tokens * top_k
    dims = {"hidden": hidden, "inter": inter, "tokens": tokens, "pairs": pairs}
    kd, nd, ar = dims[k_name], dims[n_name], dims[a_name]
    w_shape = (experts, kd, nd) if nn else (experts, nd, kd)
    k_tiles = (kd + BK - 1) // BK

    @T.prim_func
    def mkb_moe_rows(a1_h: T.handle, a2_h: T.handle, map_h: T.handle, scale_h: T.handle, w1_h: T.handle,
                     w2_h: T.handle, offs_h: T.handle, c1_h: T.handle, c2_h: T.handle, c3_h: T.handle,
                     e1_h: T.handle, e2_h: T.handle, m_tiles: T.int32):
        A1 = T.match_buffer(a1_h, (ar, kd), "float32")
        A2 = T.match_buffer(a2_h, (ar, kd), "float32")
        ROWMAP = T.match_buffer(map_h, (pairs,), "int32")
        ROWSCALE = T.match_buffer(scale_h, (pairs,), "float32")
        W1 = T.match_buffer(w1_h, w_shape, "float32")
        W2 = T.match_buffer(w2_h, w_shape, "float32")
        OFFS = T.match_buffer(offs_h, (experts + 1,), "int32")
        C1 = T.match_buffer(c1_h, (pairs, nd), "float32")
        C2 = T.match_buffer(c2_h, (pairs, nd), "float32")
        C3 = T.match_buffer(c3_h, (pairs, nd), "float32")
        E1 = T.match_buffer(e1_h, (pairs, nd), "float32")
        E2 = T.match_buffer(e2_h, (pairs, nd), "float32")
        T.device_entry()
        mt, nt, e = T.cta_id([m_tiles, (nd + BN - 1) // BN, experts])
        tx = T.thread_id([THREADS])
        sa1 = T.alloc_buffer((BK, BM + 1), "float32", scope="shared")
        sa2 = T.alloc_buffer((BK, BM + 1), "float32", scope="shared")
        sw1 = T.alloc_buffer((BK, BN + 1), "float32", scope="shared")
        sw2 = T.alloc_buffer((BK, BN + 1), "float32", scope="shared")
        tot1 = T.alloc_buffer((8,), "float64", scope="local")
        tot2 = T.alloc_buffer((8,), "float64", scope="local")
        dv = T.alloc_buffer((6,), "float64", scope="local")  # g, clamped -g, n, r, sigmoid, scratch
        row0: T.let = OFFS[e]
        rows: T.let = OFFS[e + 1] - OFFS[e]
        m0: T.let = mt * BM
        n0: T.let = nt * BN
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        if m0 < rows:
            for i in T.unroll(8):
                tot1[i] = T.float64(0.0)
                tot2[i] = T.float64(0.0)
            for kt in range(k_tiles):
                T.cuda.cta_sync()
                # A tile: 32 rows x 32 k, 4 per thread, coalesced along k; stored K-major
                for j in T.unroll(BM * BK // THREADS):
                    r: T.let = (tx + j * THREADS) // BK
                    kk: T.let = (tx + j * THREADS) % BK
                    srow: T.let = row0 + T.min(m0 + r, rows - 1)
                    arow: T.let = ROWMAP[srow] if gather else srow
                    kc: T.let = T.min(kt * BK + kk, kd - 1)
                    okay: T.let = m0 + r < rows and kt * BK + kk < kd
                    if scaled:
                        sa1[kk, r] = T.if_then_else(okay, A1[arow, kc] * ROWSCALE[srow], _f32(0.0))
                    else:
                        sa1[kk, r] = T.if_then_else(okay, A1[arow, kc], _f32(0.0))
                    if dual:
                        sa2[kk, r] = T.if_then_else(okay, A2[arow, kc], _f32(0.0))
                # W tile: 32 k x 64 n, 8 per thread, coalesced along the weight's contiguous dim
                for j in T.unroll(BN * BK // THREADS):
                    if nn:
                        wk: T.let = (tx + j * THREADS) // BN
                        wn: T.let = (tx + j * THREADS) % BN
                        wok: T.let = n0 + wn < nd and kt * BK + wk < kd
                        sw1[wk, wn] = T.if_then_else(
                            wok, W1[e, T.min(kt * BK + wk, kd - 1), T.min(n0 + wn, nd - 1)], _f32(0.0))
                        if dual:
                            sw2[wk, wn] = T.if_then_else(
                                wok, W2[e, T.min(kt * BK + wk, kd - 1), T.min(n0 + wn, nd - 1)], _f32(0.0))
                    else:
                        vn: T.let = (tx + j * THREADS) // BK
                        vk: T.let = (tx + j * THREADS) % BK
                        vok: T.let = n0 + vn < nd and kt * BK + vk < kd
                        sw1[vk, vn] = T.if_then_else(
                            vok, W1[e, T.min(n0 + vn, nd - 1), T.min(kt * BK + vk, kd - 1)], _f32(0.0))
                        if dual:
                            sw2[vk, vn] = T.if_then_else(
                                vok, W2[e, T.min(n0 + vn, nd - 1), T.min(kt * BK + vk, kd - 1)], _f32(0.0))
                T.cuda.cta_sync()
                for kk2 in T.unroll(BK):
                    for i in T.unroll(2):
                        for c in T.unroll(4):
                            tot1[i * 4 + c] = tot1[i * 4 + c] + T.float64(sa1[kk2, ty * 2 + i]) * T.float64(
                                sw1[kk2, tc * 4 + c])
                            if dual:
                                if mode == "d_x":
                                    tot2[i * 4 + c] = tot2[i * 4 + c] + T.float64(sa2[kk2, ty * 2 + i]) * T.float64(
                                        sw2[kk2, tc * 4 + c])
                                else:
                                    tot2[i * 4 + c] = tot2[i * 4 + c] + T.float64(sa1[kk2, ty * 2 + i]) * T.float64(
                                        sw2[kk2, tc * 4 + c])
            # epilogue
            for i in T.unroll(2):
                for c in T.unroll(4):
                    if m0 + ty * 2 + i < rows and n0 + tc * 4 + c < nd:
                        s: T.let = row0 + m0 + ty * 2 + i
                        n: T.let = n0 + tc * 4 + c
                        if mode == "plain":
                            C1[s, n] = T.float32(tot1[i * 4 + c])
                        elif mode == "d_x":
                            C1[s, n] = T.float32(tot1[i * 4 + c] + tot2[i * 4 + c])
                        else:
                            if mode == "gate_up":
                                dv[0] = tot1[i * 4 + c]
                            else:
                                dv[0] = T.float64(E1[s, n])
                            # sigmoid(g) = 1 / (1 + exp(-g)) in fp64: exp(-g) = 2^n exp(r)
                            dv[1] = T.max(T.min(_f64(0.0) - dv[0], _f64(60.0)), _f64(-60.0))
                            dv[2] = T.floor(dv[1] * _f64(INV_LN2) + _f64(0.5))
                            dv[3] = (dv[1] - dv[2] * _f64(LN2_HI)) - dv[2] * _f64(LN2_LO)
                            dv[5] = _poly_exp(dv[3]) * _pow2(T.Cast("int32", dv[2]))
                            dv[4] = _f64(1.0) / (_f64(1.0) + dv[5])
                            if mode == "gate_up":
                                C1[s, n] = T.float32(tot1[i * 4 + c])
                                C2[s, n] = T.float32(tot2[i * 4 + c])
                                C3[s, n] = T.float32(dv[0] * dv[4] * tot2[i * 4 + c])
                            else:
                                C2[s, n] = T.float32(tot1[i * 4 + c] * (dv[0] * dv[4]))
                                C1[s, n] = T.float32(tot1[i * 4 + c] * T.float64(E2[s, n]) * dv[4] * (
                                    _f64(1.0) + dv[0] * (_f64(1.0) - dv[4])))

    return mkb_moe_rows.with_attr("global_symbol", f"mkb_moe_rows_{build}")


def _wgrad_kernel(build, tokens, hidden, inter, experts, top_k):
    pairs = tokens * top_k
    if build == "wgrad_gate":  # d_g^T x (also d_up^T x): P sorted rows, Q gathered tokens
        p_rows, n1, q_rows, n2, pgather, qgather = pairs, inter, tokens, hidden, False, True
    else:  # (w dY)^T inter: P gathered tokens scaled by w, Q sorted rows
        p_rows, n1, q_rows, n2, pgather, qgather = tokens, hidden, pairs, inter, True, False

    @T.prim_func
    def mkb_moe_wgrad(p_h: T.handle, pmap_h: T.handle, pscale_h: T.handle, q_h: T.handle, qmap_h: T.handle,
                      offs_h: T.handle, g_h: T.handle):
        P = T.match_buffer(p_h, (p_rows, n1), "float32")
        PMAP = T.match_buffer(pmap_h, (pairs,), "int32")
        PSCALE = T.match_buffer(pscale_h, (pairs,), "float32")
        Q = T.match_buffer(q_h, (q_rows, n2), "float32")
        QMAP = T.match_buffer(qmap_h, (pairs,), "int32")
        OFFS = T.match_buffer(offs_h, (experts + 1,), "int32")
        G = T.match_buffer(g_h, (experts, n1, n2), "float32")
        T.device_entry()
        it, jt, e = T.cta_id([(n1 + WT - 1) // WT, (n2 + WT - 1) // WT, experts])
        tx = T.thread_id([THREADS])
        sp = T.alloc_buffer((WR, WT), "float32", scope="shared")
        sq = T.alloc_buffer((WR, WT), "float32", scope="shared")
        acc = T.alloc_buffer((16,), "float64", scope="local")
        row0: T.let = OFFS[e]
        rows: T.let = OFFS[e + 1] - OFFS[e]
        i0: T.let = it * WT
        j0: T.let = jt * WT
        ti: T.let = tx // 16
        tj: T.let = tx % 16
        for i in T.unroll(16):
            acc[i] = T.float64(0.0)
        for rt in range((rows + WR - 1) // WR):
            T.cuda.cta_sync()
            for j in T.unroll(WR * WT // THREADS):
                r: T.let = (tx + j * THREADS) // WT
                cc: T.let = (tx + j * THREADS) % WT
                s: T.let = row0 + T.min(rt * WR + r, rows - 1)
                prow: T.let = PMAP[s] if pgather else s
                qrow: T.let = QMAP[s] if qgather else s
                sp[r, cc] = T.if_then_else(rt * WR + r < rows and i0 + cc < n1,
                                           P[prow, T.min(i0 + cc, n1 - 1)] * PSCALE[s], _f32(0.0))
                sq[r, cc] = T.if_then_else(rt * WR + r < rows and j0 + cc < n2,
                                           Q[qrow, T.min(j0 + cc, n2 - 1)], _f32(0.0))
            T.cuda.cta_sync()
            for r2 in T.unroll(WR):
                for a in T.unroll(4):
                    for b in T.unroll(4):
                        acc[a * 4 + b] = acc[a * 4 + b] + T.float64(sp[r2, ti * 4 + a]) * T.float64(
                            sq[r2, tj * 4 + b])
        for a in T.unroll(4):
            for b in T.unroll(4):
                if i0 + ti * 4 + a < n1 and j0 + tj * 4 + b < n2:
                    G[e, i0 + ti * 4 + a, j0 + tj * 4 + b] = T.float32(acc[a * 4 + b])

    return mkb_moe_wgrad.with_attr("global_symbol", f"mkb_moe_{build}")


def _combine_kernel(tokens, hidden, inter, experts, top_k):
    pairs = tokens * top_k

    @T.prim_func
    def mkb_moe_combine(dx_h: T.handle, out_h: T.handle, dy_h: T.handle, pos_h: T.handle, gx_h: T.handle,
                        gw_h: T.handle):
        DX = T.match_buffer(dx_h, (pairs, hidden), "float32")
        OUT = T.match_buffer(out_h, (pairs, hidden), "float32")
        DY = T.match_buffer(dy_h, (tokens, hidden), "float32")
        POS = T.match_buffer(pos_h, (tokens, top_k), "int32")
        GX = T.match_buffer(gx_h, (tokens, hidden), "float32")
        GW = T.match_buffer(gw_h, (tokens, top_k), "float32")
        T.device_entry()
        t = T.cta_id([tokens])
        tx = T.thread_id([THREADS])
        red = T.alloc_buffer((THREADS // 32,), "float64", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        dot = T.alloc_buffer((1,), "float64", scope="local")
        for it in range((hidden + THREADS - 1) // THREADS):
            if it * THREADS + tx < hidden:
                acc[0] = _f32(0.0)
                for k in T.unroll(top_k):
                    acc[0] = acc[0] + DX[POS[t, k], it * THREADS + tx]
                GX[t, it * THREADS + tx] = acc[0]
        for k in T.unroll(top_k):
            dot[0] = T.float64(0.0)
            for it in range((hidden + THREADS - 1) // THREADS):
                if it * THREADS + tx < hidden:
                    dot[0] = dot[0] + T.float64(DY[t, it * THREADS + tx]) * T.float64(OUT[POS[t, k], it * THREADS + tx])
            for i in T.unroll(5):
                other: T.float64 = T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), dot[0], T.shift_right(16, i), 32)
                dot[0] = dot[0] + other
            T.cuda.cta_sync()
            if tx % 32 == 0:
                red[tx // 32] = dot[0]
            T.cuda.cta_sync()
            if tx == 0:
                dot[0] = red[0]
                for i in T.unroll(1, THREADS // 32):
                    dot[0] = dot[0] + red[i]
                GW[t, k] = T.float32(dot[0])

    return mkb_moe_combine


def _make(kind, shape):
    if kind in ROWS:
        return _rows_kernel(kind, *shape)
    if kind.startswith("wgrad"):
        return _wgrad_kernel(kind, *shape)
    return _combine_kernel(*shape)


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


def solve(grad_output, hidden_states, topk_indices, topk_weights, gate_weights, up_weights, down_weights):
    tokens, top_k = topk_indices.shape
    experts, inter, hidden = gate_weights.shape
    pairs = tokens * top_k
    dev = hidden_states.device
    f32 = torch.float32
    shape = (tokens, hidden, inter, experts, top_k)
    fns = {kind: _kernel_fn(kind, shape) for kind in KINDS}

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
    m_tiles = max(1, (int(counts.max()) + BM - 1) // BM)

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
    fns["gate_up"](x, x, tok, ones, wg, wu, offs, g, up, act_up, g, g, m_tiles)
    fns["down"](act_up, act_up, tok, ones, wd, wd, offs, out, out, out, out, out, m_tiles)
    fns["d_inter"](dy, dy, tok, w_sorted, wd, wd, offs, d_g, d_up, d_g, g, up, m_tiles)
    fns["d_x"](d_g, d_up, tok, ones, wg, wu, offs, d_x, d_x, d_x, d_x, d_x, m_tiles)
    grad_gate = torch.empty(experts, inter, hidden, dtype=f32, device=dev)
    grad_up = torch.empty(experts, inter, hidden, dtype=f32, device=dev)
    grad_down = torch.empty(experts, hidden, inter, dtype=f32, device=dev)
    fns["wgrad_gate"](d_g, tok, ones, x, tok, offs, grad_gate)
    fns["wgrad_gate"](d_up, tok, ones, x, tok, offs, grad_up)
    fns["wgrad_down"](dy, tok, w_sorted, act_up, tok, offs, grad_down)
    grad_x = torch.empty(tokens, hidden, dtype=f32, device=dev)
    grad_w = torch.empty(tokens, top_k, dtype=f32, device=dev)
    fns["combine"](d_x, out, dy, pos.view(tokens, top_k), grad_x, grad_w)
    return grad_x, grad_w, grad_gate, grad_up, grad_down


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


def kernel_sources(arch="sm_90a", **workload):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    w = workload or WORKLOAD
    shape = (w["tokens"], w["hidden"], w["inter"], w["experts"], w["top_k"])
    sources = {}
    for kind in KINDS:
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
