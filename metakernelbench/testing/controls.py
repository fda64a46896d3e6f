"""Negative controls: generated submissions that a trustworthy grader must reject, per problem.

Each control is a complete kernel file built from the problem's own source (so it knows the
reference) plus a DSL copy helper, so that it launches a real DSL kernel and is judged on its
outputs rather than thrown out for having no kernel:

- ``zeros``: every output (and every in-place update) is zero;
- ``passthrough``: returns an input's bytes in place of each output and leaves in-place inputs alone;
- ``eager_no_dsl``: the eager reference, importing the DSL but launching nothing;
- ``dsl_copy``: the eager reference, with each result copied through a DSL kernel;
- ``low_precision``: the reference with its working precision lowered to bfloat16 (for problems with
  a 16-bit output, every promoted value is also rounded through float8 e4m3: bf16 work is within
  the contract's tolerance for a bf16 output, so it would be no control);
- ``skip_last``: the reference, but the last tile of rows (or the last updated row in place) is zero;
- ``cache_first``: the first call's outputs, replayed on every later call.

The expected statuses are INCORRECT for the value controls and RULE_VIOLATION for the two that
compute nothing in the DSL. ``low_precision`` does not apply to problems without floating math.
"""

from __future__ import annotations

from pathlib import Path

from metakernelbench.contract import DSL_PACKAGES
from metakernelbench.problems import REPO_ROOT, Problem

__all__ = [
    "BODIES", "COMMON", "CONTROLS", "DSL_IMPORT", "EXPECTED", "LLVM_COPY", "applies", "control_source",
    "copy_helper_source", "skip_last_tile", "write_controls",
]

CONTROLS = ("zeros", "passthrough", "eager_no_dsl", "dsl_copy", "low_precision", "skip_last", "cache_first")
EXPECTED = {"eager_no_dsl": "RULE_VIOLATION", "dsl_copy": "RULE_VIOLATION"}

LLVM_COPY = '''
import tvm
from tvm.script import tirx as T


@T.prim_func
def _byte_copy(a: T.handle, b: T.handle):
    n = T.int32()
    A = T.match_buffer(a, (n,), "uint8")
    B = T.match_buffer(b, (n,), "uint8")
    for i in range(n):
        B[i] = A[i]


_COPY = []


def dsl_copy(t):
    if not _COPY:
        target = tvm.target.Target("llvm")
        with target:
            _COPY.append(tvm.compile(tvm.IRModule({"main": _byte_copy}), target=target,
                                     tir_pipeline="tirx").mod["main"])
    src = t.contiguous()
    out = torch.empty_like(src)
    if src.numel():
        _COPY[0](src.reshape(-1).view(torch.uint8), out.reshape(-1).view(torch.uint8))
    return out
'''

DSL_IMPORT = {dsl: f"import {package}  # noqa: F401\n" for dsl, package in DSL_PACKAGES.items()}

COMMON = '''

def _skip_last_tile(t):
    rows = t.reshape(-1, t.shape[-1]).clone()  # reshape may copy a strided tensor: write back below
    if rows.shape[0] > 1:
        rows[-min(64, -(-rows.shape[0] // 8)):] = 0
    else:
        rows[:, -min(64, -(-rows.shape[1] // 8)):] = 0
    t.copy_(rows.reshape(t.shape))

def _outputs_tuple(returned):
    if _NUM_OUTPUTS == 0:
        return ()
    return (returned,) if _NUM_OUTPUTS == 1 else tuple(returned)


def _emit(values, copy=True):
    values = tuple(dsl_copy(v) if copy else v for v in values)
    if _NUM_OUTPUTS == 0:
        return None
    return values[0] if _NUM_OUTPUTS == 1 else values


def _clone(inputs):
    return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in inputs)
'''

