"""Render one problem into one Harbor task folder, as an in-memory map of files.

A task is a pure function of the problem file, the DSL, the oracle kernel (if any), the grader
source and the templates: ``render_task`` returns ``{relative path: TaskFile}`` and never touches
the output folder, so writing, comparing (``mkb build --check``) and testing all use the same
bytes. Nothing here reads a clock or an unordered listing, so two renders are identical.

Layout of a task (``tasks/<NN>_<slug>_<dsl>/``)::

    instruction.md  task.toml
    environment/    Dockerfile, problem.py, metakernelbench/problem_kit.py, docs/<dsl>.md
                    (the agent's CPU sandbox: no grader, no tests, no solution)
    tests/          Dockerfile (the separate GPU verifier image), test.sh, grading.json,
                    problems/<family>/<NN>_<slug>.py, grader/ (the vendored grader package)
    solution/       solve.sh (+ kernel.py when an oracle exists)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import metakernelbench
import metakernelbench.verifier
from metakernelbench.problems import Problem

from . import config
from .dsl import Dsl
from .instructions import instruction_md
from .templating import render, template_text

# Sub-packages of the installed ``metakernelbench`` that are not part of the grader.
_NOT_GRADER = {"adapters", "skill_transfer", "verifier", "__pycache__"}


@dataclass(frozen=True)
class TaskFile:
    """One generated file: its bytes and whether it is executable."""

    content: bytes
    executable: bool = False

    @classmethod
    def text(cls, text: str, executable: bool = False) -> TaskFile:
        if not text.endswith("\n"):
            text += "\n"
        return cls(text.encode(), executable)


def task_dir_name(problem: Problem, dsl: Dsl) -> str:
    """``<NN>_<slug>_<dsl>``: the folder under ``tasks/``."""
    return f"{problem.spec.name}_{dsl.key}"


def task_name(problem: Problem, dsl: Dsl) -> str:
    """Harbor's ``[task] name``: ``metakernelbench/<NN>_<slug>_<dsl>``."""
    return f"{config.ORG}/{task_dir_name(problem, dsl)}"


def _toml_str(value: str) -> str:
    # A JSON string is a valid TOML basic string for everything a problem file can contain.
    return json.dumps(value, ensure_ascii=False)


def _problem_relpath(problem: Problem) -> str:
    return f"problems/{problem.spec.family}/{problem.spec.path.name}"


