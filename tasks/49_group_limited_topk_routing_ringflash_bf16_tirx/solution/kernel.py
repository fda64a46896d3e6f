"""TIRx oracle for problem 49: group-limited top-8 MoE routing over 256 experts.

Two TIRx kernels (two launches): the router GEMM, then the routing.

1. ``mkb_router_gemm``: logits = x W^T in fp32 on the tensor cores, written to an fp32
   [tokens, 256] buffer. x and W are bf16, so every product x_k * w_k is exact in fp32 and the
   reference's fp32 GEMM (TF32 off) differs from this one only in how the sums are rounded; bf16
   ``mma.sync`` m16n8k16 with fp32 accumulation (issued through TIRx's PTX intrinsic with
   hand-written fragment maps; TIRx 0.27 has no WGMMA path for sm_90) computes those same exact
   products. The tensor core's own accumulation truncates instead of rounding to nearest, so each
   32-wide K slice is summed by two mma's into zeroed registers and the slice sums are added to the
   running fp32 accumulators with ordinary round-to-nearest adds: the truncation then only touches
   a slice sum (about 1/11 of a logit's size at K = 4096), and the 128 slice additions round like
   the reference's own fp32 sums. (In a CPU model that truncates every mma's sum, the weights'
   error is 1.2x the eager reference's this way, and 13x with all of K accumulated in the mma.) A
   256-thread CTA (4 x 2 warps, each 32 tokens x 64 experts)
   computes a 128 x 128 tile (tokens symbolic; rows past the token count load the last token and
   are not stored); K advances in slices of 32 through two shared-memory stages (rows padded to
   20 words so the fragment reads are conflict-free), the next slice's 16-byte loads issued before
   the current slice is multiplied. Operands are read as 32-bit words of bf16 pairs.
2. ``mkb_group_topk_route``: one warp per token, each lane owning 8 consecutive experts (so a
   group of 32 experts is 4 lanes):

   a. sigmoid and the expert bias, per lane;
   b. each group's two largest biased scores: a local top-2, merged over the group's 4 lanes with
      xor shuffles; the group score is their sum;
   c. the top 4 groups: every lane ranks its group against the 8 group scores (shuffled from the
      first lane of each group; ties go to the lower group index, like a stable sort);
   d. the top 8 biased scores among the kept groups: 8 rounds of a warp-wide arg-max (value, then
      lower index) carried through xor shuffles together with the unbiased score; the winner is
      struck out and its index written;
   e. weights = score / (sum of the 8 scores + 1e-20) * routed_scaling_factor.

Numerics: sigmoid is 1 / (1 + exp(-x)) with a precise exp and a Newton-refined division (NVRTC
compiles with --use_fast_math, which would make ``T.exp`` and ``/`` approximate); the selections
only depend on orderings that make_inputs keeps at least 1e-4 apart, far above the logits'
summation error (a few 1e-6).
"""

import torch
import tvm
from tvm.script import tirx as T

EXPERTS, GROUPS, TOPK_GROUPS, TOPK = 256, 8, 4, 8
BM = 128  # GEMM tile: tokens
BN = 128  # GEMM tile: experts
BK = 32  # K slice
GEMM_THREADS = 256
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
KW = BK // 2  # 32-bit words (bf16 pairs) per row of one K slice
PADW = 20  # shared-memory row stride in words (16 + 4 keeps the fragment reads conflict-free)
# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(tokens=16384, hidden=4096)
PER_LANE = EXPERTS // 32
LANES_PER_GROUP = EXPERTS // GROUPS // PER_LANE
WARPS = 4
MASKED = -1.0e38  # experts of dropped groups
TAKEN = -3.0e38  # experts already selected
LOWEST = -3.4e38  # below both sentinels
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _let(value, body, name):
    """Bind ``value`` once (a TIR Let) so the expression tree does not repeat it."""
    var = T.Var(name, "float32")
    return T.Let(body(var), where={var: value})


