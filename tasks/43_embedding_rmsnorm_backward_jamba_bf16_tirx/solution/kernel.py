"""TIRx oracle for problem 43: backward of an embedding lookup + RMSNorm (Jamba), bf16 table gradient.

Host glue prepares the index only: a stable sort of the token ids (token order kept within an id,
as the reference's index_put_ accumulates) and, for every table row, the start of its run of
tokens in that order (a search over the sorted ids). Two TIRx kernels do the arithmetic.

``mkb_embed_rmsnorm_bwd``: each CTA owns ``ROWS_PER_CTA`` consecutive table rows and walks them in
order; a thread owns the same ``vec`` contiguous columns in every row (512 threads x 8 columns
cover 4096). For each token of a row's run it loads dy (bf16) and h (fp32) with 16-byte loads,
forms n = h * rstd and g = dy * w in fp32, reduces dot(g, n) by xor shuffles inside each warp and
through shared memory across warps (double-buffered by the token's position, one barrier per
token; every thread adds the warp sums in the same order), takes mean = dot * (1 / hidden) as the
reference's mean scales its sum, and adds dx = rstd * (g - n * mean) to the row's fp32 accumulator
in token order, the reference's fp32 accumulation into a zeroed table. The row is then rounded to
bf16 and stored with 16-byte stores, so rows no token hits are written as zeros by the same kernel
(the table is written once, never cleared first). Every thread also accumulates dy * n of its
columns over the CTA's tokens in fp32 registers and writes the CTA's partial row of the
norm-weight gradient; ``mkb_dw_reduce`` sums the partial rows per column in fp64 (8 interleaved
slices, combined in order through shared memory), rounds to fp32 (the reference's sum precision)
and then to bf16. Only multiplies and adds are involved, which NVRTC's fast math keeps exact (it
may fuse a multiply and an add into one FMA, which only removes a rounding). Shapes are baked into
the kernels (one build per shape).
"""

import torch
import tvm
from tvm.script import tirx as T

VOCAB = 65536
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=256, hidden=4096)
MAX_THREADS = 512
ROWS_PER_CTA = 64  # table rows per CTA of the main kernel (one fp32 partial row of dW each)
SLICES = 8  # fp64 partial sums per column in the dW reduction
COLS = 32  # columns per CTA of the dW reduction
CTAS = VOCAB // ROWS_PER_CTA
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _plan(hidden):
    """(vector width, threads per CTA, steps per thread): the multiple of 32 threads (at most 512,
    at least half of that cap) leaving the fewest idle slots; 4096 = 512 threads x 8 columns."""
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
    inv_hidden = 1.0 / hidden

    @T.prim_func
    def mkb_embed_rmsnorm_bwd(dy_h: T.handle, h_h: T.handle, r_h: T.handle, w_h: T.handle, o_h: T.handle,
                              s_h: T.handle, t_h: T.handle, p_h: T.handle):
        dy = T.match_buffer(dy_h, (tokens, hidden), "bfloat16")
        hs = T.match_buffer(h_h, (tokens, hidden), "float32")
        rstd = T.match_buffer(r_h, (tokens,), "float32")
        w = T.match_buffer(w_h, (hidden,), "bfloat16")
        order = T.match_buffer(o_h, (tokens,), "int64")
        starts = T.match_buffer(s_h, (VOCAB + 1,), "int64")
        table = T.match_buffer(t_h, (VOCAB, hidden), "bfloat16")
        partial = T.match_buffer(p_h, (CTAS, hidden), "float32")
        T.device_entry()
        cta = T.cta_id([CTAS])
        tx = T.thread_id([threads])
        scratch = T.alloc_buffer((2 * warps,), "float32", scope="shared")
        ws = T.alloc_buffer((steps, vec), "float32", scope="local")
        acc = T.alloc_buffer((steps, vec), "float32", scope="local")
        row_acc = T.alloc_buffer((steps, vec), "float32", scope="local")
        ys = T.alloc_buffer((steps, vec), "float32", scope="local")
        ns = T.alloc_buffer((steps, vec), "float32", scope="local")
        raw = T.alloc_buffer((vec,), "bfloat16", scope="local")
        red = T.alloc_buffer((2,), "float32", scope="local")
        lane: T.let = tx % 32
        warp: T.let = tx // 32
        for k in T.unroll(steps):
            for j in T.unroll(vec):
                ws[k, j] = T.float32(0.0)
                acc[k, j] = T.float32(0.0)
                ys[k, j] = T.float32(0.0)
                ns[k, j] = T.float32(0.0)
            if tx + k * threads < chunks:
                for j in T.vectorized(vec):
                    raw[j] = w[(tx + k * threads) * vec + j]
                for j in T.unroll(vec):
                    ws[k, j] = T.float32(raw[j])
        for vi in T.serial(ROWS_PER_CTA):
            for k in T.unroll(steps):
                for j in T.unroll(vec):
                    row_acc[k, j] = T.float32(0.0)
            for q in T.serial(T.Cast("int32", starts[cta * ROWS_PER_CTA + vi]),
                              T.Cast("int32", starts[cta * ROWS_PER_CTA + vi + 1])):
                token: T.let = T.Cast("int32", order[q])
                red[1] = rstd[token]
                for k in T.unroll(steps):
                    if tx + k * threads < chunks:
                        for j in T.vectorized(vec):
                            raw[j] = dy[token, (tx + k * threads) * vec + j]
                        for j in T.vectorized(vec):
                            ns[k, j] = hs[token, (tx + k * threads) * vec + j]
                        for j in T.unroll(vec):
                            ys[k, j] = T.float32(raw[j])
                red[0] = T.float32(0.0)
                for k in T.unroll(steps):
                    for j in T.unroll(vec):
                        ns[k, j] = ns[k, j] * red[1]
                        red[0] = red[0] + ys[k, j] * ws[k, j] * ns[k, j]
                        acc[k, j] = acc[k, j] + ys[k, j] * ns[k, j]
                for i in T.unroll(5):
                    red[0] = red[0] + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), red[0], T.shift_right(16, i), 32)
                if lane == 0:
                    scratch[(q % 2) * warps + warp] = red[0]
                T.cuda.cta_sync()
                red[0] = T.float32(0.0)
                for i in T.unroll(warps):
                    red[0] = red[0] + scratch[(q % 2) * warps + i]
                red[0] = red[0] * T.float32(inv_hidden)
                for k in T.unroll(steps):
                    for j in T.unroll(vec):
                        row_acc[k, j] = row_acc[k, j] + red[1] * (ys[k, j] * ws[k, j] - ns[k, j] * red[0])
            for k in T.unroll(steps):
                if tx + k * threads < chunks:
                    for j in T.unroll(vec):
                        raw[j] = T.bfloat16(row_acc[k, j])
                    for j in T.vectorized(vec):
                        table[cta * ROWS_PER_CTA + vi, (tx + k * threads) * vec + j] = raw[j]
        for k in T.unroll(steps):
            if tx + k * threads < chunks:
                for j in T.vectorized(vec):
                    partial[cta, (tx + k * threads) * vec + j] = acc[k, j]

    return mkb_embed_rmsnorm_bwd


