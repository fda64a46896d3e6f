"""Multi-token-prediction input fusion (Ling-flash-2.0 MTP layer): shifted embedding, two RMSNorms, eh_proj.

ids are shifted left by one along the sequence (the last position gets token 0) and looked up in the
157184 x 4096 bf16 table. Both the embeddings (enorm) and the incoming hidden states (hnorm) get an
RMSNorm with fp32 statistics (eps): the normalized value is rounded to bf16, then multiplied by the
bf16 weight (a bf16 product). [emb_norm, hidden_norm] (8192 features) is projected by
eh_proj (x W^T, 8192 -> 4096, no bias) with fp32 accumulation and rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, round_to, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Ling-flash-2.0 (MTP layer)",
    upstream="nvidia/SOL-ExecBench L1/057_mtp_shifted_embedding_with_dual_rms_norm_fusion "
    "(inclusionAI/Ling-flash-2.0), workload index 0",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
)
INPUTS = ("input_ids", "hidden_states", "word_embeddings", "enorm_weight", "hnorm_weight",
          "eh_proj_weight", "rms_norm_eps")
OUTPUTS = ("fused_hidden_states",)
SMALL_WORKLOAD = dict(batch=2, seq=6, hidden=32, vocab=50)


def make_inputs(device, generator, *, batch=32, seq=256, hidden=4096, vocab=157184):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    def bf16(t):
        return t.to(torch.bfloat16)

    input_ids = torch.randint(0, vocab, (batch, seq), device=device, generator=generator)
    hidden_states = bf16(randn(batch, seq, hidden))
    word_embeddings = bf16(randn(vocab, hidden))
    enorm_weight = bf16(1 + 0.1 * randn(hidden))
    hnorm_weight = bf16(1 + 0.1 * randn(hidden))
    eh_proj_weight = bf16(0.02 * randn(hidden, 2 * hidden))
    return (input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight, eh_proj_weight,
            1e-6)


def reference(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight, eh_proj_weight,
              rms_norm_eps):
    bf16 = torch.bfloat16
    shifted = torch.cat([input_ids[:, 1:], torch.zeros_like(input_ids[:, :1])], dim=1)

    def rms_norm(t, weight):
        t = acc(t)
        normed = round_to(t * torch.rsqrt(t.pow(2).mean(dim=-1, keepdim=True) + rms_norm_eps), bf16)
        return round_to(normed * acc(weight), bf16)

    emb = rms_norm(word_embeddings[shifted], enorm_weight)
    hid = rms_norm(hidden_states, hnorm_weight)
    fused = torch.cat([emb, hid], dim=-1) @ acc(eh_proj_weight).T
    return to_output(fused, bf16)


def physical_floor(*, batch, seq, hidden, vocab):
    tokens = batch * seq
    gathered = min(tokens, vocab) * hidden  # at most one table row per token is needed
    return {"bytes": 8 * tokens + 2 * (2 * tokens * hidden + gathered + 2 * hidden * hidden + 2 * hidden),
            "flops": 4 * tokens * hidden * hidden, "math": "bf16"}
