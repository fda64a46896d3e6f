"""``scripts/offline-bundle.sh`` asks pip for what a grading host needs, for the host's platform.

pip itself is replaced by a stub that records its arguments and writes a few empty wheels, so the
test downloads nothing: it checks what the script asks for (the project's pins, the DSLs, no Harbor,
LiteLLM or, with --without-torch, torch), for which platforms (every manylinux tag the host's glibc
accepts: pip takes --platform literally), and what it leaves in the bundle (no Triton, sums of the rest).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "offline-bundle.sh"
STUB = f"""#!/bin/sh
# "python -m pip download ...": record the arguments, leave three wheels; anything else: the real Python
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "$@" > "$PIP_ARGS"
  while [ $# -gt 0 ]; do [ "$1" = "--dest" ] && dest=$2; shift; done
  for w in torch-2.11.0-cp312-cp312-linux_x86_64 triton-3.6.0-cp312-cp312-linux_x86_64 rich-15.0.0-py3-none-any; do
    : > "$dest/$w.whl"
  done
  exit 0
fi
exec "{sys.executable}" "$@"
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PYTHON": str(stub), "PIP_ARGS": str(tmp_path / "pip-args")}
    return subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path / "bundle"), *args], capture_output=True,
                          text=True, timeout=120, env=env)


def _bundle(tmp_path: Path, *args: str) -> tuple[Path, str]:
    done = _run(tmp_path, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "bundle", (tmp_path / "pip-args").read_text()


def test_it_asks_for_the_pinned_grading_packages_for_the_hosts_platform(tmp_path):
    out, pip_args = _bundle(tmp_path, "--glibc", "2.28")
    wanted = (out / "requirements.txt").read_text().split()
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    torch_pin = next(r for r in dependencies if r.startswith("torch=="))
    assert torch_pin in wanted and any(r.startswith("nvidia-cutlass-dsl[cu13]==") for r in wanted), wanted
    assert any(r.startswith("apache-tvm==") for r in wanted), wanted
    assert not [r for r in wanted if r.startswith(("harbor", "litellm"))], wanted
    assert "-c requirements.lock" in pip_args and "--only-binary=:all:" in pip_args, pip_args
    for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
        assert f"--platform {tag}" in pip_args, pip_args
    assert "manylinux_2_29_x86_64" not in pip_args, pip_args


def test_triton_is_left_out_and_the_rest_is_summed(tmp_path):
    out, _ = _bundle(tmp_path)
    assert sorted(p.name.split("-")[0] for p in (out / "wheels").iterdir()) == ["rich", "torch"]
    summed = [line.split()[-1] for line in (out / "SHA256SUMS").read_text().splitlines()]
    assert sorted(summed) == sorted(p.name for p in (out / "wheels").iterdir())


def test_without_torch_torch_is_not_asked_for(tmp_path):
    # the stub leaves a torch wheel all the same, which the script must refuse as an unasked-for dependency
    done = _run(tmp_path, "--without-torch")
    assert not [r for r in (tmp_path / "bundle" / "requirements.txt").read_text().split() if r.startswith("torch")]
    assert done.returncode == 1 and "torch came in as a dependency" in done.stderr, done.stderr
