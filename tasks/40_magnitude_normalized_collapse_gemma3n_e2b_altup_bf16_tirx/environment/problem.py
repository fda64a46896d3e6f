"""Gemma-3n AltUp collapse: unembed two predicted streams, match their RMS to stream 0, average, bf16.

All in fp32 from bf16 inputs: target = sqrt(mean(x0^2)) per token; for i = 1, 2: p_i = x_i U_i^T
(3072 -> 3072), current = sqrt(max(mean(p_i^2), eps)), s_i = p_i * target / current.
Output = (x0 + s_1 + s_2) / 3, rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Gemma-3n-E2B (AltUp)",
    upstream="nvidia/SOL-ExecBench L1/052_altup_hidden_state_collapse_with_magnitude_normalization "
    "(google/gemma-3n-E2B), workload index 7",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Hidden size 3072 follows the source problem (not the E2B checkpoint). The record's "
    "workload in full: 64 sequences of 256 tokens (16384 tokens). Values are synthetic draws (the "
    "source publishes shapes only).",
)
INPUTS = ("hidden_states", "unembed_proj_1", "unembed_proj_2", "epsilon")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seq=5, hidden=32)
STREAMS = 3


def make_inputs(device, generator, *, batch=64, seq=256, hidden=3072):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    hidden_states = randn(STREAMS, batch, seq, hidden)
    unembed_proj_1 = randn(hidden, hidden)
    unembed_proj_2 = randn(hidden, hidden)
    return hidden_states, unembed_proj_1, unembed_proj_2, 1e-5


def reference(hidden_states, unembed_proj_1, unembed_proj_2, epsilon):
    x0 = acc(hidden_states[0])
    target = torch.sqrt(x0.pow(2).mean(dim=-1, keepdim=True))
    total = x0
    for i, proj in ((1, unembed_proj_1), (2, unembed_proj_2)):
        p = acc(hidden_states[i]) @ acc(proj).T
        current = torch.sqrt(torch.clamp_min(p.pow(2).mean(dim=-1, keepdim=True), epsilon))
        total = total + p * target / current
    return to_output(total / STREAMS, torch.bfloat16)


def physical_floor(*, batch, seq, hidden):
    tokens = batch * seq
    return {"bytes": 2 * ((STREAMS + 1) * tokens * hidden + 2 * hidden * hidden),
            "flops": 4 * tokens * hidden * hidden, "math": "bf16"}
