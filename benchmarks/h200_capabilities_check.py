"""GPU check of ``verifier.capabilities``: the DSLs still work after ``remove``, the exploits do not.

    source benchmarks/h200_env.sh && python3 -m benchmarks.h200_capabilities_check [--out FILE]

Each step runs in a fresh process, as a candidate worker would (torch, the DSL and its launch hooks
imported, then ``capabilities.remove(dsl)``):

- ``honest cutedsl``: problem 28's CuTe DSL oracle compiles, runs and matches the fp32 reference;
  ``cutlass.utils.HardwareInfo().get_max_active_clusters`` (the one Python-level module load CuTe
  DSL makes, admitted by call site) answers; a direct ``cuModuleLoadData`` is refused.
- ``honest tirx``: the TIRx control kernel and problem 28's TIRx oracle compile through TVM's own
  NVRTC build (admitted while ``ffi.Module.create.cuda`` runs for ``codegen_build``) and match.
- ``exploits``: the four GPU exploit files (driver PTX module, NVRTC, ``torch.cuda._compile_kernel``,
  jiterator) without ``remove`` compute the right output (their foreign half included), and with
  ``remove`` each is refused (``GuardViolation``).

Prints one line per check and writes them as JSON to ``--out``; nothing here is timed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ORACLE = REPO / "oracles" / "mlp_norm" / "28_fused_add_rmsnorm_h4096_llama31_8b_bf16_{dsl}.py"
EXPLOITS = ("driver_ptx_module_cuda", "nvrtc_kernel_cuda", "torch_compile_kernel_cuda", "jiterator_cuda")


def _draw(tokens: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(tokens)
    h = torch.randn(tokens, 4096, device="cuda", generator=g).bfloat16()
    r = torch.randn(tokens, 4096, device="cuda", generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(4096, device="cuda", generator=g)).bfloat16()
    return h, r, w


def _error(y, h, r, w) -> float:
    """Largest difference from problem 28's fp32 reference, in bf16 units of the output (ulp-ish)."""
    import torch

    x = h.float() + r.float()
    ref = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).bfloat16().float()
    return float(((y.float() - ref).abs() / ref.abs().clamp_min(1e-3)).max())


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remove(dsl: str) -> int:
    from metakernelbench.verifier import capabilities, hooks

    hooks.INSTALLERS[dsl]()
    return len(capabilities.remove(dsl))


def honest(dsl: str) -> dict:
    import torch

    from metakernelbench.verifier.guard import GuardViolation

    out = {"removed": _remove(dsl)}
    h, r, w = _draw(64)
    files = {"oracle": ORACLE.with_name(ORACLE.name.format(dsl=dsl))}
    if dsl == "tirx":
        files["control"] = REPO / "tests" / "exploits" / "control_honest_28_cuda.py"
    for label, path in files.items():
        y = _load(path, f"mkb_check_{label}").solve(h, r, w)
        torch.cuda.synchronize()
        out[f"{label}_rel_error"] = _error(y, h, r, w)
    if dsl == "cutedsl":
        from cutlass.utils import HardwareInfo

        out["max_active_clusters"] = HardwareInfo().get_max_active_clusters(1)
    import cuda.bindings.driver as driver

    try:
        driver.cuModuleLoadData(b"\0")
        out["direct_load"] = "ran"
    except GuardViolation:
        out["direct_load"] = "refused"
    return out


def _exploit(name: str):
    """The exploit file ``tests/exploits/<name>.py``, imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "exploits" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def exploits(remove: bool) -> dict:
    import torch

    from metakernelbench.verifier.guard import GuardViolation

    out = {"removed": _remove("tirx") if remove else 0}
    for name in EXPLOITS:
        h, r, w = _draw(33)
        try:
            y = _exploit(name).solve(h, r, w)
            torch.cuda.synchronize()
            out[name] = {"ran": True, "rel_error": _error(y, h, r, w),
                         "foreign_half_rel_error": _error(y[16:], h[16:], r[16:], w)}
        except GuardViolation as exc:
            out[name] = {"refused": str(exc)[:200]}
        except Exception as exc:  # noqa: BLE001 - reported as found
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


STEPS = {"honest cutedsl": lambda: honest("cutedsl"), "honest tirx": lambda: honest("tirx"),
         "exploits without remove": lambda: exploits(False), "exploits with remove": lambda: exploits(True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)  # one step, in this process
    args = parser.parse_args()
    if args.step:
        print(json.dumps(STEPS[args.step]()))
        return
    report = {}
    for step in STEPS:
        done = subprocess.run([sys.executable, "-m", "benchmarks.h200_capabilities_check", "--step", step],
                              capture_output=True, text=True, timeout=600, cwd=REPO)
        lines = done.stdout.strip().splitlines()
        report[step] = json.loads(lines[-1]) if done.returncode == 0 and lines else {"failed": done.stderr[-3000:]}
        print(step, json.dumps(report[step]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
