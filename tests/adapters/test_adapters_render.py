"""What one rendered task contains: layout, task.toml values, instruction sections, images, oracle."""

import re
import subprocess
import sys
from pathlib import Path

import yaml
from adapters_support import ORACLES, T25, T28
from harbor.models.task.config import TaskConfig, VerifierEnvironmentMode

from metakernelbench.adapters.config import BASE_IMAGE
from metakernelbench.adapters.dsl import DSLS
from metakernelbench.adapters.render import image_files, render_task
from metakernelbench.adapters.workload import VARIES, describe_inputs
from metakernelbench.problems import load_problem, problems_dir

SECTIONS = [
    "## Goal",
    "## Rules",
    "## How the kernel is graded",
    "## The skill file: /app/SKILL.md",
    "## Budget and feedback",
    "## Suggested workflow",
    "## Files",
]


def _files(task_dir):
    return sorted(p.relative_to(task_dir).as_posix() for p in task_dir.rglob("*") if p.is_file())


def test_layout_of_a_task(built):
    out, _ = built
    task = out / f"{T28}_cutedsl"
    files = _files(task)
    client = "metakernelbench/judge"
    assert files == [
        "README.md",
        "environment/Dockerfile",
        "environment/budget.sh",
        "environment/check",
        "environment/docker-compose.yaml",
        "environment/docs/cutedsl.md",
        "environment/dsl_docs.py",
        "environment/metakernelbench/__init__.py",
        f"environment/{client}/__init__.py",
        f"environment/{client}/check.py",
        f"environment/{client}/client.py",
        f"environment/{client}/submit.py",
        "environment/metakernelbench/problem_kit.py",
        "environment/metakernelbench/verifier/__init__.py",
        "environment/metakernelbench/verifier/rules.py",
        "environment/official_docs.py",
        "environment/problem.py",
        "environment/submit",
        "instruction.md",
        "solution/kernel.py",
        "solution/solve.sh",
        "task.toml",
        "tests/Dockerfile",
        "tests/client/metakernelbench/__init__.py",
        f"tests/client/{client}/__init__.py",
        f"tests/client/{client}/client.py",
        f"tests/client/{client}/final.py",
        "tests/docker-compose.yaml",
        "tests/grading.json",
        "tests/test.sh",
    ]
    # no grader code anywhere in a task: the judge grades (the sandbox's `check` carries only the
    # static rules, which hold no secret)
    grader_code = ("grader.py", "worker.py", "launch.py", "evaluation.py", "timing.py", "guard.py", "result.py",
                   "__pycache__")
    assert not any(Path(f).name == name for f in files for name in grader_code)
    assert [f for f in files if Path(f).name == "rules.py"] == ["environment/metakernelbench/verifier/rules.py"]
    for script in ("tests/test.sh", "solution/solve.sh", "environment/submit", "environment/check"):
        assert (task / script).stat().st_mode & 0o111
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
    assert env.env["MKB_TASK"] == f"metakernelbench/{T28}_tirx"
    assert env.env["MKB_JUDGE_URL"] == "${MKB_JUDGE_URL:-http://judge-relay:8765}"
    assert cfg.agent.timeout_sec == 2400
    assert cfg.verifier.environment_mode is VerifierEnvironmentMode.SEPARATE
    assert cfg.verifier.env["MKB_JUDGE_TOKEN"] == "${MKB_JUDGE_FINAL_TOKEN:-}"
    venv = cfg.verifier.environment
    assert venv.gpus == 0 and venv.network_mode.value == "no-network"
    assert cfg.metadata["pair"] == f"metakernelbench/{T28}_cutedsl"
    assert cfg.metadata["problem"] == T28 and cfg.metadata["dsl"] == "tirx"
    assert len(cfg.metadata["problem_sha256"]) == 64


