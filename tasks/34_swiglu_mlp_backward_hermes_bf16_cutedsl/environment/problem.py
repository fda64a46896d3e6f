"""Backward of a SwiGLU MLP (Hermes-4-405B, one TP=8 shard) from saved activations, bf16.

Forward: g = x W_g^T, u = x W_u^T, a = silu(g), y = (a * u) W_d^T. Given dY and the saved g, u, a (a is
used as given, not recomputed from g): dH = dY W_d; dW_d = dY^T (a * u); da = dH * u; du = dH * a;
dg = da * sigmoid(g) * (1 + g (1 - sigmoid(g))); dx = dg W_g + du W_u; dW_g = dg^T x; dW_u = du^T x.
Every GEMM output and elementwise product is a bf16 value (fp32 accumulation); only the SiLU
derivative is evaluated in fp32 before dg is rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Hermes-4-405B (one tensor-parallel shard of 8)",
    upstream="nvidia/SOL-ExecBench L2/005_swiglu_mlp_backward (NousResearch/Hermes-4-405B), "
    "workload index 12",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Workload cut from 8192 tokens x the full MLP (hidden 16384, intermediate 53248; 86 TFLOP) "
    "to 256 tokens x one TP=8 shard (intermediate 6656; 0.34 TFLOP). The eager reference runs its six "
    "GEMMs in strict fp32 (~2 s per call on an H200 at the record's size) and the float64 anchor of "
    "the full weights and weight gradients would need ~42 GB; tensor-parallel training shards the "
    "MLP this way, so one shard is the per-GPU kernel. Saved activations are independent draws, as "
    "upstream.",
)
INPUTS = ("grad_output", "x", "gate_output", "up_output", "activated_gate", "gate_weight",
          "up_weight", "down_weight")
OUTPUTS = ("grad_x", "grad_gate_weight", "grad_up_weight", "grad_down_weight")
SMALL_WORKLOAD = dict(batch=2, seq=3, hidden=64, intermediate=96)


def make_inputs(device, generator, *, batch=2, seq=128, hidden=16384, intermediate=6656):
    def randn(*shape, scale=1.0):
        return (scale * torch.randn(*shape, device=device, generator=generator)).to(torch.bfloat16)

    grad_output = randn(batch, seq, hidden)
    x = randn(batch, seq, hidden)
    gate_output = randn(batch, seq, intermediate)
    up_output = randn(batch, seq, intermediate)
    activated_gate = randn(batch, seq, intermediate)
    gate_weight = randn(intermediate, hidden, scale=hidden ** -0.5)
    up_weight = randn(intermediate, hidden, scale=hidden ** -0.5)
    down_weight = randn(hidden, intermediate, scale=intermediate ** -0.5)
    return (grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight,
            down_weight)


def reference(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight,
              down_weight):
    bf16 = torch.bfloat16
    hidden, intermediate = x.shape[-1], gate_output.shape[-1]
    dy = acc(grad_output).reshape(-1, hidden)
    xs = acc(x).reshape(-1, hidden)
    g = acc(gate_output).reshape(-1, intermediate)
    u = acc(up_output).reshape(-1, intermediate)
    a = acc(activated_gate).reshape(-1, intermediate)
    dh = round_to(dy @ acc(down_weight), bf16)
    grad_down = dy.T @ round_to(a * u, bf16)
    da = round_to(dh * u, bf16)
    du = round_to(dh * a, bf16)
    sig = torch.sigmoid(g)
    dg = round_to(da * sig * (1 + g * (1 - sig)), bf16)
    dx = round_to(dg @ acc(gate_weight), bf16) + round_to(du @ acc(up_weight), bf16)
    grad_gate = dg.T @ xs
    grad_up = du.T @ xs
    return (to_output(dx.reshape(x.shape), bf16), to_output(grad_gate, bf16),
            to_output(grad_up, bf16), to_output(grad_down, bf16))


def physical_floor(*, batch, seq, hidden, intermediate):
    tokens = batch * seq
    activations = 3 * tokens * hidden + 3 * tokens * intermediate
    return {"bytes": 2 * (activations + 6 * intermediate * hidden),
            "flops": 12 * tokens * hidden * intermediate, "math": "bf16"}
