"""TIRx oracle for problem 08: causal ragged GQA prefill (16 query heads on 2 KV heads, dim 128),
flash-attention style on the CUDA cores.

TIRx 0.27 has no WGMMA tile primitive for sm_90, and its mma.sync tile primitive keeps the
accumulator fragment layout out of reach of the per-row softmax, so both GEMMs (Q K^T and P V) run
as shared-memory tiled SIMT loops with fp32 accumulation: slower than tensor cores.

The whole computation is one TIRx kernel. Rows of work are (query token, head of the KV group)
pairs of one sequence and one KV head, packed token-major (row r is token r // 8, head kvh * 8 +
r % 8), so the eight query heads of a KV head share every K/V tile. A CTA of 256 threads takes 64
rows; the grid is (an upper bound on the row tiles of a KV head) x (KV heads) and each CTA finds its
sequence and row tile by a scan of qo_indptr (CTAs past the last tile do nothing; the heaviest tile
of each sequence gets the lowest index). Thread (ty, tc) = (tid / 16, tid % 16) owns rows
ty*4 .. ty*4+3 of the tile, keys tc*4 .. tc*4+3 of each 64-key block and output dims
g*64 + tc*4 .. +3.
- S = Q K^T per key block: the head dim advances in slices of 32; each slice of Q (gathered from q)
  and of K (row k[kv_indptr[b] + j] for key j) is loaded by 16-byte vectors, widened to fp32 and
  stored dim-major in shared memory; each thread accumulates its 4 x 4 block of S in fp32 from
  float4 reads. Keys past the sequence are clamped to its last key (never visible to a real row).
  Products of bf16 values are exact in fp32.
- Softmax in base 2 and fp32: s = S * sm_scale * log2(e); key j is masked (a -1e30 logit) for the
  row of query i unless j <= i + (L_kv - L_q) (the cached prefix comes first). The row max is
  reduced over the 16 lanes sharing a row by xor shuffles; m_new = max(m, rowmax), alpha =
  exp2(m - m_new), p = exp2(s - m_new); each thread keeps a partial row sum l = l * alpha + (its 4 p)
  and the accumulators O *= alpha. Key 0 is visible to every row, so m is a real logit after the
  first block.
- O += P V: p goes to shared memory; V is staged in fp32 in slices of 32 keys; each thread updates
  its 4 x 8 output block from broadcast p reads and float4 V reads.
- Epilogue: the 16 partial row sums are added by xor shuffles; output = O / l rounded to bf16 once;
  lse = m + log2(l) (the base-2 log-sum-exp, the reference's lse / ln 2). exp2/log2/division are
  the fast-math ones (about 2 ulp in fp32), far below the bf16 output rounding and the LSE tolerance.
"""

import math

import torch
import tvm
from tvm.script import tirx as T

