"""CuTe DSL oracle for problem 73: GDN multi-token verification (T draft tokens per request, pooled state).

The whole computation is one DSL kernel. In the 'k-last' layout [pool, head, V, K] every state row
S[v, :] evolves on its own through the T steps (decay, k.s, rank-1 update, q.s), so a row can stay
in registers for all T tokens. The grid is (batch + pool jobs, head, row block), 128 threads:

- Jobs r < batch are requests. A group of ``lanes`` neighbouring threads (8 for head dim 128) owns
  a row of pool entry initial_state_indices[r]; lane l holds the 4-float chunks l, l + lanes, ...
  (16 floats), every thread owns ``_ROWS`` rows, all loaded at once with 16-byte loads. The rows are
  first written verbatim to final_state (the copy of the pool), then run through the T steps.
- Per step t, in fp32: s = g_t s; old = k_t.s (per-lane fused multiply-adds, then butterfly
  shuffles inside the lane group); new = beta_t v_t + (1 - beta_t) old; s += k_t (new - old);
  o_t = scale * q_t.s, reduced the same way and rounded to bf16 once. The T pairs of gates
  g_t = exp(-exp(A_log) softplus(a_t + dt_bias)) (softplus(x) = x above 20, else log1p(exp(x))) and
  beta_t = 1 / (1 + exp(-b_t)) are formed once per CTA, as torch's CUDA kernels form them (accurate
  expf/log1pf, IEEE division), by the first T threads and shared through shared memory.
- Jobs r >= batch copy pool entry p = r - batch to final_state, unless some request uses p (its
  request job has already copied it), so every pool row is read once and written once.
Groups past the last row (small head dims) shuffle on a clamped row and skip their stores.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=32, draft=4, pool=49, qk_heads=8, v_heads=16, head_dim=128)
_THREADS = 128
_ROWS = 2  # state rows per thread
_SOFTPLUS_THRESHOLD = 20.0
_COMPILED = {}


def _plan(head_dim):
    """(vector width, lanes per row: a power of two <= 8 dividing the chunk count, chunks per lane)."""
    vec = 4 if head_dim % 4 == 0 else 1
    chunks = head_dim // vec
    lanes = 1
    while lanes * 2 <= min(8, chunks) and chunks % (lanes * 2) == 0:
        lanes *= 2
    return vec, lanes, chunks // lanes


@cute.kernel
def gdn_mtp_kernel(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, initial_state: cute.Tensor,
                   indices: cute.Tensor, a_log: cute.Tensor, a: cute.Tensor, dt_bias: cute.Tensor,
                   b: cute.Tensor, out: cute.Tensor, final_state: cute.Tensor, scale: cutlass.Float32,
                   vec: cutlass.Constexpr, lanes: cutlass.Constexpr, steps: cutlass.Constexpr,
                   draft: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    job, h, blk = cute.arch.block_idx()
    batch = cute.size(q, mode=[0])
    heads = cute.size(v, mode=[2])
    rows = cute.size(initial_state, mode=[2])
    group = heads // cute.size(q, mode=[2])
    groups = _THREADS // lanes
    hq = h // group
    part = tidx % lanes
    first_row = blk * (groups * _ROWS) + tidx // lanes

    smem = cutlass.memory.SmemAllocator()
    gates = smem.allocate_tensor(cutlass.Float32, cute.make_layout((draft, 2)), byte_alignment=16)

    if job < batch:
        pool_entry = indices[job]
        # The step gates, one step per thread, as torch forms them in fp32.
        if tidx < draft:
            x = a[job, tidx, h].to(cutlass.Float32) + dt_bias[h]
            softplus = cutlass.Float32(
                cutlass.select_(x > _SOFTPLUS_THRESHOLD, x, cute.math.log1p(cute.math.exp(x))))
            gates[tidx, 0] = cute.math.exp(-cute.math.exp(a_log[h]) * softplus)
            gates[tidx, 1] = 1.0 / (1.0 + cute.math.exp(-b[job, tidx, h].to(cutlass.Float32)))

        # Load every owned row (clamped rows for groups past the end) and copy it to final_state.
        sr = cute.make_rmem_tensor((vec, steps, _ROWS), cutlass.Float32)
        for r in cutlass.range_constexpr(_ROWS):
            row = cutlass.select_(first_row + r * groups < rows, first_row + r * groups, rows - 1)
            gs = cute.zipped_divide(initial_state[pool_entry, h, row, None], (vec,))
            for j in cutlass.range_constexpr(steps):
                sr[None, j, r].store(gs[None, j * lanes + part].load())
        for r in cutlass.range_constexpr(_ROWS):
            row = first_row + r * groups
            if row < rows:
                gf = cute.zipped_divide(final_state[pool_entry, h, row, None], (vec,))
                for j in cutlass.range_constexpr(steps):
                    gf[None, j * lanes + part].store(sr[None, j, r].load())
        cute.arch.sync_threads()

        qr = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
        kr = cute.make_rmem_tensor((vec, steps), cutlass.Float32)
        for t in cutlass.range(draft, unroll=1):
            gq = cute.zipped_divide(q[job, t, hq, None], (vec,))
            gk = cute.zipped_divide(k[job, t, hq, None], (vec,))
            for j in cutlass.range_constexpr(steps):
                qr[None, j].store(gq[None, j * lanes + part].load().to(cutlass.Float32))
                kr[None, j].store(gk[None, j * lanes + part].load().to(cutlass.Float32))
            vr = []
            for r in cutlass.range_constexpr(_ROWS):
                row = cutlass.select_(first_row + r * groups < rows, first_row + r * groups, rows - 1)
                vr.append(v[job, t, h, row].to(cutlass.Float32))
            g = gates[t, 0]
            beta = gates[t, 1]
            one_minus_beta = 1.0 - beta

            olds = []
            for r in cutlass.range_constexpr(_ROWS):
                acc = cutlass.Float32(0.0)
                for j in cutlass.range_constexpr(steps):
                    for i in cutlass.range_constexpr(vec):
                        sr[i, j, r] = sr[i, j, r] * g
                        acc = acc + kr[i, j] * sr[i, j, r]
                olds.append(acc)
            for r in cutlass.range_constexpr(_ROWS):
                olds[r] = cute.arch.warp_reduction(olds[r], lambda p, o: p + o, threads_in_group=lanes)
            outs = []
            for r in cutlass.range_constexpr(_ROWS):
                new = beta * vr[r] + one_minus_beta * olds[r]
                delta = new - olds[r]
                acc = cutlass.Float32(0.0)
                for j in cutlass.range_constexpr(steps):
                    for i in cutlass.range_constexpr(vec):
                        sr[i, j, r] = sr[i, j, r] + kr[i, j] * delta
                        acc = acc + qr[i, j] * sr[i, j, r]
                outs.append(acc)
            for r in cutlass.range_constexpr(_ROWS):
                outs[r] = cute.arch.warp_reduction(outs[r], lambda p, o: p + o, threads_in_group=lanes)
            for r in cutlass.range_constexpr(_ROWS):
                row = first_row + r * groups
                if row < rows and part == 0:
                    out[job, t, h, row] = (scale * outs[r]).to(cutlass.BFloat16)
    else:
        pool_entry = job - batch
        used = cutlass.Int32(0)
        for r in cutlass.range(batch, unroll=1):
            used = used | cutlass.Int32(cutlass.select_(indices[r] == pool_entry, 1, 0))
        if used == 0:
            cp = cute.make_rmem_tensor((vec, steps, _ROWS), cutlass.Float32)
            for r in cutlass.range_constexpr(_ROWS):
                row = cutlass.select_(first_row + r * groups < rows, first_row + r * groups, rows - 1)
                gs = cute.zipped_divide(initial_state[pool_entry, h, row, None], (vec,))
                for j in cutlass.range_constexpr(steps):
                    cp[None, j, r].store(gs[None, j * lanes + part].load())
            for r in cutlass.range_constexpr(_ROWS):
                row = first_row + r * groups
                if row < rows:
                    gf = cute.zipped_divide(final_state[pool_entry, h, row, None], (vec,))
                    for j in cutlass.range_constexpr(steps):
                        gf[None, j * lanes + part].store(cp[None, j, r].load())


@cute.jit
def gdn_mtp(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, initial_state: cute.Tensor, indices: cute.Tensor,
            a_log: cute.Tensor, a: cute.Tensor, dt_bias: cute.Tensor, b: cute.Tensor, out: cute.Tensor,
            final_state: cute.Tensor, scale: cutlass.Float32, stream: cuda.CUstream):
    batch = cute.size(q, mode=[0])
    draft = cute.size(q, mode=[1])
    pool = cute.size(initial_state, mode=[0])
    heads = cute.size(initial_state, mode=[1])
    rows = cute.size(initial_state, mode=[2])
    vec, lanes, steps = _plan(cute.size(initial_state, mode=[3]))
    per_cta = (_THREADS // lanes) * _ROWS
    gdn_mtp_kernel(q, k, v, initial_state, indices, a_log, a, dt_bias, b, out, final_state, scale, vec, lanes,
                   steps, draft).launch(
        grid=[batch + pool, heads, (rows + per_cta - 1) // per_cta], block=[_THREADS, 1, 1], stream=stream)


def _compile(batch, draft, pool, qk_heads, v_heads, head_dim, arch=None, ptx_dir=None):
    assert 0 < draft <= _THREADS, "one thread forms each step's gates"
    def fake(dtype, *shape):
        return make_fake_compact_tensor(dtype, shape, stride_order=tuple(reversed(range(len(shape)))),
                                        assumed_align=16)

    bf16, f32 = cutlass.BFloat16, cutlass.Float32
    qk = fake(bf16, batch, draft, qk_heads, head_dim)
    vv = fake(bf16, batch, draft, v_heads, head_dim)
    st = fake(f32, pool, v_heads, head_dim, head_dim)
    idx = fake(cutlass.Int32, batch)
    per_head = fake(f32, v_heads)
    gate = fake(bf16, batch, draft, v_heads)
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return cute.compile(gdn_mtp, qk, qk, vv, st, idx, per_head, gate, per_head, gate, vv, st, 1.0,
                        make_fake_stream(), options=options)


def solve(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale):
    batch, draft, qk_heads, head_dim = q.shape
    pool, v_heads = initial_state.shape[:2]
    ins = [t.contiguous() for t in (q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b)]
    out = torch.empty(batch, draft, v_heads, head_dim, dtype=torch.bfloat16, device=q.device)
    final_state = torch.empty_like(ins[3])
    if batch * draft == 0 or v_heads * head_dim == 0:  # nothing to run: the pool copy alone
        return out, ins[3].clone()
    key = (batch, draft, pool, qk_heads, v_heads, head_dim)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    _COMPILED[key](*ins, out, final_state, float(scale), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out, final_state


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    return list(_compile(w["batch"], w["draft"], w["pool"], w["qk_heads"], w["v_heads"], w["head_dim"], arch,
                         ptx_dir).kernel_info)
