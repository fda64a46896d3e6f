"""What an image installs, read from its Dockerfile, and Python processes that can import only that.

Why: an image's entry points must start with exactly what its Dockerfile installs. Building the
images needs Docker and several GB (the grader images carry CUDA torch), so CI checks this without
them: ``installs`` reads the Dockerfile's ``pip install`` pins (and ``pip uninstall``s), the
project files it copies and its ``PYTHONPATH``; ``allowed_modules`` turns the pins into the
top-level module names of those distributions and everything they require (resolved from the
metadata of the same versions installed here, extras and markers included); ``run_in_image`` runs a
command under ``guard/sitecustomize.py``, which refuses every other module. The project packages
come from a copy of what the image copies (for the judge and grader images, the packages
pyproject.toml lists, as ``pip install /src`` installs them; for a task image, its own
``environment/metakernelbench``), never from this checkout's editable install.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
GUARD = Path(__file__).with_name("guard")


@dataclass
class Installs:
    """What one Dockerfile puts into its image's Python environment."""

    dockerfile: Path
    requirements: list[str] = field(default_factory=list)  # pip install specifiers, as written
    uninstalled: list[str] = field(default_factory=list)  # pip uninstall names
    installs_project: bool = False  # pip install of the copied pyproject (the metakernelbench package)
    pythonpath: list[str] = field(default_factory=list)  # ENV PYTHONPATH, paths inside the image
    copies: list[tuple[str, str]] = field(default_factory=list)  # (source in the context, destination)
    has_python: bool = False  # python3 from the base image's packages (the standard library)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        current = ""
    return out


def _commands(shell: str) -> list[list[str]]:
    """The simple commands of a RUN line (split at ``&&``, ``||``, ``;`` and ``|`` outside quotes)."""
    lexer = shlex.shlex(shell, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set(";&|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def installs(dockerfile: Path) -> Installs:
    """Read the pip installs, uninstalls, copies and PYTHONPATH of a Dockerfile."""
    found = Installs(dockerfile)
    for word, rest in _instructions(dockerfile.read_text()):
        if word == "COPY":
            *sources, dest = shlex.split(rest)
            found.copies += [(s, dest) for s in sources if not s.startswith("--")]
        elif word == "ENV":
            m = re.search(r"\bPYTHONPATH=(\S+)", rest)
            if m:
                found.pythonpath += m.group(1).split(":")
        elif word == "RUN":
            for args in _commands(rest):
                if "python3" in args and "apt-get" in args:
                    found.has_python = True
                if len(args) < 2 or args[0] not in ("pip", "pip3") or args[1] not in ("install", "uninstall"):
                    continue
                names = [a for a in args[2:] if not a.startswith("-")]
                if args[1] == "uninstall":
                    found.uninstalled += names
                    continue
                for name in names:
                    if name.startswith("/"):
                        found.installs_project = True
                    else:
                        found.requirements.append(name)
    return found


def _closure(requirements: list[str]) -> tuple[set[str], list[str]]:
    """Distribution names required by ``requirements``, transitively (markers and extras evaluated);
    and the pinned ones that are not installed here (the check cannot vouch for them)."""
    seen: set[str] = set()
    missing: list[str] = []
    todo = [(Requirement(r), True) for r in requirements]
    while todo:
        req, pinned = todo.pop()
        key = (re.sub(r"[-_.]+", "-", req.name).lower(), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            if pinned:
                missing.append(req.name)
            continue
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (*req.extras, "")):
                todo.append((sub, False))
    return {name for name, _ in seen}, missing


def _top_level_names(dist: metadata.Distribution, roots: list[Path]) -> set[str]:
    """The top-level import names of a distribution's files, each taken relative to the deepest
    import root that holds it (``.pth`` files put some packages, e.g. CuTe DSL's ``cutlass``, in
    sub-folders of site-packages)."""
    names = set()
    for file in dist.files or []:
        if file.suffix not in (".py", ".so", ".pyd") and file.name != "__init__.py":
            continue
        located = Path(dist.locate_file(file)).absolute()
        for root in roots:
            if located.is_relative_to(root):
                first = located.relative_to(root).parts[0]
                if first.isidentifier() or first.partition(".")[0].isidentifier():
                    names.add(first.partition(".")[0])
                break
    return names


def allowed_modules(found: Installs) -> tuple[set[str], list[str]]:
    """Top-level module names the image's pip installs provide; and pins not installed here (their
    modules cannot be imported here either, so they make the check stricter, never laxer)."""
    dists, missing = _closure(found.requirements)
    removed = {re.sub(r"[-_.]+", "-", n).lower() for n in found.uninstalled}
    roots = sorted({Path(p).absolute() for p in sys.path if p and Path(p).is_dir()}, key=lambda p: -len(p.parts))
    allowed = set()
    for dist in metadata.distributions():
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() in dists - removed:
            allowed |= _top_level_names(dist, roots)
    return allowed, missing


def project_copy(found: Installs, dest: Path) -> dict[str, str]:
    """The project packages the image holds, copied under ``dest``: {top-level name: folder}."""
    if found.installs_project:  # pip install --no-deps /src: the packages pyproject.toml lists
        packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
        for package in packages:
            src = REPO / package.replace(".", "/")
            target = dest / "site" / package.replace(".", "/")
            target.mkdir(parents=True, exist_ok=True)
            for module in src.glob("*.py"):
                shutil.copy2(module, target / module.name)
        return {"metakernelbench": str(dest / "site")}
    # a task image: the packages its COPYs put on its PYTHONPATH (a package copied into a PYTHONPATH
    # folder, or a PYTHONPATH folder inside a copied one)
    context = found.dockerfile.parent
    roots = {}
    for n, path in enumerate(Path(p) for p in found.pythonpath):
        for source, target in found.copies:
            src, to = context / source, Path(target)
            if not src.is_dir():
                continue
            if to.parent == path:
                shutil.copytree(src, dest / f"path{n}" / to.name, dirs_exist_ok=True)
            elif path.is_relative_to(to) and (src / path.relative_to(to)).is_dir():
                shutil.copytree(src / path.relative_to(to), dest / f"path{n}", dirs_exist_ok=True)
            else:
                continue
            for package in (dest / f"path{n}").iterdir():
                if (package / "__init__.py").is_file():
                    roots.setdefault(package.name, str(dest / f"path{n}"))
    return roots


def run_in_image(found: Installs, args: list[str], tmp: Path, extra: dict[str, str] | None = None,
                 timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` (this interpreter) able to import only what ``found``'s image has."""
    allowed, _ = allowed_modules(found)
    spec = {"image": found.dockerfile.relative_to(REPO).as_posix(), "allowed": sorted(allowed),
            "project": project_copy(found, tmp)}
    (tmp / "guard.json").write_text(json.dumps(spec))
    (tmp / "cwd").mkdir()
    # the same import path as this process (the guard decides what may be imported from it), the
    # guard first; the project packages come only from the copy (guard/sitecustomize.py)
    path = [str(GUARD), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update({"PYTHONPATH": os.pathsep.join(path), "PYTHONNOUSERSITE": "1",
                "MKB_IMAGE_GUARD": str(tmp / "guard.json"), **(extra or {})})
    return subprocess.run([sys.executable, *args], cwd=tmp / "cwd", env=env, capture_output=True, text=True,
                          timeout=timeout)
