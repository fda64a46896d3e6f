"""Render one problem into one Harbor task folder, as an in-memory map of files.

A task is a pure function of the problem file, the DSL, the oracle kernel (if any), the grader
source and the templates: ``render_task`` returns ``{relative path: TaskFile}`` and never touches
the output folder, so writing, comparing (``mkb build --check``) and testing all use the same
bytes. Nothing here reads a clock or an unordered listing, so two renders are identical.

Layout of a task (``tasks/<NN>_<slug>_<dsl>/``)::

    README.md       instruction.md  task.toml
    environment/    Dockerfile, docker-compose.yaml (Docker mode: private network + judge relay),
                    problem.py, metakernelbench/ (problem_kit, the `submit` client, the static rules
                    `check` applies), submit, check,
                    budget.sh (the prompt's minutes and submissions left),
                    dsl_docs.py, official_docs.py (the DSL's reference and official pages, made at build),
                    docs/<dsl>.md   (the agent's CPU sandbox: no grader, no tests, no solution)
    tests/          Dockerfile, docker-compose.yaml, test.sh, grading.json, client/ (the final-grade
                    client): the separate verifier container, which asks the judge for the grade
    solution/       solve.sh (+ kernel.py when an oracle exists)

The grader itself runs in the judge (``metakernelbench.judge``), in the per-DSL grader images rendered by
``image_files`` into ``images/`` together with the judge's own image and compose file.

The judge client (``client.py``) is in a task twice on purpose: ``environment/`` builds the image the
agent works in (its ``submit``), and everything in that image is the agent's to change; the final
grade runs ``tests/client/``, which Harbor uploads after the agent has finished, so the grade never
depends on a file the agent could have rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import metakernelbench
import metakernelbench.judge
import metakernelbench.verifier
from metakernelbench.problem_kit import CAPTURED_SUFFIX
from metakernelbench.problems import Problem, oracle_file

from . import config
from .dsl import DSLS, Dsl
from .estimates import Estimate, estimate
from .instructions import instruction_md
from .task_readme import task_readme
from .templating import render, template_text

__all__ = [
    "DOCKER_NETWORK", "REMOTE_NETWORK", "SANDBOX_CLIENT", "TaskFile", "VERIFIER_CLIENT", "compose_values",
    "image_files", "oracle_path", "render_task", "task_dir_name", "task_name",
]

# The judge client modules copied into the images (standard library only): sandbox and verifier.
SANDBOX_CLIENT = ("client.py", "submit.py", "check.py")
VERIFIER_CLIENT = ("client.py", "final.py")
_PKG_DOC = ('''"""Only the judge client (and, in the sandbox, the static rules ``check`` applies) lives here; '''
            '''the grader runs in the judge, outside this image."""''')


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


def _toml_authors() -> str:
    """``[task] authors`` as an inline TOML array of tables."""
    return "[" + ", ".join("{ " + ", ".join(f"{k} = {_toml_str(v)}" for k, v in a.items()) + " }"
                           for a in config.AUTHORS) + "]"


def _tag(text: str) -> str:
    """A source name as a tag: lower case, words joined by hyphens (``FlashInfer-Trace`` -> ``flashinfer-trace``)."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def _problem_relpath(problem: Problem) -> str:
    return f"problems/{problem.spec.family}/{problem.spec.path.name}"


DOCKER_NETWORK = """# No network: environment/docker-compose.yaml gives the sandbox one private network whose only
# other member is this trial's judge relay. `submit` reads MKB_JUDGE_URL (and MKB_JUDGE_TOKEN in
# the remote-judge mode, docs/running.md); the judge holds the GPU, the seeds and the budget.
network_mode = "no-network"
"""
REMOTE_NETWORK = """# Remote-judge mode (docs/running.md): no network but the judge at {url}.
network_mode = "allowlist"
allowed_hosts = [{host}]
"""


def _judge_host(url: str) -> str:
    host = urlsplit(url).hostname
    if not host:
        raise ValueError(f"--remote-judge needs a URL with a host name: {url!r}")
    return host


def _estimates_toml(found: Estimate) -> str:
    """The ``[metadata]`` lines of the difficulty rule (no time estimates without an oracle)."""
    lines = [f"difficulty = {_toml_str(found.difficulty)}"]
    for key in ("expert_time_estimate_min", "junior_time_estimate_min", "oracle_code_lines"):
        value = getattr(found, key)
        if value is not None:
            lines.append(f"{key} = {value}")
    return "\n".join(lines)