def _task_toml(problem: Problem, dsl: Dsl) -> str:
    spec, prov = problem.spec, problem.spec.provenance
    keywords = ["metakernelbench", "gpu-kernels", spec.family, dsl.key]
    return render(
        "task.toml",
        problem_path=_problem_relpath(problem),
        task=_toml_str(task_name(problem, dsl)),
        description=_toml_str(f"{spec.title.rstrip('.')} ({dsl.name})"),
        keywords=json.dumps(keywords),
        problem=_toml_str(spec.name),
        family=_toml_str(spec.family),
        dsl=_toml_str(dsl.key),
        pair=_toml_str(task_name(problem, dsl.other)),
        problem_sha256=_toml_str(problem.source_sha256),
        source=_toml_str(prov.source),
        model=_toml_str(prov.model),
        upstream=_toml_str(prov.upstream),
        license=_toml_str(prov.license),
        agent_minutes=str(config.AGENT_TIMEOUT_SEC // 60),
        agent_timeout=f"{config.AGENT_TIMEOUT_SEC:.1f}",
        build_timeout=f"{config.BUILD_TIMEOUT_SEC:.1f}",
        sandbox_cpus=str(config.SANDBOX_CPUS),
        sandbox_memory_mb=str(config.SANDBOX_MEMORY_MB),
        verifier_timeout=f"{config.VERIFIER_TIMEOUT_SEC:.1f}",
        grader_cpus=str(config.GRADER_CPUS),
        grader_memory_mb=str(config.GRADER_MEMORY_MB),
        gpu_types=json.dumps(list(config.GRADER_GPU_TYPES)),
    )


def _base_image(dsl: Dsl, task: str, role: str) -> str:
    return render(
        "image-base.Dockerfile",
        role=role,
        task=task,
        dsl_name=dsl.name,
        base_image=config.BASE_IMAGE,
        common_pins=" ".join(config.COMMON_PINS),
        dsl_pins=" ".join(f'"{p}"' if "[" in p else p for p in dsl.packages),
        smoke_import=dsl.smoke_import,
    ).rstrip("\n")


def _package_files(root: Path, prefix: str, skip_dirs: set[str]) -> dict[str, TaskFile]:
    """Every file of a source package, sorted, without caches or the excluded sub-packages."""
    files: dict[str, TaskFile] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or rel.parts[0] in skip_dirs or "__pycache__" in rel.parts:
            continue
        if path.suffix in (".pyc", ".pyo"):
            continue
        files[f"{prefix}/{rel.as_posix()}"] = TaskFile(path.read_bytes())
    return files


def grader_files() -> dict[str, TaskFile]:
    """The grader vendored under ``tests/grader/``: ``metakernelbench`` (without the adapters and
    skill transfer) and ``metakernelbench.verifier``, plus a pyproject so pip can install it."""
    core = Path(metakernelbench.__file__).parent
    verifier = Path(metakernelbench.verifier.__file__).parent
    files = _package_files(core, "tests/grader/metakernelbench", _NOT_GRADER)
    files |= _package_files(verifier, "tests/grader/metakernelbench/verifier", {"__pycache__"})
    files["tests/grader/pyproject.toml"] = TaskFile.text(
        render("tests/grader-pyproject.toml", version=metakernelbench.__version__)
    )
    return files


def _sandbox_files(problem: Problem, dsl: Dsl, task: str) -> dict[str, TaskFile]:
    kit = Path(metakernelbench.__file__).parent / "problem_kit.py"
    return {
        "environment/Dockerfile": TaskFile.text(
            render("environment/Dockerfile", base=_base_image(dsl, task, "sandbox (agent)"))
        ),
        "environment/problem.py": TaskFile(problem.spec.path.read_bytes()),
        "environment/metakernelbench/__init__.py": TaskFile.text(
            '"""The part of MetaKernelBench that problem files import; the grader is not here."""'
        ),
        "environment/metakernelbench/problem_kit.py": TaskFile(kit.read_bytes()),
        f"environment/docs/{dsl.key}.md": TaskFile.text(template_text(f"docs/{dsl.key}.md")),
    }


def _grading_json(problem: Problem, dsl: Dsl, task: str) -> str:
    """What the verifier grades, without anything an oracle would need: no kernel, no outputs."""
    data = {
        "task": task,
        "problem": problem.spec.name,
        "problem_file": _problem_relpath(problem),
        "problem_sha256": problem.source_sha256,
        "dsl": dsl.key,
        "contract": {
            "correctness_draws": config.CORRECTNESS_DRAWS,
            "tolerance_factor": problem.spec.tolerance_factor,
            "warmup_calls": config.WARMUP_CALLS,
            "timed_calls": config.TIMED_CALLS,
            "speedup_cap": config.SPEEDUP_CAP,
        },
        "grade_timeout_sec": config.VERIFIER_TIMEOUT_SEC - config.GRADE_TIMEOUT_MARGIN_SEC,
    }
    return json.dumps(data, indent=2, sort_keys=True)


def _verifier_files(problem: Problem, dsl: Dsl, task: str) -> dict[str, TaskFile]:
    files = {
        "tests/Dockerfile": TaskFile.text(
            render("tests/Dockerfile", base=_base_image(dsl, task, "grader (verifier)"))
        ),
        "tests/test.sh": TaskFile.text(
            render(
                "tests/test.sh",
                task=task,
                dsl=dsl.key,
                dsl_name=dsl.name,
                problem=problem.spec.name,
                problem_file=_problem_relpath(problem),
                grade_timeout=str(config.VERIFIER_TIMEOUT_SEC - config.GRADE_TIMEOUT_MARGIN_SEC),
            ),
            executable=True,
        ),
        "tests/grading.json": TaskFile.text(_grading_json(problem, dsl, task)),
        f"tests/{_problem_relpath(problem)}": TaskFile(problem.spec.path.read_bytes()),
    }
    files |= grader_files()
    return files


def oracle_path(problem: Problem, dsl: Dsl, oracles_dir: Path) -> Path:
    """Where the oracle kernel of this task lives in the repository (it may not exist yet)."""
    return oracles_dir / f"{task_dir_name(problem, dsl)}.py"


def _solution_files(problem: Problem, dsl: Dsl, task: str, oracles_dir: Path) -> dict[str, TaskFile]:
    oracle = oracle_path(problem, dsl, oracles_dir)
    shown = f"oracles/{oracle.name}"
    if not oracle.is_file():
        script = render("solution/no-oracle.sh", task=task, oracle_path=shown)
        return {"solution/solve.sh": TaskFile.text(script, executable=True)}
    script = render("solution/solve.sh", task=task, dsl_name=dsl.name, oracle_path=shown)
    return {
        "solution/solve.sh": TaskFile.text(script, executable=True),
        "solution/kernel.py": TaskFile(oracle.read_bytes()),
    }


def render_task(problem: Problem, dsl: Dsl, oracles_dir: Path) -> dict[str, TaskFile]:
    """Every file of one task folder, keyed by its path relative to the folder, sorted."""
    task = task_name(problem, dsl)
    files = {
        "instruction.md": TaskFile.text(instruction_md(problem, dsl, task)),
        "task.toml": TaskFile.text(_task_toml(problem, dsl)),
    }
    files |= _sandbox_files(problem, dsl, task)
    files |= _verifier_files(problem, dsl, task)
    files |= _solution_files(problem, dsl, task, oracles_dir)
    return dict(sorted(files.items()))
