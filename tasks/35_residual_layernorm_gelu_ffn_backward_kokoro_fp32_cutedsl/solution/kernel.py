"""CuTe DSL oracle for problem 35: backward of LayerNorm(hidden + fc2(gelu_tanh(fc1(hidden))))
from saved activations (Kokoro-82M), fp32.

Everything is fp32 on the CUDA cores (the problem is judged at fp32 tolerance, so no TF32); torch
only allocates (and zero-pads operands of shapes that are not tile multiples, e.g. the small
workload; the graded shapes need no padding).

- ``row_kernel``: a warp per token, a lane owning 4-wide column groups; g = dY w, the row sums of g
  and g n by lane-sequential sums and butterfly shuffles, means = sum * (1 / dim), and
  dres = ((g - mean(g)) - n mean(g n)) / sqrt(var + eps) (IEEE square root and division), zero on
  padded rows and columns.
- ``gemm_kernel``: a shared-memory tiled SIMT GEMM C = A B (128 x 128 tile per 256-thread CTA,
  8 x 8 outputs per thread, K in slices of 16 staged K-major in shared memory with the next
  slice's loads in flight). B is always N-contiguous [K, N]; A is K-contiguous [M, K] or, for the
  weight gradients, M-contiguous [K, M]. Sums are two-level: each chunk of 8 slices (128 K values)
  is summed from zero and then added to the running total. Four builds:
  dgelu = dres W2 with the epilogue dpre = dgelu * gelu_tanh'(fc1_out) (torch's operation order,
  precise tanh); dhidden = dpre W1 + dres; and dW2 = dres^T gelu_out, dW1 = dpre^T hidden split over
  the tokens in chunks of 2048 (fp32 partial per chunk).
- ``colsum_kernel``: column sums over chunks of 64 tokens (a thread per column, fp32), for
  dW_ln (sum dY n), db_ln (sum dY), db2 (sum dres) and db1 (sum dpre).
- ``reduce_kernel``: sums partials (per-chunk column sums, split-K weight-gradient partials) per
  output in fp64, in chunk order, and rounds to fp32 once.
SIMT fp32 GEMMs are slower than cuBLAS's fp32 GEMMs on an H200, but are what fp32 accuracy needs.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=64, seq=1087, dim=512, ff=2048)
_BM, _BN, _BK = 128, 128, 16
_FOLD = 8  # K slices (128 values) summed from zero before they are added to the total
_SPLIT_TILES = 128  # K slices (2048 tokens) per split of the weight-gradient GEMMs
_THREADS = 256
_ROW_WARPS = 8
_CH = 64  # tokens per column-sum partial
_COLS = 128  # columns per column-sum CTA
_ROOT = 0.7978845608028654  # sqrt(2 / pi)
_C = 0.044715
_EPI_PART, _EPI_GELU, _EPI_ADD = 0, 1, 2
_COMPILED = {}


@cute.kernel
def row_kernel(dy: cute.Tensor, n: cute.Tensor, var: cute.Tensor, w: cute.Tensor, dres: cute.Tensor,
               tokens: cutlass.Int32, dim: cutlass.Int32, inv_dim: cutlass.Float32, eps: cutlass.Float32,
               per: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    row = bidx * _ROW_WARPS + tidx // 32
    g_o = cute.zipped_divide(dres[row, None], (4,))
    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    if row < tokens:
        gv = cute.make_rmem_tensor((per * 4,), cutlass.Float32)
        nv = cute.make_rmem_tensor((per * 4,), cutlass.Float32)
        g_dy = cute.zipped_divide(dy[row, None], (4,))
        g_n = cute.zipped_divide(n[row, None], (4,))
        g_w = cute.zipped_divide(w, (4,))
        s_g = cutlass.Float32(0.0)
        s_gn = cutlass.Float32(0.0)
        for j in cutlass.range_constexpr(per):
            vdy = g_dy[None, j * 32 + lane].load()
            vn = g_n[None, j * 32 + lane].load()
            vw = g_w[None, j * 32 + lane].load()
            for e in cutlass.range_constexpr(4):
                gv[j * 4 + e] = vdy[e] * vw[e]
                nv[j * 4 + e] = vn[e]
                s_g = s_g + gv[j * 4 + e]
                s_gn = s_gn + gv[j * 4 + e] * nv[j * 4 + e]
        for o in (16, 8, 4, 2, 1):
            s_g = s_g + cute.arch.shuffle_sync_bfly(s_g, offset=o)
            s_gn = s_gn + cute.arch.shuffle_sync_bfly(s_gn, offset=o)
        m_g = s_g * inv_dim
        m_gn = s_gn * inv_dim
        rs = 1.0 / cute.math.sqrt(var[row, 0] + eps)
        for j in cutlass.range_constexpr(per):
            for e in cutlass.range_constexpr(4):
                col = j * 128 + lane * 4 + e
                d = ((gv[j * 4 + e] - m_g) - nv[j * 4 + e] * m_gn) * rs
                out[e] = cutlass.Float32(cutlass.select_(col < dim, d, 0.0))
            g_o[None, j * 32 + lane].store(out.load())
    else:
        for j in cutlass.range_constexpr(per):
            out.fill(0.0)
            g_o[None, j * 32 + lane].store(out.load())


@cute.kernel
def gemm_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mX: cute.Tensor, rows_valid: cutlass.Int32,
                k_len: cutlass.Int32, a_km: cutlass.Constexpr, epi: cutlass.Constexpr):
    """C = A B over K values [s * 2048, ...) (epi PART) or all of k_len; see the module docstring."""
    tidx, _, _ = cute.arch.thread_idx()
    mb, nb, s = cute.arch.block_idx()
    row0 = mb * _BM
    col0 = nb * _BN
    k_tiles = k_len // _BK
    kt0 = s * _SPLIT_TILES
    kt1 = k_tiles
    if cutlass.const_expr(epi == _EPI_PART):
        kt1 = cutlass.min(kt0 + _SPLIT_TILES, k_tiles)
    ty = tidx // 16
    tc = tidx % 16
    lrow = tidx // 2
    lchunk = tidx % 2  # [M, K] A: which 8-wide half of the 16-wide K slice this thread loads
    kr = tidx // 16  # [K, *] operands: the K row of the slice this thread loads
    c8 = tidx % 16  # [K, *] operands: the 8-wide column group this thread loads

    smem = cutlass.memory.SmemAllocator()
    a_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BM), stride=(_BM, 1)), 16)
    b_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((_BK, _BN), stride=(_BN, 1)), 16)
    acc = cute.make_rmem_tensor((64,), cutlass.Float32)
    acc.fill(0.0)
    part = cute.make_rmem_tensor((64,), cutlass.Float32)
    part.fill(0.0)
    af = cute.make_rmem_tensor((8,), cutlass.Float32)
    bf = cute.make_rmem_tensor((8,), cutlass.Float32)
    ra = cute.make_rmem_tensor((8,), cutlass.Float32)
    rb = cute.make_rmem_tensor((8,), cutlass.Float32)

    if cutlass.const_expr(a_km):
        ra.store(cute.zipped_divide(mA[kt0 * _BK + kr, None], (8,))[None, row0 // 8 + c8].load())
    else:
        ra.store(cute.zipped_divide(mA[row0 + lrow, None], (8,))[None, kt0 * 2 + lchunk].load())
    rb.store(cute.zipped_divide(mB[kt0 * _BK + kr, None], (8,))[None, col0 // 8 + c8].load())
    for kt in range(kt0, kt1):
        for j in cutlass.range_constexpr(8):
            if cutlass.const_expr(a_km):
                a_s[kr, c8 * 8 + j] = ra[j]
            else:
                a_s[lchunk * 8 + j, lrow] = ra[j]
            b_s[kr, c8 * 8 + j] = rb[j]
        cute.arch.sync_threads()
        if kt + 1 < kt1:  # the next slice's loads fly while this slice is computed
            if cutlass.const_expr(a_km):
                ra.store(cute.zipped_divide(mA[(kt + 1) * _BK + kr, None], (8,))[None, row0 // 8 + c8].load())
            else:
                ra.store(cute.zipped_divide(mA[row0 + lrow, None], (8,))[None, (kt + 1) * 2 + lchunk].load())
            rb.store(cute.zipped_divide(mB[(kt + 1) * _BK + kr, None], (8,))[None, col0 // 8 + c8].load())
        for kk in cutlass.range_constexpr(_BK):
            s_a = cute.zipped_divide(a_s[kk, None], (4,))  # (4, 32)
            s_b = cute.zipped_divide(b_s[kk, None], (4,))
            lo = s_a[None, ty].load()
            hi = s_a[None, 16 + ty].load()
            blo = s_b[None, tc].load()
            bhi = s_b[None, 16 + tc].load()
            for i in cutlass.range_constexpr(4):
                af[i] = lo[i]
                af[4 + i] = hi[i]
                bf[i] = blo[i]
                bf[4 + i] = bhi[i]
            for i in cutlass.range_constexpr(8):
                for j in cutlass.range_constexpr(8):
                    part[i * 8 + j] = part[i * 8 + j] + af[i] * bf[j]
        cute.arch.sync_threads()
        if (kt - kt0) % _FOLD == _FOLD - 1 or kt + 1 == kt1:  # fold the chunk's sums into the total
            for i in cutlass.range_constexpr(64):
                acc[i] = acc[i] + part[i]
                part[i] = cutlass.Float32(0.0)

    out = cute.make_rmem_tensor((4,), cutlass.Float32)
    for i in cutlass.range_constexpr(8):
        row = row0 + (i // 4) * 64 + ty * 4 + i % 4
        for jh in cutlass.range_constexpr(2):
            if cutlass.const_expr(epi == _EPI_PART):
                for j in cutlass.range_constexpr(4):
                    out[j] = acc[i * 8 + jh * 4 + j]
                cute.zipped_divide(mC[s, row, None], (4,))[None, col0 // 4 + jh * 16 + tc].store(out.load())
            elif cutlass.const_expr(epi == _EPI_GELU):  # dpre = dgelu * gelu_tanh'(z), zero on padded rows
                zv = cute.zipped_divide(mX[cutlass.min(row, rows_valid - 1), None], (4,))[
                    None, col0 // 4 + jh * 16 + tc].load()
                for j in cutlass.range_constexpr(4):
                    z = zv[j]
                    z2 = z * z
                    t = cute.math.tanh((_ROOT * z) * (1.0 + _C * z2))
                    gp = 0.5 * (1.0 + t) + (((0.5 * z) * (1.0 - t * t)) * _ROOT) * (1.0 + (3.0 * _C) * z2)
                    out[j] = cutlass.Float32(cutlass.select_(row < rows_valid, acc[i * 8 + jh * 4 + j] * gp, 0.0))
                cute.zipped_divide(mC[row, None], (4,))[None, col0 // 4 + jh * 16 + tc].store(out.load())
            else:  # dhidden = dpre W1 + dres on the valid rows
                if row < rows_valid:
                    xv = cute.zipped_divide(mX[row, None], (4,))[None, col0 // 4 + jh * 16 + tc].load()
                    for j in cutlass.range_constexpr(4):
                        out[j] = acc[i * 8 + jh * 4 + j] + xv[j]
                    cute.zipped_divide(mC[row, None], (4,))[None, col0 // 4 + jh * 16 + tc].store(out.load())


@cute.kernel
def colsum_kernel(x: cute.Tensor, y: cute.Tensor, part: cute.Tensor, rows: cutlass.Int32, prod: cutlass.Constexpr):
    """part[p, c] = sum over tokens [64 p, 64 p + 64) of x[t, c] (times y[t, c] if prod), fp32 in order."""
    tidx, _, _ = cute.arch.thread_idx()
    cb, p, _ = cute.arch.block_idx()
    c = cb * _COLS + tidx
    r1 = cutlass.min(p * _CH + _CH, rows)
    total = cutlass.Float32(0.0)
    for r in range(p * _CH, r1):
        if cutlass.const_expr(prod):
            total = total + x[r, c] * y[r, c]
        else:
            total = total + x[r, c]
    part[p, c] = total


@cute.kernel
def reduce_kernel(part: cute.Tensor, out: cute.Tensor):
    """out[c] = fp32(sum_p part[p, c] in fp64), p ascending."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    c = bidx * _THREADS + tidx
    if c < cute.size(out, mode=[0]):
        total = cutlass.Float64(0.0)
        for p in range(cute.size(part, mode=[0])):
            total = total + part[p, c].to(cutlass.Float64)
        out[c] = total.to(cutlass.Float32)


