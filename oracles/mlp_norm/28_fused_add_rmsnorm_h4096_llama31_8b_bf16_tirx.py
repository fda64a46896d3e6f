"""TIRx oracle for problem 28: residual add fused with RMSNorm, one CTA per row.

The whole computation runs in one TIRx kernel. Each of 256 threads adds its strided share of the
row (hidden_states + residual in fp32) into registers and accumulates its sum of squares; a
block reduction (``T.cuda.cta_sum``: warp shuffles, then shared memory across the 8 warps) gives
the row total; every thread then writes (x * rsqrt(mean + eps)) * weight rounded to bf16, the
reference's order of operations. The hidden size is baked into the kernel (registers per
thread), the token count is symbolic. Fast-math rsqrt is about 2^-22 relative: far below the
bf16 output rounding.
"""

import torch
import tvm
from tvm.script import tirx as T

EPS = 1e-5
THREADS = 256
WARPS = THREADS // 32
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _rmsnorm_kernel(hidden):
    """One CTA per row; each thread keeps ceil(hidden / 256) fp32 values in registers."""
    per_thread = (hidden + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_fused_add_rmsnorm(x_h: T.handle, r_h: T.handle, w_h: T.handle, y_h: T.handle):
        tokens = T.int32()
        x = T.match_buffer(x_h, (tokens, hidden), "bfloat16")
        res = T.match_buffer(r_h, (tokens, hidden), "bfloat16")
        weight = T.match_buffer(w_h, (hidden,), "bfloat16")
        y = T.match_buffer(y_h, (tokens, hidden), "bfloat16")
        T.device_entry()
        row = T.cta_id([tokens])
        tx = T.thread_id([THREADS])
        scratch = T.alloc_buffer((WARPS,), "float32", scope="shared")
        vals = T.alloc_buffer((per_thread,), "float32", scope="local")
        sq: T.f32 = T.float32(0.0)
        for i in T.unroll(per_thread):
            vals[i] = T.float32(0.0)
            if i * THREADS + tx < hidden:
                vals[i] = T.float32(x[row, i * THREADS + tx]) + T.float32(res[row, i * THREADS + tx])
                sq = sq + vals[i] * vals[i]
        total: T.f32 = T.cuda.cta_sum(sq, WARPS, scratch.ptr_to([0]))
        scale: T.f32 = T.rsqrt(total / T.float32(hidden) + T.float32(EPS))
        for i in T.unroll(per_thread):
            if i * THREADS + tx < hidden:
                y[row, i * THREADS + tx] = T.bfloat16(
                    vals[i] * scale * T.float32(weight[i * THREADS + tx]))

    return mkb_fused_add_rmsnorm


def _build(hidden, arch):
    """Compile once per (hidden, arch) and return the tvm Executable."""
    key = (hidden, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _rmsnorm_kernel(hidden)}), target=target,
                                     tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(hidden):
    key = (hidden, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(hidden_states, residual, weight):
    x = hidden_states.contiguous()
    res = residual.contiguous()
    w = weight.contiguous()
    tokens, hidden = x.shape
    y = torch.empty_like(x)
    if tokens > 0:
        _kernel_fn(hidden)(x, res, w, y)
    return y


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


def kernel_sources(arch="sm_90a", hidden=4096):
    """{kernel symbol: generated CUDA source} for this file's kernels at the graded hidden size."""
    source = _build(hidden, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
