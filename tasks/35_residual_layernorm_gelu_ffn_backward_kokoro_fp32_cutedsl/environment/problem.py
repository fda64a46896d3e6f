"""Backward of LayerNorm(hidden + fc2(gelu_tanh(fc1(hidden)))) from saved activations (Kokoro-82M), fp32.

With n the saved normalized sum, var its biased variance and w the LayerNorm weight:
dW_ln = sum_tokens dY * n; db_ln = sum_tokens dY; g = dY * w;
dres = (g - mean(g) - n * mean(g * n)) / sqrt(var + eps) (means over the 512 features);
db2 = sum_tokens dres; dW2 = dres^T gelu_out; dgelu = dres W2; dpre = dgelu * gelu_tanh'(fc1_out);
db1 = sum_tokens dpre; dW1 = dpre^T hidden; dhidden = dpre W1 + dres.
gelu_tanh'(z) = 0.5 (1 + tanh(k)) + 0.5 z (1 - tanh(k)^2) sqrt(2/pi) (1 + 3 c z^2),
k = sqrt(2/pi) (z + c z^3), c = 0.044715.
"""

import math

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Kokoro-82M",
    upstream="nvidia/SOL-ExecBench L2/042_ffn_gelu_projection_fused_backward (hexgrad/Kokoro-82M), "
    "workload index 4",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The source's unused residual_output input is dropped, as upstream. The record's workload "
    "in full: 64 sequences of 1087 frames (69568 tokens), dim 512, feed-forward 2048. Values are "
    "synthetic draws (the source publishes shapes only); the saved activations are recomputed from "
    "them by make_inputs.",
)
INPUTS = ("grad_output", "hidden_states", "fc1_weight", "fc1_output", "gelu_output", "fc2_weight",
          "normalized", "var", "ln_weight", "eps")
OUTPUTS = ("grad_hidden_states", "grad_fc1_weight", "grad_fc1_bias", "grad_fc2_weight",
           "grad_fc2_bias", "grad_ln_weight", "grad_ln_bias")
SMALL_WORKLOAD = dict(batch=2, seq=7, dim=16, ff=64)
GELU_C = 0.044715
TEXT_CONSTANTS = {"the 3 of d/dz z^3": 3}
EPS = 1e-5


def make_inputs(device, generator, *, batch=64, seq=1087, dim=512, ff=2048):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    grad_output = randn(batch, seq, dim)
    hidden_states = 0.1 * randn(batch, seq, dim)
    fc1_weight = randn(ff, dim) * (2 / dim) ** 0.5
    fc2_weight = randn(dim, ff) * (2 / ff) ** 0.5
    ln_weight = 1 + 0.1 * randn(dim)
    fc1_output = hidden_states @ fc1_weight.T
    gelu_output = F.gelu(fc1_output, approximate="tanh")
    res = hidden_states + gelu_output @ fc2_weight.T
    var = res.var(dim=-1, unbiased=False, keepdim=True)
    normalized = (res - res.mean(dim=-1, keepdim=True)) * torch.rsqrt(var + EPS)
    return (grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight, normalized,
            var, ln_weight, EPS)


def gelu_tanh_grad(z):
    """d/dz of 0.5 z (1 + tanh(sqrt(2/pi) (z + c z^3))), written out."""
    root = math.sqrt(2 / math.pi)
    z2 = z * z
    t = torch.tanh(root * z * (1 + GELU_C * z2))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * root * (1 + 3 * GELU_C * z2)


def reference(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight, normalized,
              var, ln_weight, eps):
    dim, ff = fc2_weight.shape
    dy = acc(grad_output).reshape(-1, dim)
    n = acc(normalized).reshape(-1, dim)
    x = acc(hidden_states).reshape(-1, dim)
    grad_ln_weight = (dy * n).sum(dim=0)
    grad_ln_bias = dy.sum(dim=0)
    g = dy * acc(ln_weight)
    dres = (g - g.mean(dim=-1, keepdim=True) - n * (g * n).mean(dim=-1, keepdim=True))
    dres = dres * torch.rsqrt(acc(var).reshape(-1, 1) + eps)
    grad_fc2_bias = dres.sum(dim=0)
    grad_fc2_weight = dres.T @ acc(gelu_output).reshape(-1, ff)
    dpre = (dres @ acc(fc2_weight)) * gelu_tanh_grad(acc(fc1_output).reshape(-1, ff))
    grad_fc1_bias = dpre.sum(dim=0)
    grad_fc1_weight = dpre.T @ x
    grad_hidden = dpre @ acc(fc1_weight) + dres
    f32 = torch.float32
    return (to_output(grad_hidden.reshape(grad_output.shape), f32), to_output(grad_fc1_weight, f32),
            to_output(grad_fc1_bias, f32), to_output(grad_fc2_weight, f32),
            to_output(grad_fc2_bias, f32), to_output(grad_ln_weight, f32),
            to_output(grad_ln_bias, f32))


def physical_floor(*, batch, seq, dim, ff):
    tokens = batch * seq
    activations = 4 * tokens * dim + tokens + 2 * tokens * ff
    params = 4 * dim * ff + ff + 4 * dim
    return {"bytes": 4 * (activations + params), "flops": 8 * tokens * dim * ff, "math": "tf32"}
