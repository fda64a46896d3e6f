"""TIRx oracle for problem 18: DSA lightning-indexer top-2048 over an FP8 paged index-key cache.

Two TIRx kernels run back to back.

``mkb_dsa_index_scores``: one CTA of 256 threads per (page slot j, sequence b). A sequence whose
length is at most 2048 keeps every live token whatever the scores are, so its CTAs do nothing;
CTAs past the sequence's last page do nothing either. Otherwise the CTA decodes q[b] (e4m3 bytes,
read as 32-bit words, decoded exactly to fp32 by integer bit arithmetic) into shared memory
(64 x 128 fp32) and the head weights; thread (t, g) with t = tid % 64 the token of the page and
g = tid // 64 a quarter of the heads reads its token's key row in 16-byte loads, decodes the e4m3
bytes the same way and multiplies them by the token's fp32 scale (one rounding, as the reference's
dequantised key), then accumulates the dot products of its 16 heads in fp32 over the 128 dims
(q rows are warp-broadcast 16-byte shared-memory loads). Its partial score is sum over its heads
of w_h * relu(dot_h); the four quarters are added through shared memory and the fp32 score is
written to a [batch, max_pages * 64] scratch row.

``mkb_dsa_topk_select``: one CTA of 1024 threads per sequence. Length n <= 2048: the output is
every live position's slot id (block_table[b, p // 64] * 64 + p % 64) in position order, then -1.
Otherwise thread i holds the contiguous positions i*E .. i*E+E-1 (E = ceil(row / 1024)); each fp32
score becomes an order-preserving uint32 key (negatives: all bits flipped, others: sign bit set;
dead positions get 0, below every real key). The 2048th largest key T is found bit by bit from
the top (keep a bit when at least 2048 keys are >= the candidate); each of the 32 steps is one
block-wide count (warp butterfly shuffles, then the 32 warp totals through shared memory), and a
33rd count gives the keys above T. Those are all chosen, plus the first (2048 - count above T)
keys equal to T in position order (a block exclusive scan of the equal counts, shuffle-up within
warps, ranks them). A second block exclusive scan of the chosen counts gives each thread its
output offset, so the 2048 slot ids are written in ascending position order. The grader compares
the row as a set; ties at T (absent from the generated data) are broken towards lower positions.
Only integer arithmetic, fp32 multiply-adds and max are involved, so fast-math changes nothing.
"""

import torch
import tvm
from tvm.script import tirx as T

TOP_K = 2048
QUARTERS = 4  # head groups per token (threads per CTA = 4 * page_size)
VEC = 16  # e4m3 bytes per key load (4 words)
SELECT_THREADS = 1024
FULL = 0xFFFFFFFF
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def e4m3_to_f32(code):
    """The fp32 value of a finite e4m3fn byte given as an int32 in [0, 255] (exact)."""
    sign = T.shift_left(T.shift_right(code, 7), 31)
    exponent = T.bitwise_and(T.shift_right(code, 3), 15)
    mantissa = T.bitwise_and(code, 7)
    normal = T.reinterpret("float32", T.bitwise_or(
        sign, T.bitwise_or(T.shift_left(exponent + 120, 23), T.shift_left(mantissa, 20))))
    tiny = T.float32(mantissa) * T.float32(0.001953125)  # mantissa * 2^-9
    subnormal = T.if_then_else(code >= 128, tiny * T.float32(-1.0), tiny)
    return T.if_then_else(exponent == 0, subnormal, normal)


def _byte(word, k):
    """Byte k (little-endian) of an int32 word, as an int32 in [0, 255]."""
    return T.bitwise_and(T.shift_right(word, 8 * k), 255)


