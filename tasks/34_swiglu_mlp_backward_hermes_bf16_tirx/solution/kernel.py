"""TIRx oracle for problem 34: backward of a SwiGLU MLP (Hermes-4-405B) from saved activations,
bf16.

Four tensor-core kernels (five launches); torch only allocates (and zero-pads operands of shapes
that are not tile multiples, e.g. the small workload; the graded shapes need no padding).

Every GEMM runs the warp-level ``mma.sync.m16n8k16`` (bf16 operands, fp32 accumulation: exact
products, fp32 sums) issued as a TIRx PTX intrinsic with the fragments placed by hand. A CTA of
8 warps (2 x 4, each 32 x 32) owns a 64 x 128 output tile; K advances in slices of 32 with the next
slice's global loads in flight in registers. K-major A rows (16-byte loads) go to shared rows of 16
words padded to 20; token-major operands (the weights' N-major rows, and dY, dg, du, x as the
transposed A or the B of the weight gradients) are read as 32-bit words (two columns) from K rows
2p and 2p + 1 and repacked into (K 2p, K 2p + 1) words per column, the fragment layout. A lane
(g = lane / 4, t = lane % 4) reads A words (row g | g + 8, k-word t | t + 4) and B words (column g,
k-word t | t + 4); its accumulators are rows g | g + 8, columns 2t, 2t + 1 of each 16 x 8 tile.

- ``mkb_dh``: dH = dY W_d with the elementwise backward in the epilogue, at the reference's
  rounding points: dh = bf16(acc), da = bf16(dh u), du = bf16(dh a), sig = 1 / (1 + exp(-g)),
  dg = bf16((da sig) (1 + g (1 - sig))), au = bf16(a u) (for dW_d). NVRTC builds with fast math,
  so exp is a range-reduced polynomial and the division a Newton-corrected quotient (about 1 ulp).
- ``mkb_dx``: dx = bf16(bf16(dg W_g) + bf16(du W_u)): one K loop over both products (dg, W_g
  slices, then du, W_u); at the switch the first sum is rounded to bf16 into registers and the
  accumulators restart from zero.
- ``mkb_dw_down`` / ``mkb_dw_in``: out = bf16(A^T B) over all tokens (unsplit K), A and B both
  token-major: dW_d = dY^T au; dW_g = dg^T x and dW_u = du^T x (one kernel, two launches).
TIRx 0.27 has no WGMMA path on sm_90, so the GEMMs use the Ampere-style mma.sync.
"""

import torch
import tvm
from tvm.script import tirx as T

# The graded workload (the problem's make_inputs defaults).
WORKLOAD = dict(batch=64, seq=128, hidden=16384, intermediate=53248)
TBM, TBN, TBK = 64, 128, 32  # output tile rows, columns, K step
THREADS = 256
PAD = TBK // 2 + 4  # 32-bit words per shared-memory row: 16 of data, 4 of padding
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
_EXES: dict = {}
_FNS: dict = {}
_ARCHS: dict = {}


def _f32(value):
    return T.float32(value)


def _let(value, body, name):
    """Bind ``value`` once (a TIR Let) so the expression tree does not repeat it."""
    var = T.Var(name, "float32")
    return T.Let(body(var), where={var: value})


def exp_precise(x):
    """exp(x) in fp32 within about 1 ulp from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split so n * hi is exact);
    exp(r) by a degree-7 Taylor polynomial; 2^n from exponent bits. Inputs below -87 give 0;
    inputs are clamped at 88.
    """

    def with_xc(xc):
        def with_n(n):
            def with_r(r):
                poly = _f32(1.0 / 5040.0)
                for coef in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
                    poly = poly * r + _f32(coef)
                scale = T.reinterpret("float32", T.shift_left(T.int32(n) + 127, 23))
                return poly * scale

            reduced = xc - n * _f32(0.693145751953125) - n * _f32(1.428606765330187e-06)
            return _let(reduced, with_r, "r")

        return _let(T.floor(xc * _f32(1.4426950408889634) + _f32(0.5)), with_n, "n")

    def with_x(xv):
        clamped = T.max(T.min(xv, _f32(88.0)), _f32(-87.0))
        return T.if_then_else(xv < _f32(-87.0), _f32(0.0), _let(clamped, with_xc, "xc"))

    return _let(x, with_x, "x")


