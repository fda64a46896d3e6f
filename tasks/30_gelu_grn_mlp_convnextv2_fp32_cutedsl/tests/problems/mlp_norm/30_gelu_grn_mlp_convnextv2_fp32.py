"""ConvNeXt-V2 inverted-bottleneck MLP with Global Response Normalization, NHWC, fp32.

x = gelu_erf(h W1^T + b1) (128 -> 512 per pixel). GRN: G = L2 norm of x over H and W per image and
channel; N = G / (mean of G over the 512 channels + eps); y = gamma * (x * N) + beta + x.
Output = y W2^T + b2 (512 -> 128), NHWC.
"""

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="ConvNeXt-V2-Base",
    upstream="nvidia/SOL-ExecBench L1/045_fused_linear_gelu_grn_linear "
    "(facebook/convnextv2-base-22k-224), workload index 4",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
)
INPUTS = ("hidden_states", "pwconv1_weight", "pwconv1_bias", "grn_weight", "grn_bias",
          "pwconv2_weight", "pwconv2_bias", "eps")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, height=5, width=6, dim=8, hidden=32)


def make_inputs(device, generator, *, batch=64, height=56, width=56, dim=128, hidden=512):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    hidden_states = randn(batch, height, width, dim)
    pwconv1_weight = randn(hidden, dim) / dim ** 0.5
    pwconv1_bias = randn(hidden)
    grn_weight = randn(1, 1, 1, hidden) / hidden ** 0.5
    grn_bias = randn(1, 1, 1, hidden)
    pwconv2_weight = randn(dim, hidden) / hidden ** 0.5
    pwconv2_bias = randn(dim)
    return (hidden_states, pwconv1_weight, pwconv1_bias, grn_weight, grn_bias, pwconv2_weight,
            pwconv2_bias, 1e-6)


def reference(hidden_states, pwconv1_weight, pwconv1_bias, grn_weight, grn_bias, pwconv2_weight,
              pwconv2_bias, eps):
    x = F.gelu(acc(hidden_states) @ acc(pwconv1_weight).T + acc(pwconv1_bias))
    g = torch.linalg.vector_norm(x, ord=2, dim=(1, 2), keepdim=True)
    n = g / (g.mean(dim=-1, keepdim=True) + eps)
    y = acc(grn_weight) * (x * n) + acc(grn_bias) + x
    return to_output(y @ acc(pwconv2_weight).T + acc(pwconv2_bias), torch.float32)


def physical_floor(*, batch, height, width, dim, hidden):
    pixels = batch * height * width
    params = 2 * dim * hidden + 3 * hidden + dim
    return {"bytes": 4 * (2 * pixels * dim + params), "flops": 4 * pixels * dim * hidden,
            "math": "tf32"}
