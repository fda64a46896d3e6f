"""Backward of RMSNorm applied to a residual sum (Qwen3-4B), from saved normalized values and rstd.

With n = the saved normalized (pre-weight) values, w the weight and r the saved rstd per token:
dW = sum_tokens dY * n (fp32); g = dY * w; dx = r * (g - n * mean(g * n)) (mean over the 2560
features), rounded to bf16. The sum's two addends share the gradient, so dx is returned twice:
as the hidden-state gradient and as the residual gradient.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-4B",
    upstream="nvidia/SOL-ExecBench L1/013_fused_residual_rms_norm_backward "
    "(Qwen/Qwen3-4B-Instruct-2507), workload index 1",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The source's unused saved x input is dropped, as upstream. The record's workload in full: "
    "64 sequences of 8192 tokens (524288 tokens) x 2560. Values are synthetic draws (the source "
    "publishes shapes only). Memory, by arithmetic: the inputs are 8.1 GB (dY bf16 2.7 GB, "
    "normalized fp32 5.4 GB), the outputs 5.4 GB; the float64 anchor holds dY and normalized as "
    "21.5 GB plus at most three 10.7 GB temporaries: about 67 GB with the drawn inputs and the "
    "reference's outputs, within an H200.",
)
INPUTS = ("grad_output", "normalized", "rstd", "weight")
OUTPUTS = ("grad_hidden_states", "grad_residual", "grad_weight")
SMALL_WORKLOAD = dict(batch=2, seq=5, hidden=64)
EPS = 1e-6


def make_inputs(device, generator, *, batch=64, seq=8192, hidden=2560):
    def rand(*shape):
        return torch.rand(*shape, device=device, generator=generator)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    weight = 1 + 0.1 * randn(hidden)
    x = randn(batch, seq, hidden) * (0.5 + 1.5 * rand(batch, seq, 1))
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    normalized = x * rstd
    del x
    grad_output = (randn(batch, seq, hidden) + 0.5 * normalized * weight).to(torch.bfloat16)
    return grad_output, normalized, rstd, weight


def reference(grad_output, normalized, rstd, weight):
    hidden = normalized.shape[-1]
    dy = acc(grad_output)
    n = acc(normalized)
    grad_weight = (dy * n).reshape(-1, hidden).sum(dim=0)
    g = dy * acc(weight)
    dx = acc(rstd) * (g - n * (g * n).mean(dim=-1, keepdim=True))
    bf16 = torch.bfloat16
    return to_output(dx, bf16), to_output(dx, bf16), to_output(grad_weight, torch.float32)


def physical_floor(*, batch, seq, hidden):
    tokens = batch * seq
    # one bf16 write of dx: the two returned gradients hold the same values
    return {"bytes": tokens * hidden * (2 + 4 + 2) + tokens * 4 + 2 * hidden * 4,
            "flops": 8 * tokens * hidden, "math": "fp32"}
