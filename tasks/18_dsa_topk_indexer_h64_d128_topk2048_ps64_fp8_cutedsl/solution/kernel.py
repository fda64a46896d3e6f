"""CuTe DSL oracle for problem 18: DSA lightning-indexer top-2048 over an FP8 paged index-key cache.

Two DSL kernels run back to back on the caller's stream.

``dsa_index_scores_kernel``: one CTA of 256 threads per (page slot j, sequence b). A sequence whose
length is at most 2048 keeps every live token whatever the scores are, so its CTAs do nothing;
CTAs past the sequence's last page do nothing either. Otherwise the CTA decodes q[b] (e4m3, exact
in fp32) into shared memory (64 x 128 fp32) and the head weights; thread (t, g) with t = tid % 64
the token of the page and g = tid // 64 a quarter of the heads reads its token's key row with
16-byte loads, decodes the e4m3 bytes with the hardware conversion and multiplies them by the
token's fp32 scale (one rounding, as the reference's dequantised key), then accumulates the dot
products of its 16 heads in fp32 over the 128 dims (q rows are warp-broadcast shared-memory
loads). Its partial score is sum over its heads of w_h * relu(dot_h); the four quarters are added
through shared memory and the score (fp32) is written to a [batch, max_pages * 64] scratch row.

``dsa_topk_select_kernel``: one CTA of 1024 threads per sequence. Length n <= 2048: the output is
every live position's slot id (block_table[b, p // 64] * 64 + p % 64) in position order, then -1.
Otherwise thread i holds the contiguous positions i*E .. i*E+E-1 (E = ceil(row / 1024)); each fp32
score becomes an order-preserving int32 key (bits, with the low 31 bits flipped for negatives;
dead positions get INT_MIN). The 2048th largest key T is found bit by bit from the top (sign
first, then bits 30..0: keep a bit when at least 2048 keys are >= the candidate), each step one
block-wide count (warp butterfly shuffles, then the 32 warp totals through shared memory). Keys
above T are all chosen, plus the first (2048 - count above T) keys equal to T in position order
(a block exclusive scan of the equal counts ranks them). A second block exclusive scan of the
chosen counts gives each thread its output offset, so the 2048 slot ids are written in ascending
position order. The grader compares the row as a set; ties at T (absent from the generated data)
are broken towards lower positions.
"""

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

# The graded workload (the problem's make_inputs defaults), for compile-only checks.
WORKLOAD = dict(batch=31, heads=64, dim=128, page_size=64, num_pages=11923, max_pages=43)
TOP_K = 2048
_QUARTERS = 4  # head groups per token (threads per CTA = 4 * page_size)
_VEC = 16  # e4m3 bytes per key load
_SELECT_THREADS = 1024
_INT_MIN = -2147483648
_COMPILED = {}


def _warp_sum_i32(x):
    for off in (16, 8, 4, 2, 1):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=off, mask=-1, mask_and_clamp=31)
    return x


def _block_sum_i32(x, buf, lane, warp):
    """Sum of x over the 1024 threads; every lane of a warp writes the same total (no branch)."""
    x = _warp_sum_i32(x)
    buf[warp] = x
    cute.arch.sync_threads()
    return _warp_sum_i32(cutlass.Int32(buf[lane]))


def _block_exclusive_scan_i32(x, buf, lane, warp):
    """Exclusive prefix of x over the threads in thread order."""
    inc = x
    for off in (1, 2, 4, 8, 16):
        up = cute.arch.shuffle_sync_up(inc, offset=off, mask=-1)
        inc = inc + cutlass.Int32(cutlass.select_(lane >= off, up, 0))
    total = cute.arch.shuffle_sync(inc, offset=31, mask=-1)
    buf[warp] = total
    cute.arch.sync_threads()
    below = cutlass.Int32(cutlass.select_(lane < warp, buf[lane], 0))
    return _warp_sum_i32(below) + inc - x


