"""Backward of an embedding lookup followed by RMSNorm (Jamba-mini-1.7), into a 65536 x 4096 table, bf16.

With h the saved fp32 embeddings, r the saved rstd (an independent draw, used as given) and w the
norm weight: n = h * r; dW_norm = sum_tokens dY * n (fp32, returned as bf16); g = dY * w;
dx = r * (g - n * mean(g * n)) (mean over the 4096 features). The table gradient starts at zero in
fp32 and dx of every token is added to row input_ids[token] (repeated ids accumulate); it is
returned rounded to bf16.
"""

import torch

from metakernelbench.problem_kit import acc, acc_dtype, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="Jamba-mini-1.7",
    upstream="nvidia/SOL-ExecBench L1/087_embedding_with_initial_layernorm_backward "
    "(taozi555/jamba-mini-1.7-rp), workload index 0",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The reference accumulates rows with index_put_(accumulate=True), which is deterministic "
    "(sorted by id, token order kept) where index_add_ on CUDA uses atomics.",
)
INPUTS = ("grad_output", "input_ids", "hidden_states_fp32", "rstd", "norm_weight")
OUTPUTS = ("grad_embed_weight", "grad_norm_weight")
SMALL_WORKLOAD = dict(batch=2, seq=24, hidden=32)
VOCAB = 65536  # the table size is part of the problem: no input carries it


def make_inputs(device, generator, *, batch=64, seq=256, hidden=4096):
    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    grad_output = randn(batch, seq, hidden).to(torch.bfloat16)
    input_ids = torch.randint(0, VOCAB, (batch, seq), device=device, generator=generator)
    hidden_states_fp32 = randn(batch, seq, hidden)
    rstd = torch.rsqrt(0.1 + 2 * torch.rand(batch, seq, 1, device=device, generator=generator) + 1e-6)
    norm_weight = (1 + 0.1 * randn(hidden)).to(torch.bfloat16)
    return grad_output, input_ids, hidden_states_fp32, rstd, norm_weight


def reference(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight):
    hidden = grad_output.shape[-1]
    dy = acc(grad_output).reshape(-1, hidden)
    r = acc(rstd).reshape(-1, 1)
    n = acc(hidden_states_fp32).reshape(-1, hidden) * r
    grad_norm_weight = (dy * n).sum(dim=0)
    g = dy * acc(norm_weight)
    dx = r * (g - n * (g * n).mean(dim=-1, keepdim=True))
    table = torch.zeros(VOCAB, hidden, dtype=acc_dtype(), device=dx.device)
    table.index_put_((input_ids.reshape(-1),), dx, accumulate=True)
    bf16 = torch.bfloat16
    return to_output(table, bf16), to_output(grad_norm_weight, bf16)


def physical_floor(*, batch, seq, hidden):
    tokens = batch * seq
    return {"bytes": tokens * (hidden * (2 + 4) + 8 + 4) + 2 * 2 * hidden + 2 * VOCAB * hidden,
            "flops": 10 * tokens * hidden, "math": "fp32"}
