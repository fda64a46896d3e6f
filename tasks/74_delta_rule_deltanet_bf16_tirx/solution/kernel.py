"""TIRx oracle for problem 74: DeltaNet (delta rule without decay) from a given state, bf16 I/O.

One TIRx kernel runs the recurrence step by step (the reference's chunked UT form is the same
recurrence regrouped). With S [d_k, d_v], every column S[:, j] evolves on its own:
u_j = beta_t (v_t[j] - k_t.S[:, j]); S[:, j] += k_t u_j; o_t[j] = q_t.S[:, j]. So:

- CTA (batch*head, column block) with 128 threads; a group of ``lanes`` neighbouring threads (8 for
  head dim 128) owns one column and keeps it in registers for the whole sequence: lane l holds the
  2-row chunks l, l + lanes, ... (16 rows for 128), so that the lanes of a group read 128
  contiguous bytes of a staged k or q row per 16-byte shared-memory load (the 4 groups of a warp
  read the same bytes: a broadcast). A CTA owns 128 / lanes columns.
- The sequence is walked in stages of ``STAGE`` steps. Per stage the CTA stages k, q (bf16), its
  columns of v and beta in shared memory, then L2-normalises the k and q rows at the reference's
  fp32 rounding points: sum of squares in fp32 (4 interleaved partial sums, one thread per row),
  rsqrt(sum + 1e-6) evaluated in fp64 and rounded to fp32 (NVRTC's --use_fast_math only touches
  fp32 math), x * r rounded to fp32, and for q a further * d^-0.5 rounded to fp32. The normalised
  values are kept in shared memory as fp64.
- The recurrence itself runs in fp64 (state, dot products, update), which fast math leaves alone.
  A step-by-step fp32 recurrence rounds the state once per token, 1024 times, where the
  reference's chunked form rounds it once per 64-token chunk; emulated on the CPU, that fp32
  recurrence's state error reached about twice the reference's own (the grader allows three
  times), while the fp64 one stays near a third. Dot products: 4 interleaved partial sums per
  lane, added pairwise, then xor shuffles inside the lane group. o is rounded to fp32 and then to
  bf16; the final state to fp32.
"""

import torch
import tvm
from tvm.script import tirx as T

THREADS = 128
STAGE = 16  # time steps staged in shared memory at once
EPS = 1e-6
ACCS = 4  # interleaved partial sums of a lane's dot-product terms
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _plan(head_dim):
    """(vector width: 2 fp64 = one 16-byte shared-memory load, lanes per column: a power of two <= 8
    dividing the chunk count, chunks per lane)."""
    vec = 2 if head_dim % 2 == 0 else 1
    chunks = head_dim // vec
    lanes = 1
    while lanes * 2 <= min(8, chunks) and chunks % (lanes * 2) == 0:
        lanes *= 2
    return vec, lanes, chunks // lanes


def _f32(value):
    return T.float32(value)


def _f64(value):
    return T.float64(value)


def _to_f64(x):
    return T.Cast("float64", T.Cast("float32", x))


