"""Qwen3-Next sparse MoE block: top-10 of 512 SwiGLU experts plus a sigmoid-gated shared expert, bf16.

64 x 613 tokens, hidden 2048, expert and shared intermediate 512.
Router logits = x W_r^T in fp32 (returned rounded to bf16); p = softmax in fp32; the top-10 p are
renormalised to sum 1 and rounded to bf16. Each selected expert computes
y = (silu(x W_g^T) * (x W_u^T)) W_d^T with bf16 roundings after every GEMM and elementwise step,
y * weight is rounded to bf16 and added into a bf16 accumulator (per token in ascending expert
order, rounding after every add). The shared expert (same SwiGLU form) is scaled by
sigmoid(x . w_shared_gate) and added. Weights are [out, in] (used as x W^T).
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-Next-80B-A3B",
    upstream="nvidia/SOL-ExecBench L2/061_sparse_moe_routing_and_experts, workload index 4",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full (batch 64 x 613 = 39232 tokens). Synthetic draws, as upstream's. "
    "Router logits in fp32 as upstream (the source multiplies in bf16); tokens are redrawn, only those "
    "offending, until the 10th and 11th routing probabilities differ by >= 1e-5 (at 39232 tokens about "
    "2.6% of tokens need a second draw; a draw settles in 3-4 passes). The reference runs all 512 experts "
    "as padded bf16 bmm's (a per-expert Python loop is launch-bound); padding rows are zero. "
    "The source's bf16 index_add accumulates in expert order; here that order is made explicit. "
    "Grader memory (estimate): a draw is 3.4 GB, its float64 anchor copies 13.6 GB; the anchor's "
    "padded [512, ~940, 2048] expert rows and outputs and the per-pair contributions ~40 GB. Measured "
    "on the H200 (results/h200/problems.json): the reference, its float64 anchor and the controls "
    "peak at 57.1 GB in one process.",
)
INPUTS = ("hidden_states", "router_weight", "expert_gate_proj", "expert_up_proj", "expert_down_proj",
          "shared_gate_proj", "shared_up_proj", "shared_down_proj", "shared_expert_gate_weight")
OUTPUTS = ("output", "router_logits")
SMALL_WORKLOAD = dict(batch=2, seqlen=8, hidden=16, experts=16, inter=8)
TOP_K = 10
MIN_GAP = 1e-5


def _bf16(t):
    return round_to(t, torch.bfloat16)


def _route(logits, top_k):
    """Selected experts, their renormalised weights and the gap between the k-th and (k+1)-th p."""
    probs = torch.softmax(logits, dim=-1)
    top = probs.topk(top_k + 1, dim=-1)
    values, index = top.values[:, :top_k], top.indices[:, :top_k]
    return index, values / values.sum(dim=-1, keepdim=True), top.values[:, top_k - 1] - top.values[:, top_k]


def make_inputs(device, generator, *, batch=64, seqlen=613, hidden=2048, experts=512, inter=512):
    def randn(*shape, std=1.0):
        return (std * torch.randn(*shape, device=device, generator=generator)).to(torch.bfloat16)

    router = randn(experts, hidden, std=hidden ** -0.5)
    x = randn(batch * seqlen, hidden)
    for _ in range(100):  # redraw only the tokens whose top-k set is within MIN_GAP of a tie
        _, _, gap = _route(x.float() @ router.float().T, TOP_K)
        bad = (gap < MIN_GAP).nonzero().flatten()
        if bad.numel() == 0:
            break
        x[bad] = randn(bad.numel(), hidden)
    else:
        raise RuntimeError("could not draw tokens with unambiguous routing")
    return (x.view(batch, seqlen, hidden), router,
            randn(experts, inter, hidden, std=hidden ** -0.5), randn(experts, inter, hidden, std=hidden ** -0.5),
            randn(experts, hidden, inter, std=inter ** -0.5),
            randn(inter, hidden, std=hidden ** -0.5), randn(inter, hidden, std=hidden ** -0.5),
            randn(hidden, inter, std=inter ** -0.5), randn(1, hidden, std=hidden ** -0.5))


def _expert_slots(index, experts):
    """[E, cap] pair ids (t * k + slot) grouped by expert in token order; padding = number of pairs."""
    flat = index.flatten()
    pairs = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    sorted_e = flat[order]
    slots = torch.full((experts, int(counts.max())), pairs, dtype=torch.long, device=flat.device)
    slots[sorted_e, torch.arange(pairs, device=flat.device) - starts[sorted_e]] = order
    return slots


def _swiglu(x, gate_w, up_w, down_w):
    """bf16 SwiGLU in the storage dtype (bf16 GEMMs; the anchor computes in fp64 and rounds alike)."""
    gate = _bf16(torch.matmul(x, gate_w.transpose(-1, -2)))
    up = _bf16(torch.matmul(x, up_w.transpose(-1, -2)))
    return _bf16(torch.matmul(_bf16(_bf16(F.silu(gate)) * up), down_w.transpose(-1, -2)))


def reference(hidden_states, router_weight, expert_gate_proj, expert_up_proj, expert_down_proj,
              shared_gate_proj, shared_up_proj, shared_down_proj, shared_expert_gate_weight):
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])  # storage dtype: bf16, or fp64 in the anchor
    tokens, experts = x.shape[0], router_weight.shape[0]
    top_k = TOP_K
    logits = acc(x) @ acc(router_weight).T
    index, weight, _ = _route(logits, top_k)
    weight = _bf16(weight).to(x.dtype)

    slots = _expert_slots(index, experts)
    pairs = tokens * top_k
    valid = slots < pairs
    xe = torch.cat([x, x.new_zeros(1, x.shape[1])])[slots // top_k]  # [E, cap, H], zero padding
    y = _swiglu(xe, expert_gate_proj, expert_up_proj, expert_down_proj)
    w = torch.cat([weight.flatten(), weight.new_zeros(1)])[slots][..., None]
    contrib = x.new_empty(pairs, x.shape[1])
    contrib[slots[valid]] = _bf16(y * w)[valid]
    by_expert = index.argsort(dim=-1)  # accumulate each token's experts in ascending id order
    contrib = contrib.view(tokens, top_k, -1)[torch.arange(tokens, device=x.device)[:, None], by_expert]
    routed = contrib[:, 0]
    for k in range(1, top_k):
        routed = _bf16(routed + contrib[:, k])

    shared = _swiglu(x, shared_gate_proj, shared_up_proj, shared_down_proj)
    gate = _bf16(torch.sigmoid(_bf16(x @ shared_expert_gate_weight.T)))
    out = _bf16(routed + _bf16(shared * gate))
    return to_output(out.view(shape), torch.bfloat16), to_output(logits, torch.bfloat16)


def physical_floor(*, batch, seqlen, hidden, experts, inter):
    tokens = batch * seqlen
    weights = (3 * experts + 3) * inter * hidden + experts * hidden + hidden
    io = 2 * (2 * tokens * hidden + weights + tokens * experts)
    flops = 2 * tokens * hidden * experts + 2 * tokens * (TOP_K + 1) * 3 * hidden * inter
    return {"bytes": io, "flops": flops, "math": "bf16"}
