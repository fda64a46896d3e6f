"""What one rendered task contains: layout, task.toml values, instruction sections, images, oracle."""

import re
import subprocess
import sys
import sysconfig

import pytest
from adapters_support import ORACLES, T25, T28
from harbor.models.task.config import TaskConfig, VerifierEnvironmentMode

from metakernelbench.adapters.config import BASE_IMAGE
from metakernelbench.adapters.dsl import DSLS
from metakernelbench.adapters.render import render_task
from metakernelbench.adapters.workload import VARIES, describe_inputs
from metakernelbench.problems import PROBLEMS_DIR, load_problem

SECTIONS = [
    "## Goal",
    "## Rules",
    "## How the kernel is graded",
    "## The skill file: /app/SKILL.md",
    "## Budget and feedback",
    "## Files",
]


def _files(task_dir):
    return sorted(p.relative_to(task_dir).as_posix() for p in task_dir.rglob("*") if p.is_file())


def test_layout_of_a_task(built):
    out, _ = built
    task = out / f"{T28}_cutedsl"
    files = _files(task)
    top = [f for f in files if not f.startswith("tests/grader/")]
    assert top == [
        "environment/Dockerfile",
        "environment/docs/cutedsl.md",
        "environment/metakernelbench/__init__.py",
        "environment/metakernelbench/problem_kit.py",
        "environment/problem.py",
        "instruction.md",
        "solution/kernel.py",
        "solution/solve.sh",
        "task.toml",
        "tests/Dockerfile",
        "tests/grading.json",
        f"tests/problems/mlp_norm/{T28}.py",
        "tests/test.sh",
    ]
    grader = [f for f in files if f.startswith("tests/grader/")]
    for needed in ("pyproject.toml", "metakernelbench/problems.py", "metakernelbench/problem_kit.py",
                   "metakernelbench/verifier/__init__.py"):
        assert f"tests/grader/{needed}" in grader
    assert not any("/adapters/" in f or "/skill_transfer/" in f or "__pycache__" in f for f in files)
    assert (task / "tests/test.sh").stat().st_mode & 0o111
    assert (task / "solution/solve.sh").stat().st_mode & 0o111
    assert not (task / "task.toml").stat().st_mode & 0o111


def test_task_toml_values(built):
    out, _ = built
    cfg = TaskConfig.model_validate_toml((out / f"{T28}_tirx/task.toml").read_text())
    assert cfg.schema_version == "1.4"
    assert cfg.task.name == f"metakernelbench/{T28}_tirx"
    assert cfg.artifacts == ["/app/kernel.py", "/app/SKILL.md"]
    env = cfg.environment
    assert (env.cpus, env.memory_mb, env.gpus, env.network_mode.value) == (2, 8192, 0, "no-network")
    assert env.docker_image is None and env.build_timeout_sec == 1800
    assert cfg.agent.timeout_sec == 2400
    assert cfg.verifier.environment_mode is VerifierEnvironmentMode.SEPARATE
    venv = cfg.verifier.environment
    assert venv.gpus == 1 and venv.gpu_types == ["H200"] and venv.network_mode.value == "no-network"
    assert cfg.metadata["pair"] == f"metakernelbench/{T28}_cutedsl"
    assert cfg.metadata["problem"] == T28 and cfg.metadata["dsl"] == "tirx"
    assert len(cfg.metadata["problem_sha256"]) == 64


def test_instruction_sections_and_problem_facts(built):
    out, _ = built
    text = (out / f"{T28}_cutedsl/instruction.md").read_text()
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert text.startswith("# Residual add fused with RMSNorm")
    assert "def solve(hidden_states, residual, weight):" in text
    assert "| 0 | `hidden_states` | tensor | `[14509, 4096]` | `bfloat16` |" in text
    assert "It returns one tensor, `output`." in text
    assert "**CuTe DSL.**" in text and "TIRx" not in text
    for fact in ("5 independent fresh draws", "F = 3", "10 warmup calls", "50 timed calls",
                 "capped at 100x", "bypass test", "CUDA graphs", "40 minutes", "10 submissions",
                 "`submit`", "No code, no commands, no API instructions", "Triton"):
        assert fact in text, fact
    assert "{{" not in text and "}}" not in text


def test_in_place_problem_instruction(built):
    out, _ = built
    text = (out / f"{T25}_tirx/instruction.md").read_text()
    assert "It returns `None`" in text
    assert "It must update `dst_k` and `dst_v` in place" in text
    assert "| 2 | `dst_k` | tensor | `[1024, 32, 8, 256]` | `uint8` | **updated in place** (graded) |" in text
    assert "**Physical floor.** Any correct implementation moves at least 67,112,960 bytes;" in text
    assert "0 operations" not in text


