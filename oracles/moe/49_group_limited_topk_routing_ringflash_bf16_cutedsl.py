"""CuTe DSL oracle for problem 49: group-limited top-8 MoE routing over 256 experts.

The fp32 router GEMM stays in torch (TF32 is off in grading, so it is the reference's own matmul);
everything after it is one DSL kernel, one warp per token. Lane ``l`` holds experts
``l*8 .. l*8+7`` in registers, so a group of 32 experts lives on 4 neighbouring lanes:
- sigmoid (1 / (1 + exp(-x)), as torch computes it) and the expert bias, per lane;
- each group's two largest biased scores: a per-lane top-2, merged over the group's 4 lanes with
  butterfly shuffles; the group score is their sum;
- each lane ranks its group among the 8 group scores (gathered by shuffles; ties go to the lower
  group) and masks its experts when the rank is 4 or more;
- 8 rounds of warp arg-max over the remaining biased scores (ties to the lower expert index); the
  winner's lane removes it, and the unbiased score travels with the arg-max;
- lane 0 writes the 8 indices (descending biased score) and weights s / (sum + 1e-20) * scale.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

GROUPS, TOPK_GROUPS, TOPK = 8, 4, 8
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=16384, experts=256)
_WARPS = 4
_NEG = float("-inf")
_COMPILED = {}


def _max(a, b):
    return cutlass.select_(a > b, a, b)


def _min(a, b):
    return cutlass.select_(a < b, a, b)


@cute.kernel
def group_topk_route_kernel(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor,
                            w_out: cute.Tensor, scaling: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    tokens = cute.size(logits, mode=[0])
    experts = cute.size(logits, mode=[1])
    per_lane = experts // 32
    lanes_per_group = experts // GROUPS // per_lane
    token = bidx * _WARPS + tidx // 32
    row = cutlass.select_(token < tokens, token, tokens - 1)  # whole warp stays in step

    x = cute.make_rmem_tensor((per_lane,), cutlass.Float32)
    x.store(cute.zipped_divide(logits[row, None], (per_lane,))[None, lane].load())
    s = []
    v = []
    for j in cutlass.range_constexpr(per_lane):
        sj = 1.0 / (1.0 + cute.math.exp(-x[j]))
        s.append(sj)
        v.append(sj + bias[lane * per_lane + j].to(cutlass.Float32))

    # Top-2 of the group: per lane, then merged across the group's lanes.
    t1 = v[0]
    t2 = cutlass.Float32(_NEG)
    for j in cutlass.range_constexpr(1, per_lane):
        t2 = _max(t2, _min(t1, v[j]))
        t1 = _max(t1, v[j])
    off = 1
    while off < lanes_per_group:
        o1 = cute.arch.shuffle_sync_bfly(t1, offset=off)
        o2 = cute.arch.shuffle_sync_bfly(t2, offset=off)
        t2 = _max(_min(t1, o1), _max(t2, o2))
        t1 = _max(t1, o1)
        off *= 2
    group_score = t1 + t2

    # Rank of this lane's group among all groups; keep the best TOPK_GROUPS.
    group = lane // lanes_per_group
    rank = cutlass.Int32(0)
    for g in cutlass.range_constexpr(GROUPS):
        other = cute.arch.shuffle_sync(group_score, g * lanes_per_group)
        beats = (other > group_score) | ((other == group_score) & (group > g))
        rank += cutlass.select_(beats, 1, 0)
    keep = rank < TOPK_GROUPS
    for j in cutlass.range_constexpr(per_lane):
        v[j] = cutlass.select_(keep, v[j], _NEG)

    # TOPK rounds of warp arg-max; the unbiased score travels with the winner.
    sel_idx = []
    sel_score = []
    for _ in cutlass.range_constexpr(TOPK):
        bv = v[0]
        bi = lane * per_lane
        bs = s[0]
        for j in cutlass.range_constexpr(1, per_lane):
            take = v[j] > bv
            bv = cutlass.select_(take, v[j], bv)
            bi = cutlass.select_(take, lane * per_lane + j, bi)
            bs = cutlass.select_(take, s[j], bs)
        for off in (16, 8, 4, 2, 1):
            ov = cute.arch.shuffle_sync_bfly(bv, offset=off)
            oi = cute.arch.shuffle_sync_bfly(bi, offset=off)
            os_ = cute.arch.shuffle_sync_bfly(bs, offset=off)
            take = (ov > bv) | ((ov == bv) & (oi < bi))
            bv = cutlass.select_(take, ov, bv)
            bi = cutlass.select_(take, oi, bi)
            bs = cutlass.select_(take, os_, bs)
        sel_idx.append(bi)
        sel_score.append(bs)
        for j in cutlass.range_constexpr(per_lane):
            v[j] = cutlass.select_(bi == lane * per_lane + j, _NEG, v[j])

    total = sel_score[0]
    for k in cutlass.range_constexpr(1, TOPK):
        total = total + sel_score[k]
    denom = total + 1e-20
    if token < tokens:
        if lane == 0:
            for k in cutlass.range_constexpr(TOPK):
                idx_out[token, k] = cutlass.Int64(sel_idx[k])
                w_out[token, k] = sel_score[k] / denom * scaling


@cute.jit
def group_topk_route(logits: cute.Tensor, bias: cute.Tensor, idx_out: cute.Tensor, w_out: cute.Tensor,
                     scaling: cutlass.Float32, stream: cuda.CUstream):
    tokens = cute.size(logits, mode=[0])
    group_topk_route_kernel(logits, bias, idx_out, w_out, scaling).launch(
        grid=[(tokens + _WARPS - 1) // _WARPS, 1, 1], block=[_WARPS * 32, 1, 1], stream=stream)


def _compile(tokens, experts, arch=None, ptx_dir=None):
    assert experts % (32 * GROUPS) == 0, "lanes of a group must share whole groups"
    logits = make_fake_compact_tensor(cutlass.Float32, (tokens, experts), stride_order=(1, 0),
                                      assumed_align=16)
    bias = make_fake_compact_tensor(cutlass.BFloat16, (experts,))
    idx_out = make_fake_compact_tensor(cutlass.Int64, (tokens, TOPK), stride_order=(1, 0))
    w_out = make_fake_compact_tensor(cutlass.Float32, (tokens, TOPK), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(group_topk_route, logits, bias, idx_out, w_out, 1.0, make_fake_stream(),
                        options=options)


def solve(hidden_states, weight, expert_bias, routed_scaling_factor):
    logits = (hidden_states.float() @ weight.float().T).contiguous()
    tokens, experts = logits.shape
    idx = torch.empty(tokens, TOPK, dtype=torch.int64, device=logits.device)
    w = torch.empty(tokens, TOPK, dtype=torch.float32, device=logits.device)
    if tokens == 0:
        return idx, w
    key = (tokens, experts)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(tokens, experts)
    _COMPILED[key](logits, expert_bias.contiguous(), idx, w, float(routed_scaling_factor),
                   cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return idx, w


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    return list(_compile(WORKLOAD["tokens"], WORKLOAD["experts"], arch, ptx_dir).kernel_info)
