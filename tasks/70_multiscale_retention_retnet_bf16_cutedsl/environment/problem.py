"""Multi-scale retention in parallel (quadratic) form, RetNet geometry, bf16 I/O, fp32 compute.

Head-first [B, H, T, D]. Head h decays with gamma_h = 1 - 2^(-5-h); the decay matrix is
D[i, j] = 2^((i - j) log2 gamma_h) for i >= j and 0 above the diagonal. scores = (q / sqrt(d_k)) k^T
times D (no softmax, no normalisation); o = scores v.
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="flash-linear-attention",
    model="RetNet (fla RetNet config: 8 heads, key 256, value 512)",
    upstream="fla-org/flash-linear-attention fla/ops/retention/naive.py (naive_retention); inputs as in "
    "tests/ops/test_retention.py, geometry from fla/models/retnet/configuration_retnet.py",
    license="MIT",
    notes="Computed in fp32 throughout (decay matrix included) and rounded to bf16 once.",
)
INPUTS = ("q", "k", "v")
OUTPUTS = ("o",)
SMALL_WORKLOAD = dict(batch=2, heads=3, seqlen=16, key_dim=8, value_dim=12)


def make_inputs(device, generator, *, batch=8, heads=8, seqlen=1024, key_dim=256, value_dim=512):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(torch.bfloat16)

    return (randn(batch, heads, seqlen, key_dim), randn(batch, heads, seqlen, key_dim),
            randn(batch, heads, seqlen, value_dim))


def reference(q, k, v):
    heads, seqlen, key_dim = q.shape[1], q.shape[2], q.shape[3]
    dtype, device = acc(q).dtype, q.device
    head = torch.arange(heads, dtype=dtype, device=device)
    log2_gamma = torch.log2(1 - torch.exp2(-5 - head))
    pos = torch.arange(seqlen, dtype=dtype, device=device)
    distance = pos[:, None] - pos[None, :]
    causal = distance >= 0
    decay = torch.exp2(distance.clamp(min=0) * log2_gamma[:, None, None]) * causal
    scores = (acc(q) * key_dim ** -0.5) @ acc(k).transpose(-1, -2) * decay
    return to_output(scores @ acc(v), torch.bfloat16)


def physical_floor(*, batch, heads, seqlen, key_dim, value_dim):
    io = 2 * batch * heads * seqlen * (2 * key_dim + 2 * value_dim)
    pairs = batch * heads * seqlen * (seqlen + 1) // 2
    return {"bytes": io, "flops": 2 * pairs * (key_dim + value_dim), "math": "bf16"}