def _task_toml(problem: Problem, dsl: Dsl, found: Estimate, remote_judge: str | None = None) -> str:
    spec, prov = problem.spec, problem.spec.provenance
    keywords = ["metakernelbench", "gpu-kernels", spec.family, dsl.key]
    tags = [*keywords[1:], _tag(prov.source)]
    network = DOCKER_NETWORK
    if remote_judge:
        network = REMOTE_NETWORK.format(url=remote_judge, host=json.dumps(_judge_host(remote_judge)))
    return render(
        "task.toml",
        problem_path=_problem_relpath(problem),
        task=_toml_str(task_name(problem, dsl)),
        version=_toml_str(config.DATASET_VERSION),
        estimates=_estimates_toml(found),
        description=_toml_str(f"{spec.title.rstrip('.')} ({dsl.name})"),
        keywords=json.dumps(keywords),
        authors=_toml_authors(),
        author_name=_toml_str(config.AUTHORS[0]["name"]),
        category=_toml_str(config.CATEGORY),
        tags=json.dumps(tags),
        task_license=config.TASK_LICENSE,
        task_license_str=_toml_str(config.TASK_LICENSE),
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
        verifier_cpus=str(config.VERIFIER_CPUS),
        verifier_memory_mb=str(config.VERIFIER_MEMORY_MB),
        relay_url=remote_judge or config.RELAY_URL,
        judge_url=remote_judge or config.JUDGE_URL,
        sandbox_network=network.rstrip("\n"),
        verifier_network=network.rstrip("\n") if remote_judge else 'network_mode = "no-network"',
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


def _judge_client(prefix: str, modules: tuple[str, ...]) -> dict[str, TaskFile]:
    """The judge client modules, at their package paths under ``prefix`` (no grader code)."""
    judge = Path(metakernelbench.judge.__file__).parent
    files = {
        f"{prefix}/metakernelbench/__init__.py": TaskFile.text(_PKG_DOC),
        f"{prefix}/metakernelbench/judge/__init__.py": TaskFile.text(_PKG_DOC),
    }
    for name in modules:
        files[f"{prefix}/metakernelbench/judge/{name}"] = TaskFile((judge / name).read_bytes())
    return files


def compose_values() -> dict[str, str]:
    """The judge's image, network, volume and address as every compose template names them
    (Harbor's tasks here, Terminal-Bench's in ``terminal_bench``)."""
    return {"judge_image": config.JUDGE_IMAGE, "network": config.JUDGE_NETWORK,
            "secrets_volume": config.JUDGE_SECRETS_VOLUME, "port": str(config.JUDGE_PORT),
            "judge_url": config.JUDGE_URL, "base_image": config.BASE_IMAGE}


def _sandbox_files(problem: Problem, dsl: Dsl, task: str) -> dict[str, TaskFile]:
    kit = Path(metakernelbench.__file__).parent / "problem_kit.py"
    docs = Path(__file__).parent / "dsl_docs.py"
    files = {
        "environment/Dockerfile": TaskFile.text(
            render("environment/Dockerfile", base=_base_image(dsl, task, "sandbox (agent)"), dsl=dsl.key,
                   dsl_name=dsl.name, captured_copy=_captured_copy(problem))
        ),
        "environment/docker-compose.yaml": TaskFile.text(
            render("environment/docker-compose.yaml", task=task, minutes=str(config.AGENT_TIMEOUT_SEC // 60),
                   **compose_values())
        ),
        "environment/submit": TaskFile.text(template_text("environment/submit"), executable=True),
        "environment/check": TaskFile.text(render("environment/check", dsl=dsl.key), executable=True),
        "environment/budget.sh": TaskFile.text(template_text("environment/budget.sh")),
        "environment/dsl_docs.py": TaskFile(docs.read_bytes()),
        "environment/official_docs.py": TaskFile((Path(__file__).parent / "official_docs.py").read_bytes()),
        "environment/problem.py": TaskFile(problem.spec.path.read_bytes()),
        f"environment/docs/{dsl.key}.md": TaskFile.text(template_text(f"docs/{dsl.key}.md")),
    }
    if problem.captured_file is not None:  # the captured values travel beside the problem, as in problems/
        files[f"environment/problem{CAPTURED_SUFFIX}"] = TaskFile(problem.captured_file.read_bytes())
    files |= _judge_client("environment", SANDBOX_CLIENT)
    # the static rules as the judge applies them (standard library only; they hold no secret)
    rules = Path(metakernelbench.verifier.__file__).parent / "rules.py"
    files["environment/metakernelbench/verifier/__init__.py"] = TaskFile.text(_PKG_DOC)
    files["environment/metakernelbench/verifier/rules.py"] = TaskFile(rules.read_bytes())
    files["environment/metakernelbench/__init__.py"] = TaskFile.text(
        '"""The part of MetaKernelBench that problem files import, and the `submit` client; the grader is not here."""'
    )
    files["environment/metakernelbench/problem_kit.py"] = TaskFile(kit.read_bytes())
    return files


def _captured_copy(problem: Problem) -> str:
    """The sandbox Dockerfile's line for the problem's captured values; empty when it has none."""
    if problem.captured_file is None:
        return ""
    return f"COPY problem{CAPTURED_SUFFIX} /app/problem{CAPTURED_SUFFIX}\n"


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
            render("tests/Dockerfile", task=task, dsl=dsl.key, base_image=config.BASE_IMAGE)
        ),
        "tests/docker-compose.yaml": TaskFile.text(render("tests/docker-compose.yaml", **compose_values())),
        "tests/test.sh": TaskFile.text(
            render(
                "tests/test.sh",
                task=task,
                dsl_name=dsl.name,
                grade_timeout=str(config.VERIFIER_TIMEOUT_SEC - config.GRADE_TIMEOUT_MARGIN_SEC),
            ),
            executable=True,
        ),
        "tests/grading.json": TaskFile.text(_grading_json(problem, dsl, task)),
    }
    files |= _judge_client("tests/client", VERIFIER_CLIENT)
    return files


