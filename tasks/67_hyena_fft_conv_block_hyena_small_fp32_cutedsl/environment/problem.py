"""Complete order-2 Hyena block (d_model 256, L = 256) with an FFT long convolution, fp32.

r = x + Hyena(LayerNorm1(x)); out = r + MLP(LayerNorm2(r)), MLP = fc2(gelu_tanh(fc1)).
Hyena: u = in_proj (256 -> 768, bias); causal depthwise conv (kernel 3, bias) over time; split into
x0, x1, v. Implicit filter from positional features z = [t, cos(f w), -sin(f w)] (t = linspace(0,
1, L), w = 2 pi n / L, f = [1e-4, 1]): h = sin(freq (z W1 + b1)), twice more with W2, W3, then
W_final (no bias); h <- h (exp(-t |deltas|) + shift) + filter_bias. The [L, 256] filter becomes the
per-channel kernels k [256, L] by a raw reshape (no transpose). g = v x1; y = causal conv of g with
k (via zero-padded FFT of size 2L) + g filter_bias; out_proj(y x0).
"""

import math

import torch
import torch.nn.functional as F

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Hyena-small-32k",
    upstream="nvidia/SOL-ExecBench L2/051_seqlen-finetuned-reconstructed_hyena_complete_forward_block, "
    "workload index 7",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="As in the source, the filter is reshaped (not transposed) from [L, d] to [d, L]; with "
    "L = d = 256 this swaps the time and channel roles. filter_bias enters twice: added to the "
    "filter and as the skip term g * filter_bias.",
)
INPUTS = ("hidden_states", "norm1_weight", "norm1_bias", "norm2_weight", "norm2_bias", "in_proj_weight",
          "in_proj_bias", "short_conv_weight", "short_conv_bias", "filter_linear1_weight",
          "filter_linear1_bias", "sin_freq", "filter_linear2_weight", "filter_linear2_bias",
          "filter_linear3_weight", "filter_linear3_bias", "filter_linear_final_weight", "filter_bias",
          "exp_mod_deltas", "out_proj_weight", "out_proj_bias", "mlp_fc1_weight", "mlp_fc1_bias",
          "mlp_fc2_weight", "mlp_fc2_bias", "layer_norm_eps", "exp_mod_shift")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, seqlen=16, d_model=8, filter_dim=8, mlp_dim=32)
BANDS = 2
FIRST_BAND = 1e-4  # the filter's positional features use frequencies [FIRST_BAND, 1]


def make_inputs(device, generator, *, batch=32, seqlen=256, d_model=256, filter_dim=64, mlp_dim=1024):
    def randn(*shape, std=1.0, mean=0.0):
        return mean + std * torch.randn(*shape, device=device, generator=generator)

    small = 0.02
    width = 3 * d_model
    deltas = torch.linspace(math.log(0.01) / 1.5, math.log(0.01) / 0.3, d_model, device=device)
    return (
        randn(batch, seqlen, d_model),
        randn(d_model, std=0.1, mean=1.0), randn(d_model, std=0.1),
        randn(d_model, std=0.1, mean=1.0), randn(d_model, std=0.1),
        randn(width, d_model, std=small), randn(width, std=small),
        randn(width, 1, 3, std=small), randn(width, std=small),
        randn(filter_dim, 1 + 2 * BANDS, std=small), randn(filter_dim, std=small),
        randn(1, filter_dim, std=0.1, mean=1.0),
        randn(filter_dim, filter_dim, std=small), randn(filter_dim, std=small),
        randn(filter_dim, filter_dim, std=small), randn(filter_dim, std=small),
        randn(d_model, filter_dim, std=small), randn(d_model, std=small),
        deltas.view(1, 1, d_model),
        randn(d_model, d_model, std=small), randn(d_model, std=small),
        randn(mlp_dim, d_model, std=small), randn(mlp_dim, std=small),
        randn(d_model, mlp_dim, std=small), randn(d_model, std=small),
        1e-5, 0.05,
    )


