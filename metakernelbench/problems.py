"""Find, load and validate problem files (design.md §3).

A problem file is ``problems/<family>/<NN>_<slug>.py``: plain Python that imports only torch and
``metakernelbench.problem_kit``. It is loaded by path (file names start with digits, so they are
never importable by name) and its module-level declarations are checked into a ``ProblemSpec``, so
a malformed file fails with a message that names the file and the field.

Required names in a problem file::

    PROVENANCE   dict: source, model, upstream, license (and optional notes)
    INPUTS       tuple of input names, in the order make_inputs returns them
    OUTPUTS      tuple of names of the values reference() returns (may be empty)
    make_inputs(device, generator, **workload) -> tuple   defaults are the graded workload
    reference(*inputs) -> tensor | tuple                   plain eager PyTorch, no grad
    SMALL_WORKLOAD   dict of make_inputs keyword overrides for CPU tests

Optional declarations (defaults in brackets)::

    INPLACE      names of inputs that the call updates in place and that are graded [()]
    EXACT        names of floating outputs that must match bit for bit [()]; integer and
                 boolean outputs are always exact
    SETS         {output: {"dim": d, "with": (other outputs...)}}: compare ``output`` as a set
                 along ``dim``; the named companions are permuted the same way [{}]
    TOLERANCE_FACTOR   the anchor factor F [3.0]; set only with TOLERANCE_NOTE saying why
    captured values: ``<NN>_<slug>.captured.json`` beside the file, read with
                 ``problem_kit.captured(__file__)`` inside make_inputs, never at import (the grader's
                 negative controls embed the problem's source elsewhere); fields: source, record,
                 license, attribution, values
    physical_floor(**workload) -> {"bytes": int, "flops": int, "math": "fp32|tf32|bf16|fp8|fp4"}
                 the least traffic and arithmetic any correct implementation must do
    text_values(**workload) -> dict   numbers the docstring quotes that derive from the workload
                 (a capacity, a byte offset); TEXT_CONSTANTS: a dict of numbers it quotes that are
                 facts of a formula or of the source, by name

Every number the docstring quotes must be backed by the graded workload (a make_inputs default, an
input's dimension or value, a module constant, a text_values value): ``mkb build`` refuses a
description that is not (``metakernelbench.adapters.text_numbers``), so it cannot go stale.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from metakernelbench.contract import DEFAULT_TOLERANCE_FACTOR, DSL_PATTERN

__all__ = [
    "FAMILIES", "FILE_PATTERN", "MATH_KINDS", "ORACLES_DIR", "Problem", "ProblemError", "ProblemSpec",
    "Provenance", "REPO_ROOT", "SetRule", "declared_output_count", "find_problem", "find_problem_path",
    "load_problem", "oracle_file", "oracle_files", "problem_paths", "problems_dir", "source_digest",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
ORACLES_DIR = REPO_ROOT / "oracles"
FAMILIES = ("attention", "kv_cache", "linear_attention", "mlp_norm", "moe", "quantization")
FILE_PATTERN = re.compile(r"^(?P<id>\d{2})_(?P<slug>[a-z0-9_]+)\.py$")
MATH_KINDS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int")


class ProblemError(ValueError):
    """A problem file is missing a declaration or declares something inconsistent."""


class Provenance(BaseModel):
    """Where the problem comes from; shown in instructions and reports."""

    model_config = ConfigDict(extra="forbid")
    source: str
    model: str
    upstream: str
    license: str
    notes: str = ""


class SetRule(BaseModel):
    """Compare one output as a set along ``dim``, permuting companion outputs alike."""

    model_config = ConfigDict(extra="forbid")
    dim: int = -1
    with_: tuple[str, ...] = Field(default=(), alias="with")


class ProblemSpec(BaseModel):
    """The validated declarations of one problem file (everything but its two functions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    slug: str
    family: str
    path: Path
    title: str
    provenance: Provenance
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    inplace: tuple[str, ...] = ()
    exact: tuple[str, ...] = ()
    sets: dict[str, SetRule] = {}
    tolerance_factor: float = DEFAULT_TOLERANCE_FACTOR
    tolerance_note: str = ""
    workload: dict[str, Any]
    small_workload: dict[str, Any]

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"family {v!r} is not one of {FAMILIES}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ProblemSpec:
        for name in self.inplace:
            if name not in self.inputs:
                raise ValueError(f"INPLACE names {name!r}, which is not in INPUTS")
        if not self.outputs and not self.inplace:
            raise ValueError("the problem has neither OUTPUTS nor INPLACE inputs: nothing to grade")
        graded = set(self.outputs) | set(self.inplace)
        for name in self.exact:
            if name not in graded:
                raise ValueError(f"EXACT names {name!r}, which is not a graded output")
        for name, rule in self.sets.items():
            if name not in graded or any(c not in graded for c in rule.with_):
                raise ValueError(f"SETS rule for {name!r} names an output that is not graded")
        if self.tolerance_factor != DEFAULT_TOLERANCE_FACTOR and not self.tolerance_note:
            raise ValueError(f"TOLERANCE_FACTOR differs from {DEFAULT_TOLERANCE_FACTOR:g} without a TOLERANCE_NOTE "
                             "saying why")
        for key in self.small_workload:
            if key not in self.workload:
                raise ValueError(f"SMALL_WORKLOAD key {key!r} is not a make_inputs keyword")
        return self

    @property
    def name(self) -> str:
        """``NN_slug``: the stem shared by the problem file and its two tasks."""
        return f"{self.id}_{self.slug}"

    @property
    def graded_names(self) -> tuple[str, ...]:
        """Returned outputs first, then in-place inputs: the order the grader reports them in."""
        return self.outputs + self.inplace


class Problem:
    """A loaded problem: its validated spec plus the module's functions."""

    def __init__(self, spec: ProblemSpec, module: ModuleType):
        self.spec = spec
        self.module = module

    def __repr__(self) -> str:
        return f"Problem({self.spec.name})"

    @property
    def make_inputs(self) -> Callable[..., tuple]:
        return self.module.make_inputs

    @property
    def reference(self) -> Callable[..., Any]:
        return self.module.reference

    def physical_floor(self, workload: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The problem's declared minimum traffic/arithmetic, or None when it declares none."""
        fn = getattr(self.module, "physical_floor", None)
        if fn is None:
            return None
        floor = fn(**(workload or self.spec.workload))
        if floor.get("math", "fp32") not in MATH_KINDS:
            raise ProblemError(f"{self.spec.path}: physical_floor math must be one of {MATH_KINDS}")
        return floor

    @property
    def captured_file(self) -> Path | None:
        """The problem's captured values beside it (``<stem>.captured.json``), when it has them."""
        from metakernelbench.problem_kit import captured_path  # imports torch: only when asked

        path = captured_path(self.spec.path)
        return path if path.is_file() else None

    @cached_property
    def source_sha256(self) -> str:
        """sha256 of what defines the problem: the file, then its captured values when it has them."""
        return source_digest(self.spec.path)


def source_digest(problem_file: Path) -> str:
    """sha256 of a problem file followed by its captured-values file, if any (one digest for both)."""
    from metakernelbench.problem_kit import captured_path  # imports torch: only when asked

    digest = hashlib.sha256(Path(problem_file).read_bytes())
    sidecar = captured_path(problem_file)
    if sidecar.is_file():
        digest.update(b"\0captured\0" + sidecar.read_bytes())
    return digest.hexdigest()


def _module_from_path(path: Path) -> ModuleType:
    name = f"mkb_problem_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(name, None)
        raise
    return module


def _require(module: ModuleType, path: Path, name: str) -> Any:
    if not hasattr(module, name):
        raise ProblemError(f"{path}: missing required declaration {name}")
    return getattr(module, name)


def load_problem(path: str | Path) -> Problem:
    """Load and validate one problem file; raise ProblemError naming the file on any defect."""
    path = Path(path).resolve()
    match = FILE_PATTERN.match(path.name)
    if match is None:
        raise ProblemError(f"{path}: file name must be NN_slug.py (two digits, lowercase slug)")
    module = _module_from_path(path)
    for fn in ("make_inputs", "reference"):
        if not callable(_require(module, path, fn)):
            raise ProblemError(f"{path}: {fn} must be a function")
    doc = (module.__doc__ or "").strip()
    if not doc:
        raise ProblemError(f"{path}: the module needs a docstring whose first line is its title")
    params = inspect.signature(module.make_inputs).parameters
    workload = {
        k: p.default
        for k, p in params.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
    }
    missing = [k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
               and p.default is inspect.Parameter.empty]
    if missing or list(params)[:2] != ["device", "generator"]:
        raise ProblemError(
            f"{path}: make_inputs must be make_inputs(device, generator, *, key=default, ...)"
        )
    try:
        spec = ProblemSpec(
            id=match["id"],
            slug=match["slug"],
            family=path.parent.name,
            path=path,
            title=doc.splitlines()[0].strip(),
            provenance=_require(module, path, "PROVENANCE"),
            inputs=tuple(_require(module, path, "INPUTS")),
            outputs=tuple(_require(module, path, "OUTPUTS")),
            inplace=tuple(getattr(module, "INPLACE", ())),
            exact=tuple(getattr(module, "EXACT", ())),
            sets=dict(getattr(module, "SETS", {})),
            tolerance_factor=float(getattr(module, "TOLERANCE_FACTOR", DEFAULT_TOLERANCE_FACTOR)),
            tolerance_note=str(getattr(module, "TOLERANCE_NOTE", "")),
            workload=workload,
            small_workload=dict(_require(module, path, "SMALL_WORKLOAD")),
        )
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        raise ProblemError(f"{path}: {exc}") from exc
    return Problem(spec, module)


def problems_dir() -> Path:
    """The problems tree: the repository's own, or another one named by ``MKB_PROBLEMS_DIR`` (a copy
    with an added problem, as the add-a-problem test builds). Read when asked, not at import, so a
    setting made after the import counts; tools take an explicit root as well."""
    return Path(os.environ.get("MKB_PROBLEMS_DIR") or REPO_ROOT / "problems")


def problem_paths(root: Path | None = None) -> list[Path]:
    """Every problem file under ``root`` (default: ``problems_dir()``), sorted by id."""
    root = problems_dir() if root is None else root
    paths = [p for p in root.glob("*/*.py") if FILE_PATTERN.match(p.name)]
    return sorted(paths, key=lambda p: p.name)


def find_problem_path(key: str, root: Path | None = None) -> Path:
    """The file of a problem given by id (``28``), stem (``28_fused_...``), task name or file path
    (without loading it: no torch)."""
    candidate = Path(key)
    if candidate.suffix == ".py" and candidate.exists():
        return candidate
    stem = re.sub(rf"_({DSL_PATTERN})$", "", candidate.name)
    root = problems_dir() if root is None else root
    for path in problem_paths(root):
        if path.stem == stem or path.stem.split("_", 1)[0] == stem:
            return path
    raise ProblemError(f"no problem matches {key!r} under {root}")


def declared_output_count(path: Path) -> int | None:
    """How many outputs a problem file declares, read from its ``OUTPUTS`` literal without running it
    (None when it is not a literal)."""
    import ast

    try:
        tree = ast.parse(Path(path).read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "OUTPUTS"
                                                    for t in node.targets):
                value = ast.literal_eval(node.value)
                return len(value) if isinstance(value, tuple) else None
    except (OSError, SyntaxError, ValueError):
        return None
    return None


def find_problem(key: str, root: Path | None = None) -> Problem:
    """Load a problem by id (``28``), stem (``28_fused_...``), task name or file path."""
    return load_problem(find_problem_path(key, root))


def oracle_file(problem: Problem, dsl_key: str, root: Path = ORACLES_DIR) -> Path:
    """Where the oracle kernel of (problem, DSL) lives: ``oracles/<family>/<NN>_<slug>_<dsl>.py``.

    The folder mirrors ``problems/<family>/`` so that a problem's files are found together; the file
    may not exist yet (a task without an oracle).
    """
    return root / problem.spec.family / f"{problem.spec.name}_{dsl_key}.py"


def oracle_files(root: Path = ORACLES_DIR) -> list[Path]:
    """Every oracle kernel under ``root`` (the ``_*.py`` controls at its top are not oracles)."""
    return sorted(p for p in root.glob("*/[0-9][0-9]_*.py") if p.parent.name in FAMILIES)