@cute.jit
def row_step(dy: cute.Tensor, n: cute.Tensor, var: cute.Tensor, w: cute.Tensor, dres: cute.Tensor,
             tokens: cutlass.Int32, dim: cutlass.Int32, inv_dim: cutlass.Float32, eps: cutlass.Float32,
             stream: cuda.CUstream):
    per = cute.size(dres, mode=[1]) // 128
    row_kernel(dy, n, var, w, dres, tokens, dim, inv_dim, eps, per).launch(
        grid=[cute.size(dres, mode=[0]) // _ROW_WARPS, 1, 1], block=[_ROW_WARPS * 32, 1, 1], stream=stream)


@cute.jit
def gemm_step(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, mX: cute.Tensor, rows_valid: cutlass.Int32,
              k_len: cutlass.Int32, m_tiles: cutlass.Constexpr, n_tiles: cutlass.Constexpr,
              splits: cutlass.Constexpr, a_km: cutlass.Constexpr, epi: cutlass.Constexpr, stream: cuda.CUstream):
    gemm_kernel(mA, mB, mC, mX, rows_valid, k_len, a_km, epi).launch(
        grid=[m_tiles, n_tiles, splits], block=[_THREADS, 1, 1], stream=stream)


@cute.jit
def colsum_step(x: cute.Tensor, y: cute.Tensor, part: cute.Tensor, rows: cutlass.Int32, prod: cutlass.Constexpr,
                stream: cuda.CUstream):
    colsum_kernel(x, y, part, rows, prod).launch(
        grid=[cute.size(part, mode=[1]) // _COLS, cute.size(part, mode=[0]), 1], block=[_COLS, 1, 1], stream=stream)


@cute.jit
def reduce_step(part: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    reduce_kernel(part, out).launch(
        grid=[(cute.size(out, mode=[0]) + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)


def _options(arch, ptx_dir):
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    return options


def _fake(*shape):
    order = tuple(range(len(shape) - 1, -1, -1))
    return make_fake_compact_tensor(cutlass.Float32, shape, stride_order=order, assumed_align=16)


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _plan(tokens, dim, ff, padded):
    """(rows of the token inputs, padded tokens, dim, ff, K of the token sums, splits, partial chunks)."""
    tp, dp, fp = _up(tokens, _BM), _up(dim, _BN), _up(ff, _BN)
    tr = tp if padded else tokens
    k_tok = tp if padded else tokens
    splits = (k_tok // _BK + _SPLIT_TILES - 1) // _SPLIT_TILES
    return tr, tp, dp, fp, k_tok, splits, (tokens + _CH - 1) // _CH


def _compile(kind, plan, arch=None, ptx_dir=None):
    tr, tp, dp, fp, _, splits, chunks = plan
    opts = _options(arch, ptx_dir)
    stream = make_fake_stream()
    if kind == "row":
        return cute.compile(row_step, _fake(tr, dp), _fake(tr, dp), _fake(tr, 1), _fake(dp), _fake(tp, dp), 1, 1,
                            1.0, 1e-5, stream, options=opts)
    if kind == "dgelu":
        return cute.compile(gemm_step, _fake(tp, dp), _fake(dp, fp), _fake(tp, fp), _fake(tr, fp), 1, 1,
                            tp // _BM, fp // _BN, 1, False, _EPI_GELU, stream, options=opts)
    if kind == "dhidden":
        return cute.compile(gemm_step, _fake(tp, fp), _fake(fp, dp), _fake(tr, dp), _fake(tp, dp), 1, 1,
                            tp // _BM, dp // _BN, 1, False, _EPI_ADD, stream, options=opts)
    if kind == "dw2":
        return cute.compile(gemm_step, _fake(tp, dp), _fake(tr, fp), _fake(splits, dp, fp), _fake(tp, dp), 1, 1,
                            dp // _BM, fp // _BN, splits, True, _EPI_PART, stream, options=opts)
    if kind == "dw1":
        return cute.compile(gemm_step, _fake(tp, fp), _fake(tr, dp), _fake(splits, fp, dp), _fake(tp, fp), 1, 1,
                            fp // _BM, dp // _BN, splits, True, _EPI_PART, stream, options=opts)
    if kind == "colsum_d":
        return cute.compile(colsum_step, _fake(tr, dp), _fake(tr, dp), _fake(chunks, dp), 1, False, stream,
                            options=opts)
    if kind == "colsum_dn":
        return cute.compile(colsum_step, _fake(tr, dp), _fake(tr, dp), _fake(chunks, dp), 1, True, stream,
                            options=opts)
    if kind == "colsum_f":
        return cute.compile(colsum_step, _fake(tp, fp), _fake(tp, fp), _fake(chunks, fp), 1, False, stream,
                            options=opts)
    if kind == "reduce_d":
        return cute.compile(reduce_step, _fake(chunks, dp), _fake(dp), stream, options=opts)
    if kind == "reduce_f":
        return cute.compile(reduce_step, _fake(chunks, fp), _fake(fp), stream, options=opts)
    return cute.compile(reduce_step, _fake(splits, dp * fp), _fake(dp * fp), stream, options=opts)


_KINDS = ("row", "dgelu", "dhidden", "dw2", "dw1", "colsum_d", "colsum_dn", "colsum_f", "reduce_d", "reduce_f",
          "reduce_w")


def _fn(kind, plan):
    key = (kind, plan)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(kind, plan)
    return _COMPILED[key]


def _padded(t, shape, fill=0.0):
    t = t.contiguous()
    if tuple(t.shape) == tuple(shape):
        return t
    p = torch.full(shape, fill, dtype=torch.float32, device=t.device)
    p[tuple(slice(0, s) for s in t.shape)] = t
    return p


def solve(grad_output, hidden_states, fc1_weight, fc1_output, gelu_output, fc2_weight, normalized, var, ln_weight,
          eps):
    dim, ff = fc2_weight.shape
    tokens = grad_output.numel() // dim
    dev = grad_output.device
    f32 = torch.float32
    padded = dim % _BN != 0 or ff % _BN != 0 or tokens % _BK != 0
    plan = _plan(tokens, dim, ff, padded)
    tr, tp, dp, fp, k_tok, splits, chunks = plan
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    dy = _padded(grad_output.reshape(tokens, dim), (tr, dp))
    nrm = _padded(normalized.reshape(tokens, dim), (tr, dp))
    x = _padded(hidden_states.reshape(tokens, dim), (tr, dp))
    z = _padded(fc1_output.reshape(tokens, ff), (tr, fp))
    gelu = _padded(gelu_output.reshape(tokens, ff), (tr, fp))
    w1 = _padded(fc1_weight, (fp, dp))
    w2 = _padded(fc2_weight, (dp, fp))
    dres = torch.empty(tp, dp, dtype=f32, device=dev)
    _fn("row", plan)(dy, nrm, _padded(var.reshape(tokens, 1), (tr, 1), 1.0), _padded(ln_weight, (dp,)), dres,
                     tokens, dim, 1.0 / dim, float(eps), stream)
    dpre = torch.empty(tp, fp, dtype=f32, device=dev)
    _fn("dgelu", plan)(dres, w2, dpre, z, tokens, dp, stream)
    dhid = torch.empty(tr, dp, dtype=f32, device=dev)
    _fn("dhidden", plan)(dpre, w1, dhid, dres, tokens, fp, stream)
    part_w = torch.empty(splits, dp * fp, dtype=f32, device=dev)
    gw2 = torch.empty(dp, fp, dtype=f32, device=dev)
    _fn("dw2", plan)(dres, gelu, part_w.view(splits, dp, fp), dres, tokens, k_tok, stream)
    _fn("reduce_w", plan)(part_w, gw2.view(-1), stream)
    gw1 = torch.empty(fp, dp, dtype=f32, device=dev)
    _fn("dw1", plan)(dpre, x, part_w.view(splits, fp, dp), dpre, tokens, k_tok, stream)
    _fn("reduce_w", plan)(part_w, gw1.view(-1), stream)
    part_d = torch.empty(chunks, dp, dtype=f32, device=dev)
    part_f = torch.empty(chunks, fp, dtype=f32, device=dev)
    sums = []
    for kind, a, b in (("colsum_dn", dy, nrm), ("colsum_d", dy, dy), ("colsum_d", dres[:tr], dres[:tr])):
        _fn(kind, plan)(a, b, part_d, tokens, stream)
        out = torch.empty(dp, dtype=f32, device=dev)
        _fn("reduce_d", plan)(part_d, out, stream)
        sums.append(out)
    gln_w, gln_b, gb2 = sums
    _fn("colsum_f", plan)(dpre, dpre, part_f, tokens, stream)
    gb1 = torch.empty(fp, dtype=f32, device=dev)
    _fn("reduce_f", plan)(part_f, gb1, stream)
    if padded:
        dhid = dhid[:tokens, :dim]
        gw1, gw2 = gw1[:ff, :dim].contiguous(), gw2[:dim, :ff].contiguous()
        gb1, gb2, gln_w, gln_b = gb1[:ff].contiguous(), gb2[:dim].contiguous(), gln_w[:dim].contiguous(), \
            gln_b[:dim].contiguous()
    return (dhid.reshape(grad_output.shape).contiguous(), gw1, gb1, gw2, gb2, gln_w, gln_b)


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile every kernel for the graded workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    plan = _plan(w["batch"] * w["seq"], w["dim"], w["ff"], False)
    return [name for kind in _KINDS for name in _compile(kind, plan, arch, ptx_dir).kernel_info]