def _implicit_filter(seqlen, dtype, device, w1, b1, freq, w2, b2, w3, b3, w_final, bias, deltas, shift):
    """The [L, d] filter: sine MLP over positional features, exponentially modulated, plus bias."""
    t = torch.linspace(0, 1, seqlen, dtype=dtype, device=device)[:, None]
    w = 2 * math.pi * torch.arange(seqlen, dtype=dtype, device=device)[:, None] / seqlen
    f = torch.linspace(FIRST_BAND, BANDS - 1, BANDS, dtype=dtype, device=device)[None, :]
    z = torch.cat([t, torch.cos(f * w), -torch.sin(f * w)], dim=-1)  # [L, 1 + 2 bands]
    h = torch.sin(freq * F.linear(z, w1, b1))
    h = torch.sin(freq * F.linear(h, w2, b2))
    h = torch.sin(freq * F.linear(h, w3, b3))
    h = F.linear(h, w_final)
    return h * (torch.exp(-t * deltas.abs().view(1, -1)) + shift) + bias


def reference(hidden_states, norm1_weight, norm1_bias, norm2_weight, norm2_bias, in_proj_weight,
              in_proj_bias, short_conv_weight, short_conv_bias, filter_linear1_weight,
              filter_linear1_bias, sin_freq, filter_linear2_weight, filter_linear2_bias,
              filter_linear3_weight, filter_linear3_bias, filter_linear_final_weight, filter_bias,
              exp_mod_deltas, out_proj_weight, out_proj_bias, mlp_fc1_weight, mlp_fc1_bias,
              mlp_fc2_weight, mlp_fc2_bias, layer_norm_eps, exp_mod_shift):
    x = acc(hidden_states)
    _, seqlen, d_model = x.shape
    n1 = F.layer_norm(x, (d_model,), acc(norm1_weight), acc(norm1_bias), layer_norm_eps)
    u = F.linear(n1, acc(in_proj_weight), acc(in_proj_bias)).transpose(1, 2)  # [B, 3d, L]
    u = F.conv1d(u, acc(short_conv_weight), acc(short_conv_bias), padding=2, groups=u.shape[1])
    x0, x1, v = u[..., :seqlen].split(d_model, dim=1)
    h = _implicit_filter(seqlen, x.dtype, x.device, acc(filter_linear1_weight), acc(filter_linear1_bias),
                         acc(sin_freq), acc(filter_linear2_weight), acc(filter_linear2_bias),
                         acc(filter_linear3_weight), acc(filter_linear3_bias),
                         acc(filter_linear_final_weight), acc(filter_bias), acc(exp_mod_deltas),
                         exp_mod_shift)
    k = h.reshape(d_model, seqlen)  # raw reshape of [L, d], as in the source
    g = v * x1
    n = 2 * seqlen
    y = torch.fft.irfft(torch.fft.rfft(g, n=n) * torch.fft.rfft(k, n=n), n=n)[..., :seqlen]
    y = (y + g * acc(filter_bias)[:, None]) * x0
    r = x + F.linear(y.transpose(1, 2), acc(out_proj_weight), acc(out_proj_bias))
    n2 = F.layer_norm(r, (d_model,), acc(norm2_weight), acc(norm2_bias), layer_norm_eps)
    m = F.gelu(F.linear(n2, acc(mlp_fc1_weight), acc(mlp_fc1_bias)), approximate="tanh")
    out = r + F.linear(m, acc(mlp_fc2_weight), acc(mlp_fc2_bias))
    return to_output(out, torch.float32)


def physical_floor(*, batch, seqlen, d_model, filter_dim, mlp_dim):
    tokens = batch * seqlen
    weights = 3 * d_model * d_model + d_model * d_model + 2 * mlp_dim * d_model
    io = 4 * (2 * tokens * d_model + weights)
    gemm = 2 * tokens * weights
    fft_conv = 2 * batch * d_model * seqlen * 2 * 5 * math.log2(2 * seqlen)  # two real FFTs of size 2L
    return {"bytes": io, "flops": int(gemm + fft_conv), "math": "tf32"}