def div_precise(num, den):
    """num / den: the fast-math quotient corrected by one Newton step on the residual."""

    def with_operands(n, d):
        def with_r(r):
            return _let(n * r, lambda q: q + (n - d * q) * r, "q")

        return _let(_f32(1.0) / d, with_r, "rcp")

    return _let(num, lambda n: _let(den, lambda d: with_operands(n, d), "den"), "num")


def _bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return T.float32(T.bfloat16(x))


def _pack_lo(w0, w1):
    """The 32-bit word (low bf16 of w0, low bf16 of w1): a K pair of one column."""
    return T.Cast("uint32", T.bitwise_or(T.bitwise_and(w0, T.int32(0xFFFF)), T.shift_left(w1, 16)))


def _pack_hi(w0, w1):
    """The 32-bit word (high bf16 of w0, high bf16 of w1): a K pair of the next column."""
    return T.Cast("uint32", T.bitwise_or(T.bitwise_and(T.shift_right(w0, 16), T.int32(0xFFFF)),
                                         T.bitwise_and(w1, T.int32(-65536))))


def _tc_kernel(kind, mp, hp, ip):
    """One tensor-core GEMM of the backward on 64 x 128 tiles; mp, hp, ip: padded tokens, hidden, inter.

    dh: A = dY [mp, hp] bf16 (K-major), B = W_d [hp, ip] as words; epilogue writes dg, du, au [mp, ip].
    dx: A1 = dg, A2 = du [mp, ip] bf16, B1 = W_g, B2 = W_u [ip, hp] as words; out dx [mp, hp].
    dw_down: A^T = dY [mp, hp], B = au [mp, ip], both as words; out [hp, ip].
    dw_in: A^T = dg or du [mp, ip], B = x [mp, hp], both as words; out [ip, hp].
    """
    if kind == "dh":
        rows, cols, k_tiles = mp, ip, hp // TBK
    elif kind == "dx":
        rows, cols, k_tiles = mp, hp, 2 * (ip // TBK)
    elif kind == "dw_down":
        rows, cols, k_tiles = hp, ip, mp // TBK
    else:
        rows, cols, k_tiles = ip, hp, mp // TBK
    trans = kind in ("dw_down", "dw_in")
    half = ip // TBK  # dx: slices of the first product

    @T.prim_func
    def tc_gemm(a_h: T.handle, b_h: T.handle, a2_h: T.handle, b2_h: T.handle, e1_h: T.handle, e2_h: T.handle,
                out_h: T.handle, o2_h: T.handle, o3_h: T.handle):
        if trans:  # a2 .. e2 (unused) take the transposed A itself, o2 and o3 (unused) the output
            a_w = T.match_buffer(a_h, (mp, rows // 2), "int32")
            b_w = T.match_buffer(b_h, (mp, cols // 2), "int32")
            T.match_buffer(a2_h, (mp, rows), "bfloat16")
            T.match_buffer(b2_h, (mp, rows), "bfloat16")
            T.match_buffer(e1_h, (mp, rows), "bfloat16")
            T.match_buffer(e2_h, (mp, rows), "bfloat16")
            T.match_buffer(o2_h, (rows, cols), "bfloat16")
            T.match_buffer(o3_h, (rows, cols), "bfloat16")
        elif kind == "dh":
            a_b = T.match_buffer(a_h, (mp, hp), "bfloat16")
            b_w = T.match_buffer(b_h, (hp, ip // 2), "int32")
            gt = T.match_buffer(a2_h, (mp, ip), "bfloat16")
            ut = T.match_buffer(b2_h, (mp, ip), "bfloat16")
            at = T.match_buffer(e1_h, (mp, ip), "bfloat16")
            T.match_buffer(e2_h, (mp, ip), "bfloat16")  # unused
            du_o = T.match_buffer(o2_h, (mp, ip), "bfloat16")
            au_o = T.match_buffer(o3_h, (mp, ip), "bfloat16")
        else:
            a_b = T.match_buffer(a_h, (mp, ip), "bfloat16")
            b_w = T.match_buffer(b_h, (ip, hp // 2), "int32")
            a2_b = T.match_buffer(a2_h, (mp, ip), "bfloat16")
            b2_w = T.match_buffer(b2_h, (ip, hp // 2), "int32")
            T.match_buffer(e1_h, (mp, ip), "bfloat16")  # unused
            T.match_buffer(e2_h, (mp, ip), "bfloat16")  # unused
            T.match_buffer(o2_h, (mp, hp), "bfloat16")  # unused
            T.match_buffer(o3_h, (mp, hp), "bfloat16")  # unused
        out = T.match_buffer(out_h, (rows, cols), "bfloat16")
        T.device_entry()
        mb, nb = T.cta_id([rows // TBM, cols // TBN])
        tx = T.thread_id([THREADS])
        a_s = T.alloc_buffer((TBM, PAD), "uint32", scope="shared")
        b_s = T.alloc_buffer((TBN, PAD), "uint32", scope="shared")
        acc = T.alloc_buffer((32,), "float32", scope="local")
        first = T.alloc_buffer((32,), "float32", scope="local")
        af = T.alloc_buffer((8,), "uint32", scope="local")
        bfr = T.alloc_buffer((2,), "uint32", scope="local")
        ra = T.alloc_buffer((8,), "bfloat16", scope="local")
        ra_w = T.decl_buffer((4,), "uint32", data=ra.data, scope="local")
        rat = T.alloc_buffer((4,), "int32", scope="local")  # transposed A: [K row parity][2 words]
        rb = T.alloc_buffer((8,), "int32", scope="local")  # [K row parity][4 words]
        ev = T.alloc_buffer((6,), "float32", scope="local")
        res = T.alloc_buffer((2,), "bfloat16", scope="local")
        res2 = T.alloc_buffer((2,), "bfloat16", scope="local")
        res3 = T.alloc_buffer((2,), "bfloat16", scope="local")
        warp: T.let = tx // 32
        lane: T.let = tx % 32
        g: T.let = lane // 4
        t: T.let = lane % 4
        wr: T.let = (warp // 4) * 32
        wc: T.let = (warp % 4) * 32
        kp: T.let = tx % 16  # staging: K rows 2 kp, 2 kp + 1 of the slice
        cc: T.let = tx // 16  # staging: B columns 8 cc .. 8 cc + 7 (transposed A: rows 4 cc .. 4 cc + 3)
        m0: T.let = mb * TBM
        n0: T.let = nb * TBN
        for i in T.unroll(32):
            acc[i] = T.float32(0.0)
        # slice 0 into registers
        if trans:
            for par in T.unroll(2):
                for e in T.vectorized(2):
                    rat[par * 2 + e] = a_w[kp * 2 + par, m0 // 2 + cc * 2 + e]
        else:
            for e in T.vectorized(8):
                ra[e] = a_b[m0 + tx // 4, (tx % 4) * 8 + e]
        for par in T.unroll(2):
            for e in T.vectorized(4):
                rb[par * 4 + e] = b_w[kp * 2 + par, n0 // 2 + cc * 4 + e]
        for kt in range(k_tiles):
            if trans:  # a_s[row, K pair] = (A^T[2 kp, row], A^T[2 kp + 1, row])
                for e in T.unroll(2):
                    a_s[cc * 4 + 2 * e, kp] = _pack_lo(rat[e], rat[2 + e])
                    a_s[cc * 4 + 2 * e + 1, kp] = _pack_hi(rat[e], rat[2 + e])
            else:
                for e in T.vectorized(4):
                    a_s[tx // 4, (tx % 4) * 4 + e] = ra_w[e]
            for e in T.unroll(4):  # b_s[column, K pair] = (B[2 kp, column], B[2 kp + 1, column])
                b_s[cc * 8 + 2 * e, kp] = _pack_lo(rb[e], rb[4 + e])
                b_s[cc * 8 + 2 * e + 1, kp] = _pack_hi(rb[e], rb[4 + e])
            T.cuda.cta_sync()
            if kt + 1 < k_tiles:  # the next slice's loads fly while this one is computed
                if trans:
                    for par in T.unroll(2):
                        for e in T.vectorized(2):
                            rat[par * 2 + e] = a_w[(kt + 1) * TBK + kp * 2 + par, m0 // 2 + cc * 2 + e]
                    for par in T.unroll(2):
                        for e in T.vectorized(4):
                            rb[par * 4 + e] = b_w[(kt + 1) * TBK + kp * 2 + par, n0 // 2 + cc * 4 + e]
                elif kind == "dh":
                    for e in T.vectorized(8):
                        ra[e] = a_b[m0 + tx // 4, (kt + 1) * TBK + (tx % 4) * 8 + e]
                    for par in T.unroll(2):
                        for e in T.vectorized(4):
                            rb[par * 4 + e] = b_w[(kt + 1) * TBK + kp * 2 + par, n0 // 2 + cc * 4 + e]
                else:
                    if kt + 1 < half:
                        for e in T.vectorized(8):
                            ra[e] = a_b[m0 + tx // 4, (kt + 1) * TBK + (tx % 4) * 8 + e]
                        for par in T.unroll(2):
                            for e in T.vectorized(4):
                                rb[par * 4 + e] = b_w[(kt + 1) * TBK + kp * 2 + par, n0 // 2 + cc * 4 + e]
                    else:
                        for e in T.vectorized(8):
                            ra[e] = a2_b[m0 + tx // 4, (kt + 1 - half) * TBK + (tx % 4) * 8 + e]
                        for par in T.unroll(2):
                            for e in T.vectorized(4):
                                rb[par * 4 + e] = b2_w[(kt + 1 - half) * TBK + kp * 2 + par, n0 // 2 + cc * 4 + e]
            if kind == "dx":
                if kt == half:  # first product done: keep it rounded, restart the sums
                    for i in T.unroll(32):
                        first[i] = _bf16(acc[i])
                        acc[i] = T.float32(0.0)
            for ks in T.unroll(2):
                for mt in T.unroll(2):
                    af[mt * 4 + 0] = a_s[wr + mt * 16 + g, ks * 8 + t]
                    af[mt * 4 + 1] = a_s[wr + mt * 16 + g + 8, ks * 8 + t]
                    af[mt * 4 + 2] = a_s[wr + mt * 16 + g, ks * 8 + t + 4]
                    af[mt * 4 + 3] = a_s[wr + mt * 16 + g + 8, ks * 8 + t + 4]
                for nt in T.unroll(4):
                    bfr[0] = b_s[wc + nt * 8 + g, ks * 8 + t]
                    bfr[1] = b_s[wc + nt * 8 + g, ks * 8 + t + 4]
                    for mt in T.unroll(2):
                        T.ptx[MMA](acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                                   acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3],
                                   af[mt * 4 + 0], af[mt * 4 + 1], af[mt * 4 + 2], af[mt * 4 + 3], bfr[0], bfr[1],
                                   acc[(mt * 4 + nt) * 4 + 0], acc[(mt * 4 + nt) * 4 + 1],
                                   acc[(mt * 4 + nt) * 4 + 2], acc[(mt * 4 + nt) * 4 + 3])
            T.cuda.cta_sync()
        # accumulator (mt, nt) holds rows g | g + 8, columns 2t, 2t + 1 of its 16 x 8 tile
        for mt in T.unroll(2):
            for hr in T.unroll(2):
                for nt in T.unroll(4):
                    if kind == "dh":
                        for j in T.unroll(2):
                            ev[0] = _bf16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])  # dh
                            ev[1] = T.float32(ut[m0 + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j])
                            ev[2] = T.float32(at[m0 + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j])
                            ev[3] = T.float32(gt[m0 + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j])
                            ev[4] = _bf16(ev[0] * ev[1])  # da
                            ev[5] = div_precise(_f32(1.0), _f32(1.0) + exp_precise(_f32(0.0) - ev[3]))  # sigmoid
                            res[j] = T.bfloat16((ev[4] * ev[5]) * (_f32(1.0) + ev[3] * (_f32(1.0) - ev[5])))
                            res2[j] = T.bfloat16(ev[0] * ev[2])
                            res3[j] = T.bfloat16(ev[2] * ev[1])
                        for j in T.vectorized(2):
                            du_o[m0 + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j] = res2[j]
                        for j in T.vectorized(2):
                            au_o[m0 + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j] = res3[j]
                    elif kind == "dx":
                        for j in T.unroll(2):
                            res[j] = T.bfloat16(first[(mt * 4 + nt) * 4 + hr * 2 + j]
                                                + _bf16(acc[(mt * 4 + nt) * 4 + hr * 2 + j]))
                    else:
                        for j in T.unroll(2):
                            res[j] = T.bfloat16(acc[(mt * 4 + nt) * 4 + hr * 2 + j])
                    for j in T.vectorized(2):
                        out[m0 + wr + mt * 16 + hr * 8 + g, n0 + wc + nt * 8 + t * 2 + j] = res[j]

    return tc_gemm.with_attr("global_symbol", "mkb_" + kind)


_KINDS = ("dh", "dx", "dw_down", "dw_in")


def _exported(funcs):
    """An IRModule whose functions are exported under their keys (a prim_func otherwise exports its
    own global_symbol, and the runtime module would have no function by the key's name); the device
    kernels are then named ``<key>_kernel``."""
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})


def _build(mp, hp, ip, arch):
    """Compile every kernel once per padded shape and arch; return the tvm Executable."""
    key = (mp, hp, ip, arch)
    if key not in _EXES:
        funcs = {kind: _tc_kernel(kind, mp, hp, ip) for kind in _KINDS}
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[key] = tvm.compile(_exported(funcs), target=target, tir_pipeline="tirx")
    return _EXES[key]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fns(mp, hp, ip):
    key = (mp, hp, ip, _device_arch())
    if key not in _FNS:
        mod = _build(*key).mod
        _FNS[key] = tuple(mod[kind] for kind in _KINDS)
    return _FNS[key]


def _up(x, tile):
    return (x + tile - 1) // tile * tile


def _padded(t, rows, cols):
    t = t.reshape(-1, t.shape[-1])
    if tuple(t.shape) == (rows, cols):
        return t.contiguous()
    p = torch.zeros(rows, cols, dtype=torch.bfloat16, device=t.device)
    p[:t.shape[0], :t.shape[1]] = t
    return p


def _words(t):
    """A bf16 tensor's values as int32 words (two consecutive values each, low half first)."""
    return t.contiguous().view(torch.int32)


def solve(grad_output, x, gate_output, up_output, activated_gate, gate_weight, up_weight, down_weight):
    hidden, inter = x.shape[-1], gate_output.shape[-1]
    tokens = x.numel() // hidden
    dev = x.device
    bf16 = torch.bfloat16
    # Rows padded to 64 (the M tile and a whole number of 32-token K steps), hidden and inter to 128.
    mp, hp, ip = _up(max(tokens, 1), TBM), _up(hidden, TBN), _up(inter, TBN)
    k_dh, k_dx, k_dw_down, k_dw_in = _kernel_fns(mp, hp, ip)
    dy = _padded(grad_output, mp, hp)
    xs = _padded(x, mp, hp)
    dg = torch.empty(mp, ip, dtype=bf16, device=dev)
    du = torch.empty(mp, ip, dtype=bf16, device=dev)
    au = torch.empty(mp, ip, dtype=bf16, device=dev)
    gt = _padded(gate_output, mp, ip)
    k_dh(dy, _words(_padded(down_weight, hp, ip)), gt, _padded(up_output, mp, ip), _padded(activated_gate, mp, ip),
         gt, dg, du, au)
    dx = torch.empty(mp, hp, dtype=bf16, device=dev)
    wg = _words(_padded(gate_weight, ip, hp))
    k_dx(dg, wg, du, _words(_padded(up_weight, ip, hp)), dg, dg, dx, dx, dx)
    gw_down = torch.empty(hp, ip, dtype=bf16, device=dev)
    k_dw_down(_words(dy), _words(au), dy, dy, dy, dy, gw_down, gw_down, gw_down)
    gw_gate = torch.empty(ip, hp, dtype=bf16, device=dev)
    gw_up = torch.empty(ip, hp, dtype=bf16, device=dev)
    xw = _words(xs)
    k_dw_in(_words(dg), xw, dg, dg, dg, dg, gw_gate, gw_gate, gw_gate)
    k_dw_in(_words(du), xw, du, du, du, du, gw_up, gw_up, gw_up)
    if (mp, hp, ip) != (tokens, hidden, inter):
        dx = dx[:tokens, :hidden].contiguous()
        gw_down = gw_down[:hidden, :inter].contiguous()
        gw_gate = gw_gate[:inter, :hidden].contiguous()
        gw_up = gw_up[:inter, :hidden].contiguous()
    return dx.reshape(x.shape), gw_gate, gw_up, gw_down


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


def kernel_sources(arch="sm_90a"):
    """{kernel symbol: generated CUDA source} at the graded workload."""
    w = WORKLOAD
    source = _build(w["batch"] * w["seq"], w["hidden"], w["intermediate"], arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file for the graded workload (no GPU needed); kernel symbols."""
    return list(kernel_sources(arch))
