"""Residual add, RMSNorm and SwiGLU MLP of a Llama-3.1-405B decoder layer (Hermes-4-405B), bf16.

s = residual + hidden_states rounded to bf16; x = s * rsqrt(mean(s^2) + eps) * weight with fp32
statistics, rounded to bf16; gate = x W_g^T and up = x W_u^T (bf16 GEMM outputs);
a = silu(gate) * up (bf16 elementwise); y = a W_d^T rounded to bf16. The residual sum is not returned.
The whole MLP (hidden 16384, intermediate 53248) runs on 64 sequences of 128 tokens.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Hermes-4-405B (Llama-3.1-405B architecture)",
    upstream="nvidia/SOL-ExecBench L2/004_fused_residual_rms_mlp (NousResearch/Hermes-4-405B), "
    "workload index 4",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The record's workload in full: 64 sequences of 128 tokens (8192 tokens) through the whole "
    "MLP (16384 -> 53248 -> 16384, 43 TFLOP), no tensor-parallel shard. Values are synthetic draws "
    "(the source publishes shapes only). Memory, by arithmetic: the bf16 inputs are 5.5 GB (weights "
    "5.2 GB); the float64 anchor holds the weights as 20.9 GB plus up to four [8192, 53248] "
    "intermediates of 3.5 GB, about 45 GB with the drawn inputs, within an H200.",
)
INPUTS = ("hidden_states", "residual", "norm_weight", "gate_proj_weight", "up_proj_weight",
          "down_proj_weight", "eps")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seq=3, hidden=64, intermediate=96)


def make_inputs(device, generator, *, batch=64, seq=128, hidden=16384, intermediate=53248):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    def bf16(t):
        return t.to(torch.bfloat16)

    hidden_states = bf16(randn(batch, seq, hidden))
    residual = bf16(randn(batch, seq, hidden))
    norm_weight = bf16(1 + 0.1 * randn(hidden))
    gate_proj_weight = bf16(randn(intermediate, hidden) / hidden ** 0.5)
    up_proj_weight = bf16(randn(intermediate, hidden) / hidden ** 0.5)
    down_proj_weight = bf16(randn(hidden, intermediate) / intermediate ** 0.5)
    return (hidden_states, residual, norm_weight, gate_proj_weight, up_proj_weight, down_proj_weight,
            1e-5)


def reference(hidden_states, residual, norm_weight, gate_proj_weight, up_proj_weight,
              down_proj_weight, eps):
    bf16 = torch.bfloat16
    s = round_to(acc(residual) + acc(hidden_states), bf16)
    x = round_to(s * torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps) * acc(norm_weight), bf16)
    gate = round_to(x @ acc(gate_proj_weight).T, bf16)
    up = round_to(x @ acc(up_proj_weight).T, bf16)
    a = round_to(round_to(F.silu(gate), bf16) * up, bf16)
    return to_output(a @ acc(down_proj_weight).T, bf16)


def physical_floor(*, batch, seq, hidden, intermediate):
    tokens = batch * seq
    return {"bytes": 2 * (3 * tokens * hidden + hidden + 3 * intermediate * hidden),
            "flops": 6 * tokens * hidden * intermediate, "math": "bf16"}