def _reduce_kernel(hidden):
    rounds = (CTAS + SLICES - 1) // SLICES

    @T.prim_func
    def mkb_dw_reduce(p_h: T.handle, dw_h: T.handle):
        partial = T.match_buffer(p_h, (CTAS, hidden), "float32")
        dw = T.match_buffer(dw_h, (hidden,), "bfloat16")
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
                if part + i * SLICES < CTAS:
                    acc[0] = acc[0] + T.float64(partial[part + i * SLICES, col])
        sums[tx] = acc[0]
        T.cuda.cta_sync()
        if part == 0 and col < hidden:
            acc[0] = T.float64(0.0)
            for i in T.unroll(SLICES):
                acc[0] = acc[0] + sums[i * COLS + tx]
            dw[col] = T.bfloat16(T.float32(acc[0]))

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


def solve(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight):
    hidden = grad_output.shape[-1]
    tokens = grad_output.numel() // hidden
    device = grad_output.device
    table = torch.empty(VOCAB, hidden, dtype=torch.bfloat16, device=device)
    dw = torch.empty(hidden, dtype=torch.bfloat16, device=device)
    if tokens == 0:
        table.zero_()
        dw.zero_()
        return table, dw
    vec, threads, steps = _plan(hidden)
    if steps * vec > 32:
        raise ValueError(f"rows of {hidden} do not fit this kernel's registers")
    # index preparation: tokens grouped by id in token order, and each table row's run start
    sorted_ids, order = torch.sort(input_ids.reshape(-1), stable=True)
    starts = torch.searchsorted(sorted_ids, torch.arange(VOCAB + 1, device=device, dtype=sorted_ids.dtype))
    partial = torch.empty(CTAS, hidden, dtype=torch.float32, device=device)
    _kernel_fn("bwd", (tokens, hidden))(
        grad_output.contiguous().view(tokens, hidden), hidden_states_fp32.contiguous().view(tokens, hidden),
        rstd.contiguous().view(tokens), norm_weight.contiguous(), order, starts, table, partial)
    _kernel_fn("reduce", (hidden,))(partial, dw)
    return table, dw


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
    sources = {}
    for kind, shape in (("bwd", (tokens, hidden)), ("reduce", (hidden,))):
        source = _build(kind, shape, arch).mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
