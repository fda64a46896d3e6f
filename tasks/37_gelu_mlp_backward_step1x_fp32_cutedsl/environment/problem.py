"""Backward of y = W2 gelu_tanh(W1 x + b1) + b2 from saved activations (Step1X-Edit), fp32.

Given dY, x, the saved pre-activation z and activation act (independent draws, used as given):
dA = dY W2; dW2 = dY^T act; db2 = sum_tokens dY; dZ = dA * gelu_tanh'(z); dX = dZ W1;
dW1 = dZ^T x; db1 = sum_tokens dZ, with
gelu_tanh'(z) = 0.5 (1 + tanh(k)) + 0.5 z (1 - tanh(k)^2) sqrt(2/pi) (1 + 3 c z^2),
k = sqrt(2/pi) (z + c z^3), c = 0.044715.
"""

import math

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Step1X-Edit",
    upstream="nvidia/SOL-ExecBench L2/073_feedforward_mlp_backward (stepfun-ai/Step1X-Edit), "
    "workload index 7",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The source's unused bias1/bias2 inputs are dropped, as upstream; intermediate and "
    "intermediate_activated are independent draws, as upstream. The record's workload in full: 64 "
    "sequences of 128 tokens (8192 tokens), dim 2048, feed-forward 8192. Values are synthetic draws "
    "(the source publishes shapes only).",
)
INPUTS = ("grad_output", "hidden_states", "weight1", "weight2", "intermediate",
          "intermediate_activated")
OUTPUTS = ("grad_hidden_states", "grad_weight1", "grad_bias1", "grad_weight2", "grad_bias2")
SMALL_WORKLOAD = dict(batch=2, seq=5, dim=16, ff=64)
GELU_C = 0.044715
TEXT_CONSTANTS = {"the 3 of d/dz z^3": 3}


def make_inputs(device, generator, *, batch=64, seq=128, dim=2048, ff=8192):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    grad_output = randn(batch, seq, dim)
    hidden_states = randn(batch, seq, dim)
    weight1 = randn(ff, dim) / dim ** 0.5
    weight2 = randn(dim, ff) / ff ** 0.5
    intermediate = randn(batch, seq, ff)
    intermediate_activated = randn(batch, seq, ff)
    return grad_output, hidden_states, weight1, weight2, intermediate, intermediate_activated


def gelu_tanh_grad(z):
    """d/dz of 0.5 z (1 + tanh(sqrt(2/pi) (z + c z^3))), written out."""
    root = math.sqrt(2 / math.pi)
    z2 = z * z
    t = torch.tanh(root * z * (1 + GELU_C * z2))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * root * (1 + 3 * GELU_C * z2)


def reference(grad_output, hidden_states, weight1, weight2, intermediate, intermediate_activated):
    dim, ff = weight2.shape
    dy = acc(grad_output).reshape(-1, dim)
    grad_weight2 = dy.T @ acc(intermediate_activated).reshape(-1, ff)
    grad_bias2 = dy.sum(dim=0)
    dz = (dy @ acc(weight2)) * gelu_tanh_grad(acc(intermediate).reshape(-1, ff))
    grad_hidden = dz @ acc(weight1)
    grad_weight1 = dz.T @ acc(hidden_states).reshape(-1, dim)
    grad_bias1 = dz.sum(dim=0)
    f32 = torch.float32
    return (to_output(grad_hidden.reshape(grad_output.shape), f32), to_output(grad_weight1, f32),
            to_output(grad_bias1, f32), to_output(grad_weight2, f32), to_output(grad_bias2, f32))


def physical_floor(*, batch, seq, dim, ff):
    tokens = batch * seq
    activations = 3 * tokens * dim + 2 * tokens * ff
    params = 4 * dim * ff + ff + dim
    return {"bytes": 4 * (activations + params), "flops": 8 * tokens * dim * ff, "math": "tf32"}
