"""Backward of the SwiGLU MLP of Hermes-4-405B from saved activations, bf16.

Forward: g = x W_g^T, u = x W_u^T, a = silu(g), y = (a * u) W_d^T. Given dY and the saved g, u, a (a is
used as given, not recomputed from g): dH = dY W_d; dW_d = dY^T (a * u); da = dH * u; du = dH * a;
dg = da * sigmoid(g) * (1 + g (1 - sigmoid(g))); dx = dg W_g + du W_u; dW_g = dg^T x; dW_u = du^T x.
Every GEMM output and elementwise product is a bf16 value (fp32 accumulation); only the SiLU
derivative is evaluated in fp32 before dg is rounded to bf16. The whole MLP (hidden 16384,
intermediate 53248) on 64 sequences of 128 tokens.
"""

import torch

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Hermes-4-405B",
    upstream="nvidia/SOL-ExecBench L2/005_swiglu_mlp_backward (NousResearch/Hermes-4-405B), "
    "workload index 12",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The record's workload in full: 64 sequences of 128 tokens (8192 tokens) through the whole "
    "MLP (hidden 16384, intermediate 53248; 86 TFLOP), no tensor-parallel shard. Saved activations "
    "are independent draws, as upstream; all values are synthetic (the source publishes shapes "
    "only). Memory, by arithmetic: the bf16 inputs are 8.4 GB (weights 5.2 GB), the outputs 5.5 GB; "
    "the float64 anchor holds the inputs as 33.5 GB and, as the reference releases each intermediate "
    "once used, at most ~22 GB more (the three [16384, 53248] weight gradients of 7.0 GB, or the "
    "[8192, 53248] terms of 3.5 GB): about 70 GB with the drawn inputs and the reference's outputs, "
    "within an H200.",
)
INPUTS = ("grad_output", "x", "gate_output", "up_output", "activated_gate", "gate_weight",
          "up_weight", "down_weight")
OUTPUTS = ("grad_x", "grad_gate_weight", "grad_up_weight", "grad_down_weight")
SMALL_WORKLOAD = dict(batch=2, seq=3, hidden=64, intermediate=96)


def make_inputs(device, generator, *, batch=64, seq=128, hidden=16384, intermediate=53248):
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
    # Each intermediate is released once used: in the float64 anchor at the graded size every
    # [tokens, intermediate] term is 3.5 GB and every weight gradient 7.0 GB.
    grad_down = dy.T @ round_to(a * u, bf16)
    dh = round_to(dy @ acc(down_weight), bf16)
    du = round_to(dh * a, bf16)
    da = round_to(dh * u, bf16)
    del dh
    sig = torch.sigmoid(g)
    dg = da * sig
    del da
    # dg = (da * sig) * (1 + g * (1 - sig)), the same operations in place in sig's storage
    dg *= sig.neg_().add_(1).mul_(g).add_(1)
    del sig
    dg = round_to(dg, bf16)
    dx = round_to(dg @ acc(gate_weight), bf16) + round_to(du @ acc(up_weight), bf16)
    grad_gate = dg.T @ xs
    del dg
    grad_up = du.T @ xs
    return (to_output(dx.reshape(x.shape), bf16), to_output(grad_gate, bf16),
            to_output(grad_up, bf16), to_output(grad_down, bf16))


def physical_floor(*, batch, seq, hidden, intermediate):
    tokens = batch * seq
    activations = 3 * tokens * hidden + 3 * tokens * intermediate
    return {"bytes": 2 * (activations + 6 * intermediate * hidden),
            "flops": 12 * tokens * hidden * intermediate, "math": "bf16"}
