"""CuTe DSL oracle for problem 51: gpt-oss sparse MoE expert dispatch and combine (clamped GLU with
biases, weights stored [E, in, out]), fp32.

The gathers, both expert GEMMs, the GLU, the routing-weight scaling and the combine run in three DSL
kernels; torch only sorts the (token, k) assignments by expert and builds index tables.

- ``moe_glu_kernel``: a CTA owns one tile of up to 64 rows of one expert (sorted assignments, each
  the token's row of x gathered through an index table) and 64 GLU columns j, i.e. the 128
  contiguous gate_up columns 2 n0 .. 2 n0 + 127, de-interleaved while staging (gate columns 2j to
  the first half of the shared tile, up columns 2j + 1 to the second). K advances in steps of 32;
  256 threads each hold a 4 x 8 fp32 accumulator (rows ty + 16i, columns tx + 16j); each K step's
  32 products are summed by fp32 FMAs from zero and the step sum is added to the accumulator
  (fp32 accumulation, no TF32; the two levels keep the rounding error well below one running sum's).
  Epilogue, rounding like the reference: gu = acc + bias;
  gate = min(gu_gate, 7), up = clamp(gu_up, -7, 7); h = (up + 1) * (gate * sigmoid(1.702 gate)),
  sigmoid = 1 / (1 + exp(-z)) with an IEEE division.
- ``moe_down_kernel``: the same CTA shape over 128 output columns: y = acc + bias, and the stored
  contribution is y * routing_weights[t, e] (rounded on its own, as the reference's product).
- ``moe_combine_kernel``: one CTA per token; per column the token's contributions are summed in
  ascending expert order from zero (the reference's index_add_ order).
No tensor cores: fp32 GEMMs without TF32 have no tensor-core instruction on sm_90, so the GEMMs are
SIMT fp32 FMAs.

Speed (final grade on an NVIDIA H100 80GB HBM3, results/h200/oracles.json run 20): 141.6 ms against
the eager reference's 93.2 ms (0.66x). The grader's profiled call puts 99.8 % of the GPU time in DSL
kernels: the gathered gate/up GEMM with the GLU 97.9 ms, the down GEMM 41.4 ms, the combine 0.31 ms
(the torch sort and index tables 0.2 ms). The 65,536 routed rows make 3.26 TFLOP: these SIMT loops
issue them at 23 TFLOP/s (gate/up 22, down 26), while the reference's strict fp32 cuBLAS GEMMs, one
expert at a time, reach 35 TFLOP/s, about half the H100's fp32 FMA peak (67 TFLOP/s). The route that
would beat eager, not taken here: 3xTF32 on the tensor cores (each fp32 operand split into a TF32 high
part and a TF32 remainder, three WGMMA products accumulated in fp32, CUTLASS's fp32 emulation with
about fp32's error), or short of that a SIMT GEMM built like cuBLAS's (8 x 8 outputs per thread,
128-row tiles, double-buffered shared-memory staging), which would reach the reference's rate on the
same expert-sorted tiles without its per-expert launches.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

LIMIT, ALPHA = 7.0, 1.702
# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(tokens=16384, hidden=2880, inter=2880, experts=128, top_k=4)
BM, BN, BK = 64, 128, 32  # rows per tile, columns per CTA (GLU: 64 gate + 64 up), K step
HALF = BN // 2
_THREADS = 256
_COMPILED = {}


def _smem_tiles():
    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BM), stride=(BM + 1, 1)), byte_alignment=16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BN), stride=(BN + 1, 1)), byte_alignment=16)
    return a_s, b_s


@cute.jit
def _load_a(a_s: cute.Tensor, a: cute.Tensor, rowidx: cute.Tensor, row_begin: cutlass.Int32,
            row_end: cutlass.Int32, k0: cutlass.Int32, tidx: cutlass.Int32):
    """a_s[k, r] = A[rowidx[row_begin + r], k0 + k] (zero past the tile's rows or K)."""
    kdim = cute.size(a, mode=[1])
    for q in cutlass.range_constexpr(BM * BK // _THREADS):
        i = tidx + q * _THREADS
        r = i // BK
        kk = i - r * BK
        a_s[kk, r] = cutlass.Float32(0.0)
        if row_begin + r < row_end and k0 + kk < kdim:
            a_s[kk, r] = a[rowidx[row_begin + r], k0 + kk]


@cute.jit
def _mac(acc: cute.Tensor, a_s: cute.Tensor, b_s: cute.Tensor, ty: cutlass.Int32, tx: cutlass.Int32):
    """acc[i, j] += (sum_k a_s[k, ty + 16 i] * b_s[k, tx + 16 j]) over the K step, the step's 32 products
    summed from zero first (two-level accumulation: a much smaller rounding error than one running sum)."""
    part = cute.make_rmem_tensor((4, 8), cutlass.Float32)
    part.fill(0.0)
    for k in cutlass.range_constexpr(BK):
        av = []
        for ii in cutlass.range_constexpr(4):
            av.append(a_s[k, ty + 16 * ii])
        for jj in cutlass.range_constexpr(8):
            bv = b_s[k, tx + 16 * jj]
            for ii in cutlass.range_constexpr(4):
                part[ii, jj] = part[ii, jj] + av[ii] * bv
    for ii in cutlass.range_constexpr(4):
        for jj in cutlass.range_constexpr(8):
            acc[ii, jj] = acc[ii, jj] + part[ii, jj]


@cute.kernel
def moe_glu_kernel(x: cute.Tensor, rowidx: cute.Tensor, w_gu: cute.Tensor, b_gu: cute.Tensor, tiles: cute.Tensor,
                   h_out: cute.Tensor):
    """h[p, j] = clamped GLU of (x[rowidx[p]] W_gu[e] + b_gu[e]) at columns 2j, 2j + 1."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kdim = cute.size(w_gu, mode=[1])
    inter = cute.size(h_out, mode=[1])
    a_s, b_s = _smem_tiles()
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * HALF
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        acc.fill(0.0)
        for k0 in range(0, kdim, BK):
            _load_a(a_s, x, rowidx, row_begin, row_end, k0, tidx)
            for q in cutlass.range_constexpr(BN * BK // _THREADS):
                i = tidx + q * _THREADS
                kk = i // BN
                c = i - kk * BN  # gate_up column 2 n0 + c: GLU column n0 + c // 2, gate if c is even
                dst = c // 2 + (c % 2) * HALF
                b_s[kk, dst] = cutlass.Float32(0.0)
                if k0 + kk < kdim and n0 + c // 2 < inter:
                    b_s[kk, dst] = w_gu[expert, k0 + kk, 2 * n0 + c]
            cute.arch.sync_threads()
            _mac(acc, a_s, b_s, ty, tx)
            cute.arch.sync_threads()
        for jj in cutlass.range_constexpr(4):
            j = n0 + tx + 16 * jj
            if j < inter:
                bias_gate = b_gu[expert, 2 * j]
                bias_up = b_gu[expert, 2 * j + 1]
                for ii in cutlass.range_constexpr(4):
                    p = row_begin + ty + 16 * ii
                    if p < row_end:
                        gate = acc[ii, jj] + bias_gate
                        up = acc[ii, jj + 4] + bias_up
                        gate = cutlass.Float32(cutlass.select_(gate > LIMIT, LIMIT, gate))
                        up = cutlass.Float32(cutlass.select_(up > LIMIT, LIMIT, up))
                        up = cutlass.Float32(cutlass.select_(up < -LIMIT, -LIMIT, up))
                        z = gate * ALPHA
                        sig = 1.0 / (1.0 + cute.math.exp(-z))
                        h_out[p, j] = (up + 1.0) * (gate * sig)


@cute.kernel
def moe_down_kernel(h: cute.Tensor, w_d: cute.Tensor, b_d: cute.Tensor, pair_w: cute.Tensor, tiles: cute.Tensor,
                    out: cute.Tensor):
    """out[p, n] = (h[p] W_d[e][:, n] + b_d[e, n]) * pair_w[p] for the rows p of each tile's expert e."""
    tidx, _, _ = cute.arch.thread_idx()
    nb, tb, _ = cute.arch.block_idx()
    kdim = cute.size(w_d, mode=[1])
    n_out = cute.size(out, mode=[1])
    a_s, b_s = _smem_tiles()
    expert = tiles[tb, 0]
    row_begin = tiles[tb, 1]
    row_end = tiles[tb, 2]
    n0 = nb * BN
    ty = tidx // 16
    tx = tidx - ty * 16
    if row_end > row_begin:
        acc = cute.make_rmem_tensor((4, 8), cutlass.Float32)
        acc.fill(0.0)
        for k0 in range(0, kdim, BK):
            for q in cutlass.range_constexpr(BM * BK // _THREADS):
                i = tidx + q * _THREADS
                r = i // BK
                kk = i - r * BK
                a_s[kk, r] = cutlass.Float32(0.0)
                if row_begin + r < row_end and k0 + kk < kdim:
                    a_s[kk, r] = h[row_begin + r, k0 + kk]
            for q in cutlass.range_constexpr(BN * BK // _THREADS):
                i = tidx + q * _THREADS
                kk = i // BN
                c = i - kk * BN
                b_s[kk, c] = cutlass.Float32(0.0)
                if k0 + kk < kdim and n0 + c < n_out:
                    b_s[kk, c] = w_d[expert, k0 + kk, n0 + c]
            cute.arch.sync_threads()
            _mac(acc, a_s, b_s, ty, tx)
            cute.arch.sync_threads()
        for jj in cutlass.range_constexpr(8):
            n = n0 + tx + 16 * jj
            if n < n_out:
                bias = b_d[expert, n]
                for ii in cutlass.range_constexpr(4):
                    p = row_begin + ty + 16 * ii
                    if p < row_end:
                        y = acc[ii, jj] + bias
                        out[p, n] = y * pair_w[p]


@cute.kernel
def moe_combine_kernel(contrib: cute.Tensor, slots: cute.Tensor, out: cute.Tensor, top_k: cutlass.Constexpr):
    """out[t, c] = sum over t's rows in ascending expert order of contrib[row, c], from zero."""
    tidx, _, _ = cute.arch.thread_idx()
    t, _, _ = cute.arch.block_idx()
    hidden = cute.size(out, mode=[1])
    rows = []
    for k in cutlass.range_constexpr(top_k):
        rows.append(slots[t, k])
    for c in range(tidx, hidden, _THREADS):
        total = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(top_k):
            total = total + contrib[rows[k], c]
        out[t, c] = total


@cute.jit
def moe_glu(x: cute.Tensor, rowidx: cute.Tensor, w_gu: cute.Tensor, b_gu: cute.Tensor, tiles: cute.Tensor,
            h_out: cute.Tensor, stream: cuda.CUstream):
    moe_glu_kernel(x, rowidx, w_gu, b_gu, tiles, h_out).launch(
        grid=[(cute.size(h_out, mode=[1]) + HALF - 1) // HALF, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_down(h: cute.Tensor, w_d: cute.Tensor, b_d: cute.Tensor, pair_w: cute.Tensor, tiles: cute.Tensor,
             out: cute.Tensor, stream: cuda.CUstream):
    moe_down_kernel(h, w_d, b_d, pair_w, tiles, out).launch(
        grid=[(cute.size(out, mode=[1]) + BN - 1) // BN, cute.size(tiles, mode=[0]), 1],
        block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def moe_combine(contrib: cute.Tensor, slots: cute.Tensor, out: cute.Tensor, top_k: cutlass.Constexpr,
                stream: cuda.CUstream):
    moe_combine_kernel(contrib, slots, out, top_k).launch(
        grid=[cute.size(out, mode=[0]), 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(dtype, shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(dtype, shape, stride_order=order, assumed_align=4)


def _max_tiles(pairs, experts):
    return pairs // BM + experts


def _compile_glu(tokens, pairs, experts, hidden, inter, arch=None, ptx_dir=None):
    f32 = cutlass.Float32
    return cute.compile(moe_glu, _fake(f32, (tokens, hidden)), _fake(cutlass.Int32, (pairs,)),
                        _fake(f32, (experts, hidden, 2 * inter)), _fake(f32, (experts, 2 * inter)),
                        _fake(cutlass.Int32, (_max_tiles(pairs, experts), 3)), _fake(f32, (pairs, inter)),
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_down(pairs, experts, hidden, inter, arch=None, ptx_dir=None):
    f32 = cutlass.Float32
    return cute.compile(moe_down, _fake(f32, (pairs, inter)), _fake(f32, (experts, inter, hidden)),
                        _fake(f32, (experts, hidden)), _fake(f32, (pairs,)),
                        _fake(cutlass.Int32, (_max_tiles(pairs, experts), 3)), _fake(f32, (pairs, hidden)),
                        make_fake_stream(), options=_options(arch, ptx_dir))


def _compile_combine(tokens, top_k, hidden, arch=None, ptx_dir=None):
    f32 = cutlass.Float32
    return cute.compile(moe_combine, _fake(f32, (tokens * top_k, hidden)), _fake(cutlass.Int32, (tokens, top_k)),
                        _fake(f32, (tokens, hidden)), top_k, make_fake_stream(), options=_options(arch, ptx_dir))


def _get(key, build):
    if key not in _COMPILED:
        _COMPILED[key] = build()
    return _COMPILED[key]


def _plan(index, routing_weights, experts):
    """Rows sorted by expert (stable), their routing weights, 64-row tiles, each token's rows in expert order."""
    tokens, top_k = index.shape
    pairs = tokens * top_k
    device = index.device
    flat = index.flatten()
    order = torch.argsort(flat, stable=True)
    sorted_tok = order // top_k
    pair_w = routing_weights[sorted_tok, flat[order]].float().contiguous()
    counts = torch.bincount(flat, minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    ntiles = (counts + BM - 1) // BM
    tile_end = torch.cumsum(ntiles, 0)
    ti = torch.arange(_max_tiles(pairs, experts), device=device)
    te = torch.searchsorted(tile_end, ti, right=True)
    valid = te < experts
    tec = torch.clamp(te, max=experts - 1)
    row_begin = starts[tec] + (ti - (tile_end[tec] - ntiles[tec])) * BM
    row_end = torch.minimum(row_begin + BM, starts[tec] + counts[tec])
    tiles = torch.stack([tec, torch.where(valid, row_begin, 0), torch.where(valid, row_end, 0)], 1)
    slots = torch.argsort(sorted_tok, stable=True).view(tokens, top_k)  # a token's rows, ascending expert
    return (sorted_tok.to(torch.int32).contiguous(), pair_w, tiles.to(torch.int32).contiguous(),
            slots.to(torch.int32).contiguous())


def solve(hidden_states, router_indices, routing_weights, gate_up_proj, gate_up_proj_bias, down_proj,
          down_proj_bias):
    tokens, hidden = hidden_states.shape
    top_k = router_indices.shape[1]
    experts, _, inter2 = gate_up_proj.shape
    inter = inter2 // 2
    pairs = tokens * top_k
    device = hidden_states.device
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    f32 = torch.float32
    sorted_tok, pair_w, tiles, slots = _plan(router_indices, routing_weights, experts)
    h = torch.empty(pairs, inter, dtype=f32, device=device)
    _get(("glu", tokens, pairs, experts, hidden, inter), lambda: _compile_glu(tokens, pairs, experts, hidden, inter))(
        hidden_states.contiguous(), sorted_tok, gate_up_proj.contiguous(), gate_up_proj_bias.contiguous(), tiles, h,
        stream)
    contrib = torch.empty(pairs, hidden, dtype=f32, device=device)
    _get(("down", pairs, experts, hidden, inter), lambda: _compile_down(pairs, experts, hidden, inter))(
        h, down_proj.contiguous(), down_proj_bias.contiguous(), pair_w, tiles, contrib, stream)
    out = torch.empty(tokens, hidden, dtype=f32, device=device)
    _get(("combine", tokens, top_k, hidden), lambda: _compile_combine(tokens, top_k, hidden))(
        contrib, slots, out, stream)
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    tokens, hidden, inter, experts, top_k = w["tokens"], w["hidden"], w["inter"], w["experts"], w["top_k"]
    pairs = tokens * top_k
    builds = [_compile_glu(tokens, pairs, experts, hidden, inter, arch, ptx_dir),
              _compile_down(pairs, experts, hidden, inter, arch, ptx_dir),
              _compile_combine(tokens, top_k, hidden, arch, ptx_dir)]
    return [name for compiled in builds for name in compiled.kernel_info]
