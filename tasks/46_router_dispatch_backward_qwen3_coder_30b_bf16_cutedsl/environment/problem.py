"""Backward of the MoE router (softmax -> top-8 -> renormalise -> linear), 128 experts, bf16 I/O.

In fp32: w = probs at the selected experts, S = their sum (given). Renormalisation backward
dw = dW / S - (sum_k dW_k w_k / S) / S is scattered into dP [T, E] at the selected experts, the
expert-mask gradient grad_expert_mask[e, k, t] at e = selected[t, k] is scatter-added as well, and
grad_router_logits is added. Softmax backward dL = P (dP - sum(dP P)); dL is rounded to bf16;
grad_hidden = dL W_gate and grad_gate_weight = dL^T hidden, both rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-Coder-30B-A3B",
    upstream="nvidia/SOL-ExecBench L2/011_moe_sparse_routing_and_dispatch_backward, workload index 2",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The source's unused router_logits input is not passed. The two GEMMs take the "
    "bf16-rounded dL (as the source's bf16 GEMMs do) and accumulate in fp32.",
)
INPUTS = ("hidden_states", "gate_weight", "routing_probs", "selected_experts", "routing_weights_sum",
          "grad_routing_weights", "grad_expert_mask", "grad_router_logits")
OUTPUTS = ("grad_hidden_states", "grad_gate_weight")
SMALL_WORKLOAD = dict(tokens=32, hidden=16, experts=16, top_k=4)


def make_inputs(device, generator, *, tokens=65536, hidden=2048, experts=128, top_k=8):
    def randn(*shape, std=1.0):
        return std * torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    hidden_states = randn(tokens, hidden).to(bf16)
    gate_weight = randn(experts, hidden, std=0.02).to(bf16)
    probs = torch.softmax(randn(tokens, experts).to(bf16).float(), dim=-1)
    top = probs.topk(top_k, dim=-1)
    return (hidden_states, gate_weight, probs, top.indices, top.values.sum(dim=-1, keepdim=True),
            randn(tokens, top_k, std=0.1).to(bf16), randn(experts, top_k, tokens, std=0.01).to(bf16),
            randn(tokens, experts, std=0.1).to(bf16))


def reference(hidden_states, gate_weight, routing_probs, selected_experts, routing_weights_sum,
              grad_routing_weights, grad_expert_mask, grad_router_logits):
    tokens, top_k = selected_experts.shape
    probs, total = acc(routing_probs), acc(routing_weights_sum)
    chosen = probs.gather(1, selected_experts)
    d_chosen = acc(grad_routing_weights)
    d_unnorm = d_chosen / total - (d_chosen * chosen / total).sum(dim=-1, keepdim=True) / total
    slot = torch.arange(top_k, device=selected_experts.device)[None, :]
    token = torch.arange(tokens, device=selected_experts.device)[:, None]
    d_mask = acc(grad_expert_mask[selected_experts, slot, token])  # [T, k]
    d_probs = acc(grad_router_logits).scatter_add(1, selected_experts, d_unnorm + d_mask)
    d_logits = probs * (d_probs - (d_probs * probs).sum(dim=-1, keepdim=True))
    d_logits = round_to(d_logits, torch.bfloat16)
    grad_hidden = d_logits @ acc(gate_weight)
    grad_gate = d_logits.T @ acc(hidden_states)
    return to_output(grad_hidden, torch.bfloat16), to_output(grad_gate, torch.bfloat16)


def physical_floor(*, tokens, hidden, experts, top_k):
    io = (2 * tokens * hidden * 2 + 2 * experts * hidden * 2 + tokens * experts * (4 + 2)
          + tokens * top_k * (8 + 2 + 2) + tokens * 4)
    return {"bytes": io, "flops": 2 * 2 * tokens * experts * hidden, "math": "bf16"}
