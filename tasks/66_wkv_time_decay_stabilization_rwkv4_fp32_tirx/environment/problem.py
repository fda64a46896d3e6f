"""RWKV-4 WKV recurrence with exponent stabilisation, resumed from a carried state, fp32.

64 sequences of 1721 steps, 2048 channels, each channel independent.
w = -exp(time_decay), u = time_first. Per step t, with state (m, a, b):
p = max(m, k_t + u); out_t = (e^(m-p) a + e^(k_t+u-p) v_t) / (e^(m-p) b + e^(k_t+u-p));
q = max(m + w, k_t); a <- e^(m+w-q) a + e^(k_t-q) v_t; b <- e^(m+w-q) b + e^(k_t-q); m <- q.
Returns every step's output and the final (m, a, b).
"""

import torch

from metakernelbench.problem_kit import acc, to_output

PROVENANCE = dict(
    source="SOL-ExecBench",
    model="RWKV (source tag RWKV-v7-1.5B; the math is the RWKV-4 WKV)",
    upstream="nvidia/SOL-ExecBench L1/094_time_decay_exponential_stabilization, workload index 6",
    license="math and shapes only (SOL-ExecBench data is not redistributed); reference written here",
    notes="The graded workload is the source's, in full: 64 sequences x 1721 steps x 2048 channels. "
    "Every input is a synthetic draw, as in the source's workload record (it fixes the shapes, no "
    "captured values). The reference walks the 1721 steps in a Python loop of elementwise torch ops.",
)
INPUTS = ("time_decay", "key", "time_first", "value", "max_state", "num_state", "den_state")
OUTPUTS = ("output", "max_state_out", "num_state_out", "den_state_out")
SMALL_WORKLOAD = dict(batch=2, steps=5, channels=64)


def make_inputs(device, generator, *, batch=64, steps=1721, channels=2048):
    def rand(*shape):
        return torch.rand(*shape, device=device, generator=generator)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    time_decay = -6 + 5 * rand(channels)
    key = randn(batch, steps, channels)
    time_first = 0.5 * randn(channels)
    value = randn(batch, steps, channels)
    max_state = randn(batch, channels)
    num_state = randn(batch, channels)
    den_state = 0.5 + 1.5 * rand(batch, channels)
    return time_decay, key, time_first, value, max_state, num_state, den_state


def reference(time_decay, key, time_first, value, max_state, num_state, den_state):
    w = -torch.exp(acc(time_decay))
    u = acc(time_first)
    k, v = acc(key), acc(value)
    m, a, b = acc(max_state), acc(num_state), acc(den_state)
    output = torch.empty_like(k)
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        p = torch.maximum(m, kt + u)
        e_state, e_new = torch.exp(m - p), torch.exp(kt + u - p)
        output[:, t] = (e_state * a + e_new * vt) / (e_state * b + e_new)
        q = torch.maximum(m + w, kt)
        e_state, e_new = torch.exp(m + w - q), torch.exp(kt - q)
        a = e_state * a + e_new * vt
        b = e_state * b + e_new
        m = q
    f32 = torch.float32
    return to_output(output, f32), to_output(m, f32), to_output(a, f32), to_output(b, f32)


def physical_floor(*, batch, steps, channels):
    sequence = batch * steps * channels * 4
    return {"bytes": 3 * sequence + 6 * batch * channels * 4, "flops": 20 * batch * steps * channels,
            "math": "fp32"}
