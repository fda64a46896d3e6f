"""Chunked (64-token) gated-delta-rule attention as defined by the source, Qwen3-Next heads, bf16 I/O.

Head-first inputs, zero initial state, fp32 math. q and k are L2-normalised (x / sqrt(sum x^2 +
1e-6)), q is multiplied by scale, and the 4 q/k heads are tiled to 16 value heads (head h reads
q/k head h mod 4). Per 64-token chunk with G the within-chunk cumsum of g:
decay[i, j] = exp(G_i - G_j) for j <= i (else 0); T = (I + strictly_lower(beta k k^T * decay))^-1;
u = T (beta v); w = T (beta k exp(g)). Carrying S [d_k, d_v] (zero at the start) over the chunks:
v_new = u - w S; o = (q exp(g)) S + (q k^T * decay) v_new; S <- exp(g_last) S + (k exp(g_last - g))^T v_new.
As in the source, these inter-chunk factors use the raw per-token g, not its cumulative sum G, so
this is not the textbook gated delta rule; it must be reproduced as written. Output [B, S, H, D].
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Qwen3-Next-80B-A3B",
    upstream="nvidia/SOL-ExecBench L2/060_chunk_gated_delta_rule_linear_attention, workload index 9",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="Keeps the source's formula: raw per-token g in the inter-chunk terms and tiled (h mod 4) "
    "head expansion. T is applied with a unit-lower-triangular solve, which equals the source's "
    "row-by-row forward substitution.",
)
INPUTS = ("query", "key", "value", "g", "beta", "scale")
OUTPUTS = ("output",)
SMALL_WORKLOAD = dict(batch=2, qk_heads=2, v_heads=4, seqlen=80, head_dim=8)
CHUNK = 64
L2_NORM_EPS = 1e-6  # inside the square root of the L2 normalisation


def make_inputs(device, generator, *, batch=16, qk_heads=4, v_heads=16, seqlen=256, head_dim=128):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    bf16 = torch.bfloat16
    query = randn(batch, qk_heads, seqlen, head_dim).to(bf16)
    key = randn(batch, qk_heads, seqlen, head_dim).to(bf16)
    value = randn(batch, v_heads, seqlen, head_dim).to(bf16)
    g = (-0.05 * torch.rand(batch, v_heads, seqlen, device=device, generator=generator)).to(bf16)
    beta = torch.sigmoid(randn(batch, v_heads, seqlen)).to(bf16)
    return query, key, value, g, beta, head_dim ** -0.5


def _l2norm(x):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2_NORM_EPS)


def _chunks(x):
    """[B, H, S, ...] -> [B, H, N, CHUNK, ...], zero-padding S up to a multiple of CHUNK."""
    pad = -x.shape[2] % CHUNK
    if pad:
        x = torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], pad, *x.shape[3:])], dim=2)
    return x.view(x.shape[0], x.shape[1], -1, CHUNK, *x.shape[3:])


def chunk_attention(q, k, v, beta, g, inter):
    """The chunked computation; ``inter`` is the log decay used by the inter-chunk factors.

    The source passes the raw g; passing the cumulative G instead gives the textbook gated delta
    rule (which is how this function is checked against a step-by-step recurrence).
    """
    qc, kc, vc = _chunks(q), _chunks(k), _chunks(v)  # padded steps: k = v = beta = g = 0
    bc = _chunks(beta)[..., None]
    cum = _chunks(g).cumsum(dim=-1)
    ic = _chunks(inter)
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")))
    a = ((bc * kc) @ kc.transpose(-1, -2) * decay).masked_fill(~causal.tril(-1), 0)
    rhs = torch.cat([bc * vc, bc * kc * torch.exp(ic)[..., None]], dim=-1)
    ut = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)  # diag taken as 1
    u, w = ut[..., :vc.shape[-1]], ut[..., vc.shape[-1]:]
    qk = qc @ kc.transpose(-1, -2) * decay
    q_in = qc * torch.exp(ic)[..., None]
    k_out = kc * torch.exp(ic[..., -1:] - ic)[..., None]
    last = torch.exp(ic[..., -1])[..., None, None]
    s = qc.new_zeros(*qc.shape[:2], qc.shape[-1], vc.shape[-1])
    out = torch.empty_like(vc)
    for n in range(qc.shape[2]):
        v_new = u[:, :, n] - w[:, :, n] @ s
        out[:, :, n] = q_in[:, :, n] @ s + qk[:, :, n] @ v_new
        s = last[:, :, n] * s + k_out[:, :, n].transpose(-1, -2) @ v_new
    return out.flatten(2, 3)[:, :, : q.shape[2]]


def reference(query, key, value, g, beta, scale):
    tiles = value.shape[1] // query.shape[1]
    q = (_l2norm(acc(query)) * scale).repeat(1, tiles, 1, 1)
    k = _l2norm(acc(key)).repeat(1, tiles, 1, 1)
    log_decay = acc(g)
    o = chunk_attention(q, k, acc(value), acc(beta), log_decay, log_decay)
    return to_output(o.transpose(1, 2), torch.bfloat16)


def physical_floor(*, batch, qk_heads, v_heads, seqlen, head_dim):
    io = 2 * batch * seqlen * (2 * qk_heads * head_dim + 2 * v_heads * head_dim + 2 * v_heads)
    per_token = 6 * head_dim * head_dim + 2 * CHUNK * 3 * head_dim  # state products + chunk matrices
    return {"bytes": io, "flops": batch * v_heads * seqlen * per_token, "math": "bf16"}
