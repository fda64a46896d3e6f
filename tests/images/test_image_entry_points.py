"""Each image's entry points start with exactly what its Dockerfile installs (no Docker needed).

Why: the judge's server once imported torch through the problem loader; the judge image installs no
torch, and its build check (``serve --help``) never imported the server, so the judge container
restarted in a loop and only a manual Docker run noticed. Here every image of the Docker mode (the
judge and relay, the two grader images, and a task's sandbox and verifier images of each DSL) runs
its entry points in a process that can import only what that Dockerfile installs
(``image_env``): the commands' ``--help``, the modules those commands import when they run (lazy
imports included: the server, the relay, the runner and grader, the Docker SDK), and in the sandbox
the ``check`` tool on the task's reference kernel. The guard itself is tested to refuse what an
image lacks, so these tests can fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from image_env import REPO, installs, run_in_image

JUDGE = REPO / "images" / "judge.Dockerfile"
GRADERS = {"tirx": REPO / "images" / "grader-tirx.Dockerfile", "cutedsl": REPO / "images" / "grader-cutedsl.Dockerfile"}
DSL_MODULES = {"tirx": ["tvm", "tvm.script.tirx"], "cutedsl": ["cutlass", "cutlass.cute"]}

# Runs in the guarded process: each (module, argv) as `python -m module argv` (SystemExit 0 is
# success), then each module imported; writes what was imported from where to the file argv[2]
# (not to stdout: the runner moves fd 1 away for its report channel).
DRIVER = r"""
import importlib, json, runpy, sys
commands, modules = json.loads(sys.argv[1])
out = sys.argv[2]
for module, argv in commands:
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise SystemExit(f"python -m {module} {' '.join(argv)} exited with {exc.code}")
for name in modules:
    importlib.import_module(name)
with open(out, "w") as f:
    json.dump({m: getattr(sys.modules[m], "__file__", None) for m in modules}, f)
"""


def start(dockerfile: Path, tmp: Path, commands: list[tuple[str, list[str]]], modules: list[str]) -> dict:
    """Run the entry points under the image's guard; what each module was imported from."""
    out = tmp / "imported.json"
    done = run_in_image(installs(dockerfile), ["-c", DRIVER, json.dumps([commands, modules]), str(out)], tmp)
    assert done.returncode == 0, f"{dockerfile.relative_to(REPO)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    where = json.loads(out.read_text())
    project = [f for m, f in where.items() if m.startswith("metakernelbench")]
    assert all(f.startswith(str(tmp)) for f in project), f"not the image's copy: {project}"
    return where


def task_dirs(dsl: str) -> list[Path]:
    return sorted(p for p in (REPO / "tasks").iterdir() if p.name.endswith(f"_{dsl}") and (p / "task.toml").is_file())


def test_the_guard_refuses_what_an_image_does_not_install(tmp_path):
    """The check can fail: torch and the problem loader's torch-bound kit are absent from the judge
    image, and a task's sandbox copies only part of the package."""
    done = run_in_image(installs(JUDGE), ["-c", "import metakernelbench.problem_kit"], tmp_path / "judge")
    assert done.returncode != 0
    assert "No module named 'torch': images/judge.Dockerfile does not install it" in done.stderr, done.stderr
    sandbox = task_dirs("tirx")[0] / "environment" / "Dockerfile"
    done = run_in_image(installs(sandbox), ["-c", "import metakernelbench.problems"], tmp_path / "sandbox")
    assert done.returncode != 0 and "in the files" in done.stderr, done.stderr
    done = run_in_image(installs(GRADERS["tirx"]), ["-c", "import triton"], tmp_path / "grader")
    assert "No module named 'triton'" in done.stderr, "the grader images uninstall Triton"


def test_dockerfile_install_lists_are_read():
    judge = installs(JUDGE)
    assert judge.installs_project and not judge.pythonpath
    assert {r.split("==")[0] for r in judge.requirements} == {"docker", "pydantic", "typer", "rich", "setuptools"}
    grader = installs(GRADERS["tirx"])
    assert any(r.startswith("torch==") for r in grader.requirements) and grader.uninstalled == ["triton"]
    sandbox = installs(task_dirs("cutedsl")[0] / "environment" / "Dockerfile")
    assert sandbox.pythonpath == ["/opt/mkb"] and not sandbox.installs_project
    assert any(r.startswith("nvidia-cutlass-dsl[cu13]==") for r in sandbox.requirements)
    verifier = installs(task_dirs("tirx")[0] / "tests" / "Dockerfile")
    assert verifier.has_python and not verifier.requirements and verifier.pythonpath == ["/tests/client"]


def test_judge_image_serves_relays_and_reaches_docker(tmp_path):
    """The judge image's CMD (serve, Docker isolation) and the relay of every trial."""
    judge = "metakernelbench.judge"
    start(JUDGE, tmp_path, [(judge, ["serve", "--help"]), (judge, ["relay", "--help"])],
                  [f"{judge}.__main__", f"{judge}.server", f"{judge}.relay", f"{judge}.client", "docker",
                   "docker.types"])


@pytest.mark.slow
@pytest.mark.parametrize("dsl", sorted(GRADERS))
def test_grader_image_runs_an_evaluation(dsl, tmp_path):
    """What the judge starts in a grader container: the runner, the grader, the workers, the DSL."""
    start(GRADERS[dsl], tmp_path, [("metakernelbench.judge.runner", ["--help"])],
          ["metakernelbench.judge.runner", "metakernelbench.verifier.grader",
           "metakernelbench.verifier.launch", "metakernelbench.verifier.worker", "torch", *DSL_MODULES[dsl]])


@pytest.mark.slow
@pytest.mark.parametrize("dsl", sorted(GRADERS))
def test_task_sandbox_image_has_its_tools(dsl, tmp_path):
    """The agent's tools in the sandbox: submit, check (run on the task's reference kernel), and the
    problem file's own imports. Every task of a DSL has the same install list."""
    tasks = task_dirs(dsl)
    first = installs(tasks[0] / "environment" / "Dockerfile")
    for task in tasks[1:]:
        other = installs(task / "environment" / "Dockerfile")
        assert (other.requirements, other.uninstalled, other.pythonpath) == \
            (first.requirements, first.uninstalled, first.pythonpath), task.name
    # the check on the shortest reference kernel of the DSL (it builds the kernel: the shortest builds fastest)
    task = min(tasks, key=lambda t: len((t / "solution" / "kernel.py").read_text().splitlines()))
    env = task / "environment"
    start(env / "Dockerfile", tmp_path / "tools",
          [("metakernelbench.judge.submit", ["--help"]), ("metakernelbench.judge.check", ["--help"])],
          ["metakernelbench.problem_kit", "torch", *DSL_MODULES[dsl]])
    kernel = task / "solution" / "kernel.py"
    done = run_in_image(first, ["-m", "metakernelbench.judge.check", "--dsl", dsl, "--problem",
                                str(env / "problem.py"), str(kernel)], tmp_path / "check")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.parametrize("dsl", sorted(GRADERS))
def test_task_verifier_image_sends_the_final_grade(dsl, tmp_path):
    """The verifier image has the standard library and the task's judge client only."""
    start(task_dirs(dsl)[0] / "tests" / "Dockerfile", tmp_path,
          [("metakernelbench.judge.final", ["--help"])], ["metakernelbench.judge.final"])


def test_interpreter_is_the_images_kind():
    """The guard runs this interpreter; the images have CPython 3.12 or 3.13 (docs/running.md)."""
    assert sys.version_info[:2] in ((3, 12), (3, 13))
