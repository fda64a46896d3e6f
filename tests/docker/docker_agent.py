"""A scripted Harbor agent for the Docker-mode trial (tests/docker/test_docker_trial.py).

It drives the sandbox container through ``environment.exec`` and records every command and its
output in ``<trial>/agent/script.json``: what the sandbox can reach (the relay, and neither the judge
nor the internet), whether any token or secret is visible in it, a wrong kernel and the right one
through ``submit``, then the right kernel and a skill file left on disk for the final grade.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from harbor.agents.base import BaseAgent

RIGHT = Path(__file__).resolve().parents[1] / "fixtures" / "kernels" / "rmsnorm_tirx_llvm.py"
SKILL = """# Skill: fused add + RMSNorm

Findings: one fused pass over each row is correct; scaling the normalizer by 5% fails the max-abs check.
Split: the whole computation is in the DSL kernel; eager PyTorch only allocates the output.
Open questions: the GPU schedule (rows per block) is untested in this attempt.
"""
# Connects to HOST:PORT with a short timeout; prints "reached" or the error's class and text.
PROBE = ("import socket, sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
         "    print('reached')\n"
         "except OSError as exc:\n"
         "    print('refused', type(exc).__name__, exc)\n")


def wrong(text: str) -> str:
    return text.replace("scale * T.float32(weight[i])", "scale * T.float32(1.05) * T.float32(weight[i])")


class DockerAgent(BaseAgent):
    SUPPORTS_ATIF = False

    @staticmethod
    def name() -> str:
        return "mkb-docker-scripted"

    def version(self) -> str:
        return "1"

    async def setup(self, environment) -> None:
        return None

    async def run(self, instruction: str, environment, context) -> None:
        log: list[dict] = []

        async def sh(label: str, command: str, timeout: int = 900) -> dict:
            result = await environment.exec(command, timeout_sec=timeout)
            entry = {"label": label, "command": command, "rc": result.return_code,
                     "stdout": result.stdout or "", "stderr": result.stderr or ""}
            log.append(entry)
            (self.logs_dir / "script.json").write_text(json.dumps(log, indent=2))
            return entry

        async def put(path: str, text: str) -> None:
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
                f.write(text)
            await environment.upload_file(f.name, path)
            os.unlink(f.name)

        right = RIGHT.read_text()
        await put("/tmp/probe.py", PROBE)
        await sh("instruction-files", "ls /app /app/docs && test -x \"$(command -v submit)\" && echo has-submit")
        await sh("reach-relay", "python /tmp/probe.py judge-relay 8765")
        await sh("reach-judge", "python /tmp/probe.py mkb-judge 8765")
        await sh("reach-internet", "python /tmp/probe.py pypi.org 443")
        await sh("reach-internet-ip", "python /tmp/probe.py 1.1.1.1 443")
        await sh("secrets", "ls -A /run/mkb-judge 2>&1; echo \"token=[${MKB_JUDGE_TOKEN:-}]\"; "
                            "env | grep -c -i -E 'relay.token|final.token' || true")
        await put("/app/kernel.py", wrong(right))
        await sh("wrong", "submit")
        await put("/app/kernel.py", right)
        await sh("right", "submit")
        await put("/app/SKILL.md", SKILL)
        (self.logs_dir / "script.json").write_text(json.dumps(log, indent=2))
