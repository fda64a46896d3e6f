"""Capacity-limited MoE expert execution (routing given), 160 SwiGLU experts, top-8, bf16.

8192 tokens, hidden 6144, expert intermediate 2560. Capacity C = floor(T * k / E * 1.25) slots per
expert (512 here). The (token, k) assignments are
flattened token-major and stably sorted by expert; each expert keeps its first C assignments and
drops the rest. Kept tokens are packed into a zero-initialised [E, C, H] buffer and run through
batched SwiGLU experts (x @ W with W [E, in, out]): a = silu(x W_g) * (x W_u), y = a W_d, with bf16
roundings after every GEMM and elementwise step. Each kept y times its routing weight (bf16) is
added into a bf16 output, per token in ascending expert order, rounding after every add.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-Coder-480B-A35B",
    upstream="nvidia/SOL-ExecBench L2/012_moe_expert_batched_execution_with_capacity_factor, "
    "workload index 8",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Upstream's workload in full (8192 tokens, capacity 512). Synthetic draws, as upstream's: "
    "expert assignments from a per-expert popularity plus Gumbel noise, so some experts overflow. "
    "The GEMMs run as bf16 GEMMs with fp32 accumulation (as in the source). The source's bf16 "
    "index_add has no defined order for a token's 8 contributions; here they are added in ascending "
    "expert order (the order the sorted assignments list them in), so the reference is deterministic. "
    "Grader memory (estimate): a draw is 15.2 GB (three 5.03 GB bf16 weight stacks); the float64 anchor "
    "copies 60.4 GB; the anchor's intermediates (the [160, 512, 6144] slot buffer and y, the per-pair "
    "contributions) ~17 GB. Measured on the H200 (results/h200/problems.json): the reference, its "
    "float64 anchor and the controls peak at 102.6 GB in one process, the most of any problem; the "
    "grader's rechecks keep only in-place inputs, not whole draws. Whether a full grading fits the "
    "H200 is not yet measured; the weights set the size (fewer tokens save only a few GB).",
)
INPUTS = ("hidden_states", "selected_experts", "routing_weights", "expert_gate_weights",
          "expert_up_weights", "expert_down_weights")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=40, hidden=16, inter=8, experts=10, top_k=3)
CAPACITY_FACTOR = 1.25


def text_values(*, tokens, experts, top_k, **_):
    """The capacity the description quotes, at the graded workload."""
    return {"capacity": int(tokens * top_k / experts * CAPACITY_FACTOR)}


def _bf16(t):
    return round_to(t, torch.bfloat16)


def make_inputs(device, generator, *, tokens=8192, hidden=6144, inter=2560, experts=160, top_k=8):
    def randn(*shape, std=1.0):
        return std * torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    popularity = randn(experts, std=0.5)  # skewed loads: some experts overflow their capacity
    u = torch.rand(tokens, experts, device=device, generator=generator).clamp(min=1e-20)
    gumbel = -torch.log(-torch.log(u))
    selected = (popularity + gumbel).topk(top_k, dim=-1).indices
    weights = torch.softmax(randn(tokens, top_k), dim=-1).to(bf16)
    return (randn(tokens, hidden).to(bf16), selected, weights,
            randn(experts, hidden, inter, std=hidden ** -0.5).to(bf16),
            randn(experts, hidden, inter, std=hidden ** -0.5).to(bf16),
            randn(experts, inter, hidden, std=inter ** -0.5).to(bf16))


def reference(hidden_states, selected_experts, routing_weights, expert_gate_weights, expert_up_weights,
              expert_down_weights):
    x = hidden_states  # storage dtype: bf16, or fp64 in the anchor
    tokens, top_k = selected_experts.shape
    experts = expert_gate_weights.shape[0]
    capacity = int(tokens * top_k / experts * CAPACITY_FACTOR)
    flat = selected_experts.flatten()
    pairs = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    sorted_e = flat[order]
    position = torch.arange(pairs, device=flat.device) - (torch.cumsum(counts, 0) - counts)[sorted_e]
    kept = position < capacity
    pair, expert, slot = order[kept], sorted_e[kept], position[kept]

    buffer = x.new_zeros(experts, capacity, x.shape[1])
    buffer[expert, slot] = x[pair // top_k]
    gate = _bf16(torch.bmm(buffer, expert_gate_weights))
    up = _bf16(torch.bmm(buffer, expert_up_weights))
    del buffer  # the float64 anchor's buffers are GBs: free each one once it is used
    y = _bf16(torch.bmm(_bf16(_bf16(F.silu(gate)) * up), expert_down_weights))
    del gate, up

    contrib = x.new_zeros(pairs, x.shape[1])  # dropped assignments contribute zero
    contrib[pair] = _bf16(y[expert, slot] * routing_weights.flatten()[pair, None].to(x.dtype))
    del y
    by_expert = selected_experts.argsort(dim=-1)
    contrib = contrib.view(tokens, top_k, -1)[torch.arange(tokens, device=x.device)[:, None], by_expert]
    out = contrib[:, 0]
    for k in range(1, top_k):
        out = _bf16(out + contrib[:, k])
    return to_output(out, torch.bfloat16)


def physical_floor(*, tokens, hidden, inter, experts, top_k):
    io = 2 * (2 * tokens * hidden + 3 * experts * hidden * inter) + tokens * top_k * (8 + 2)
    # the kept assignments (about 87% of them at this skew; 3/4 as a safe bound) need all 3 GEMMs
    flops = 2 * 3 * hidden * inter * (tokens * top_k * 3 // 4)
    return {"bytes": io, "flops": flops, "math": "bf16"}
