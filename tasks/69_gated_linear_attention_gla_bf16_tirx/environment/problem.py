"""Gated linear attention (GLA) recurrence with per-key-channel decay, 4 heads, d_k 256, d_v 512.

Layout [B, T, H, D]; the state h [d_k, d_v] starts at zero. Per step t, in fp32:
h <- diag(exp(gk_t)) h + k_t v_t^T; o_t = (q_t d_k^-0.5)^T h. Output bf16.

The reference evaluates the recurrence exactly in chunks of 64 steps: with G the within-chunk
cumulative sum of gk and h_0 the state entering the chunk,
o_t = (q_t e^G_t) . (h_0 + sum_{j<=t} (k_j e^-G_j) v_j^T) and h_end = e^G_end (the same over the chunk).
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="flash-linear-attention",
    model="GLA (fla GLA config: 4 heads, key 256, value 512)",
    upstream="fla-org/flash-linear-attention fla/ops/gla/naive.py (naive_recurrent_gla); inputs as in "
    "tests/ops/test_gla.py, geometry from fla/models/gla/configuration_gla.py",
    license="MIT",
    notes="Written in the exact chunked form rather than a 1024-step Python loop; checked against "
    "the step-by-step recurrence.",
)
INPUTS = ("q", "k", "v", "gk")
OUTPUTS = ("o",)
SMALL_WORKLOAD = dict(batch=2, seqlen=80, heads=2, key_dim=8, value_dim=12)
CHUNK = 64


def make_inputs(device, generator, *, batch=8, seqlen=1024, heads=4, key_dim=256, value_dim=512):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    q = randn(batch, seqlen, heads, key_dim).to(bf16)
    k = randn(batch, seqlen, heads, key_dim).to(bf16)
    v = randn(batch, seqlen, heads, value_dim).to(bf16)
    gk = (torch.nn.functional.logsigmoid(randn(batch, seqlen, heads, key_dim)) / 16).to(bf16)
    return q, k, v, gk


def _chunks(x, chunk):
    """[B, T, H, D] -> [B, H, N, chunk, D], zero-padding T up to a multiple of chunk."""
    x = x.transpose(1, 2)
    pad = -x.shape[2] % chunk
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], pad, x.shape[3])], dim=2)
    return x.reshape(x.shape[0], x.shape[1], -1, chunk, x.shape[3])


def reference(q, k, v, gk):
    seqlen, key_dim = q.shape[1], q.shape[3]
    qc = _chunks(acc(q) * key_dim ** -0.5, CHUNK)  # padded steps: k = v = gk = 0
    kc, vc = _chunks(acc(k), CHUNK), _chunks(acc(v), CHUNK)
    gc = _chunks(acc(gk), CHUNK).cumsum(dim=3)
    q_up, k_down = qc * torch.exp(gc), kc * torch.exp(-gc)
    k_end = k_down * torch.exp(gc[:, :, :, -1:])  # k_j e^(G_end - G_j)
    decay_end = torch.exp(gc[:, :, :, -1])[..., None]
    intra = (q_up @ k_down.transpose(-1, -2)).tril() @ vc  # all chunks at once
    h = qc.new_zeros(*qc.shape[:2], key_dim, vc.shape[-1])
    out = torch.empty_like(vc)
    for n in range(qc.shape[2]):
        out[:, :, n] = intra[:, :, n] + q_up[:, :, n] @ h
        h = decay_end[:, :, n] * h + k_end[:, :, n].transpose(-1, -2) @ vc[:, :, n]
    o = out.flatten(2, 3)[:, :, :seqlen].transpose(1, 2)
    return to_output(o, torch.bfloat16)


def physical_floor(*, batch, seqlen, heads, key_dim, value_dim):
    tokens = batch * seqlen * heads
    io = 2 * tokens * (3 * key_dim + 2 * value_dim)
    # any chunked form reads the carried state (q^T h) and folds each token into it
    return {"bytes": io, "flops": 4 * tokens * key_dim * value_dim, "math": "bf16"}
