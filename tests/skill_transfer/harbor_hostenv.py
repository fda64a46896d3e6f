"""A minimal Harbor environment for the opt-in end-to-end test: host subprocesses, no container.

Each ``exec`` runs in a private mount namespace (``unshare --mount``) in which the trial's folders
are bind-mounted over the container paths Harbor uses (``/app``, ``/tests``, ``/solution`` from a
per-trial scratch root, ``/logs/{agent,verifier,artifacts}`` straight onto the trial folder, as
Docker's bind mounts do). It needs root, ``unshare`` and empty mount points at those paths. It is
test scaffolding for checking Harbor's real output layout, not a sandbox.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

MOUNT_POINTS = ("/app", "/tests", "/solution", "/logs/agent", "/logs/verifier", "/logs/artifacts")


def _copy(src: Path, dst: Path) -> None:
    if dst.exists() and dst.resolve() == src.resolve():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)


def _copytree(src: Path, dst: Path) -> None:
    if dst.resolve() == src.resolve() or dst.resolve().is_relative_to(src.resolve()):
        return  # already in place (a bind-mounted log folder)
    shutil.copytree(src, dst, dirs_exist_ok=True)


class HostEnv(BaseEnvironment):
    """Runs the trial's commands on the host with the container paths bind-mounted."""

    @staticmethod
    def type() -> str:
        return "mkb-test-host"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(mounted=True)

    def _validate_definition(self) -> None:
        return None

    @property
    def _root(self) -> Path:
        return self.trial_paths.trial_dir / ".root"

    def _host(self, path: str) -> Path:
        """Where a container path lives on the host."""
        logs = {
            "/logs/agent": self.trial_paths.agent_dir,
            "/logs/verifier": self.trial_paths.verifier_dir,
            "/logs/artifacts": self.trial_paths.artifacts_dir,
        }
        text = str(path)
        for container, host in logs.items():
            if text == container or text.startswith(container + "/"):
                return Path(host) / text[len(container):].lstrip("/")
        return self._root / text.lstrip("/")

    async def start(self, force_build: bool) -> None:
        for name in ("app", "tests", "solution"):
            (self._root / name).mkdir(parents=True, exist_ok=True)
        self.trial_paths.mkdir()

    async def stop(self, delete: bool) -> None:
        if delete:
            shutil.rmtree(self._root, ignore_errors=True)

    async def upload_file(self, source_path, target_path) -> None:
        _copy(Path(source_path), self._host(target_path))

    async def upload_dir(self, source_dir, target_dir) -> None:
        _copytree(Path(source_dir), self._host(target_dir))

    async def download_file(self, source_path, target_path) -> None:
        _copy(self._host(source_path), Path(target_path))

    async def download_dir(self, source_dir, target_dir) -> None:
        _copytree(self._host(source_dir), Path(target_dir))

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        binds = " && ".join(f"mount --bind {shlex.quote(str(self._host(m)))} {m}" for m in MOUNT_POINTS)
        inner = f"{binds} && cd {shlex.quote(cwd or '/app')} && bash -c {shlex.quote(command)}"
        proc = await asyncio.create_subprocess_exec(
            "unshare", "--mount", "--propagation", "private", "bash", "-c", inner,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
        return ExecResult(stdout=out.decode(), stderr=err.decode(), return_code=proc.returncode)
