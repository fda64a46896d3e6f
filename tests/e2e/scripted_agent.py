"""A scripted Harbor agent for the end-to-end test: it drives the sandbox like a model would, through
``environment.exec``, and records every command and its output in ``<trial>/agent/script.json``.

On problem 28 (the full script): ``submit`` without a kernel, a wrong kernel, a parse error (refused
by ``submit`` and, sent straight to the judge, refused there too), a judge restart, the right
kernel, kernels that break a static rule until the budget is spent, one submission too many, then
the right kernel and a skill file left on disk. On any other problem (the concurrent trial): one
right kernel and a skill file.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path

from harbor.agents.base import BaseAgent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
RIGHT = {"28": "rmsnorm_tirx_llvm.py", "25": "blockcopy_tirx_llvm.py"}
SKILL = """# Skill: fused add + RMSNorm

Findings: one fused pass over each row is correct; scaling the normalizer by 5% fails the max-abs check
by a wide margin (the report showed the error against the allowance).
Split: the whole computation is in the DSL kernel; eager PyTorch only allocates the output.
Open questions: the GPU schedule (rows per block) is untested in this attempt.
"""


def wrong(text: str) -> str:
    return text.replace("scale * T.float32(weight[i])", "scale * T.float32(1.05) * T.float32(weight[i])")


class ScriptedAgent(BaseAgent):
    SUPPORTS_ATIF = False

    @staticmethod
    def name() -> str:
        return "mkb-scripted"

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
            with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
                f.write(text)
            await environment.upload_file(f.name, path)
            os.unlink(f.name)

        problem = next((k for k in RIGHT if f"/{k}_" in instruction or f"`{k}_" in instruction), "28")
        right = (FIXTURES / RIGHT[problem]).read_text()
        await sh("instruction-files", "ls /app /app/docs && test -x \"$(command -v submit)\" && echo has-submit")
        if problem == "28":
            await sh("no-kernel", "submit")
            await put("/app/kernel.py", wrong(right))
            await sh("wrong", "submit")
            await put("/app/kernel.py", "def solve(:\n    pass\n")
            await sh("parse-error-local", "submit")
            direct = ("from metakernelbench.judge.client import JudgeClient; import json; "
                      "print(json.dumps(JudgeClient.from_env().submit(b'def solve(:\\n')))")
            await sh("parse-error-judge", f"python -c {shlex.quote(direct)}")
            await self.restart_judge(log)
            await sh("status-after-restart", "submit --status")
            await put("/app/kernel.py", right)
            await sh("right", "submit")
            for i in range(8):
                await put(f"/app/rule_{i}.py", "import triton\n" + right)
                await sh(f"rule-{i}", f"submit /app/rule_{i}.py")
            await sh("over-budget", "submit")
        else:
            await put("/app/kernel.py", right)
            await sh("right", "submit")
        await put("/app/kernel.py", right)
        await put("/app/SKILL.md", SKILL)
        (self.logs_dir / "script.json").write_text(json.dumps(log, indent=2))

    async def restart_judge(self, log: list[dict]) -> None:
        """Stop the judge and start it again, as an operator would, between two submissions."""
        import asyncio

        from metakernelbench.harbor_env import ensure_judge, stop_judge

        state = Path(os.environ["MKB_E2E_JUDGE_STATE"])
        stopped = await asyncio.to_thread(stop_judge, state)
        await asyncio.to_thread(ensure_judge, state, shlex.split(os.environ["MKB_E2E_JUDGE_ARGS"]))
        log.append({"label": "judge-restart", "stopped": stopped})
