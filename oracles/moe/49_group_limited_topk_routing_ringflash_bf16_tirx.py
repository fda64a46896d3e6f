"""TIRx oracle for problem 49: group-limited top-8 MoE routing over 256 experts.

torch computes the router logits (x W^T in fp32, the reference's own GEMM; TF32 is off in
grading). Everything after that runs in one TIRx kernel, one warp per token, each lane owning 8
consecutive experts (so a group of 32 experts is 4 lanes):

1. sigmoid and the expert bias, per lane;
2. each group's two largest biased scores: a local top-2, merged over the group's 4 lanes with
   xor shuffles; the group score is their sum;
3. the top 4 groups: every lane ranks its group against the 8 group scores (shuffled from the
   first lane of each group; ties go to the lower group index, like a stable sort);
4. the top 8 biased scores among the kept groups: 8 rounds of a warp-wide arg-max (value, then
   lower index) carried through xor shuffles together with the unbiased score; the winner is
   struck out and its index written;
5. weights = score / (sum of the 8 scores + 1e-20) * routed_scaling_factor.

Numerics: sigmoid is 1 / (1 + exp(-x)) with a precise exp and a Newton-refined division (NVRTC
compiles with --use_fast_math, which would make ``T.exp`` and ``/`` approximate); the selections
only depend on orderings that make_inputs keeps at least 1e-4 apart.
"""

import torch
import tvm
from tvm.script import tirx as T

EXPERTS, GROUPS, TOPK_GROUPS, TOPK = 256, 8, 4, 8
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


def _build(arch):
    """Compile (once per arch) and return the tvm Executable."""
    if arch not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[arch] = tvm.compile(tvm.IRModule({"main": _route_kernel()}), target=target,
                                      tir_pipeline="tirx")
    return _EXES[arch]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn():
    arch = _device_arch()
    if arch not in _FNS:
        _FNS[arch] = _build(arch).mod["main"]
    return _FNS[arch]


def solve(hidden_states, weight, expert_bias, routed_scaling_factor):
    if weight.shape[0] != EXPERTS:
        raise ValueError(f"this kernel is written for {EXPERTS} experts")
    logits = (hidden_states.float() @ weight.float().T).contiguous()
    tokens = logits.shape[0]
    topk_idx = torch.empty(tokens, TOPK, dtype=torch.int64, device=logits.device)
    topk_weight = torch.empty(tokens, TOPK, dtype=torch.float32, device=logits.device)
    if tokens > 0:
        _kernel_fn()(logits, expert_bias.contiguous(), topk_idx, topk_weight,
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


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} for this file's kernels."""
    source = _build(arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file (no GPU needed) and return the kernel symbols."""
    return list(kernel_sources(arch))
