"""TIRx oracle for problem 65: the Mamba-2 SSD intra-chunk (diagonal block) output on the CUDA cores.

Y[i] = sum_{j <= i} (C_i . B_j) exp(s_i - s_j) x_j within each chunk, where s is the within-chunk
cumulative sum of the per-step log decays (A_cumsum), head h reading group h // (heads / groups).

TIRx 0.27 has no WGMMA tile primitive for sm_90, so both products (C B^T and P x) run as
shared-memory tiled SIMT loops with fp32 accumulation: slower than tensor cores, but P stays in fp32.

The whole computation is one TIRx kernel, shape-specialised. A CTA of 256 threads serves 64 query
rows of one (sequence, chunk, head); the grid is (row tiles of the chunk) x heads x (sequences x
chunks). Thread (ty, tc) = (tid / 16, tid % 16) owns rows ty*4 .. ty*4+3 of the tile, keys
tc*4 .. tc*4+3 of each 64-key block and output columns g*64 + tc*4 .. +3.
- The head's per-step decays of the chunk are widened to fp32 in shared memory; each thread forms
  the cumulative sums of its positions by adding them in order (the reference's fp32 cumsum up to
  summation order).
- For each 64-key block up to the diagonal, S = C B^T: the state dimension advances in slices of
  32; each slice of C rows and B rows is loaded by 16-byte vectors (state columns past the problem's
  size as zeros, rows past the chunk clamped to its last row), widened to fp32 and stored
  state-major in shared memory; each thread accumulates its 4 x 4 block of S from float4 reads.
  Products of bf16 values are exact in fp32.
- P = S * exp(s_i - s_j) for j <= i and 0 above the diagonal, in the reference's order (score times
  decay, both fp32), written to shared memory. exp is the fast-math one NVRTC builds (a few ulp in
  fp32 on these arguments, |s_i - s_j| being small), far below the bf16 output rounding.
- Y += P x: x rows are staged in fp32 in slices of keys; each thread updates its 4 x 4-per-64-column
  output block from broadcast P reads and float4 x reads.
- Epilogue: Y rounded to bf16 once, written for rows inside the chunk and real columns.
Sizes: state and head_dim must be multiples of 8 (16-byte vectors).
"""

import torch
import tvm
from tvm.script import tirx as T

BM = 64  # query rows per CTA and keys per block
DC = 32  # state slice of the S loop
THREADS = 256
POOL = 4096  # fp32 words of the shared staging pool (C and B slices, or an x slice)
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _up(x, m):
    return (x + m - 1) // m * m


