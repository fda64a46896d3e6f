"""Offline API reference for a DSL, generated from the installed package's own docstrings.

Run once while the sandbox image is built (``python dsl_docs.py --dsl tirx --out /app/docs/tirx-api``):
the sandbox has no network, so the agent reads the installed DSL's documentation here. Both DSLs
are documented by the same walk with the same limits (modules to the same depth, the same number of
members per module, the same docstring length), so neither variant gets a deeper reference than the
other; the hand-written guide (``docs/<dsl>.md``) is of equal length for both too. Text files that
ship inside the package (READMEs, ``.md``/``.rst``) are copied as well. Standard library only, and
it never fails the image build: a module that does not import is listed with its error.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import shutil
import sys
from pathlib import Path

__all__ = [
    "MAX_DEPTH", "MAX_DOC_LINES", "MAX_MEMBERS", "MAX_MODULES", "PACKAGES", "ROOTS", "SKIP", "build",
    "document_module", "main", "package_texts",
]

# The public entry points of each DSL (what its guide and examples import); the walk starts here.
ROOTS = {
    "tirx": ["tvm.script.tirx", "tvm.script.tirx.tile", "tvm.tirx", "tvm.target", "tvm.runtime", "tvm.driver"],
    "cutedsl": ["cutlass", "cutlass.cute", "cutlass.cute.nvgpu", "cutlass.cute.runtime", "cutlass.utils",
                "cutlass.pipeline"],
}
PACKAGES = {"tirx": ["tvm"], "cutedsl": ["cutlass"]}
MAX_DEPTH = 2          # submodules below a root
MAX_MODULES = 80       # per DSL
MAX_MEMBERS = 150      # per module
MAX_DOC_LINES = 40     # per member
SKIP = ("test", "testing", "_", "experimental", "viz", "web", "contrib", "relax", "topi", "te", "s_tir", "triton",
        "external_kernel")


def _doc(obj: object) -> str:
    text = inspect.getdoc(obj) or ""
    lines = text.strip().splitlines()
    if len(lines) > MAX_DOC_LINES:
        lines = lines[:MAX_DOC_LINES] + ["[...]"]
    return "\n".join(lines)


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def document_module(name: str) -> tuple[str, list[str]]:
    """Markdown for one module, and the names of its public submodules."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - documented as unavailable, the build goes on
        return f"# {name}\n\nNot importable here: {type(exc).__name__}: {exc}\n", []
    out = [f"# {name}\n", _doc(module) + "\n" if _doc(module) else ""]
    public = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    shown = 0
    for member in sorted(set(public)):
        if shown >= MAX_MEMBERS:
            out.append(f"\n[{len(public) - shown} more members not shown]\n")
            break
        try:
            obj = getattr(module, member)
        except Exception:  # noqa: BLE001 - lazy attributes that fail on a CPU-only machine
            continue
        if inspect.ismodule(obj):
            continue
        kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else "value"
        head = f"## {member}" + (_signature(obj) if kind in ("class", "function") else "") + f"  ({kind})"
        body = _doc(obj) if kind != "value" else repr(obj)[:200]
        out.append(f"\n{head}\n\n{body}\n")
        shown += 1
    subs = []
    if hasattr(module, "__path__"):
        subs = [f"{name}.{m.name}" for m in pkgutil.iter_modules(module.__path__)
                if not m.name.startswith(SKIP) and m.name not in SKIP]
    return "".join(out), subs


def package_texts(packages: list[str], out: Path) -> list[str]:
    """Copy the text documentation shipped inside the installed packages (not licences)."""
    copied = []
    for package in packages:
        try:
            root = Path(importlib.import_module(package).__file__).parent
        except Exception:  # noqa: BLE001
            continue
        for path in sorted(root.rglob("*")):
            if path.suffix.lower() in (".md", ".rst") and "licen" not in path.as_posix().lower():
                dest = out / "package-docs" / package / path.relative_to(root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, dest)
                copied.append(str(dest.relative_to(out)))
    return copied


def build(dsl: str, out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    queue = [(name, 0) for name in ROOTS[dsl]]
    done: list[str] = []
    while queue and len(done) < MAX_MODULES:
        name, depth = queue.pop(0)
        if name in done:
            continue
        text, subs = document_module(name)
        (out / f"{name}.md").write_text(text)
        done.append(name)
        if depth < MAX_DEPTH:
            queue += [(s, depth + 1) for s in subs]
    texts = package_texts(PACKAGES[dsl], out)
    index = [f"# {dsl} API reference (generated from the installed package's docstrings)\n",
             "One file per module; members with their signatures and docstrings.\n"]
    index += [f"- [{n}]({n}.md)" for n in done]
    if texts:
        index += ["", "Documentation files shipped with the package:", *[f"- {t}" for t in texts]]
    (out / "index.md").write_text("\n".join(index) + "\n")
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dsl", required=True, choices=sorted(ROOTS))
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    done = build(args.dsl, args.out)
    print(f"documented {len(done)} modules of {args.dsl} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