def test_compose_files_give_the_sandbox_the_relay_and_nothing_else(built):
    out, _ = built
    task = out / f"{T28}_tirx"
    sandbox = yaml.safe_load((task / "environment/docker-compose.yaml").read_text())
    assert sandbox["services"]["main"]["networks"] == ["sandbox"]
    assert sandbox["networks"]["sandbox"] == {"internal": True}
    relay = sandbox["services"]["judge-relay"]
    assert relay["networks"] == ["sandbox", "judge"] and relay["image"].endswith("metakernelbench/judge:0.1.0}")
    assert f"metakernelbench/{T28}_tirx" in relay["command"] and "volumes" not in sandbox["services"]["main"]
    assert sandbox["networks"]["judge"] == {"external": True, "name": "mkb-judge"}
    verifier = yaml.safe_load((task / "tests/docker-compose.yaml").read_text())
    assert verifier["services"]["main"]["networks"] == ["judge"]
    assert verifier["services"]["main"]["volumes"] == ["mkb-judge-secrets:/run/mkb-judge:ro"]


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
                 "`submit`", "No code, no commands, no API instructions", "Triton",
                 "Specialise only on what the task fixes", "## Suggested workflow", "Open questions",
                 "Do not give the file a title", "The shell prompt shows the minutes and submissions left"):
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
    images = image_files()
    for dsl in DSLS.values():
        task = out / f"{T28}_{dsl.key}"
        sandbox = (task / "environment/Dockerfile").read_text()
        grader = images[f"images/grader-{dsl.key}.Dockerfile"].content.decode()
        for image in (sandbox, grader):
            assert f"ARG BASE_IMAGE={BASE_IMAGE}\nFROM ${{BASE_IMAGE}}\n" in image  # a build argument
            assert "torch==2.11.0" in image and "pip uninstall -y triton" in image
            for package in dsl.packages:
                assert package in image
            for package in dsl.other.packages:
                assert package not in image
        assert "tmux asciinema" in sandbox and "tmux" not in grader
        assert f"--dsl {dsl.key} --out /app/docs/{dsl.key}-api" in sandbox
        assert "COPY problems/ /opt/mkb/problems/" in grader and "USER grader" in grader
        copies = [line for line in sandbox.splitlines() if line.startswith(("COPY", "ADD"))]
        assert copies and not any(("tests" in c or "solution" in c or "grader" in c) for c in copies)
        # The shared layers are textually identical in the sandbox and the grader image of one DSL.
        shared = sandbox.split("# Terminus-2")[0].split("FROM")[1]
        assert shared == grader.split("# ---- the grader")[0].split("FROM")[1]
        verifier = (task / "tests/Dockerfile").read_text()
        assert "COPY . /tests/" in verifier and "torch" not in verifier and "pip" not in verifier
        assert f"ARG BASE_IMAGE={BASE_IMAGE}\nFROM ${{BASE_IMAGE}}\n" in verifier
        # the sandbox's build also chooses whether the DSL's official documentation is fetched
        docs_args = {"MKB_OFFICIAL_DOCS": "${MKB_OFFICIAL_DOCS:-fetch}",
                     "MKB_DOCS_ARCHIVE_URL": "${MKB_DOCS_ARCHIVE_URL:-}"}
        for compose, extra in (("environment/docker-compose.yaml", docs_args), ("tests/docker-compose.yaml", {})):
            main = yaml.safe_load((task / compose).read_text())["services"]["main"]
            assert main["build"]["args"] == {"BASE_IMAGE": f"${{MKB_BASE_IMAGE:-{BASE_IMAGE}}}", **extra}
    judge = images["images/judge.Dockerfile"].content.decode()
    assert "docker==7.1.0" in judge and "torch" not in judge
    assert f"ARG BASE_IMAGE={BASE_IMAGE}\nFROM ${{BASE_IMAGE}}\n" in judge
    compose = yaml.safe_load(images["images/judge-compose.yaml"].content)
    assert compose["services"]["judge"]["build"]["args"] == {"BASE_IMAGE": f"${{MKB_BASE_IMAGE:-{BASE_IMAGE}}}"}


def test_solution_installs_the_oracle(built):
    out, _ = built
    task = out / f"{T28}_cutedsl"
    assert (task / "solution/kernel.py").read_bytes() == (ORACLES / "mlp_norm" / f"{T28}_cutedsl.py").read_bytes()
    assert "cp /solution/kernel.py /app/kernel.py" in (task / "solution/solve.sh").read_text()


def test_solution_without_oracle_fails_honestly(tmp_path):
    problem = load_problem(problems_dir() / "mlp_norm" / f"{T28}.py")
    files = render_task(problem, DSLS["tirx"], tmp_path / "no-oracles")
    assert "solution/kernel.py" not in files
    script = tmp_path / "solve.sh"
    script.write_bytes(files["solution/solve.sh"].content)
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "no oracle kernel for this task yet" in run.stderr


def test_captured_values_travel_beside_the_problem(tmp_path):
    """A problem with a sidecar gets it copied into the sandbox next to /app/problem.py; one without gets no line."""
    source = problems_dir() / "mlp_norm" / f"{T28}.py"
    path = tmp_path / "mlp_norm" / source.name
    path.parent.mkdir()
    path.write_bytes(source.read_bytes())
    plain = render_task(load_problem(path), DSLS["tirx"], ORACLES)
    assert "environment/problem.captured.json" not in plain
    assert "captured" not in plain["environment/Dockerfile"].content.decode()
    sidecar = b'{"source": "s", "record": "r", "license": "Apache-2.0", "attribution": "a", "values": {"v": [1]}}'
    path.with_name(path.stem + ".captured.json").write_bytes(sidecar)
    problem = load_problem(path)
    files = render_task(problem, DSLS["tirx"], ORACLES)
    assert files["environment/problem.captured.json"].content == sidecar
    dockerfile = files["environment/Dockerfile"].content.decode()
    assert "COPY problem.captured.json /app/problem.captured.json\n" in dockerfile
    assert dockerfile.index("COPY problem.py") < dockerfile.index("COPY problem.captured.json")
    # the digest the judge compares covers the sidecar
    assert problem.source_sha256 != load_problem(source).source_sha256


def _isolated_python(path, code):
    """Run ``code`` with only the standard library and ``path`` (no site-packages, no editable install)."""
    prelude = f"import sys; sys.path[:0] = [{str(path)!r}]; "
    return subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True, text=True)


def test_the_clients_in_the_images_need_only_the_standard_library(built):
    out, _ = built
    task = out / f"{T28}_cutedsl"
    run = _isolated_python(task / "tests/client", (
        "import metakernelbench.judge.final as f, sys; print(f.__file__); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pydantic', 'harbor')))"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(task / "tests/client/metakernelbench/judge/final.py"), "[]"]
    run = _isolated_python(task / "environment",
                           "import metakernelbench.judge.submit as s; s.main(['--help'])")
    assert run.returncode == 0, run.stderr
    assert "submissions" in run.stdout
