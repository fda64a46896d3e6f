"""``benchmarks/h200_env.sh`` picks the host's environment: the earlier bundle layout when its setup
script is there (hosts prepared that way keep working), else the checkout's ``.venv`` (from
``scripts/setup-dev.sh`` or ``scripts/offline-install.sh``), else it stops and says how to make one.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ENV_SH = Path(__file__).resolve().parents[2] / "benchmarks" / "h200_env.sh"


def _source(host: Path) -> subprocess.CompletedProcess:
    script = f'source "{ENV_SH}"; echo "rc=$?"'
    return subprocess.run(["bash", "-c", script], cwd=host, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "HOME": str(host)})


def _fake_venv(host: Path) -> None:
    """A .venv whose activate puts a python3 first on PATH that only echoes what it was asked."""
    bin_dir = host / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "python3"):
        stub = bin_dir / name
        stub.write_text('#!/bin/sh\necho "venv python $*"\n')
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    (bin_dir / "activate").write_text(f'echo activated; export PATH="{bin_dir}:$PATH"\n')


def test_the_earlier_layout_is_used_when_its_setup_script_is_there(tmp_path):
    setup = tmp_path / ".gpu" / "setup" / "setup.sh"
    setup.parent.mkdir(parents=True)
    setup.write_text("echo earlier layout sourced; return 1\n")
    _fake_venv(tmp_path)
    done = _source(tmp_path)
    assert "earlier layout sourced" in done.stdout and "activated" not in done.stdout, done.stdout
    assert done.stdout.strip().endswith("rc=1"), done.stdout


def test_the_checkout_venv_is_activated_otherwise(tmp_path):
    _fake_venv(tmp_path)
    done = _source(tmp_path)
    assert done.stdout.startswith("activated"), done.stdout + done.stderr
    assert "venv python -c import metakernelbench.verifier.grader, torch" in done.stdout, done.stdout
    assert done.stdout.strip().endswith("rc=0"), done.stdout


def test_without_either_it_says_how_to_make_one(tmp_path):
    done = _source(tmp_path)
    assert done.stdout.strip().endswith("rc=1"), done.stdout
    assert "scripts/offline-bundle.sh" in done.stderr and "scripts/setup-dev.sh" in done.stderr, done.stderr