BODIES = {
    "zeros": '''
def solve(*inputs):
    outs = _outputs_tuple(reference(*_clone(inputs)))
    for i in _INPLACE:
        inputs[i].copy_(dsl_copy(torch.zeros_like(inputs[i])))
    return _emit(tuple(torch.zeros_like(o) for o in outs))
''',
    "passthrough": '''
def _like(src, want):
    flat = src.reshape(-1).view(torch.uint8)
    need = want.numel() * want.element_size()
    reps = need // max(flat.numel(), 1) + 1
    return flat.repeat(reps)[:need].view(want.dtype).reshape(want.shape).clone()


def solve(*inputs):
    outs = _outputs_tuple(reference(*_clone(inputs)))
    tensors = [v for v in inputs if isinstance(v, torch.Tensor) and v.numel()]
    for i in _INPLACE:  # in-place outputs: their own unchanged bytes, through the DSL copy
        inputs[i].copy_(dsl_copy(inputs[i]))
    return _emit(tuple(_like(tensors[0], o) for o in outs))
''',
    "eager_no_dsl": '''
def solve(*inputs):
    return reference(*inputs)
''',
    "dsl_copy": '''
def solve(*inputs):
    work = _clone(inputs)
    outs = _outputs_tuple(reference(*work))
    for i in _INPLACE:
        inputs[i].copy_(dsl_copy(work[i]))
    return _emit(outs)
''',
    "low_precision": '''
_LOW = []


def acc(t):
    if _LOW and _LOW[0] == "fp8":  # outputs are already 16-bit: go one class lower
        return t.to(torch.float8_e4m3fn).to(torch.bfloat16)
    return t.to(torch.bfloat16)


def acc_dtype():
    return torch.bfloat16


def solve(*inputs):
    if not _LOW:
        probe = _outputs_tuple(reference(*_clone(inputs)))
        _LOW.append("fp8" if any(o.dtype in (torch.float16, torch.bfloat16) for o in probe) else "bf16")
    work = _clone(inputs)
    outs = _outputs_tuple(reference(*work))
    for i in _INPLACE:
        inputs[i].copy_(dsl_copy(work[i]))
    return _emit(tuple(o.to(r.dtype) for o, r in zip(outs, _outputs_tuple(reference(*_clone(inputs))))))
''',
    "skip_last": '''
def solve(*inputs):
    work = _clone(inputs)
    outs = list(_outputs_tuple(reference(*work)))
    for k, o in enumerate(outs):
        if o.dim() >= 1 and o.numel() > 1:
            outs[k] = o.clone()
            _skip_last_tile(outs[k])
    for i in _INPLACE:
        changed = (work[i] != inputs[i]).reshape(work[i].shape[0], -1).any(dim=1).nonzero().flatten()
        if changed.numel():
            work[i][int(changed[-1])] = inputs[i][int(changed[-1])]
        inputs[i].copy_(dsl_copy(work[i]))
    return _emit(tuple(outs))
''',
    "cache_first": '''
_FIRST = {}


def solve(*inputs):
    if not _FIRST:
        work = _clone(inputs)
        _FIRST["outs"] = _outputs_tuple(reference(*work))
        _FIRST["inplace"] = {i: work[i] for i in _INPLACE}
    for i, value in _FIRST["inplace"].items():
        inputs[i].copy_(dsl_copy(value))
    return _emit(_FIRST["outs"])
''',
}


def skip_last_tile(t) -> None:
    """Zero the last tile of rows (up to 64 rows, an eighth of them at least one), as a kernel that
    skips its tail would leave them; a single-row tensor loses its last columns instead."""
    rows = t.reshape(-1, t.shape[-1]).clone()  # reshape may copy a strided tensor: write back below
    if rows.shape[0] > 1:
        rows[-min(64, -(-rows.shape[0] // 8)):] = 0
    else:
        rows[:, -min(64, -(-rows.shape[1] // 8)):] = 0
    t.copy_(rows.reshape(t.shape))


def applies(problem: Problem, kind: str) -> bool:
    """``low_precision`` needs floating work; ``skip_last`` needs an output with more than one row."""
    if kind == "low_precision":
        return "acc(" in problem.spec.path.read_text()
    return True


def copy_helper_source(dsl: str, device: str) -> str:
    """The DSL byte-copy helper: the oracle authors' CUDA copy, or an llvm TIRx copy on CPU."""
    if device == "cpu":
        return LLVM_COPY
    path = REPO_ROOT / "oracles" / f"_dsl_copy_{dsl}.py"
    return path.read_text()


def control_source(problem: Problem, kind: str, dsl: str, device: str) -> str:
    """The complete kernel file of one control."""
    spec = problem.spec
    inplace = [spec.inputs.index(n) for n in spec.inplace]
    header = (f"# Negative control {kind!r} for {spec.name} ({dsl}, {device}); generated by "
              "metakernelbench.testing.controls. Expected: "
              f"{EXPECTED.get(kind, 'INCORRECT')}.\n")
    parts = [header, "import torch\n", problem.spec.path.read_text(), "\n# ---- DSL copy helper\n",
             copy_helper_source(dsl, device) if kind != "eager_no_dsl" else DSL_IMPORT[dsl],
             f"\n_NUM_OUTPUTS = {len(spec.outputs)}\n_INPLACE = {inplace!r}\n", COMMON, BODIES[kind]]
    return "\n".join(parts)


def write_controls(problem: Problem, dsl: str, device: str, directory: Path) -> dict[str, Path]:
    """Write every applicable control for one problem; returns kind -> file."""
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for kind in CONTROLS:
        if applies(problem, kind):
            path = directory / f"{problem.spec.id}_{kind}_{dsl}.py"
            path.write_text(control_source(problem, kind, dsl, device))
            written[kind] = path
    return written
