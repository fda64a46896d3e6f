"""TIRx oracle for problem 31: GroupNorm (32 groups) over NCHW fp32, affine per channel.

The whole computation is one TIRx kernel with one CTA per (sample, group). A group's channels are
contiguous in NCHW, so a group is one contiguous row of ``channels / 32 * height * width`` floats
(2560 at the graded shape). Each thread loads ``vec`` contiguous floats per step (16-byte loads
when the row length allows) and keeps its share of the row in registers. The mean is a two-level
block reduction (``T.cuda.cta_sum``: warp shuffles, then the per-warp sums through shared memory)
divided by the row length; the variance is the same reduction of the squared centred values
(slots past the row contribute zero), the reference's two-pass form. NVRTC compiles with
--use_fast_math, which would make ``/`` and ``sqrt`` approximate; the fp32 output is judged within
a few ulp, so both divisions, the square root and the reciprocal are the IEEE-rounded PTX
instructions by name (``div.rn``, ``sqrt.rn``, ``rcp.rn``). Then y = (x - mean) * rstd *
weight[c] + bias[c], c the channel of the element, stored with 16-byte stores. Shapes are baked
into the kernel (one build per shape).
"""

import torch
import tvm
from tvm.script import tirx as T

GROUPS = 32
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, channels=1280, height=8, width=8)
_MAX_THREADS = 256
_MAX_PER_THREAD = 64  # fp32 values a thread keeps in registers
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _plan(row):
    """(vector width, threads per CTA, steps per thread) for a group row of ``row`` floats.

    ``T.cuda.cta_sum`` takes a power-of-two warp count, so the thread count is 256 or 128 (fewer
    for short rows), whichever leaves fewer idle slots: 640 vectors of the graded row become 128
    threads x 5 steps exactly.
    """
    vec = 4 if row % 4 == 0 else (2 if row % 2 == 0 else 1)
    chunks = row // vec
    cap = 32
    while cap < min(chunks, _MAX_THREADS):
        cap *= 2
    best = None
    for threads in (cap, max(cap // 2, 32)):
        steps = (chunks + threads - 1) // threads
        if best is None or steps * threads < best[0]:
            best = (steps * threads, threads, steps)
    return vec, best[1], best[2]


def _groupnorm_kernel(batch, channels, hw):
    per_group = channels // GROUPS
    length = per_group * hw
    rows = batch * GROUPS
    vec, threads, steps = _plan(length)
    chunks = length // vec
    warps = threads // 32

    @T.prim_func
    def mkb_groupnorm(x_h: T.handle, w_h: T.handle, b_h: T.handle, eps: T.float32, y_h: T.handle):
        x = T.match_buffer(x_h, (rows, length), "float32")
        weight = T.match_buffer(w_h, (channels,), "float32")
        bias = T.match_buffer(b_h, (channels,), "float32")
        y = T.match_buffer(y_h, (rows, length), "float32")
        T.device_entry()
        row = T.cta_id([rows])
        tx = T.thread_id([threads])
        scratch_sum = T.alloc_buffer((warps,), "float32", scope="shared")
        scratch_sq = T.alloc_buffer((warps,), "float32", scope="shared")
        vals = T.alloc_buffer((steps, vec), "float32", scope="local")
        outv = T.alloc_buffer((vec,), "float32", scope="local")
        tmp = T.alloc_buffer((4,), "float32", scope="local")
        first_channel: T.let = (row % GROUPS) * per_group
        s: T.f32 = T.float32(0.0)
        for k in T.unroll(steps):
            for j in T.unroll(vec):
                vals[k, j] = T.float32(0.0)
            if tx + k * threads < chunks:
                for j in T.vectorized(vec):
                    vals[k, j] = x[row, (tx + k * threads) * vec + j]
            for j in T.unroll(vec):
                s = s + vals[k, j]
        total: T.f32 = T.cuda.cta_sum(s, warps, scratch_sum.ptr_to([0]))
        T.ptx["div.rn.f32"](tmp[0], total, T.float32(length))
        q: T.f32 = T.float32(0.0)
        for k in T.unroll(steps):
            if tx + k * threads < chunks:
                for j in T.unroll(vec):
                    vals[k, j] = vals[k, j] - tmp[0]
                    q = q + vals[k, j] * vals[k, j]
        total_sq: T.f32 = T.cuda.cta_sum(q, warps, scratch_sq.ptr_to([0]))
        T.ptx["div.rn.f32"](tmp[1], total_sq, T.float32(length))
        T.ptx["sqrt.rn.f32"](tmp[2], tmp[1] + eps)
        T.ptx["rcp.rn.f32"](tmp[3], tmp[2])
        for k in T.unroll(steps):
            if tx + k * threads < chunks:
                for j in T.unroll(vec):
                    outv[j] = (vals[k, j] * tmp[3]) * weight[first_channel + ((tx + k * threads) * vec + j) // hw] \
                        + bias[first_channel + ((tx + k * threads) * vec + j) // hw]
                for j in T.vectorized(vec):
                    y[row, (tx + k * threads) * vec + j] = outv[j]

    return mkb_groupnorm


def _build(batch, channels, hw, arch):
    """Compile once per (shape, arch) and return the tvm Executable."""
    key = (batch, channels, hw, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _groupnorm_kernel(batch, channels, hw)}),
                                     target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(batch, channels, hw):
    key = (batch, channels, hw, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(x, weight, bias, eps):
    n, c, h, w = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    length = c // GROUPS * h * w
    vec, threads, steps = _plan(length)
    if steps * vec > _MAX_PER_THREAD:
        raise ValueError(f"group of {length} values does not fit this kernel's registers")
    _kernel_fn(n, c, h * w)(x.contiguous().view(n * GROUPS, length), weight.contiguous(), bias.contiguous(),
                            float(eps), out.view(n * GROUPS, length))
    return out


def _symbols(source):
    """Kernel names declared in a generated CUDA source (``<global_symbol>_kernel``)."""
    names = []
    for part in source.split("__global__ void ")[1:]:
        if part.startswith("__launch_bounds__"):
            part = part[part.index(")") + 1:]
        name = part[:part.index("(")].strip()
        if name not in names:
            names.append(name)
    return names


def kernel_sources(arch="sm_90a", batch=WORKLOAD["batch"], channels=WORKLOAD["channels"],
                   hw=WORKLOAD["height"] * WORKLOAD["width"]):
    """{kernel symbol: generated CUDA source} for this file's kernel at the given shape."""
    source = _build(batch, channels, hw, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
