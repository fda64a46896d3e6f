"""RMSNorm over rows of 128 (per-head q/k norm of Qwen3-30B-A3B), 520128 rows, bf16 in and out.

y = x * rsqrt(mean(x^2) + 1e-6) * weight, computed in fp32 per row and rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Qwen3-30B-A3B (per-head q/k norm)",
    upstream="flashinfer-ai/flashinfer-trace definitions/rmsnorm/rmsnorm_h128.json "
    "(workload record f2872f89-5d8d-403a-9603-5918541cb9e0)",
    license="Apache-2.0",
)
INPUTS = ("hidden_states", "weight")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(rows=37)
EPS = 1e-6


def make_inputs(device, generator, *, rows=520128, hidden=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(rows, hidden).to(torch.bfloat16)
    weight = (1 + 0.1 * randn(hidden)).to(torch.bfloat16)
    return hidden_states, weight


def reference(hidden_states, weight):
    x = acc(hidden_states)
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * acc(weight)
    return to_output(y, torch.bfloat16)


def physical_floor(*, rows, hidden):
    return {"bytes": 2 * (2 * rows * hidden + hidden), "flops": 4 * rows * hidden, "math": "fp32"}