def image_files() -> dict[str, TaskFile]:
    """``images/``: the per-DSL grader images the judge evaluates in, the judge's image and compose file.

    Each grader image shares its base layers, textually, with the sandbox images of its DSL
    (``image-base.Dockerfile``), so sandbox and grader run the same pinned software.
    """
    files: dict[str, TaskFile] = {}
    for key, dsl in DSLS.items():
        image = config.GRADER_IMAGES[key]
        base = _base_image(dsl, f"every {dsl.name} task (image {image})", "grader (judge evaluation)")
        files[f"images/grader-{key}.Dockerfile"] = TaskFile.text(
            render("images/grader.Dockerfile", base=base, dsl=key, image=image))
    files["images/judge.Dockerfile"] = TaskFile.text(render(
        "images/judge.Dockerfile", judge_image=config.JUDGE_IMAGE, base_image=config.BASE_IMAGE,
        judge_pins=" ".join(config.JUDGE_PINS), port=str(config.JUDGE_PORT)))
    files["images/judge-compose.yaml"] = TaskFile.text(render(
        "images/judge-compose.yaml", grader_cutedsl=config.GRADER_IMAGES["cutedsl"],
        grader_tirx=config.GRADER_IMAGES["tirx"], state_volume=config.JUDGE_STATE_VOLUME, **compose_values()))
    return files


def oracle_path(problem: Problem, dsl: Dsl, oracles_dir: Path) -> Path:
    """Where the oracle kernel of this task lives in the repository (it may not exist yet)."""
    return oracle_file(problem, dsl.key, oracles_dir)


def _solution_files(problem: Problem, dsl: Dsl, task: str, oracles_dir: Path) -> dict[str, TaskFile]:
    oracle = oracle_path(problem, dsl, oracles_dir)
    shown = f"oracles/{problem.spec.family}/{oracle.name}"
    if not oracle.is_file():
        script = render("solution/no-oracle.sh", task=task, oracle_path=shown)
        return {"solution/solve.sh": TaskFile.text(script, executable=True)}
    script = render("solution/solve.sh", task=task, dsl_name=dsl.name, oracle_path=shown)
    return {
        "solution/solve.sh": TaskFile.text(script, executable=True),
        "solution/kernel.py": TaskFile(oracle.read_bytes()),
    }


def render_task(problem: Problem, dsl: Dsl, oracles_dir: Path,
                remote_judge: str | None = None) -> dict[str, TaskFile]:
    """Every file of one task folder, keyed by its path relative to the folder, sorted.

    ``remote_judge`` (a URL) renders the remote-judge variant: no compose files, and the sandbox and
    verifier may reach only the judge's host (Harbor's allowlist network mode).
    """
    task = task_name(problem, dsl)
    found = estimate(oracle_path(problem, dsl, oracles_dir))
    files = {
        "README.md": TaskFile.text(task_readme(problem, dsl, task, task_name(problem, dsl.other), found)),
        "instruction.md": TaskFile.text(instruction_md(problem, dsl, task)),
        "task.toml": TaskFile.text(_task_toml(problem, dsl, found, remote_judge)),
    }
    files |= _sandbox_files(problem, dsl, task)
    files |= _verifier_files(problem, dsl, task)
    files |= _solution_files(problem, dsl, task, oracles_dir)
    if remote_judge:
        files = {k: v for k, v in files.items() if not k.endswith("docker-compose.yaml")}
    return dict(sorted(files.items()))
