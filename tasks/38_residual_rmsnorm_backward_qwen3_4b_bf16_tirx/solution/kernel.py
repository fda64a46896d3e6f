"""TIRx oracle for problem 38: backward of residual add + RMSNorm (hidden 2560), dx in bf16, dW in fp32.

Two TIRx kernels. ``mkb_rmsnorm_bwd``: each CTA owns ``CHUNK`` consecutive tokens and walks them two
rows per step. A thread owns the same ``vec`` contiguous columns in every row (320 threads x 8
columns cover a row of 2560), loads them with 16-byte loads (dy in bf16, n in fp32) and forms
g = dy * w in fp32. The row's dot(g, n) is reduced by xor shuffles inside each warp and across
warps through shared memory (double-buffered by step parity, one barrier per step; every thread
adds the warp sums in the same order); mean = dot * (1 / hidden), as the reference's mean scales
its sum; dx = rstd * (g - n * mean) is rounded to bf16 once and stored with 16-byte stores. The
same tensor is returned as the hidden-state and the residual gradient (the reference returns equal
values). For the weight gradient every thread accumulates dy * n of its columns over the CTA's
tokens in fp32 registers and writes the CTA's partial row; ``mkb_dw_reduce`` sums the partial rows
per column in fp64 (8 interleaved slices per column, combined in order through shared memory) and
rounds to fp32 once. Only multiplies and adds are involved, which NVRTC's fast math keeps exact
(it may fuse a multiply and an add into one FMA, which only removes a rounding). Shapes are baked
into the kernels (one build per shape).
"""

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, seq=8192, hidden=2560)
MAX_THREADS = 512
CHUNK = 64  # tokens per CTA of the main kernel (one fp32 partial row of dW each)
ROWS = 2  # rows in flight per step
SLICES = 8  # fp64 partial sums per column in the dW reduction
COLS = 32  # columns per CTA of the dW reduction
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _plan(hidden):
    """(vector width, threads per CTA, steps per thread): the multiple of 32 threads (at most 512,
    at least half of that cap) leaving the fewest idle slots; 2560 = 320 threads x 8 columns."""
    vec = 8 if hidden % 8 == 0 else (4 if hidden % 4 == 0 else (2 if hidden % 2 == 0 else 1))
    chunks = hidden // vec
    cap = min(MAX_THREADS, (chunks + 31) // 32 * 32)
    best = None
    for threads in range(cap, max(cap // 2, 32) - 1, -32):
        steps = (chunks + threads - 1) // threads
        if best is None or steps * threads < best[0]:
            best = (steps * threads, threads, steps)
    return vec, best[1], best[2]


def _bwd_kernel(tokens, hidden):
    vec, threads, steps = _plan(hidden)
    chunks = hidden // vec
    warps = threads // 32
    ctas = (tokens + CHUNK - 1) // CHUNK
    inv_hidden = 1.0 / hidden

    @T.prim_func
    def mkb_rmsnorm_bwd(dy_h: T.handle, n_h: T.handle, r_h: T.handle, w_h: T.handle, dx_h: T.handle,
                        p_h: T.handle):
        dy = T.match_buffer(dy_h, (tokens, hidden), "bfloat16")
        n = T.match_buffer(n_h, (tokens, hidden), "float32")
        rstd = T.match_buffer(r_h, (tokens,), "float32")
        w = T.match_buffer(w_h, (hidden,), "float32")
        dx = T.match_buffer(dx_h, (tokens, hidden), "bfloat16")
        partial = T.match_buffer(p_h, (ctas, hidden), "float32")
        T.device_entry()
        cta = T.cta_id([ctas])
        tx = T.thread_id([threads])
        scratch = T.alloc_buffer((2 * ROWS * warps,), "float32", scope="shared")
        ws = T.alloc_buffer((steps, vec), "float32", scope="local")
        acc = T.alloc_buffer((steps, vec), "float32", scope="local")
        ys = T.alloc_buffer((ROWS, steps, vec), "float32", scope="local")
        ns = T.alloc_buffer((ROWS, steps, vec), "float32", scope="local")
        raw = T.alloc_buffer((vec,), "bfloat16", scope="local")
        red = T.alloc_buffer((ROWS,), "float32", scope="local")
        lane: T.let = tx % 32
        warp: T.let = tx // 32
        for k in T.unroll(steps):
            for j in T.unroll(vec):
                ws[k, j] = T.float32(0.0)
                acc[k, j] = T.float32(0.0)
            if tx + k * threads < chunks:
                for j in T.vectorized(vec):
                    ws[k, j] = w[(tx + k * threads) * vec + j]
        for it in T.serial(CHUNK // ROWS):
            for r in T.unroll(ROWS):
                for k in T.unroll(steps):
                    for j in T.unroll(vec):
                        ys[r, k, j] = T.float32(0.0)
                        ns[r, k, j] = T.float32(0.0)
                    if cta * CHUNK + it * ROWS + r < tokens and tx + k * threads < chunks:
                        for j in T.vectorized(vec):
                            raw[j] = dy[cta * CHUNK + it * ROWS + r, (tx + k * threads) * vec + j]
                        for j in T.vectorized(vec):
                            ns[r, k, j] = n[cta * CHUNK + it * ROWS + r, (tx + k * threads) * vec + j]
                        for j in T.unroll(vec):
                            ys[r, k, j] = T.float32(raw[j])
            for r in T.unroll(ROWS):
                red[r] = T.float32(0.0)
                for k in T.unroll(steps):
                    for j in T.unroll(vec):
                        red[r] = red[r] + ys[r, k, j] * ws[k, j] * ns[r, k, j]
                        acc[k, j] = acc[k, j] + ys[r, k, j] * ns[r, k, j]
                for i in T.unroll(5):
                    red[r] = red[r] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), red[r], T.shift_right(16, i), 32)
                if lane == 0:
                    scratch[((it % 2) * ROWS + r) * warps + warp] = red[r]
            T.cuda.cta_sync()
            for r in T.unroll(ROWS):
                red[r] = T.float32(0.0)
                for i in T.unroll(warps):
                    red[r] = red[r] + scratch[((it % 2) * ROWS + r) * warps + i]
                red[r] = red[r] * T.float32(inv_hidden)
                if cta * CHUNK + it * ROWS + r < tokens:
                    for k in T.unroll(steps):
                        if tx + k * threads < chunks:
                            for j in T.unroll(vec):
                                raw[j] = T.bfloat16(rstd[cta * CHUNK + it * ROWS + r]
                                                    * (ys[r, k, j] * ws[k, j] - ns[r, k, j] * red[r]))
                            for j in T.vectorized(vec):
                                dx[cta * CHUNK + it * ROWS + r, (tx + k * threads) * vec + j] = raw[j]
        for k in T.unroll(steps):
            if tx + k * threads < chunks:
                for j in T.vectorized(vec):
                    partial[cta, (tx + k * threads) * vec + j] = acc[k, j]

    return mkb_rmsnorm_bwd


def _reduce_kernel(ctas, hidden):
    rounds = (ctas + SLICES - 1) // SLICES

    @T.prim_func
    def mkb_dw_reduce(p_h: T.handle, dw_h: T.handle):
        partial = T.match_buffer(p_h, (ctas, hidden), "float32")
        dw = T.match_buffer(dw_h, (hidden,), "float32")
        T.device_entry()
        bx = T.cta_id([(hidden + COLS - 1) // COLS])
        tx = T.thread_id([SLICES * COLS])
        sums = T.alloc_buffer((SLICES * COLS,), "float64", scope="shared")
        acc = T.alloc_buffer((1,), "float64", scope="local")
        col: T.let = bx * COLS + tx % COLS
        part: T.let = tx // COLS
        acc[0] = T.float64(0.0)
        if col < hidden:
            for i in T.serial(rounds):
                if part + i * SLICES < ctas:
                    acc[0] = acc[0] + T.float64(partial[part + i * SLICES, col])
        sums[tx] = acc[0]
        T.cuda.cta_sync()
        if part == 0 and col < hidden:
            acc[0] = T.float64(0.0)
            for i in T.unroll(SLICES):
                acc[0] = acc[0] + sums[i * COLS + tx]
            dw[col] = T.float32(acc[0])

    return mkb_dw_reduce


def _build(kind, shape, arch):
    """Compile one kernel once per (kind, shape, arch) and return the tvm Executable."""
    key = (kind, shape, arch)
    if key not in _EXES:
        func = _bwd_kernel(*shape) if kind == "bwd" else _reduce_kernel(*shape)
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(kind, shape):
    key = (kind, shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(grad_output, normalized, rstd, weight):
    hidden = normalized.shape[-1]
    tokens = normalized.numel() // hidden
    dx = torch.empty(normalized.shape, dtype=torch.bfloat16, device=normalized.device)
    dw = torch.empty(hidden, dtype=torch.float32, device=normalized.device)
    if tokens == 0:
        dw.zero_()
        return dx, dx, dw
    vec, threads, steps = _plan(hidden)
    if steps * vec > 32:
        raise ValueError(f"rows of {hidden} do not fit this kernel's registers")
    ctas = (tokens + CHUNK - 1) // CHUNK
    partial = torch.empty(ctas, hidden, dtype=torch.float32, device=normalized.device)
    _kernel_fn("bwd", (tokens, hidden))(
        grad_output.contiguous().view(tokens, hidden), normalized.contiguous().view(tokens, hidden),
        rstd.contiguous().view(tokens), weight.contiguous(), dx.view(tokens, hidden), partial)
    _kernel_fn("reduce", (ctas, hidden))(partial, dw)
    return dx, dx, dw


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


def kernel_sources(arch="sm_90a", tokens=WORKLOAD["batch"] * WORKLOAD["seq"], hidden=WORKLOAD["hidden"]):
    """{kernel symbol: generated CUDA source} for this file's two kernels at the given shape."""
    ctas = (tokens + CHUNK - 1) // CHUNK
    sources = {}
    for kind, shape in (("bwd", (tokens, hidden)), ("reduce", (ctas, hidden))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
