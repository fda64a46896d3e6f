"""``mkb --help`` and every command's ``--help``: written for users, and quick to answer.

The help is the first thing a newcomer runs, so it must not show the code's own notes (reST markup,
module docstrings, implementation remarks), must not lose text to rich's markup (a ``[...]`` in an
option's help is taken for a style tag and vanishes), and must not wait seconds for torch, Harbor or
LiteLLM to import: the commands import those only when they run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "harbor", "litellm", "tvm", "cutlass", "numpy", "docker", "ray")
# what a user's help must not show: reST markup, section signs of the design doc, notes about the code
INTERNAL = ("``", "§", "argparse", "docstring", "entry point exists", "deferred", "keeps `mkb --help` fast")

# Renders the root help and every command's help in one process, then lists the heavy packages
# that were imported on the way, with each option's raw help text.
PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    import typer.main
    from metakernelbench.cli import app

    group = typer.main.get_command(app)
    texts, option_help = {}, {}
    for name in ["", *sorted(group.commands)]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            group.main([name, "--help"] if name else ["--help"], prog_name="mkb")
        texts[name] = out.getvalue()
        if name:
            option_help[name] = [p.help or "" for p in group.commands[name].params]
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
    print(json.dumps({"texts": texts, "options": option_help, "heavy": heavy}))
""")


@pytest.fixture(scope="module")
def probe() -> dict:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_help_imports_no_heavy_package(probe):
    assert probe["heavy"] == [], f"--help imported {probe['heavy']}: import them inside the command"
    assert {"grade", "judge", "build", "arms", "annotate"} <= set(probe["texts"])


def test_help_texts_hold_no_internal_notes(probe):
    for name, text in probe["texts"].items():
        assert text.strip(), f"mkb {name} --help printed nothing"
        found = [marker for marker in INTERNAL if marker in text]
        assert not found, f"mkb {name} --help shows {found}:\n{text}"


def test_option_help_has_no_markup_that_rich_would_swallow(probe):
    for name, helps in probe["options"].items():
        for text in helps:
            assert "[" not in text, f"mkb {name}: {text!r} (rich drops [..]; write (default: ...))"


def test_root_help_speaks_to_users(probe):
    text = probe["texts"][""]
    assert "MetaKernelBench" in text and "typer app" not in text, text
