"""``check [KERNEL]``: what the sandbox can check without a GPU, before a submission is spent.

It applies the grader's own static rules (the module the judge runs first, shipped into the sandbox
as it is), then imports the kernel file in a fresh Python process, as the grader's worker will
(its module-level code runs, its DSL imports resolve), and checks that ``solve`` is callable with
the problem's inputs in order. It never calls ``solve``: the kernels run only on the GPU. Nothing
is sent anywhere and nothing is charged.

Exit status: 0 when every check passed, 1 when one failed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from metakernelbench.verifier.rules import MAX_KERNEL_BYTES, scan_source

__all__ = ["DEFAULT_KERNEL", "DEFAULT_PROBLEM", "IMPORT_TIMEOUT_S", "import_finding", "main", "static_findings"]

DEFAULT_KERNEL = "/app/kernel.py"
DEFAULT_PROBLEM = "/app/problem.py"
IMPORT_TIMEOUT_S = 600

# Runs in the child: load the problem and the kernel as modules, then bind solve to the inputs.
_CHILD = r"""
import importlib.util, inspect, json, sys

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

problem = load(sys.argv[1], "mkb_check_problem")
inputs = list(getattr(problem, "INPUTS", []))
try:
    kernel = load(sys.argv[2], "kernel")
except BaseException as exc:
    print(json.dumps({"problem": "import", "detail": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
solve = getattr(kernel, "solve", None)
if not callable(solve):
    print(json.dumps({"problem": "structure", "detail": "the file defines no callable solve(*inputs)"}))
    sys.exit(0)
try:
    inspect.signature(solve).bind(*inputs)
except TypeError as exc:
    print(json.dumps({"problem": "structure", "detail": f"solve cannot take the {len(inputs)} inputs "
                      f"({', '.join(map(str, inputs))}) in order: {exc}"}))
    sys.exit(0)
except ValueError:
    pass  # a callable without a readable signature: the grader will find out
print(json.dumps({"problem": None, "inputs": len(inputs)}))
"""


def static_findings(source: bytes, dsl: str) -> list[str]:
    """What the judge's static stage would refuse (size, syntax, rules), in its words."""
    if len(source) > MAX_KERNEL_BYTES:
        return [f"the file is {len(source)} bytes, over the {MAX_KERNEL_BYTES}-byte limit"]
    if not source.strip():
        return ["the file is empty"]
    return [str(v) for v in scan_source(source.decode("utf-8", errors="replace"), dsl)]


def import_finding(kernel: Path, problem: Path, python: str = sys.executable) -> str | None:
    """Why the kernel file would fail to load in the grader's worker, or None."""
    try:
        done = subprocess.run([python, "-c", _CHILD, str(problem), str(kernel)], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S, cwd=str(kernel.parent))
    except subprocess.TimeoutExpired:
        return f"importing the file took more than {IMPORT_TIMEOUT_S} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return "the check could not load the file: " + " | ".join(tail)
    report = json.loads(lines[-1])
    return None if report["problem"] is None else f"{report['problem']}: {report['detail']}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel", nargs="?", default=DEFAULT_KERNEL)
    p.add_argument("--dsl", required=True, choices=("cutedsl", "tirx"))
    p.add_argument("--problem", default=DEFAULT_PROBLEM)
    args = p.parse_args(argv)
    kernel, problem = Path(args.kernel), Path(args.problem)
    try:
        source = kernel.read_bytes()
    except OSError as exc:
        print(f"check: cannot read {kernel}: {exc.strerror or exc}")
        return 1
    findings = static_findings(source, args.dsl)
    for finding in findings:
        print(f"static rules: {finding}")
    if findings:
        print("check: refused by the static rules (a submission would be too; it costs nothing there)")
        return 1
    print("static rules: passed")
    found = import_finding(kernel.resolve(), problem.resolve())
    if found:
        print(f"import: {found}")
        print("check: failed")
        return 1
    print("import: passed (solve takes the problem's inputs in order; it was not run: kernels need the GPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