def _delta_rule_kernel(heads, head_dim):
    """Specialised on the head count and head dim; batch and sequence length symbolic."""
    vec, lanes, steps = _plan(head_dim)
    cols = THREADS // lanes
    blocks = (head_dim + cols - 1) // cols
    terms = steps * vec
    accs = min(ACCS, terms)
    offsets = []
    offset = lanes // 2
    while offset > 0:
        offsets.append(offset)
        offset //= 2
    scale = head_dim ** -0.5

    @T.prim_func
    def mkb_delta_rule(q_h: T.handle, k_h: T.handle, v_h: T.handle, beta_h: T.handle, s0_h: T.handle,
                       o_h: T.handle, s1_h: T.handle):
        batch = T.int32()
        seqlen = T.int32()
        q = T.match_buffer(q_h, (batch, heads, seqlen, head_dim), "bfloat16")
        k = T.match_buffer(k_h, (batch, heads, seqlen, head_dim), "bfloat16")
        v = T.match_buffer(v_h, (batch, heads, seqlen, head_dim), "bfloat16")
        beta = T.match_buffer(beta_h, (batch, heads, seqlen), "bfloat16")
        s0 = T.match_buffer(s0_h, (batch, heads, head_dim, head_dim), "float32")
        o = T.match_buffer(o_h, (batch, heads, seqlen, head_dim), "bfloat16")
        s1 = T.match_buffer(s1_h, (batch, heads, head_dim, head_dim), "float32")
        T.device_entry()
        bh, blk = T.cta_id([batch * heads, blocks])
        tx = T.thread_id([THREADS])
        kq = T.alloc_buffer((2, STAGE, head_dim), "float64", scope="shared")
        vs = T.alloc_buffer((STAGE, cols), "float64", scope="shared")
        bs = T.alloc_buffer((STAGE,), "float64", scope="shared")
        rinv = T.alloc_buffer((2 * STAGE,), "float32", scope="shared")
        st = T.alloc_buffer((steps, vec), "float64", scope="local")
        kr = T.alloc_buffer((steps, vec), "float64", scope="local")
        acc = T.alloc_buffer((accs,), "float64", scope="local")
        sq = T.alloc_buffer((4,), "float32", scope="local")
        bi: T.let = bh // heads
        h: T.let = bh % heads
        part: T.let = tx % lanes
        group: T.let = tx // lanes
        col: T.let = T.min(blk * cols + group, head_dim - 1)

        # This group's column of the state, in fp64 registers.
        for j in T.unroll(steps):
            for e in T.unroll(vec):
                st[j, e] = T.Cast("float64", s0[bi, h, (j * lanes + part) * vec + e, col])

        for stage in range(T.ceildiv(seqlen, STAGE)):
            t0: T.let = stage * STAGE
            # Stage k, q (zeros past the end), this CTA's v columns and beta.
            for it in range(T.ceildiv(2 * STAGE * head_dim, THREADS)):
                if it * THREADS + tx < 2 * STAGE * head_dim:
                    w: T.let = (it * THREADS + tx) // (STAGE * head_dim)
                    s: T.let = (it * THREADS + tx) // head_dim % STAGE
                    i: T.let = (it * THREADS + tx) % head_dim
                    kq[w, s, i] = T.if_then_else(
                        t0 + s < seqlen,
                        T.if_then_else(w == 0, _to_f64(k[bi, h, T.min(t0 + s, seqlen - 1), i]),
                                       _to_f64(q[bi, h, T.min(t0 + s, seqlen - 1), i])),
                        _f64(0.0))
            for it in range(T.ceildiv(STAGE * cols, THREADS)):
                if it * THREADS + tx < STAGE * cols:
                    sv: T.let = (it * THREADS + tx) // cols
                    c: T.let = (it * THREADS + tx) % cols
                    vs[sv, c] = T.if_then_else(
                        t0 + sv < seqlen and blk * cols + c < head_dim,
                        _to_f64(v[bi, h, T.min(t0 + sv, seqlen - 1), T.min(blk * cols + c, head_dim - 1)]),
                        _f64(0.0))
            if tx < STAGE:
                bs[tx] = T.if_then_else(t0 + tx < seqlen, _to_f64(beta[bi, h, T.min(t0 + tx, seqlen - 1)]),
                                        _f64(0.0))
            T.cuda.cta_sync()
            # One thread per k/q row: the fp32 sum of squares and the correctly rounded rsqrt.
            for it in range(T.ceildiv(2 * STAGE, THREADS)):
                if it * THREADS + tx < 2 * STAGE:
                    for m in T.unroll(4):
                        sq[m] = _f32(0.0)
                    for i in T.unroll(head_dim):
                        sq[i % 4] = sq[i % 4] + T.Cast("float32", kq[(it * THREADS + tx) // STAGE,
                                                                      (it * THREADS + tx) % STAGE, i]) * T.Cast(
                            "float32", kq[(it * THREADS + tx) // STAGE, (it * THREADS + tx) % STAGE, i])
                    rinv[it * THREADS + tx] = T.Cast(
                        "float32", _f64(1.0) / T.sqrt(T.Cast("float64", ((sq[0] + sq[1]) + (sq[2] + sq[3]))
                                                             + _f32(EPS))))
            T.cuda.cta_sync()
            for it in range(T.ceildiv(2 * STAGE * head_dim, THREADS)):
                if it * THREADS + tx < 2 * STAGE * head_dim:
                    w2: T.let = (it * THREADS + tx) // (STAGE * head_dim)
                    s2: T.let = (it * THREADS + tx) // head_dim % STAGE
                    i2: T.let = (it * THREADS + tx) % head_dim
                    y: T.f32 = T.Cast("float32", kq[w2, s2, i2]) * rinv[w2 * STAGE + s2]
                    if w2 == 1:
                        y = y * _f32(scale)
                    kq[w2, s2, i2] = T.Cast("float64", y)
            T.cuda.cta_sync()

            for s3 in range(T.min(seqlen - t0, STAGE)):
                # old = k.S[:, col]
                for m in T.unroll(accs):
                    acc[m] = _f64(0.0)
                for j in T.unroll(steps):
                    for e in T.unroll(vec):
                        kr[j, e] = kq[0, s3, (j * lanes + part) * vec + e]
                        acc[(j * vec + e) % accs] = acc[(j * vec + e) % accs] + kr[j, e] * st[j, e]
                old: T.float64 = _sum_partials(acc, accs)
                for m in T.unroll(len(offsets)):
                    old = old + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), old, T.shift_right(lanes, m + 1), 32)
                u: T.float64 = bs[s3] * (vs[s3, group] - old)
                # S[:, col] += k u; o = q.S[:, col]
                for m in T.unroll(accs):
                    acc[m] = _f64(0.0)
                for j in T.unroll(steps):
                    for e in T.unroll(vec):
                        st[j, e] = st[j, e] + kr[j, e] * u
                        acc[(j * vec + e) % accs] = (acc[(j * vec + e) % accs]
                                                     + kq[1, s3, (j * lanes + part) * vec + e] * st[j, e])
                out: T.float64 = _sum_partials(acc, accs)
                for m in T.unroll(len(offsets)):
                    out = out + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), out, T.shift_right(lanes, m + 1), 32)
                if blk * cols + group < head_dim and part == 0:
                    o[bi, h, t0 + s3, col] = T.bfloat16(T.Cast("float32", out))
            T.cuda.cta_sync()

        if blk * cols + group < head_dim:
            for j in T.unroll(steps):
                for e in T.unroll(vec):
                    s1[bi, h, (j * lanes + part) * vec + e, col] = T.Cast("float32", st[j, e])

    return mkb_delta_rule


def _pairwise(values):
    """Sum a list pairwise ((a + b) + (c + d)), the order the partial sums are combined in."""
    while len(values) > 1:
        values = [values[i] + values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _sum_partials(acc, count):
    """The partial sums acc[0 .. count) added pairwise."""
    return _pairwise([acc[m] for m in range(count)])


def _build(heads, head_dim, arch):
    """Compile once per (heads, head_dim, arch) and return the tvm Executable."""
    key = (heads, head_dim, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _delta_rule_kernel(heads, head_dim)}), target=target,
                                     tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(heads, head_dim):
    key = (heads, head_dim, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(q, k, v, beta, initial_state):
    batch, heads, seqlen, head_dim = q.shape
    args = [t.contiguous() for t in (q, k, v, beta, initial_state)]
    o = torch.empty_like(args[0])
    final_state = torch.empty_like(args[4])
    if batch * heads * head_dim > 0:
        _kernel_fn(heads, head_dim)(*args, o, final_state)
    return o, final_state


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


def kernel_sources(arch="sm_90a", heads=16, head_dim=128):
    """{kernel symbol: generated CUDA source} for this file's kernels (graded shape by default)."""
    source = _build(heads, head_dim, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
