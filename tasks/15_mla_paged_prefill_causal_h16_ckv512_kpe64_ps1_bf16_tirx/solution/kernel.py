"""TIRx oracle for problem 15: causal absorbed-MLA paged prefill (16 heads, latent 512 + RoPE 64,
page size 1), flash-attention style on the CUDA cores.

TIRx 0.27 has no WGMMA tile primitive for sm_90, and its mma.sync tile primitive keeps the
accumulator fragment layout out of reach of the per-row softmax, so both GEMMs (Q K^T and P V) run
as shared-memory tiled SIMT loops with fp32 accumulation: slower than tensor cores.

The whole computation is one TIRx kernel. The 16 heads share every cached row, and the latent ckv is
both the key's first 512 dims and the value: the kernel treats the problem as attention with one
KV head, a 576-dim q.k (q = [q_nope | q_pe] against k = [ckv | kpe]) and a 512-dim value. Rows of
work are (query token, head) pairs of one sequence, packed token-major (row r is token r // 16,
head r % 16), so the 16 heads share every K/V tile. A CTA of 256 threads takes 64 rows and one
512-dim slice of the value/output dims (S is recomputed per slice); the grid is (an upper bound
on the row tiles) x (slices) and each CTA finds its sequence and row tile by a scan of qo_indptr
(CTAs past the last tile do nothing; the last tile of each sequence, which sees the most keys, gets
the lowest index). Thread (ty, tc) = (tid / 16, tid % 16) owns rows ty*4 .. ty*4+3 of the tile,
keys tc*4 .. tc*4+3 of each 64-key block and output dims g*64 + tc*4 .. +3 of its slice.
- S = Q K^T per key block: the 576-dim q.k advances in slices of 32 (16 from q_nope / ckv, then 2
  from q_pe / kpe); each slice of Q and of K (row kv_indices[kv_indptr[b] + j] of the caches for
  cached token j) is loaded by 16-byte vectors, widened to fp32 and stored dim-major in shared
  memory; each thread accumulates its 4 x 4 block of S in fp32 from float4 reads, each slice's 32
  products from zero and the 18 slice sums added after (as one chain of 576 fused adds, the lse of
  a row missed its row allowance on the H100 in a final grade: the lse carries the row's largest
  logit). Tokens past the sequence are clamped to its last one (never visible to a real row).
  Products of bf16 values are exact in fp32.
- Softmax in base 2 and fp32: s = S * sm_scale * log2(e); key j is masked (a -1e30 logit) for the
  row of query i unless j <= i + (L_kv - L_q) (the cached prefix comes first). The row max is
  reduced over the 16 lanes sharing a row by xor shuffles; m_new = max(m, rowmax), alpha =
  exp2(m - m_new), p = exp2(s - m_new); each thread keeps a partial row sum l = l * alpha + (its 4 p)
  and the accumulators O *= alpha. Key 0 is visible to every row, so m is a real logit after the
  first block.
- O += P V: p goes to shared memory; the slice's V dims (of the same ckv rows) are staged in fp32,
  a few keys at a time; each thread updates its 4 x (slice / 16) output block from broadcast p reads
  and float4 V reads.
- Epilogue: the 16 partial row sums are added by xor shuffles; output = O / l rounded to bf16 once;
  lse = m + log2(l) (the base-2 log-sum-exp, the reference's lse / ln 2). exp2/log2/division are
  the fast-math ones (about 2 ulp in fp32), far below the bf16 output rounding and the LSE tolerance.
The lse is written by the CTAs of the first slice. Latent or RoPE widths that are not a multiple of
64 (the small test shape's 32 / 8) are zero-padded to one by glue before the kernel (zero dims add
nothing to q.k; the padded output dims are sliced off).
"""

import math

import torch
import tvm
from tvm.script import tirx as T