def _diag_kernel(batch, chunks, length, heads, head_dim, groups, state):
    bc = batch * chunks
    hpg = heads // groups
    n_tiles = (length + BM - 1) // BM
    l_pad = n_tiles * BM
    n_slices = _up(state, DC) // DC
    p_pad = _up(head_dim, 64)
    dgroups = p_pad // 64
    vk = POOL // p_pad  # keys per x slice
    vvec = vk * p_pad // 8 // THREADS  # 16-byte x loads per thread per slice
    scan_its = (l_pad + THREADS - 1) // THREADS

    @T.prim_func
    def mkb_ssd_diag(x_h: T.handle, a_h: T.handle, b_h: T.handle, c_h: T.handle, y_h: T.handle):
        x = T.match_buffer(x_h, (bc, length, heads, head_dim), "bfloat16")
        a = T.match_buffer(a_h, (batch, heads, chunks, length), "bfloat16")
        bm = T.match_buffer(b_h, (bc, length, groups, state), "bfloat16")
        cm = T.match_buffer(c_h, (bc, length, groups, state), "bfloat16")
        y = T.match_buffer(y_h, (bc, length, heads, head_dim), "bfloat16")
        T.device_entry()
        tile, h, z = T.cta_id([n_tiles, heads, bc])
        tx = T.thread_id([THREADS])
        pool = T.alloc_buffer((POOL,), "float32", scope="shared")
        p_s = T.alloc_buffer((BM * BM,), "float32", scope="shared")
        a_s = T.alloc_buffer((l_pad,), "float32", scope="shared")
        s_s = T.alloc_buffer((l_pad,), "float32", scope="shared")
        acc_s = T.alloc_buffer((16,), "float32", scope="local")
        acc_o = T.alloc_buffer((4 * 4 * dgroups,), "float32", scope="local")
        af = T.alloc_buffer((4,), "float32", scope="local")
        bf = T.alloc_buffer((4,), "float32", scope="local")
        s_row = T.alloc_buffer((4,), "float32", scope="local")
        raw = T.alloc_buffer((8,), "bfloat16", scope="local")
        ty: T.let = tx // 16
        tc: T.let = tx % 16
        lrow: T.let = tx % 64
        ld8: T.let = (tx // 64) * 8
        g: T.let = h // hpg
        r0: T.let = tile * BM
        # per-step decays, then cumulative sums in order
        for it in T.unroll(scan_its):
            p: T.let = it * THREADS + tx
            if p < l_pad:
                a_s[p] = T.if_then_else(p < length, T.float32(a[z // chunks, h, z % chunks, T.min(p, length - 1)]),
                                        _f32(0.0))
        T.cuda.cta_sync()
        for it in T.unroll(scan_its):
            p2: T.let = it * THREADS + tx
            if p2 < l_pad:
                run: T.f32 = _f32(0.0)
                for q in range(p2 + 1):
                    run = run + a_s[q]
                s_s[p2] = run
        T.cuda.cta_sync()
        for i in T.unroll(4):
            s_row[i] = s_s[r0 + ty * 4 + i]
        for i in T.unroll(4 * 4 * dgroups):
            acc_o[i] = _f32(0.0)
        crow: T.let = T.min(r0 + lrow, length - 1)
        for nb in range(tile + 1):
            # ---- S = C B^T over state slices of DC
            for i in T.unroll(16):
                acc_s[i] = _f32(0.0)
            brow: T.let = T.min(nb * BM + lrow, length - 1)
            for dc in T.unroll(n_slices):
                if dc * DC + ld8 < state:
                    for e in T.vectorized(8):
                        raw[e] = cm[z, crow, g, T.min(dc * DC + ld8, state - 8) + e]
                    for e in T.unroll(8):
                        pool[(ld8 + e) * BM + lrow] = T.float32(raw[e])
                    for e in T.vectorized(8):
                        raw[e] = bm[z, brow, g, T.min(dc * DC + ld8, state - 8) + e]
                    for e in T.unroll(8):
                        pool[DC * BM + (ld8 + e) * BM + lrow] = T.float32(raw[e])
                else:
                    for e in T.unroll(8):
                        pool[(ld8 + e) * BM + lrow] = _f32(0.0)
                        pool[DC * BM + (ld8 + e) * BM + lrow] = _f32(0.0)
                T.cuda.cta_sync()
                for d in T.unroll(DC):
                    for i in T.vectorized(4):
                        af[i] = pool[d * BM + ty * 4 + i]
                    for j in T.vectorized(4):
                        bf[j] = pool[DC * BM + d * BM + tc * 4 + j]
                    for i in T.unroll(4):
                        for j in T.unroll(4):
                            acc_s[i * 4 + j] = acc_s[i * 4 + j] + af[i] * bf[j]
                T.cuda.cta_sync()
            # ---- P = S * exp(s_i - s_j) below the diagonal, 0 above
            for i in T.unroll(4):
                for j in T.unroll(4):
                    key: T.let = nb * BM + tc * 4 + j
                    acc_s[i * 4 + j] = T.if_then_else(key <= r0 + ty * 4 + i,
                                                      acc_s[i * 4 + j] * T.exp(s_row[i] - s_s[key]), _f32(0.0))
                for j in T.vectorized(4):
                    p_s[(ty * 4 + i) * BM + tc * 4 + j] = acc_s[i * 4 + j]
            # ---- Y += P x over key slices of vk
            for vs in T.unroll(BM // vk):
                for it2 in T.unroll(vvec):
                    u: T.let = it2 * THREADS + tx
                    vkey: T.let = u // (p_pad // 8)
                    vd: T.let = (u % (p_pad // 8)) * 8
                    xrow: T.let = T.min(nb * BM + vs * vk + vkey, length - 1)
                    if vd < head_dim:
                        for e in T.vectorized(8):
                            raw[e] = x[z, xrow, h, T.min(vd, head_dim - 8) + e]
                        for e in T.unroll(8):
                            pool[vkey * p_pad + vd + e] = T.float32(raw[e])
                    else:
                        for e in T.unroll(8):
                            pool[vkey * p_pad + vd + e] = _f32(0.0)
                T.cuda.cta_sync()
                for kj in T.unroll(vk):
                    for i in T.unroll(4):
                        af[i] = p_s[(ty * 4 + i) * BM + vs * vk + kj]
                    for gg in T.unroll(dgroups):
                        for j in T.vectorized(4):
                            bf[j] = pool[kj * p_pad + gg * 64 + tc * 4 + j]
                        for i in T.unroll(4):
                            for j in T.unroll(4):
                                acc_o[i * 4 * dgroups + gg * 4 + j] = (
                                    acc_o[i * 4 * dgroups + gg * 4 + j] + af[i] * bf[j])
                T.cuda.cta_sync()
        # ---- epilogue
        for i in T.unroll(4):
            r: T.let = r0 + ty * 4 + i
            if r < length:
                for gg in T.unroll(dgroups):
                    if gg * 64 + tc * 4 < head_dim:
                        for j in T.vectorized(4):
                            y[z, r, h, T.min(gg * 64 + tc * 4, head_dim - 4) + j] = T.bfloat16(
                                acc_o[i * 4 * dgroups + gg * 4 + j])

    return mkb_ssd_diag


def _build(shape, arch):
    """Compile once per (shape, arch) and return the tvm Executable."""
    key = (shape, arch)
    if key not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(tvm.IRModule({"main": _diag_kernel(*shape)}), target=target,
                                     tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn(shape):
    key = (shape, _device_arch())
    if key not in _FNS:
        _FNS[key] = _build(*key).mod["main"]
    return _FNS[key]


def solve(hidden_states, A_cumsum, B, C):
    batch, chunks, length, heads, head_dim = hidden_states.shape
    groups, state = B.shape[3], B.shape[4]
    if state % 8 or head_dim % 8 or heads % groups:
        raise ValueError("this kernel expects state and head_dim multiples of 8, heads a multiple of groups")
    y = torch.empty(batch, chunks, length, heads, head_dim, dtype=torch.bfloat16, device=hidden_states.device)
    if y.numel() == 0:
        return y
    bc = batch * chunks
    _kernel_fn((batch, chunks, length, heads, head_dim, groups, state))(
        hidden_states.contiguous().view(bc, length, heads, head_dim), A_cumsum.contiguous(),
        B.contiguous().view(bc, length, groups, state), C.contiguous().view(bc, length, groups, state),
        y.view(bc, length, heads, head_dim))
    return y


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


def kernel_sources(arch="sm_90a", batch=16, chunks=1, chunk_len=128, heads=32, head_dim=128, groups=8, state=128):
    """{kernel symbol: generated CUDA source} at the graded workload (the problem's defaults)."""
    source = _build((batch, chunks, chunk_len, heads, head_dim, groups, state), arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
