"""Kimi Delta Attention (KDA): delta rule with per-key-channel decay, 16 heads x 128, bf16 I/O.

Layout [B, T, H, D]. q and k are L2-normalised per head (x / sqrt(sum x^2 + 1e-6)), q is scaled by
d_k^-0.5, and the state S [d_k, d_v] starts at zero. Per step t, in fp32:
S <- diag(exp(g_t)) S; S <- S + (beta_t k_t) (v_t - k_t^T S)^T; o_t = q_t^T S.

The reference evaluates the recurrence exactly in chunks of 64 steps. With G the within-chunk
cumulative sum of g (per channel) and S_0 the state entering the chunk, the corrections u solve
(I + A) U = diag(beta) (V - (K e^G) S_0), A[t, j] = beta_t (k_t e^G_t) . (k_j e^-G_j) for j < t;
o_t = (q_t e^G_t) . (S_0 + sum_{j<=t} (k_j e^-G_j) u_j^T) and S_end = e^G_end (same sum over the chunk).
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="flash-linear-attention",
    model="Kimi-Linear (KDA)",
    upstream="fla-org/flash-linear-attention fla/ops/kda/naive.py (naive_recurrent_kda); inputs as in "
    "tests/ops/test_kda.py, head geometry from fla/models/kda/configuration_kda.py",
    license="MIT",
    notes="Written in the exact chunked form rather than a 1024-step Python loop (~8k kernel "
    "launches); checked against the step-by-step recurrence. Within a 64-step chunk e^-G stays "
    "below e^24 for these gates, far from fp32 overflow.",
)
INPUTS = ("q", "k", "v", "g", "beta")
OUTPUTS = ("o",)
SMALL_WORKLOAD = dict(batch=2, seqlen=80, heads=2, head_dim=8)
CHUNK = 64
L2_NORM_EPS = 1e-6  # inside the square root of the L2 normalisation


def make_inputs(device, generator, *, batch=8, seqlen=1024, heads=16, head_dim=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    q, k, v = (randn(batch, seqlen, heads, head_dim).to(bf16) for _ in range(3))
    g = (torch.nn.functional.logsigmoid(randn(batch, seqlen, heads, head_dim)) / 16).to(bf16)
    beta = torch.sigmoid(randn(batch, seqlen, heads)).to(bf16)
    return q, k, v, g, beta


def _l2norm(x):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2_NORM_EPS)


def _chunks(x, chunk):
    """[B, T, H, ...] -> [B, H, N, chunk, ...], zero-padding T up to a multiple of chunk."""
    x = x.transpose(1, 2)
    pad = -x.shape[2] % chunk
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], pad, *x.shape[3:])], dim=2)
    return x.reshape(x.shape[0], x.shape[1], -1, chunk, *x.shape[3:])


def reference(q, k, v, g, beta):
    seqlen, head_dim = q.shape[1], q.shape[3]
    qc = _chunks(_l2norm(acc(q)) * head_dim ** -0.5, CHUNK)  # padded steps: k = v = beta = g = 0
    kc = _chunks(_l2norm(acc(k)), CHUNK)
    vc = _chunks(acc(v), CHUNK)
    bc = _chunks(acc(beta), CHUNK)[..., None]
    gc = _chunks(acc(g), CHUNK).cumsum(dim=3)  # within-chunk cumulative log decay per channel
    k_up, k_down, q_up = kc * torch.exp(gc), kc * torch.exp(-gc), qc * torch.exp(gc)
    k_end = k_down * torch.exp(gc[:, :, :, -1:])  # k_j e^(G_end - G_j)
    decay_end = torch.exp(gc[:, :, :, -1])[..., None]  # [B, H, N, d_k, 1]
    strict = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril(-1)
    a = ((bc * k_up) @ k_down.transpose(-1, -2)).masked_fill(~strict, 0)
    ut = torch.linalg.solve_triangular(a, torch.cat([bc * vc, bc * k_up], dim=-1), upper=False,
                                       unitriangular=True)  # diagonal of a is taken as 1
    u0, w = ut[..., :vc.shape[-1]], ut[..., vc.shape[-1]:]
    qk = (q_up @ k_down.transpose(-1, -2)).tril()
    s = qc.new_zeros(*qc.shape[:2], head_dim, vc.shape[-1])
    out = torch.empty_like(vc)
    for n in range(qc.shape[2]):
        u = u0[:, :, n] - w[:, :, n] @ s
        out[:, :, n] = q_up[:, :, n] @ s + qk[:, :, n] @ u
        s = decay_end[:, :, n] * s + k_end[:, :, n].transpose(-1, -2) @ u
    o = out.flatten(2, 3)[:, :, :seqlen].transpose(1, 2)
    return to_output(o, torch.bfloat16)


def physical_floor(*, batch, seqlen, heads, head_dim):
    tokens = batch * seqlen * heads
    io = 2 * tokens * (5 * head_dim + 1)
    # the step-by-step form is the cheapest: decay, k^T S, the rank-1 update and q^T S per token
    return {"bytes": io, "flops": 7 * tokens * head_dim * head_dim, "math": "bf16"}
