"""Residual add fused with RMSNorm over hidden 4096 (Llama-3.1-8B), bf16 in and out.

x = hidden_states + residual in fp32; y = x * rsqrt(mean(x^2) + 1e-5) * weight, rounded to bf16.
Only y is returned: unlike FlashInfer's in-place API, the residual sum is not written back.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="FlashInfer-Trace",
    model="Llama-3.1-8B",
    upstream="flashinfer-ai/flashinfer-trace definitions/rmsnorm/fused_add_rmsnorm_h4096.json "
    "(workload record 3e460c8c-7cad-4071-959f-e689ca024206)",
    license="Apache-2.0",
)
INPUTS = ("hidden_states", "residual", "weight")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(tokens=7, hidden=256)
EPS = 1e-5


def make_inputs(device, generator, *, tokens=14509, hidden=4096):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(tokens, hidden).to(torch.bfloat16)
    residual = randn(tokens, hidden).to(torch.bfloat16)
    weight = (1 + 0.1 * randn(hidden)).to(torch.bfloat16)
    return hidden_states, residual, weight


def reference(hidden_states, residual, weight):
    x = acc(hidden_states) + acc(residual)
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * acc(weight)
    return to_output(y, torch.bfloat16)


def physical_floor(*, tokens, hidden):
    return {"bytes": 3 * tokens * hidden * 2 + hidden * 2, "flops": 4 * tokens * hidden,
            "math": "fp32"}
