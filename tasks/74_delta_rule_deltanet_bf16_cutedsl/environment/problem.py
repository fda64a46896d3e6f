"""DeltaNet recurrence (delta rule without decay) from a given state, 16 heads x 128, bf16 I/O.

Head-first [B, H, T, D]. q and k are L2-normalised (x / sqrt(sum x^2 + 1e-6)) and q is scaled by
d^-0.5; S [d_k, d_v] starts at initial_state. Per step t, in fp32:
u = beta_t (v_t - k_t^T S); S <- S + k_t u^T; o_t = q_t^T S. Returns o (bf16) and the final S (fp32).

The reference evaluates the recurrence exactly in chunks of 64 steps (the WY / UT form): within a
chunk, (I + strictly_lower(diag(beta) K K^T)) U = diag(beta) (V - K S_0) gives every u at once.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="flash-linear-attention",
    model="DeltaNet (16 heads x 128)",
    upstream="fla-org/flash-linear-attention fla/ops/delta_rule/naive.py (delta_rule_recurrence); inputs "
    "as in tests/ops/test_delta.py, geometry from fla/models/delta_net/configuration_delta_net.py",
    license="MIT",
    notes="Written in the exact chunked (UT transform) form rather than a 1024-step Python loop, "
    "which would launch ~7k kernels; it was checked against the step-by-step recurrence.",
)
INPUTS = ("q", "k", "v", "beta", "initial_state")
OUTPUTS = ("o", "S")
SMALL_WORKLOAD = dict(batch=2, heads=2, seqlen=80, head_dim=8)
CHUNK = 64
L2_NORM_EPS = 1e-6  # inside the square root of the L2 normalisation


def make_inputs(device, generator, *, batch=8, heads=16, seqlen=1024, head_dim=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    q, k, v = (randn(batch, heads, seqlen, head_dim).to(bf16) for _ in range(3))
    beta = torch.sigmoid(randn(batch, heads, seqlen)).to(bf16)
    initial_state = randn(batch, heads, head_dim, head_dim)
    return q, k, v, beta, initial_state


def _l2norm(x):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2_NORM_EPS)


def _chunks(x, chunk):
    """[B, H, T, ...] -> [B, H, N, chunk, ...], zero-padding T up to a multiple of chunk."""
    pad = -x.shape[2] % chunk
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], pad, *x.shape[3:])], dim=2)
    return x.view(x.shape[0], x.shape[1], -1, chunk, *x.shape[3:])


def reference(q, k, v, beta, initial_state):
    seqlen, head_dim = q.shape[2], q.shape[3]
    qc = _chunks(_l2norm(acc(q)) * head_dim ** -0.5, CHUNK)  # padded steps have k = v = beta = 0
    kc = _chunks(_l2norm(acc(k)), CHUNK)
    vc = _chunks(acc(v), CHUNK)
    bc = _chunks(acc(beta), CHUNK)[..., None]
    strict = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril(-1)
    a = ((bc * kc) @ kc.transpose(-1, -2)).masked_fill(~strict, 0)
    ut = torch.linalg.solve_triangular(a, torch.cat([bc * vc, bc * kc], dim=-1), upper=False,
                                       unitriangular=True)  # diagonal of a is taken as 1
    u0, w = ut[..., :vc.shape[-1]], ut[..., vc.shape[-1]:]
    qk = (qc @ kc.transpose(-1, -2)).tril()
    s = acc(initial_state)
    out = torch.empty_like(vc)
    for n in range(qc.shape[2]):
        u = u0[:, :, n] - w[:, :, n] @ s
        out[:, :, n] = qc[:, :, n] @ s + qk[:, :, n] @ u
        s = s + kc[:, :, n].transpose(-1, -2) @ u
    o = out.flatten(2, 3)[:, :, :seqlen]
    return to_output(o, torch.bfloat16), to_output(s, torch.float32)


def physical_floor(*, batch, heads, seqlen, head_dim):
    tokens = batch * heads * seqlen
    io = 2 * tokens * (4 * head_dim + 1) + 2 * batch * heads * head_dim * head_dim * 4
    # the step-by-step form is the cheapest: k^T S, the rank-1 update and q^T S per token
    return {"bytes": io, "flops": 6 * tokens * head_dim * head_dim, "math": "bf16"}