@cute.kernel
def dsa_index_scores_kernel(q8: cute.Tensor, cache: cute.Tensor, weights: cute.Tensor, seq_lens: cute.Tensor,
                            table: cute.Tensor, scores: cute.Tensor, page_size: cutlass.Constexpr,
                            top_k: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    j, b, _ = cute.arch.block_idx()
    heads = cute.size(q8, mode=[1])
    dim = cute.size(q8, mode=[2])
    hpq = heads // _QUARTERS
    chunks = dim // _VEC
    t = tidx % page_size
    g = tidx // page_size

    smem = cutlass.memory.SmemAllocator()
    q_s = smem.allocate_tensor(cutlass.Float32, cute.make_ordered_layout((heads, dim), order=(1, 0)),
                               byte_alignment=16)
    w_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((heads,)), byte_alignment=16)
    part_s = smem.allocate_tensor(cutlass.Float32, cute.make_ordered_layout((_QUARTERS, page_size), order=(1, 0)),
                                  byte_alignment=16)

    n = seq_lens[b]
    if n > top_k:
        if j * page_size < n:
            # q[b] -> fp32 shared memory (16 values per step), weights[b]
            qf8 = cute.recast_tensor(q8, cutlass.Float8E4M3FN)
            for i in range(tidx, heads * chunks, _QUARTERS * page_size):
                h = i // chunks
                c = i % chunks
                src = cute.zipped_divide(qf8[b, h, None], (_VEC,))[None, c]
                cute.zipped_divide(q_s[h, None], (_VEC,))[None, c].store(src.load().to(cutlass.Float32))
            for i in range(tidx, heads, _QUARTERS * page_size):
                w_s[i] = weights[b, i]
            cute.arch.sync_threads()

            page = table[b, j]
            scale = cute.recast_tensor(cache, cutlass.Float32)[page, page_size * dim // 4 + t]
            kf8 = cute.recast_tensor(cache, cutlass.Float8E4M3FN)
            row = cute.zipped_divide(kf8[page, None], (_VEC,))
            acc = cute.make_rmem_tensor((hpq,), cutlass.Float32)
            acc.fill(0.0)
            kr = cute.make_rmem_tensor((_VEC,), cutlass.Float32)
            qr = cute.make_rmem_tensor((_VEC,), cutlass.Float32)
            for c in cutlass.range_constexpr(chunks):
                kr.store(row[None, t * chunks + c].load().to(cutlass.Float32) * scale)
                for h in cutlass.range_constexpr(hpq):
                    qr.store(cute.zipped_divide(q_s[g * hpq + h, None], (_VEC,))[None, c].load())
                    a = acc[h]
                    for i in cutlass.range_constexpr(_VEC):
                        a = a + qr[i] * kr[i]
                    acc[h] = a
            part = cutlass.Float32(0.0)
            for h in cutlass.range_constexpr(hpq):
                dot = acc[h]
                part = part + w_s[g * hpq + h] * cutlass.Float32(cutlass.select_(dot > 0.0, dot, 0.0))
            part_s[g, t] = part
            cute.arch.sync_threads()
            if g == 0:
                total = part_s[0, t]
                for q in cutlass.range_constexpr(1, _QUARTERS):
                    total = total + part_s[q, t]
                pos = j * page_size + t
                if pos < n:
                    scores[b, pos] = total


@cute.kernel
def dsa_topk_select_kernel(keys_in: cute.Tensor, seq_lens: cute.Tensor, table: cute.Tensor, out: cute.Tensor,
                           page_size: cutlass.Constexpr, per_thread: cutlass.Constexpr,
                           top_k: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    b, _, _ = cute.arch.block_idx()
    lane = cute.arch.lane_idx()
    warp = cute.arch.warp_idx()
    max_pages = cute.size(table, mode=[1])

    smem = cutlass.memory.SmemAllocator()
    cnt_s = smem.allocate_tensor(cutlass.Int32, cute.make_ordered_layout((2, 32), order=(1, 0)), byte_alignment=16)
    eq_s = smem.allocate_tensor(cutlass.Int32, cute.make_layout((32,)), byte_alignment=16)
    sel_s = smem.allocate_tensor(cutlass.Int32, cute.make_layout((32,)), byte_alignment=16)

    n = seq_lens[b]
    if n <= top_k:
        for p in range(tidx, top_k, _SELECT_THREADS):
            pc = cutlass.max(cutlass.min(p, n - 1), 0)
            slot = table[b, cutlass.min(pc // page_size, max_pages - 1)] * page_size + pc % page_size
            out[b, p] = cutlass.Int32(cutlass.select_(p < n, slot, -1))
    else:
        keys = cute.make_rmem_tensor((per_thread,), cutlass.Int32)
        for e in cutlass.range_constexpr(per_thread):
            p = tidx * per_thread + e
            bits = keys_in[b, cutlass.min(p, n - 1)]
            key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
            keys[e] = cutlass.Int32(cutlass.select_(p < n, key, _INT_MIN))

        # the top_k-th largest key, sign bit first, then bits 30..0
        c0 = cutlass.Int32(0)
        for e in cutlass.range_constexpr(per_thread):
            c0 = c0 + cutlass.Int32(cutlass.select_(keys[e] >= 0, 1, 0))
        total = _block_sum_i32(c0, cnt_s[0, None], lane, warp)
        thr = cutlass.Int32(cutlass.select_(total >= top_k, 0, _INT_MIN))
        for step in cutlass.range_constexpr(31):
            cand = thr | (1 << (30 - step))
            c = cutlass.Int32(0)
            for e in cutlass.range_constexpr(per_thread):
                c = c + cutlass.Int32(cutlass.select_(keys[e] >= cand, 1, 0))
            total = _block_sum_i32(c, cnt_s[(step + 1) % 2, None], lane, warp)
            thr = cutlass.Int32(cutlass.select_(total >= top_k, cand, thr))
        c_gt = cutlass.Int32(0)
        c_eq = cutlass.Int32(0)
        for e in cutlass.range_constexpr(per_thread):
            c_gt = c_gt + cutlass.Int32(cutlass.select_(keys[e] > thr, 1, 0))
            c_eq = c_eq + cutlass.Int32(cutlass.select_(keys[e] == thr, 1, 0))
        need = top_k - _block_sum_i32(c_gt, cnt_s[0, None], lane, warp)

        # keys equal to thr are taken in position order until need are taken
        rank = _block_exclusive_scan_i32(c_eq, eq_s, lane, warp)
        chosen = cute.make_rmem_tensor((per_thread,), cutlass.Int32)
        c_sel = cutlass.Int32(0)
        for e in cutlass.range_constexpr(per_thread):
            eq = keys[e] == thr
            take = (keys[e] > thr) | (eq & (rank < need))
            chosen[e] = cutlass.Int32(cutlass.select_(take, 1, 0))
            c_sel = c_sel + chosen[e]
            rank = rank + cutlass.Int32(cutlass.select_(eq, 1, 0))
        o = _block_exclusive_scan_i32(c_sel, sel_s, lane, warp)
        for e in cutlass.range_constexpr(per_thread):
            if chosen[e] != 0:
                p = tidx * per_thread + e
                out[b, o] = table[b, p // page_size] * page_size + p % page_size
                o = o + 1


@cute.jit
def dsa_index_scores(q8: cute.Tensor, cache: cute.Tensor, weights: cute.Tensor, seq_lens: cute.Tensor,
                     table: cute.Tensor, scores: cute.Tensor, page_size: cutlass.Constexpr, stream: cuda.CUstream):
    batch = cute.size(q8, mode=[0])
    heads = cute.size(q8, mode=[1])
    dim = cute.size(q8, mode=[2])
    max_pages = cute.size(table, mode=[1])
    smem_bytes = (heads * dim + heads + _QUARTERS * page_size) * 4 + 64
    dsa_index_scores_kernel(q8, cache, weights, seq_lens, table, scores, page_size, TOP_K).launch(
        grid=[max_pages, batch, 1], block=[_QUARTERS * page_size, 1, 1], smem=smem_bytes, stream=stream)


@cute.jit
def dsa_topk_select(keys: cute.Tensor, seq_lens: cute.Tensor, table: cute.Tensor, out: cute.Tensor,
                    page_size: cutlass.Constexpr, stream: cuda.CUstream):
    batch = cute.size(out, mode=[0])
    max_pages = cute.size(table, mode=[1])
    per_thread = (max_pages * page_size + _SELECT_THREADS - 1) // _SELECT_THREADS
    dsa_topk_select_kernel(keys, seq_lens, table, out, page_size, per_thread, TOP_K).launch(
        grid=[batch, 1, 1], block=[_SELECT_THREADS, 1, 1], smem=4 * 32 * 4 + 64, stream=stream)


def _compile(batch, heads, dim, page_size, num_pages, max_pages, arch=None, ptx_dir=None):
    assert heads % _QUARTERS == 0 and dim % _VEC == 0 and _QUARTERS * page_size <= 1024
    row = max_pages * page_size
    q8 = make_fake_compact_tensor(cutlass.Uint8, (batch, heads, dim), stride_order=(2, 1, 0), assumed_align=16)
    cache = make_fake_compact_tensor(cutlass.Uint8, (num_pages, page_size * (dim + 4)), stride_order=(1, 0),
                                     assumed_align=16)
    weights = make_fake_compact_tensor(cutlass.Float32, (batch, heads), stride_order=(1, 0))
    lens = make_fake_compact_tensor(cutlass.Int32, (batch,))
    table = make_fake_compact_tensor(cutlass.Int32, (batch, max_pages), stride_order=(1, 0))
    scores = make_fake_compact_tensor(cutlass.Float32, (batch, row), stride_order=(1, 0))
    keys = make_fake_compact_tensor(cutlass.Int32, (batch, row), stride_order=(1, 0))
    out = make_fake_compact_tensor(cutlass.Int32, (batch, TOP_K), stride_order=(1, 0))
    options = "--enable-tvm-ffi"
    if arch:
        options += f" --gpu-arch {arch}"
    if ptx_dir:
        options += f" --keep-ptx --dump-dir {ptx_dir}"
    score = cute.compile(dsa_index_scores, q8, cache, weights, lens, table, scores, page_size, make_fake_stream(),
                         options=options)
    select = cute.compile(dsa_topk_select, keys, lens, table, out, page_size, make_fake_stream(), options=options)
    return score, select


def solve(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table):
    batch, heads, dim = q_index_fp8.shape
    num_pages, page_size = k_index_cache_fp8.shape[:2]
    max_pages = block_table.shape[1]
    device = q_index_fp8.device
    out = torch.empty(batch, TOP_K, dtype=torch.int32, device=device)
    if batch == 0:
        return out
    scores = torch.empty(batch, max_pages * page_size, dtype=torch.float32, device=device)
    key = (batch, heads, dim, page_size, num_pages, max_pages)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(*key)
    score, select = _COMPILED[key]
    lens = seq_lens.contiguous().to(torch.int32)
    table = block_table.contiguous().to(torch.int32)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    score(q_index_fp8.contiguous().view(torch.uint8),
          k_index_cache_fp8.contiguous().view(torch.uint8).view(num_pages, page_size * (dim + 4)),
          weights.contiguous().float(), lens, table, scores, stream)
    select(scores.view(torch.int32), lens, table, out, stream)
    return out


def precompile(arch="sm_90a", ptx_dir=None):
    """Compile for the fixed workload without a GPU; return the kernel names (PTX to ``ptx_dir``)."""
    w = WORKLOAD
    built = _compile(w["batch"], w["heads"], w["dim"], w["page_size"], w["num_pages"], w["max_pages"], arch, ptx_dir)
    return [name for executor in built for name in executor.kernel_info]
