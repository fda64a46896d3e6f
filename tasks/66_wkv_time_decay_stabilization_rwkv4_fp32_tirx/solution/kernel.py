"""TIRx oracle for problem 66: the RWKV-4 WKV recurrence, one CUDA thread per (batch, channel).

The whole computation runs in one TIRx kernel: each thread loads its channel's decay and bonus,
walks the sequence carrying (m, a, b) in registers, writes every step's output and finally the
carried state. Nothing is left to torch except allocating the outputs.

Numerics: TVM compiles CUDA through NVRTC with ``--use_fast_math``, so ``T.exp`` would become the
approximate ``__expf`` and ``/`` an approximate division, both a few ulp off and compounding over
the sequence's 1721 steps. The kernel therefore uses ``exp_precise`` (Cody-Waite range reduction, a
degree-7 polynomial and an exact power-of-two scale built from the exponent bits: within 1 ulp) and
a division refined by one Newton step, both made only of adds, multiplies, floor and bit casts,
which fast-math leaves exact. The operation order follows the reference (``m + w`` once, then
``- q``), so the result tracks the reference rounding closely.
"""

import torch
import tvm
from tvm.script import tirx as T

THREADS = 256
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
    """exp(x) in fp32 within about 1 ulp, from arithmetic that --use_fast_math keeps exact.

    exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 (ln 2 split in a short
    high part, so n * hi is exact, and a low part); exp(r) on |r| <= ln2/2 by a degree-7 Taylor
    polynomial (truncation below 1e-8 relative); 2^n assembled from exponent bits. Inputs below
    -87 give 0 (the true value is under 1.7e-38); inputs are clamped at 88.
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


def _wkv_kernel():
    """Build the prim_func (all sizes symbolic: one compile serves every shape)."""

    @T.prim_func
    def mkb_wkv4(decay_h: T.handle, key_h: T.handle, first_h: T.handle, value_h: T.handle,
                 m0_h: T.handle, a0_h: T.handle, b0_h: T.handle, out_h: T.handle, m1_h: T.handle,
                 a1_h: T.handle, b1_h: T.handle):
        batch = T.int32()
        steps = T.int32()
        channels = T.int32()
        decay = T.match_buffer(decay_h, (channels,), "float32")
        key = T.match_buffer(key_h, (batch, steps, channels), "float32")
        first = T.match_buffer(first_h, (channels,), "float32")
        value = T.match_buffer(value_h, (batch, steps, channels), "float32")
        m0 = T.match_buffer(m0_h, (batch, channels), "float32")
        a0 = T.match_buffer(a0_h, (batch, channels), "float32")
        b0 = T.match_buffer(b0_h, (batch, channels), "float32")
        out = T.match_buffer(out_h, (batch, steps, channels), "float32")
        m1 = T.match_buffer(m1_h, (batch, channels), "float32")
        a1 = T.match_buffer(a1_h, (batch, channels), "float32")
        b1 = T.match_buffer(b1_h, (batch, channels), "float32")
        T.device_entry()
        bx = T.cta_id([T.ceildiv(batch * channels, THREADS)])
        tx = T.thread_id([THREADS])
        idx: T.let = bx * THREADS + tx
        if idx < batch * channels:
            bi: T.let = idx // channels
            ci: T.let = idx % channels
            w: T.f32 = _f32(0.0) - exp_precise(decay[ci])
            u: T.f32 = first[ci]
            m: T.f32 = m0[bi, ci]
            a: T.f32 = a0[bi, ci]
            b: T.f32 = b0[bi, ci]
            for t in range(steps):
                kt: T.f32 = key[bi, t, ci]
                vt: T.f32 = value[bi, t, ci]
                ku: T.f32 = kt + u
                p: T.f32 = T.max(m, ku)
                e_state: T.f32 = exp_precise(m - p)
                e_new: T.f32 = exp_precise(ku - p)
                out[bi, t, ci] = div_precise(e_state * a + e_new * vt, e_state * b + e_new)
                mw: T.f32 = m + w
                q: T.f32 = T.max(mw, kt)
                d_state: T.f32 = exp_precise(mw - q)
                d_new: T.f32 = exp_precise(kt - q)
                a = d_state * a + d_new * vt
                b = d_state * b + d_new
                m = q
            m1[bi, ci] = m
            a1[bi, ci] = a
            b1[bi, ci] = b

    return mkb_wkv4


def _build(arch):
    """Compile (once per arch) and return the tvm Executable."""
    if arch not in _EXES:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            _EXES[arch] = tvm.compile(tvm.IRModule({"main": _wkv_kernel()}), target=target,
                                      tir_pipeline="tirx")
    return _EXES[arch]


def _device_arch():
    """The current GPU's arch string (sm_90a on an H200), looked up once per device."""
    device = torch.cuda.current_device()
    if device not in _ARCHS:
        major, minor = torch.cuda.get_device_capability(device)
        _ARCHS[device] = f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    return _ARCHS[device]


def _kernel_fn():
    arch = _device_arch()
    if arch not in _FNS:
        _FNS[arch] = _build(arch).mod["main"]
    return _FNS[arch]


def solve(time_decay, key, time_first, value, max_state, num_state, den_state):
    args = [t.contiguous() for t in (time_decay, key, time_first, value, max_state, num_state,
                                     den_state)]
    batch, steps, channels = args[1].shape
    out = torch.empty(batch, steps, channels, dtype=torch.float32, device=key.device)
    m_out = torch.empty(batch, channels, dtype=torch.float32, device=key.device)
    a_out = torch.empty_like(m_out)
    b_out = torch.empty_like(m_out)
    _kernel_fn()(*args, out, m_out, a_out, b_out)
    return out, m_out, a_out, b_out


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
    """{kernel symbol: generated CUDA source} for this file's kernels."""
    source = _build(arch).mod.imports[0].inspect_source()
    return {name: source for name in _symbols(source)}


def precompile(arch="sm_90a"):
    """Build every kernel of this file (no GPU needed) and return the kernel symbols."""
    return list(kernel_sources(arch))