def exp_precise(x):
    """exp(x) in fp32 within about 1 ulp, from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split so n * hi is exact);
    exp(r) by a degree-7 Taylor polynomial on |r| <= ln2/2; 2^n from exponent bits. Inputs
    below -87 give 0; inputs are clamped at 88.
    """

    def with_xc(xc):
        def with_n(n):
            def with_r(r):
                poly = _f32(1.0 / 5040.0)
                for coef in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
                    poly = poly * r + _f32(coef)
                scale = T.reinterpret("float32", T.shift_left(T.int32(n) + 127, 23))
                return poly * scale

            reduced = xc - n * _f32(0.693145751953125) - n * _f32(1.428606765330187e-06)
            return _let(reduced, with_r, "r")

        return _let(T.floor(xc * _f32(1.4426950408889634) + _f32(0.5)), with_n, "n")

    def with_x(xv):
        clamped = T.max(T.min(xv, _f32(88.0)), _f32(-87.0))
        return T.if_then_else(xv < _f32(-87.0), _f32(0.0), _let(clamped, with_xc, "xc"))

    return _let(x, with_x, "x")


def div_precise(num, den):
    """num / den: the fast-math quotient corrected by one Newton step on the residual."""

    def with_operands(n, d):
        def with_r(r):
            return _let(n * r, lambda q: q + (n - d * q) * r, "q")

        return _let(_f32(1.0) / d, with_r, "rcp")

    return _let(num, lambda n: _let(den, lambda d: with_operands(n, d), "den"), "num")


def _shfl_xor(value, mask):
    return T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), value, mask, 32)