DATA_DEPENDENT = '''"""A synthetic problem whose generator needs values: .item(), nonzero and tolist.

Only for the input-description tests.
"""

import torch

PROVENANCE = dict(source="test", model="none", upstream="none", license="Apache-2.0")
INPUTS = ("x", "picked", "lengths", "scale", "eps")
OUTPUTS = ("y",)
SMALL_WORKLOAD = dict(n=8)


def make_inputs(device, generator, *, n=64):
    x = torch.randn(n, 4, device=device, generator=generator)
    picked = x[(x[:, 0] > 0).nonzero().flatten()]
    lengths = torch.randint(1, 5, (3,), device=device, generator=generator)
    table = torch.zeros(3, max(lengths.tolist()), device=device)
    scale = float(x.abs().amax().item())
    return x, picked, table, scale, 1e-6


def reference(x, picked, lengths, scale, eps):
    return x * scale + eps
'''


def test_input_descriptions_never_guess_drawn_values(tmp_path):
    path = tmp_path / "mlp_norm" / "99_data_dependent.py"
    path.parent.mkdir()
    path.write_text(DATA_DEPENDENT)
    info = {i.name: i for i in describe_inputs(load_problem(path))}
    assert (info["x"].shape, info["x"].dtype) == ("[64, 4]", "float32")
    assert info["picked"].shape == VARIES and info["lengths"].shape == VARIES
    assert info["scale"].kind == "float" and info["scale"].value == ""
    assert info["eps"].value == "1e-06"


def _without_dsl(text, dsl):
    paragraph = re.compile(r"^\*\*" + re.escape(dsl.name) + r"\.\*\*.*?(?=\n\n)", re.S | re.M)
    text, count = paragraph.subn("<DSL PARAGRAPH>", text)
    assert count == 1
    return text.replace(dsl.name, "<DSL>").replace(dsl.key, "<dsl>")


def test_variants_differ_only_in_the_dsl(built):
    out, _ = built
    for stem in (T28, T25):
        texts = [_without_dsl((out / f"{stem}_{d.key}/instruction.md").read_text(), d)
                 for d in DSLS.values()]
        assert texts[0] == texts[1]


def test_images_pin_versions_and_keep_tests_out_of_the_sandbox(built):
    out, _ = built
    for dsl in DSLS.values():
        task = out / f"{T28}_{dsl.key}"
        sandbox = (task / "environment/Dockerfile").read_text()
        grader = (task / "tests/Dockerfile").read_text()
        for image in (sandbox, grader):
            assert f"FROM {BASE_IMAGE}" in image
            assert "torch==2.11.0" in image and "pip uninstall -y triton" in image
            for package in dsl.packages:
                assert package in image
            for package in dsl.other.packages:
                assert package not in image
        assert "tmux asciinema" in sandbox and "tmux" not in grader
        assert "COPY . /tests/" in grader and "pip install --no-deps --no-build-isolation /tests/grader" in grader
        copies = [line for line in sandbox.splitlines() if line.startswith(("COPY", "ADD"))]
        assert copies and not any(("tests" in c or "solution" in c or "grader" in c) for c in copies)
        # The shared layers are textually identical in the two images of one DSL.
        assert sandbox.split("# Terminus-2")[0].split("FROM")[1] == grader.split("# ---- task")[0].split("FROM")[1]


def test_solution_installs_the_oracle(built):
    out, _ = built
    task = out / f"{T28}_cutedsl"
    assert (task / "solution/kernel.py").read_bytes() == (ORACLES / f"{T28}_cutedsl.py").read_bytes()
    assert "cp /solution/kernel.py /app/kernel.py" in (task / "solution/solve.sh").read_text()


def test_solution_without_oracle_fails_honestly(tmp_path):
    problem = load_problem(PROBLEMS_DIR / "mlp_norm" / f"{T28}.py")
    files = render_task(problem, DSLS["tirx"], tmp_path / "no-oracles")
    assert "solution/kernel.py" not in files
    script = tmp_path / "solve.sh"
    script.write_bytes(files["solution/solve.sh"].content)
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "no oracle kernel for this task yet" in run.stderr


def _isolated_python(grader_dir, code):
    """Run ``code`` with the vendored grader first on sys.path and without the editable install."""
    site = sysconfig.get_paths()["purelib"]
    prelude = f"import sys; sys.path[:0] = [{str(grader_dir)!r}]; sys.path.append({site!r}); "
    return subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True, text=True)


def test_vendored_grader_is_self_contained(built):
    out, _ = built
    grader = out / f"{T28}_cutedsl/tests/grader"
    problem = out / f"{T28}_cutedsl/tests/problems/mlp_norm/{T28}.py"
    run = _isolated_python(grader, (
        "import metakernelbench, metakernelbench.verifier.result as r; "
        "from metakernelbench.problems import load_problem; "
        f"p = load_problem({str(problem)!r}); "
        "print(metakernelbench.__file__); print(r.__file__); print(p.spec.name)"
    ))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split()
    assert lines[0].startswith(str(grader)) and lines[1].startswith(str(grader))
    assert lines[2] == T28


def test_vendored_grader_runs_mkb(built):
    out, _ = built
    grader = out / f"{T28}_cutedsl/tests/grader"
    run = _isolated_python(grader, "from metakernelbench.cli import app; print(app.registered_commands)")
    assert run.returncode == 0, run.stderr