BM = 64  # rows (token, head) per CTA
BN = 64  # keys per block
DC = 32  # head-dim slice of the S loop
THREADS = 256
POOL = 4096  # fp32 words of the shared staging pool (Q and K slices, or a V slice)
NEG = -1.0e30
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _prefill_kernel(heads, kv_heads, head_dim):
    """Shape-specialised on the head counts and head_dim; token and batch counts symbolic."""
    group = heads // kv_heads
    vk = POOL // head_dim  # keys per V slice
    dgroups = head_dim // 64  # 4-dim groups of a thread's output columns
    vvec = vk * head_dim // 8 // THREADS  # 16-byte V loads per thread per slice

    @T.prim_func
    def mkb_gqa_ragged_prefill(q_h: T.handle, k_h: T.handle, v_h: T.handle, qo_h: T.handle, kvp_h: T.handle,
                               out_h: T.handle, lse_h: T.handle, scale_log2: T.float32, n_tiles: T.int32):
        tokens = T.int32()
        total_kv = T.int32()
        batch1 = T.int32()
        q = T.match_buffer(q_h, (tokens, heads, head_dim), "bfloat16")
        k = T.match_buffer(k_h, (total_kv, kv_heads, head_dim), "bfloat16")
        v = T.match_buffer(v_h, (total_kv, kv_heads, head_dim), "bfloat16")
        qo_indptr = T.match_buffer(qo_h, (batch1,), "int32")
        kv_indptr = T.match_buffer(kvp_h, (batch1,), "int32")
        out = T.match_buffer(out_h, (tokens, heads, head_dim), "bfloat16")
        lse = T.match_buffer(lse_h, (tokens, heads), "float32")
        T.device_entry()
        tile, kvh = T.cta_id([n_tiles, kv_heads])
        tx = T.thread_id([THREADS])
        pool = T.alloc_buffer((POOL,), "float32", scope="shared")
        p_s = T.alloc_buffer((BM * BN,), "float32", scope="shared")
        info = T.alloc_buffer((2,), "int32", scope="local")
        acc_s = T.alloc_buffer((16,), "float32", scope="local")
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
            q_head: T.let = kvh * group + qr % group
            for i in T.unroll(4):
                m_run[i] = _f32(NEG)
                l_run[i] = _f32(0.0)
            for i in T.unroll(4 * 4 * dgroups):
                acc_o[i] = _f32(0.0)
            for nb in range(n_blocks):
                # ---- S = Q K^T over head-dim slices of DC
                for i in T.unroll(16):
                    acc_s[i] = _f32(0.0)
                k_row: T.let = kv_beg + T.min(nb * BN + lrow, kv_len - 1)
                for dc in range(head_dim // DC):
                    for e in T.vectorized(8):
                        raw[e] = q[q_tok, q_head, dc * DC + ld8 + e]
                    for e in T.unroll(8):
                        pool[(ld8 + e) * BM + lrow] = T.float32(raw[e])
                    for e in T.vectorized(8):
                        raw[e] = k[k_row, kvh, dc * DC + ld8 + e]
                    for e in T.unroll(8):
                        pool[DC * BM + (ld8 + e) * BN + lrow] = T.float32(raw[e])
                    T.cuda.cta_sync()
                    for d in T.unroll(DC):
                        for i in T.vectorized(4):
                            af[i] = pool[d * BM + ty * 4 + i]
                        for j in T.vectorized(4):
                            bf[j] = pool[DC * BM + d * BN + tc * 4 + j]
                        for i in T.unroll(4):
                            for j in T.unroll(4):
                                acc_s[i * 4 + j] = acc_s[i * 4 + j] + af[i] * bf[j]
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
                        vkey: T.let = u // (head_dim // 8)
                        vd: T.let = (u % (head_dim // 8)) * 8
                        v_row: T.let = kv_beg + T.min(nb * BN + vs * vk + vkey, kv_len - 1)
                        for e in T.vectorized(8):
                            raw[e] = v[v_row, kvh, vd + e]
                        for e in T.unroll(8):
                            pool[vkey * head_dim + vd + e] = T.float32(raw[e])
                    T.cuda.cta_sync()
                    for kj in T.unroll(vk):
                        for i in T.unroll(4):
                            af[i] = p_s[(ty * 4 + i) * BN + vs * vk + kj]
                        for g in T.unroll(dgroups):
                            for j in T.vectorized(4):
                                bf[j] = pool[kj * head_dim + g * 64 + tc * 4 + j]
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
                    o_head: T.let = kvh * group + r % group
                    for g in T.unroll(dgroups):
                        for j in T.vectorized(4):
                            out[o_tok, o_head, g * 64 + tc * 4 + j] = T.bfloat16(
                                acc_o[i * 4 * dgroups + g * 4 + j] / tot)
                    if tc == 0:
                        lse[o_tok, o_head] = m_run[i] + T.log2(tot)

    return mkb_gqa_ragged_prefill


def _build(heads, kv_heads, head_dim, arch):
    """Compile once per (heads, kv_heads, head_dim, arch) and return the tvm Executable."""
    key = (heads, kv_heads, head_dim, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _prefill_kernel(heads, kv_heads, head_dim)}),
                                     target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(heads, kv_heads, head_dim):
    key = (heads, kv_heads, head_dim, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(q, k, v, qo_indptr, kv_indptr, sm_scale):
    tokens, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    if head_dim % 64 != 0 or heads % kv_heads != 0:
        raise ValueError("this kernel expects head_dim % 64 == 0 and heads % kv_heads == 0")
    batch = qo_indptr.numel() - 1
    out = torch.empty(tokens, heads, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(tokens, heads, dtype=torch.float32, device=q.device)
    if tokens == 0 or batch == 0:
        return out, lse
    n_tiles = (tokens * (heads // kv_heads) + BM - 1) // BM + batch  # each sequence wastes < 1 tile
    _kernel_fn(heads, kv_heads, head_dim)(
        q.contiguous(), k.contiguous(), v.contiguous(), qo_indptr.to(torch.int32).contiguous(),
        kv_indptr.to(torch.int32).contiguous(), out, lse,
        float(sm_scale) * math.log2(math.e), n_tiles)
    return out, lse


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


def kernel_sources(arch="sm_90a", heads=16, kv_heads=2, head_dim=128):
    """{kernel symbol: generated CUDA source} at the graded shape (16 heads, 2 KV heads, d 128)."""
    source = _build(heads, kv_heads, head_dim, arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
