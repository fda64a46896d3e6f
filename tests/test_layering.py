"""The layering is a checked contract (design.md §2), and nothing reaches past it.

- ``lint-imports`` holds the import graph to the contracts of ``[tool.importlinter]`` in pyproject.toml
  (the layers, a contract that imports nothing of the project, a verifier without the judge or Harbor).
- No module of the product (``metakernelbench``, ``benchmarks``, ``demo``, ``scripts``) imports another
  module's private name (``from x import _name``) or reaches for one (``module._name``): what another
  module needs is public, in its ``__all__``. Tests may exercise a module's private helpers (they are
  the module's white-box tests); the product may not.
- Every module of the package declares its public names (``__all__``), and every name the product imports
  from one of them is among those names.
- No script edits ``sys.path``: the benchmarks run as ``python3 -m benchmarks.<name>`` from the root.

Each check is also run once on a planted violation, so that a check that can no longer fail is seen.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("metakernelbench", "benchmarks", "demo", "scripts")
PROJECT_PACKAGES = ("metakernelbench", "benchmarks", "demo")
# not project modules: Harbor's adapter layout (its own package) and the task templates (data)
OUTSIDE = ("metakernelbench/adapters/metakernelbench/", "metakernelbench/adapters/templates/")
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"


def _product_files() -> list[Path]:
    files = [p for top in PRODUCT for p in sorted((REPO / top).rglob("*.py"))]
    return [p for p in files if not p.relative_to(REPO).as_posix().startswith(OUTSIDE)]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_file(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _source_module(node: ast.ImportFrom, here: str, package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = here.split(".") if package else here.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _uses(source: str, here: str, package: bool = False) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` for every name this source takes from another project module: the names
    of ``from module import name`` (submodules aside) and the attributes read or set on an imported
    project module (``module.name``)."""
    tree = ast.parse(source)
    found: list[tuple[int, str, str]] = []
    modules: dict[str, str] = {}  # local name -> project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _source_module(node, here, package)
            if src.split(".")[0] not in PROJECT_PACKAGES:
                continue
            for alias in node.names:
                if _module_file(f"{src}.{alias.name}") is not None:
                    modules[alias.asname or alias.name] = f"{src}.{alias.name}"
                elif src != here:
                    found.append((node.lineno, src, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT_PACKAGES:
                    local = alias.asname or alias.name.split(".")[0]
                    modules[local] = alias.name if alias.asname else local
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in modules:
            continue
        module = ".".join([modules[value.id], *reversed(chain)])
        if module != here and _module_file(module) is not None and _module_file(f"{module}.{node.attr}") is None:
            found.append((node.lineno, module, node.attr))
    return found


def private_reach_ins(source: str, here: str, package: bool = False) -> list[str]:
    return [f"line {line}: {module}.{name}" for line, module, name in _uses(source, here, package)
            if _private(name)]


def sys_path_edits(source: str) -> list[int]:
    """The lines that change ``sys.path`` (insert, append, extend, assignment) or add a site folder."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = ast.unparse(node.func.value)
            if (target == "sys.path" and node.func.attr in ("insert", "append", "extend", "remove")) or \
                    (target == "site" and node.func.attr == "addsitedir"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(t).startswith("sys.path") for t in targets):
                lines.append(node.lineno)
    return lines


def _lint(cwd: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    code = LINT if config is None else LINT.replace("no_cache=True", f"config_filename={str(config)!r}, no_cache=True")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


# ---- the import contracts -------------------------------------------------------------------------

def test_the_import_contracts_hold():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_verifier_that_imports_the_judge_breaks_them(tmp_path):
    """The same contracts over a copy of the package in which the verifier imports the judge."""
    shutil.copytree(REPO / "metakernelbench", tmp_path / "metakernelbench",
                    ignore=shutil.ignore_patterns("__pycache__", "templates"))
    rules = tmp_path / "metakernelbench" / "verifier" / "rules.py"
    rules.write_text(rules.read_text() + "\nimport metakernelbench.judge.client  # noqa\n")
    done = _lint(tmp_path, REPO / "pyproject.toml")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Layers: each part imports only the parts below it BROKEN" in done.stdout
    assert "metakernelbench.verifier.rules -> metakernelbench.judge.client" in done.stdout


# ---- private names --------------------------------------------------------------------------------

def test_no_module_of_the_product_reaches_for_another_modules_private_names():
    found = [f"{path.relative_to(REPO)} {hit}" for path in _product_files()
             for hit in private_reach_ins(path.read_text(), _module_name(path), path.name == "__init__.py")]
    assert found == [], "make these public where they are defined (and list them in __all__):\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "from metakernelbench.verifier.launch import _environment\n",
    "from metakernelbench.verifier import launch\nlaunch._environment({})\n",
    "import metakernelbench.verifier.launch\nmetakernelbench.verifier.launch._environment({})\n",
    "import metakernelbench.verifier.launch as l\nx = l._environment\n",
    "from ..verifier.launch import _environment\n",
])
def test_a_private_reach_in_is_found(source):
    assert private_reach_ins(source, "metakernelbench.judge.runner")


def test_a_module_may_use_its_own_private_names():
    assert private_reach_ins("from . import launch\nx = launch.__name__\n", "metakernelbench.verifier.grader") == []
    assert private_reach_ins("import os\nos._exit(0)\n", "metakernelbench.verifier.grader") == []


# ---- __all__ --------------------------------------------------------------------------------------

def _api_modules() -> list[Path]:
    package = [p for p in _product_files() if p.relative_to(REPO).parts[0] == "metakernelbench"]
    return [p for p in package if p.name not in ("__init__.py", "__main__.py")]


def _declared(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            return list(ast.literal_eval(node.value))
    return None


def test_every_module_of_the_package_declares_its_public_names():
    missing = [str(p.relative_to(REPO)) for p in _api_modules() if _declared(p) is None]
    assert missing == [], "add __all__ to: " + ", ".join(missing)


def test_what_the_product_imports_from_a_module_is_in_its_all():
    declared = {_module_name(p): _declared(p) or [] for p in _api_modules()}
    found = [f"{path.relative_to(REPO)}:{line}: {module}.{name}"
             for path in _product_files()
             for line, module, name in _uses(path.read_text(), _module_name(path), path.name == "__init__.py")
             if module in declared and not name.startswith("__") and name not in declared[module]]
    assert found == [], "public API not listed in the module's __all__:\n" + "\n".join(found)


# ---- sys.path --------------------------------------------------------------------------------------

def test_no_script_edits_sys_path():
    found = [f"{path.relative_to(REPO)}:{line}" for path in _product_files()
             for line in sys_path_edits(path.read_text())]
    assert found == [], "import by package name instead (python3 -m benchmarks.<name>):\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "import sys\nsys.path.insert(0, 'x')\n",
    "import sys\nsys.path[:0] = ['x']\n",
    "import sys\nsys.path += ['x']\n",
    "import site\nsite.addsitedir('x')\n",
])
def test_a_sys_path_edit_is_found(source):
    assert sys_path_edits(source)