BM = 64  # rows (token, head) per CTA
BN = 64  # keys per block
DC = 32  # head-dim slice of the S loop
THREADS = 256
VSPLIT = 1  # slices of the value/output dims (grid y)
POOL = 4096  # fp32 words of the shared staging pool (Q and K slices, or a V slice)
NEG = -1.0e30
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _prefill_kernel(heads, rank, rope_dim):
    """Shape-specialised on the head count and the latent / RoPE widths; token, page and batch counts
    symbolic."""
    group = heads  # one KV head (the latent cache) for all heads
    vsplit = VSPLIT if rank % (64 * VSPLIT) == 0 else 1
    vw = rank // vsplit  # value/output dims per CTA
    n_nope = rank // DC  # q.k slices from q_nope / ckv (then rope_dim // DC from q_pe / kpe)
    vk = POOL // vw  # keys per V staging slice
    dgroups = vw // 64  # 4-dim groups of a thread's output columns
    vvec = vk * vw // 8 // THREADS  # 16-byte V loads per thread per staging slice

    @T.prim_func
    def mkb_mla_paged_prefill(qn_h: T.handle, qp_h: T.handle, ckv_h: T.handle, kpe_h: T.handle, qo_h: T.handle,
                              kvp_h: T.handle, idx_h: T.handle, out_h: T.handle, lse_h: T.handle,
                              scale_log2: T.float32, n_tiles: T.int32):
        tokens = T.int32()
        num_pages = T.int32()
        batch1 = T.int32()
        nnz = T.int32()
        q_nope = T.match_buffer(qn_h, (tokens, heads, rank), "bfloat16")
        q_pe = T.match_buffer(qp_h, (tokens, heads, rope_dim), "bfloat16")
        ckv = T.match_buffer(ckv_h, (num_pages, 1, rank), "bfloat16")
        kpe = T.match_buffer(kpe_h, (num_pages, 1, rope_dim), "bfloat16")
        qo_indptr = T.match_buffer(qo_h, (batch1,), "int32")
        kv_indptr = T.match_buffer(kvp_h, (batch1,), "int32")
        kv_indices = T.match_buffer(idx_h, (nnz,), "int32")
        out = T.match_buffer(out_h, (tokens, heads, rank), "bfloat16")
        lse = T.match_buffer(lse_h, (tokens, heads), "float32")
        T.device_entry()
        tile, vsl = T.cta_id([n_tiles, vsplit])
        tx = T.thread_id([THREADS])
        pool = T.alloc_buffer((POOL,), "float32", scope="shared")
        p_s = T.alloc_buffer((BM * BN,), "float32", scope="shared")
        info = T.alloc_buffer((2,), "int32", scope="local")
        acc_s = T.alloc_buffer((16,), "float32", scope="local")
        part_s = T.alloc_buffer((16,), "float32", scope="local")
        acc_o = T.alloc_buffer((4 * 4 * dgroups,), "float32", scope="local")
        m_run = T.alloc_buffer((4,), "float32", scope="local")
        l_run = T.alloc_buffer((4,), "float32", scope="local")
        alpha = T.alloc_buffer((4,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((4,), "float32", scope="local")
        raw = T.alloc_buffer((8,), "bfloat16", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx % 64
        ld8: T.let = (tx // 64) * 8
        # the sequence and first row of this CTA's tile (the last tile of a sequence first)
        info[0] = -1
        info[1] = 0
        first: T.i32 = 0
        for b in range(batch1 - 1):
            nt: T.let = ((qo_indptr[b + 1] - qo_indptr[b]) * group + BM - 1) // BM
            if tile >= first and tile < first + nt:
                info[0] = b
                info[1] = (first + nt - 1 - tile) * BM
            first = first + nt
        if info[0] >= 0:
            seq: T.let = info[0]
            r0: T.let = info[1]
            q_beg: T.let = qo_indptr[seq]
            q_len: T.let = qo_indptr[seq + 1] - q_beg
            kv_beg: T.let = kv_indptr[seq]
            kv_len: T.let = kv_indptr[seq + 1] - kv_beg
            prefix: T.let = kv_len - q_len
            rows: T.let = q_len * group
            r_last: T.let = T.min(r0 + BM, rows) - 1
            n_blocks: T.let = (r_last // group + prefix + BN) // BN
            # this thread's Q row for the slice loads (clamped to the sequence)
            qr: T.let = T.min(r0 + lrow, rows - 1)
            q_tok: T.let = q_beg + qr // group
            q_head: T.let = qr % group
            for i in T.unroll(4):
                m_run[i] = _f32(NEG)
                l_run[i] = _f32(0.0)
            for i in T.unroll(4 * 4 * dgroups):
                acc_o[i] = _f32(0.0)
            for nb in range(n_blocks):
                # ---- S = Q K^T over head-dim slices of DC
                for i in T.unroll(16):
                    acc_s[i] = _f32(0.0)
                k_page: T.let = kv_indices[kv_beg + T.min(nb * BN + lrow, kv_len - 1)]
                for dc in range(n_nope + rope_dim // DC):
                    if dc < n_nope:
                        for e in T.vectorized(8):
                            raw[e] = q_nope[q_tok, q_head, dc * DC + ld8 + e]
                    else:
                        for e in T.vectorized(8):
                            raw[e] = q_pe[q_tok, q_head, (dc - n_nope) * DC + ld8 + e]
                    for e in T.unroll(8):
                        pool[(ld8 + e) * BM + lrow] = T.float32(raw[e])
                    if dc < n_nope:
                        for e in T.vectorized(8):
                            raw[e] = ckv[k_page, 0, dc * DC + ld8 + e]
                    else:
                        for e in T.vectorized(8):
                            raw[e] = kpe[k_page, 0, (dc - n_nope) * DC + ld8 + e]
                    for e in T.unroll(8):
                        pool[DC * BM + (ld8 + e) * BN + lrow] = T.float32(raw[e])
                    T.cuda.cta_sync()
                    for i in T.unroll(16):
                        part_s[i] = _f32(0.0)  # each slice's 32 products from zero, then one add
                    for d in T.unroll(DC):
                        for i in T.vectorized(4):
                            af[i] = pool[d * BM + ty * 4 + i]
                        for j in T.vectorized(4):
                            bf[j] = pool[DC * BM + d * BN + tc * 4 + j]
                        for i in T.unroll(4):
                            for j in T.unroll(4):
                                part_s[i * 4 + j] = part_s[i * 4 + j] + af[i] * bf[j]
                    for i in T.unroll(16):
                        acc_s[i] = acc_s[i] + part_s[i]
                    T.cuda.cta_sync()
                # ---- masked base-2 online softmax (rows ty*4+i, keys tc*4+j)
                for i in T.unroll(4):
                    lim: T.let = (r0 + ty * 4 + i) // group + prefix
                    for j in T.unroll(4):
                        acc_s[i * 4 + j] = T.if_then_else(nb * BN + tc * 4 + j <= lim,
                                                          acc_s[i * 4 + j] * scale_log2, _f32(NEG))
                    mx: T.f32 = T.max(T.max(acc_s[i * 4], acc_s[i * 4 + 1]), T.max(acc_s[i * 4 + 2], acc_s[i * 4 + 3]))
                    for sh in T.unroll(4):
                        mx = T.max(mx, T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), mx, T.shift_left(1, sh), 32))
                    m_new: T.f32 = T.max(m_run[i], mx)
                    alpha[i] = T.exp2(m_run[i] - m_new)
                    psum: T.f32 = _f32(0.0)
                    for j in T.unroll(4):
                        acc_s[i * 4 + j] = T.exp2(acc_s[i * 4 + j] - m_new)
                        psum = psum + acc_s[i * 4 + j]
                    l_run[i] = l_run[i] * alpha[i] + psum
                    m_run[i] = m_new
                    for j in T.vectorized(4):
                        p_s[(ty * 4 + i) * BN + tc * 4 + j] = acc_s[i * 4 + j]
                    for c in T.unroll(4 * dgroups):
                        acc_o[i * 4 * dgroups + c] = acc_o[i * 4 * dgroups + c] * alpha[i]
                # ---- O += P V over key slices of vk
                for vs in range(BN // vk):
                    for it in T.unroll(vvec):
                        u: T.let = it * THREADS + tx
                        vkey: T.let = u // (vw // 8)
                        vd: T.let = (u % (vw // 8)) * 8
                        v_page: T.let = kv_indices[kv_beg + T.min(nb * BN + vs * vk + vkey, kv_len - 1)]
                        for e in T.vectorized(8):
                            raw[e] = ckv[v_page, 0, vsl * vw + vd + e]
                        for e in T.unroll(8):
                            pool[vkey * vw + vd + e] = T.float32(raw[e])
                    T.cuda.cta_sync()
                    for kj in T.unroll(vk):
                        for i in T.unroll(4):
                            af[i] = p_s[(ty * 4 + i) * BN + vs * vk + kj]
                        for g in T.unroll(dgroups):
                            for j in T.vectorized(4):
                                bf[j] = pool[kj * vw + g * 64 + tc * 4 + j]
                            for i in T.unroll(4):
                                for j in T.unroll(4):
                                    acc_o[i * 4 * dgroups + g * 4 + j] = (
                                        acc_o[i * 4 * dgroups + g * 4 + j] + af[i] * bf[j])
                    T.cuda.cta_sync()
            # ---- epilogue
            for i in T.unroll(4):
                tot: T.f32 = l_run[i]
                for sh in T.unroll(4):
                    tot = tot + T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), tot, T.shift_left(1, sh), 32)
                r: T.let = r0 + ty * 4 + i
                if r < rows:
                    o_tok: T.let = q_beg + r // group
                    o_head: T.let = r % group
                    for g in T.unroll(dgroups):
                        for j in T.vectorized(4):
                            out[o_tok, o_head, vsl * vw + g * 64 + tc * 4 + j] = T.bfloat16(
                                acc_o[i * 4 * dgroups + g * 4 + j] / tot)
                    if tc == 0 and vsl == 0:
                        lse[o_tok, o_head] = m_run[i] + T.log2(tot)

    return mkb_mla_paged_prefill


def _build(heads, rank, rope_dim, arch):
    """Compile once per (heads, rank, rope_dim, arch) and return the tvm Executable."""
    key = (heads, rank, rope_dim, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _prefill_kernel(heads, rank, rope_dim)}),
                                     target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(heads, rank, rope_dim):
    key = (heads, rank, rope_dim, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def _pad64(x):
    """x with its last dim zero-padded to a multiple of 64 (glue for small test shapes; zero dims add
    nothing to q.k, and padded latent dims are sliced off the output)."""
    dim = x.shape[-1]
    if dim % 64 == 0:
        return x.contiguous()
    padded = x.new_zeros(*x.shape[:-1], (dim + 63) // 64 * 64)
    padded[..., :dim] = x
    return padded


def solve(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    rank_out = q_nope.shape[2]
    q_nope, q_pe, ckv_cache, kpe_cache = _pad64(q_nope), _pad64(q_pe), _pad64(ckv_cache), _pad64(kpe_cache)
    tokens, heads, rank = q_nope.shape
    rope_dim = q_pe.shape[2]
    if ckv_cache.shape[1] != 1 or ckv_cache.shape[2] != rank or kpe_cache.shape[2] != rope_dim:
        raise ValueError("this kernel expects page size 1 and caches as wide as q_nope / q_pe")
    batch = qo_indptr.numel() - 1
    out = torch.empty(tokens, heads, rank, dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.empty(tokens, heads, dtype=torch.float32, device=q_nope.device)
    if tokens > 0 and batch > 0:
        n_tiles = (tokens * heads + BM - 1) // BM + batch  # each sequence wastes < 1 tile
        _kernel_fn(heads, rank, rope_dim)(
            q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr.to(torch.int32).contiguous(),
            kv_indptr.to(torch.int32).contiguous(), kv_indices.to(torch.int32).contiguous(), out, lse,
            float(sm_scale) * math.log2(math.e), n_tiles)
    return (out if rank == rank_out else out[..., :rank_out].contiguous()), lse


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


def kernel_sources(arch="sm_90a", heads=16, rank=512, rope_dim=64):
    """{kernel symbol: generated CUDA source} at the graded shape (16 heads, latent 512, RoPE 64)."""
    source = _build(heads, rank, rope_dim, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
