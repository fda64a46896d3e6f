"""FLUX feed-forward block: Linear 3072 -> 12288, tanh-approximate GELU, Linear 12288 -> 3072, fp32.

h = x W1^T + b1; a = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))); y = a W2^T + b2, all in fp32
(the GEMMs must be fp32-accurate: a single TF32 pass is not).
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="FLUX.1-dev",
    upstream="nvidia/SOL-ExecBench L1/037_flux_feedforward_gelu_approximate "
    "(black-forest-labs/FLUX.1-dev), workload index 6",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The record's workload in full: 32 sequences of 512 tokens (16384 tokens), hidden 3072, "
    "feed-forward 12288. Values are synthetic draws (the source publishes shapes only).",
)
INPUTS = ("hidden_states", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seq=5, dim=32, ff=128)
TEXT_CONSTANTS = {"tanh GELU cubic coefficient": 0.044715}


def make_inputs(device, generator, *, batch=32, seq=512, dim=3072, ff=12288):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(batch, seq, dim)
    fc1_weight = randn(ff, dim) / dim ** 0.5
    fc1_bias = randn(ff)
    fc2_weight = randn(dim, ff) / ff ** 0.5
    fc2_bias = randn(dim)
    return hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias


def reference(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    h = acc(hidden_states) @ acc(fc1_weight).T + acc(fc1_bias)
    a = F.gelu(h, approximate="tanh")
    return to_output(a @ acc(fc2_weight).T + acc(fc2_bias), torch.float32)


def physical_floor(*, batch, seq, dim, ff):
    tokens = batch * seq
    return {"bytes": 4 * (2 * tokens * dim + 2 * dim * ff + ff + dim),
            "flops": 4 * tokens * dim * ff, "math": "tf32"}