def _route_kernel():
    """One warp per token (tokens symbolic)."""

    @T.prim_func
    def mkb_group_topk_route(logits_h: T.handle, bias_h: T.handle, idx_h: T.handle,
                             weight_h: T.handle, scaling: T.float32):
        tokens = T.int32()
        logits = T.match_buffer(logits_h, (tokens, EXPERTS), "float32")
        bias = T.match_buffer(bias_h, (EXPERTS,), "bfloat16")
        topk_idx = T.match_buffer(idx_h, (tokens, TOPK), "int64")
        topk_weight = T.match_buffer(weight_h, (tokens, TOPK), "float32")
        T.device_entry()
        bx = T.cta_id([T.ceildiv(tokens, WARPS)])
        tx = T.thread_id([WARPS * 32])
        token: T.let = bx * WARPS + tx // 32
        lane: T.let = tx % 32
        if token < tokens:  # uniform over the warp, so full-mask shuffles are safe
            score = T.alloc_buffer((PER_LANE,), "float32", scope="local")
            biased = T.alloc_buffer((PER_LANE,), "float32", scope="local")
            chosen = T.alloc_buffer((TOPK,), "float32", scope="local")
            # 1. sigmoid + bias
            for j in T.unroll(PER_LANE):
                score[j] = div_precise(
                    _f32(1.0), _f32(1.0) + exp_precise(_f32(0.0) - logits[token, lane * PER_LANE + j]))
                biased[j] = score[j] + T.float32(bias[lane * PER_LANE + j])
            # 2. group top-2: local, then over the group's lanes
            top1: T.f32 = _f32(LOWEST)
            top2: T.f32 = _f32(LOWEST)
            for j in T.unroll(PER_LANE):
                if biased[j] > top1:
                    top2 = top1
                    top1 = biased[j]
                else:
                    if biased[j] > top2:
                        top2 = biased[j]
            for step in T.unroll(2):
                other1: T.f32 = _shfl_xor(top1, 1 << step)
                other2: T.f32 = _shfl_xor(top2, 1 << step)
                top2 = T.max(T.min(top1, other1), T.max(top2, other2))
                top1 = T.max(top1, other1)
            group_score: T.f32 = top1 + top2
            # 3. rank this lane's group among the 8 groups
            rank: T.i32 = 0
            for g in T.unroll(GROUPS):
                other: T.f32 = T.cuda.__shfl_sync(T.uint32(0xFFFFFFFF), group_score,
                                                  g * LANES_PER_GROUP, 32)
                if other > group_score or (other == group_score and g < lane // LANES_PER_GROUP):
                    rank = rank + 1
            if rank >= TOPK_GROUPS:
                for j in T.unroll(PER_LANE):
                    biased[j] = _f32(MASKED)
            # 4. top-8 experts of the kept groups, by warp arg-max rounds
            for r in T.unroll(TOPK):
                best: T.f32 = _f32(LOWEST)
                best_idx: T.i32 = EXPERTS
                best_score: T.f32 = _f32(0.0)
                for j in T.unroll(PER_LANE):
                    if biased[j] > best:
                        best = biased[j]
                        best_idx = lane * PER_LANE + j
                        best_score = score[j]
                for step in T.unroll(5):
                    o_val: T.f32 = _shfl_xor(best, 1 << step)
                    o_idx: T.i32 = _shfl_xor(best_idx, 1 << step)
                    o_score: T.f32 = _shfl_xor(best_score, 1 << step)
                    if o_val > best or (o_val == best and o_idx < best_idx):
                        best = o_val
                        best_idx = o_idx
                        best_score = o_score
                chosen[r] = best_score
                for j in T.unroll(PER_LANE):
                    if lane * PER_LANE + j == best_idx:
                        biased[j] = _f32(TAKEN)
                if lane == 0:
                    topk_idx[token, r] = T.int64(best_idx)
            # 5. normalised weights
            total: T.f32 = _f32(0.0)
            for r in T.unroll(TOPK):
                total = total + chosen[r]
            denom: T.f32 = total + _f32(1e-20)
            if lane == 0:
                for r in T.unroll(TOPK):
                    topk_weight[token, r] = div_precise(chosen[r], denom) * scaling

    return mkb_group_topk_route


def _gemm_kernel(hidden):
    """L[m, e] = sum_k X[m, k] W[e, k] in fp32 for all 256 experts (tokens m symbolic).

    X and W are bf16 given as 32-bit words of bf16 pairs (X32 [m, hidden / 2], W32 [256,
    hidden / 2]); hidden is a multiple of 32.
    """
    k_tiles = hidden // BK
    tiles_n = EXPERTS // BN

    @T.prim_func
    def mkb_router_gemm(x_h: T.handle, w_h: T.handle, l_h: T.handle):
        m = T.int32()
        X32 = T.match_buffer(x_h, (m, hidden // 2), "uint32")
        W32 = T.match_buffer(w_h, (EXPERTS, hidden // 2), "uint32")
        L = T.match_buffer(l_h, (m, EXPERTS), "float32")
        T.device_entry()
        cta = T.cta_id([T.ceildiv(m, BM) * tiles_n])
        tx = T.thread_id([GEMM_THREADS])
        a_s = T.alloc_buffer((2, BM, PADW), "uint32", scope="shared")
        b_s = T.alloc_buffer((2, BN, PADW), "uint32", scope="shared")
        acc = T.alloc_buffer((64,), "float32", scope="local")
        part = T.alloc_buffer((4,), "float32", scope="local")
        af = T.alloc_buffer((16,), "uint32", scope="local")
        bfr = T.alloc_buffer((4,), "uint32", scope="local")
        ra = T.alloc_buffer((8,), "uint32", scope="local")
        rb = T.alloc_buffer((8,), "uint32", scope="local")
        row0: T.let = (cta // tiles_n) * BM
        col0: T.let = (cta % tiles_n) * BN
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wm: T.let = (warp % 4) * 32
        wn: T.let = (warp // 4) * 64
        lrow: T.let = tx // 2
        lw: T.let = (tx % 2) * 8
        arow: T.let = T.min(row0 + lrow, m - 1)  # rows past the last token repeat it, unstored
        for i in T.unroll(64):
            acc[i] = T.float32(0.0)
        for c in T.unroll(2):
            for j in T.vectorized(4):
                ra[c * 4 + j] = X32[arow, lw + c * 4 + j]
            for j in T.vectorized(4):
                rb[c * 4 + j] = W32[col0 + lrow, lw + c * 4 + j]
        for j in T.unroll(8):
            a_s[0, lrow, lw + j] = ra[j]
            b_s[0, lrow, lw + j] = rb[j]
        T.cuda.cta_sync()
        for kt in range(k_tiles):
            st: T.let = kt % 2
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is multiplied
                for c in T.unroll(2):
                    for j in T.vectorized(4):
                        ra[c * 4 + j] = X32[arow, (kt + 1) * KW + lw + c * 4 + j]
                    for j in T.vectorized(4):
                        rb[c * 4 + j] = W32[col0 + lrow, (kt + 1) * KW + lw + c * 4 + j]
            # A fragments of both 16-wide halves of the slice: rows g / g + 8 x words t / t + 4
            for ks in T.unroll(2):
                for mi in T.unroll(2):
                    for h in T.unroll(2):
                        for q in T.unroll(2):
                            af[ks * 8 + mi * 4 + q * 2 + h] = a_s[st, wm + mi * 16 + h * 8 + g,
                                                                  ks * 8 + q * 4 + t]
            for ni in T.unroll(8):
                for ks in T.unroll(2):
                    for q in T.unroll(2):  # B fragment: expert row g, words t / t + 4
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
            if kt + 1 < k_tiles:  # the other stage was last read before the previous barrier
                for j in T.unroll(8):
                    a_s[1 - st, lrow, lw + j] = ra[j]
                    b_s[1 - st, lrow, lw + j] = rb[j]
            T.cuda.cta_sync()
        for mi in T.unroll(2):
            for h in T.unroll(2):
                row: T.let = row0 + wm + mi * 16 + h * 8 + g
                if row < m:
                    for ni in T.unroll(8):
                        for c in T.unroll(2):  # accumulators 2h, 2h + 1: row g (+ 8), columns 2t, 2t + 1
                            L[row, col0 + wn + ni * 8 + 2 * t + c] = acc[mi * 32 + ni * 4 + 2 * h + c]

    return mkb_router_gemm


def _build(kind, hidden, arch):
    """Compile one kernel once per (kind, K, arch) and return the tvm Executable."""
    key = (kind, hidden, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        func = _gemm_kernel(hidden) if kind == "gemm" else _route_kernel()
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


def _kernel_fn(kind, hidden=0):
    key = (kind, hidden, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(hidden_states, weight, expert_bias, routed_scaling_factor):
    if weight.shape[0] != EXPERTS:
        raise ValueError(f"this kernel is written for {EXPERTS} experts")
    tokens, hidden = hidden_states.shape
    if hidden % BK:
        raise ValueError(f"hidden must be a multiple of {BK}")
    dev = hidden_states.device
    topk_idx = torch.empty(tokens, TOPK, dtype=torch.int64, device=dev)
    topk_weight = torch.empty(tokens, TOPK, dtype=torch.float32, device=dev)
    if tokens > 0:
        logits = torch.empty(tokens, EXPERTS, dtype=torch.float32, device=dev)
        _kernel_fn("gemm", hidden)(hidden_states.contiguous().view(torch.uint32),
                                   weight.contiguous().view(torch.uint32), logits)
        _kernel_fn("route")(logits, expert_bias.contiguous(), topk_idx, topk_weight,
                            float(routed_scaling_factor))
    return topk_idx, topk_weight


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


def kernel_sources(arch="sm_90a", hidden=WORKLOAD["hidden"]):
    """{kernel symbol: generated CUDA source} for this file's kernels, the GEMM at the graded K."""
    sources = {}
    for kind, k in (("gemm", hidden), ("route", 0)):
        source = _build(kind, k, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file (no GPU needed) and return the kernel symbols."""
    return list(kernel_sources(arch))