def _scores_kernel(heads, dim, page_size):
    threads = QUARTERS * page_size
    hpq = heads // QUARTERS
    chunks = dim // VEC
    qwords = dim // 4
    row_words = page_size * (dim + 4) // 4

    @T.prim_func
    def mkb_dsa_index_scores(q_h: T.handle, cache_h: T.handle, w_h: T.handle, lens_h: T.handle,
                             table_h: T.handle, scores_h: T.handle):
        batch = T.int32()
        num_pages = T.int32()
        max_pages = T.int32()
        q_words = T.match_buffer(q_h, (batch, heads, qwords), "int32")
        cache = T.match_buffer(cache_h, (num_pages, row_words), "int32")
        weights = T.match_buffer(w_h, (batch, heads), "float32")
        seq_lens = T.match_buffer(lens_h, (batch,), "int32")
        table = T.match_buffer(table_h, (batch, max_pages), "int32")
        scores = T.match_buffer(scores_h, (batch, max_pages * page_size), "float32")
        T.device_entry()
        j, b = T.cta_id([max_pages, batch])
        tx = T.thread_id([threads])
        q_s = T.alloc_buffer((heads, dim), "float32", scope="shared")
        w_s = T.alloc_buffer((heads,), "float32", scope="shared")
        part_s = T.alloc_buffer((QUARTERS, page_size), "float32", scope="shared")
        acc = T.alloc_buffer((hpq,), "float32", scope="local")
        wr = T.alloc_buffer((4,), "int32", scope="local")
        kr = T.alloc_buffer((VEC,), "float32", scope="local")
        qr = T.alloc_buffer((VEC,), "float32", scope="local")
        n: T.let = seq_lens[b]
        t: T.let = tx % page_size
        g: T.let = tx // page_size
        if n > TOP_K:
            if j * page_size < n:
                # q[b] -> fp32 shared memory (one word = 4 values per step), weights[b]
                for it in range(T.ceildiv(heads * qwords, threads)):
                    i: T.let = it * threads + tx
                    if i < heads * qwords:
                        word: T.let = q_words[b, i // qwords, i % qwords]
                        for k in T.unroll(4):
                            q_s[i // qwords, (i % qwords) * 4 + k] = e4m3_to_f32(_byte(word, k))
                for it in range(T.ceildiv(heads, threads)):
                    if it * threads + tx < heads:
                        w_s[it * threads + tx] = weights[b, it * threads + tx]
                T.cuda.cta_sync()
                page: T.let = table[b, j]
                scale: T.let = T.reinterpret("float32", cache[page, page_size * dim // 4 + t])
                for h in T.unroll(hpq):
                    acc[h] = T.float32(0.0)
                for c in T.unroll(chunks):
                    for k in T.vectorized(4):
                        wr[k] = cache[page, t * qwords + c * 4 + k]
                    for k in T.unroll(4):
                        for v in T.unroll(4):
                            kr[k * 4 + v] = e4m3_to_f32(_byte(wr[k], v)) * scale
                    for h in T.unroll(hpq):
                        for k in T.unroll(4):
                            for v in T.vectorized(4):
                                qr[k * 4 + v] = q_s[g * hpq + h, c * VEC + k * 4 + v]
                        for d in T.unroll(VEC):
                            acc[h] = acc[h] + qr[d] * kr[d]
                part: T.f32 = T.float32(0.0)
                for h in T.unroll(hpq):
                    part = part + w_s[g * hpq + h] * T.max(acc[h], T.float32(0.0))
                part_s[g, t] = part
                T.cuda.cta_sync()
                if g == 0:
                    total: T.f32 = part_s[0, t]
                    for qq in T.unroll(1, QUARTERS):
                        total = total + part_s[qq, t]
                    if j * page_size + t < n:
                        scores[b, j * page_size + t] = total

    return mkb_dsa_index_scores


def _warp_sum(value, i):
    return T.cuda.__shfl_xor_sync(T.uint32(FULL), value, T.shift_right(16, i), 32)


def _select_kernel(page_size, max_pages):
    row = max_pages * page_size
    per = (row + SELECT_THREADS - 1) // SELECT_THREADS

    @T.prim_func
    def mkb_dsa_topk_select(scores_h: T.handle, lens_h: T.handle, table_h: T.handle, out_h: T.handle):
        batch = T.int32()
        scores = T.match_buffer(scores_h, (batch, row), "float32")
        seq_lens = T.match_buffer(lens_h, (batch,), "int32")
        table = T.match_buffer(table_h, (batch, max_pages), "int32")
        out = T.match_buffer(out_h, (batch, TOP_K), "int32")
        T.device_entry()
        b = T.cta_id([batch])
        tx = T.thread_id([SELECT_THREADS])
        red = T.alloc_buffer((2, 32), "int32", scope="shared")
        scan_s = T.alloc_buffer((2, 32), "int32", scope="shared")
        keys = T.alloc_buffer((per,), "uint32", scope="local")
        chosen = T.alloc_buffer((per,), "int32", scope="local")
        st = T.alloc_buffer((4,), "int32", scope="local")  # count, running rank / offset, need, scratch
        thr = T.alloc_buffer((2,), "uint32", scope="local")  # threshold, candidate
        n: T.let = seq_lens[b]
        lane: T.let = tx % 32
        warp: T.let = tx // 32
        if n <= TOP_K:
            for it in range(T.ceildiv(TOP_K, SELECT_THREADS)):
                p: T.let = it * SELECT_THREADS + tx
                if p < TOP_K:
                    pc: T.let = T.max(T.min(p, n - 1), 0)
                    slot: T.let = table[b, T.min(pc // page_size, max_pages - 1)] * page_size + pc % page_size
                    out[b, p] = T.if_then_else(p < n, slot, -1)
        else:
            for e in T.unroll(per):
                bits: T.let = T.reinterpret("uint32", scores[b, T.min(tx * per + e, n - 1)])
                flip: T.let = T.if_then_else(bits >= T.uint32(0x80000000), T.uint32(FULL), T.uint32(0x80000000))
                keys[e] = T.if_then_else(tx * per + e < n, T.bitwise_xor(bits, flip), T.uint32(0))
            # steps 0..31: the top_k-th largest key bit by bit; step 32: how many keys exceed it
            thr[0] = T.uint32(0)
            for step in range(33):
                thr[1] = T.if_then_else(step < 32, T.bitwise_or(thr[0], T.shift_left(T.uint32(1), T.Cast(
                    "uint32", 31 - T.min(step, 31)))), thr[0] + T.uint32(1))
                st[0] = 0
                for e in T.unroll(per):
                    st[0] = st[0] + T.if_then_else(keys[e] >= thr[1], 1, 0)
                for i in T.unroll(5):
                    st[0] = st[0] + _warp_sum(st[0], i)
                red[step % 2, warp] = st[0]
                T.cuda.cta_sync()
                st[0] = red[step % 2, lane]
                for i in T.unroll(5):
                    st[0] = st[0] + _warp_sum(st[0], i)
                if step < 32:
                    if st[0] >= TOP_K:
                        thr[0] = thr[1]
                else:
                    st[2] = TOP_K - st[0]
            # rank of this thread's first key equal to the threshold (exclusive scan in position order)
            st[3] = 0
            for e in T.unroll(per):
                st[3] = st[3] + T.if_then_else(keys[e] == thr[0], 1, 0)
            st[0] = st[3]
            for i in T.unroll(5):
                up0: T.int32 = T.cuda.__shfl_up_sync(T.uint32(FULL), st[0], T.shift_left(1, i), 32)
                st[0] = st[0] + T.if_then_else(lane >= T.shift_left(1, i), up0, 0)
            tot0: T.int32 = T.cuda.__shfl_sync(T.uint32(FULL), st[0], 31, 32)
            scan_s[0, warp] = tot0
            T.cuda.cta_sync()
            st[1] = T.if_then_else(lane < warp, scan_s[0, lane], 0)
            for i in T.unroll(5):
                st[1] = st[1] + _warp_sum(st[1], i)
            st[1] = st[1] + st[0] - st[3]
            # chosen: above the threshold, or equal with rank below need
            st[3] = 0
            for e in T.unroll(per):
                chosen[e] = T.if_then_else(keys[e] > thr[0], 1, T.if_then_else(
                    keys[e] == thr[0], T.if_then_else(st[1] < st[2], 1, 0), 0))
                st[1] = st[1] + T.if_then_else(keys[e] == thr[0], 1, 0)
                st[3] = st[3] + chosen[e]
            # output offset of this thread's first chosen key
            st[0] = st[3]
            for i in T.unroll(5):
                up1: T.int32 = T.cuda.__shfl_up_sync(T.uint32(FULL), st[0], T.shift_left(1, i), 32)
                st[0] = st[0] + T.if_then_else(lane >= T.shift_left(1, i), up1, 0)
            tot1: T.int32 = T.cuda.__shfl_sync(T.uint32(FULL), st[0], 31, 32)
            scan_s[1, warp] = tot1
            T.cuda.cta_sync()
            st[1] = T.if_then_else(lane < warp, scan_s[1, lane], 0)
            for i in T.unroll(5):
                st[1] = st[1] + _warp_sum(st[1], i)
            st[1] = st[1] + st[0] - st[3]
            for e in T.unroll(per):
                if chosen[e] != 0:
                    out[b, st[1]] = table[b, (tx * per + e) // page_size] * page_size + (tx * per + e) % page_size
                    st[1] = st[1] + 1

    return mkb_dsa_topk_select


def _build(heads, dim, page_size, max_pages, arch):
    """Compile once per shape and arch: the tvm Executables of the score and the select kernels."""
    key = (heads, dim, page_size, max_pages, arch)
    if key not in _EXES:
        if heads % QUARTERS or dim % VEC or QUARTERS * page_size > 1024:
            raise ValueError("need heads % 4 == 0, dim % 16 == 0 and page_size <= 256")
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            score = tvm.compile(tvm.IRModule({"main": _scores_kernel(heads, dim, page_size)}), target=target,
                                tir_pipeline="tirx")
            select = tvm.compile(tvm.IRModule({"main": _select_kernel(page_size, max_pages)}), target=target,
                                 tir_pipeline="tirx")
        _EXES[key] = (score, select)
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(heads, dim, page_size, max_pages):
    key = (heads, dim, page_size, max_pages, _device_arch())
    if key not in _FNS:
        _FNS[key] = tuple(exe.mod["main"] for exe in _build(*key))
    return _FNS[key]


def solve(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table):
    batch, heads, dim = q_index_fp8.shape
    num_pages, page_size = k_index_cache_fp8.shape[:2]
    max_pages = block_table.shape[1]
    device = q_index_fp8.device
    out = torch.empty(batch, TOP_K, dtype=torch.int32, device=device)
    if batch == 0:
        return out
    scores = torch.empty(batch, max_pages * page_size, dtype=torch.float32, device=device)
    score, select = _kernel_fns(heads, dim, page_size, max_pages)
    lens = seq_lens.contiguous().to(torch.int32)
    table = block_table.contiguous().to(torch.int32)
    score(q_index_fp8.contiguous().view(torch.uint8).view(torch.int32),
          k_index_cache_fp8.contiguous().view(num_pages, -1).view(torch.int32), weights.contiguous().float(),
          lens, table, scores)
    select(scores, lens, table, out)
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


def kernel_sources(arch="sm_90a", heads=64, dim=128, page_size=64, max_pages=43):
    """{kernel symbol: generated CUDA source} at the graded shape (64 heads, dim 128, 43 page slots)."""
    sources = {}
    for exe in _build(heads, dim, page_size, max_pages, arch):
        source = exe.mod.imports[0].inspect_source()
        sources.update({name: source for name in _symbols(source)})
    return sources


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
