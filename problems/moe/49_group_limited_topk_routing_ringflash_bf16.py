"""Group-limited top-8 MoE routing over 256 experts (Ring-flash-2.0), bf16 activations.

logits = x W^T in fp32 (hidden 4096 -> 256 experts); s = sigmoid(logits); biased = s + expert_bias.
Each of 8 groups of 32 experts scores the sum of its two largest biased values; the top 4 groups are
kept, the other experts masked out, and the top 8 biased scores taken in descending order. Weights
are the unbiased s at those experts divided by (their sum + 1e-20), times routed_scaling_factor.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Ring-flash-2.0",
    upstream="nvidia/SOL-ExecBench L2/049_group_limited_topk_routing, workload index 7",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
)
INPUTS = ("hidden_states", "weight", "expert_bias", "routed_scaling_factor")
OUTPUTS = ("topk_idx", "topk_weight")
SETS = {"topk_idx": {"dim": -1, "with": ("topk_weight",)}}
SMALL_WORKLOAD = dict(tokens=32, hidden=64)
GROUPS, TOPK_GROUPS, TOPK = 8, 4, 8
MIN_GAP = 1e-4
WEIGHT_SUM_EPS = 1e-20  # added to the selected scores' sum before dividing


def _route(logits, expert_bias, scaling):
    """Selections and weights from fp32/fp64 logits; also the decision gaps used by make_inputs."""
    scores = torch.sigmoid(logits)
    biased = scores + expert_bias.to(scores.dtype)
    tokens, experts = biased.shape
    grouped = biased.view(tokens, GROUPS, experts // GROUPS)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    ranked_groups = group_scores.sort(dim=-1, descending=True)
    keep = torch.zeros_like(group_scores, dtype=torch.bool)
    keep.scatter_(1, ranked_groups.indices[:, :TOPK_GROUPS], True)
    allowed = keep.repeat_interleave(experts // GROUPS, dim=1)
    masked = biased.masked_fill(~allowed, torch.finfo(biased.dtype).min)
    top = masked.topk(TOPK + 1, dim=-1)
    idx = top.indices[:, :TOPK]
    chosen = scores.gather(1, idx)
    weights = chosen / (chosen.sum(dim=-1, keepdim=True) + WEIGHT_SUM_EPS) * scaling
    group_gap = ranked_groups.values[:, TOPK_GROUPS - 1] - ranked_groups.values[:, TOPK_GROUPS]
    expert_gap = (top.values[:, :-1] - top.values[:, 1:]).min(dim=-1).values
    return idx, weights, torch.minimum(group_gap, expert_gap)


def make_inputs(device, generator, *, tokens=16384, hidden=4096, experts=256):
    weight = (torch.randn(experts, hidden, device=device, generator=generator)
              / hidden ** 0.5).to(torch.bfloat16)
    expert_bias = torch.randn(experts, device=device, generator=generator).to(torch.bfloat16)
    x = torch.randn(tokens, hidden, device=device, generator=generator).to(torch.bfloat16)
    for _ in range(100):  # redraw tokens whose routing decision is within MIN_GAP of a tie
        logits = x.float() @ weight.float().T
        _, _, gap = _route(logits, expert_bias, 1.0)
        bad = (gap < MIN_GAP).nonzero().flatten()
        if bad.numel() == 0:
            break
        x[bad] = torch.randn(bad.numel(), hidden, device=device, generator=generator).to(x.dtype)
    else:
        raise RuntimeError("could not draw tokens with unambiguous routing")
    return x, weight, expert_bias, 2.5


def reference(hidden_states, weight, expert_bias, routed_scaling_factor):
    logits = acc(hidden_states) @ acc(weight).T
    idx, weights, _ = _route(logits, acc(expert_bias), routed_scaling_factor)
    return idx, to_output(weights, torch.float32)


def physical_floor(*, tokens, hidden, experts):
    return {"bytes": tokens * hidden * 2 + experts * hidden * 2 + tokens * TOPK * 12,
            "flops": 2 * tokens * hidden * experts, "math": "bf16"}
