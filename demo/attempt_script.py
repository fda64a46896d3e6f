"""What the scripted model says next in a Terminus-2 attempt, decided from the conversation alone.

The script is the shortest honest attempt: look at the sandbox, write a prepared kernel to
``/app/kernel.py``, run it on the CPU against the reference at the small workload, ``submit`` it to
the judge, write ``/app/SKILL.md`` from what the check and the judge's report said, and mark the task
complete (Terminus-2 asks for that twice).

The reply depends only on the messages of the request, never on server state: the step to play next
is the number of scripted steps already in the history (each reply's ``plan`` starts with its step
name), so any number of attempts can share one server, and a step that waits for a command to finish
(``wait_for``) is followed by polling replies until its marker appears in the terminal output or
the polls run out (then the script moves on, and the attempt's result shows what went wrong).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

TASK_RE = re.compile(r"task `metakernelbench/(?P<task>[0-9]{2}_[A-Za-z0-9_]+_(?P<dsl>cutedsl|tirx))`")
NOTES_HEADER = "## Notes from a previous attempt"  # skill_transfer.skill.HEADER's first line
CONFIRM = "Are you sure you want to mark the task as complete?"
STEP_RE = re.compile(r"^\(step (?P<name>[a-z-]+)\)")
WAIT_PREFIX = "(waiting for "
DSL_TITLES = {"cutedsl": "CuTe DSL", "tirx": "TIRx"}
POLL_SECONDS = 3.0
MAX_POLLS = 200  # 10 minutes of polling per waiting step

CHECK_EXIT_RE = r"\[local check exit code (\d+)\]"
SUBMIT_EXIT_RE = r"\[submit exit code (\d+)\]"
# the local check's printed result (digits first: the typed command shows the format string instead)
DIFF_RE = r"largest difference from the reference on the small workload: ([0-9][^\s]*|nan|inf)"

# Runs the kernel next to the reference on the small workload, on the CPU, and prints the largest
# difference; typed into the sandbox's shell as a here-document (no tabs, no '!').
LOCAL_CHECK = """\
import torch, problem, kernel
def draw():
    return problem.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0), **problem.SMALL_WORKLOAD)
def tensors(value):
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    return [t for t in items if isinstance(t, torch.Tensor)]
mine, ref = draw(), draw()
got = tensors(kernel.solve(*mine)) + tensors(mine)
want = tensors(problem.reference(*ref)) + tensors(ref)
worst = max((float((a.double() - b.double()).abs().max()) for a, b in zip(got, want)), default=0.0)
print(f"largest difference from the reference on the small workload: {worst:.3g}")
"""


class Keys(BaseModel):
    """One command of a Terminus-2 reply: keystrokes and how long to wait after sending them."""

    model_config = ConfigDict(extra="forbid")

    keystrokes: str
    duration: float


class Step(BaseModel):
    """One scripted reply; ``wait_for`` (a regex) must match the terminal output before the next."""

    model_config = ConfigDict(extra="forbid")

    name: str
    analysis: str
    plan: str
    commands: list[Keys]
    wait_for: str | None = None
    task_complete: bool = False

    def reply(self) -> str:
        return json.dumps({"analysis": self.analysis, "plan": f"(step {self.name}) {self.plan}",
                           "commands": [c.model_dump() for c in self.commands],
                           "task_complete": self.task_complete})


class AttemptContext(BaseModel):
    """What the script knows about the attempt: the task, the kernel it will write, the transcript."""

    model_config = ConfigDict(extra="forbid")

    task: str
    dsl: str
    kernel: str
    notes_given: bool
    terminal: str  # every terminal observation so far, joined


def task_of(instruction: str) -> tuple[str, str] | None:
    """(task folder name, dsl) named by a MetaKernelBench instruction, or None."""
    m = TASK_RE.search(instruction)
    return (m["task"], m["dsl"]) if m else None


def heredoc(path: str, text: str, then: str = "") -> str:
    body = text if text.endswith("\n") else text + "\n"
    if "\nMKB_EOF\n" in "\n" + body:
        raise ValueError(f"{path}: the text contains the here-document delimiter")
    return f"cat > {path} <<'MKB_EOF'{then}\n{body}MKB_EOF\n"


def _last(pattern: str, text: str) -> str | None:
    found = re.findall(pattern, text)
    return found[-1] if found else None


def skill_text(ctx: AttemptContext) -> str:
    """The skill file: prose built from what this attempt saw (the check and the judge's report)."""
    dsl = DSL_TITLES[ctx.dsl]
    status = _last(r"status: ([A-Z_]+)", ctx.terminal)
    speedup = _last(r"speedup: ([0-9.]+)x", ctx.terminal)
    check = _last(CHECK_EXIT_RE, ctx.terminal)
    diff = _last(DIFF_RE, ctx.terminal)
    if status is None:
        verdict = "The judge's report never arrived, so this attempt has no GPU evidence."
    elif speedup is not None and status == "PASSED":
        verdict = f"The judge graded the submitted kernel {status}, at {speedup} times the eager reference."
    else:
        verdict = f"The judge graded the submitted kernel {status}."
    if check == "0" and diff is not None:
        local = f"On the CPU at the small workload its largest difference from the reference was {diff}."
    elif check is not None:
        local = "Run on the CPU at the small workload it did not complete, so it was not checked locally."
    else:
        local = "It was not checked on the CPU."
    notes = (" Notes from an attempt in the other DSL came with the instruction and were read first."
             if ctx.notes_given else "")
    return f"""# Skill: {ctx.task.rsplit('_', 1)[0]} in {dsl}

## Findings
{verdict} {local}{notes}

## Split between eager PyTorch and {dsl}
Not explored: this attempt replayed one prepared kernel and tried no other split.

## When this applies
These notes come from a scripted demonstration attempt that replayed a prepared kernel, graded by
the judge of this run at its workload; they say nothing about how fast a tuned kernel can be.

## Open questions
How the work should be split across thread blocks on the GPU was not explored.
"""


def steps(ctx: AttemptContext) -> list[Step]:
    """The whole script for one attempt (later steps read the transcript when they are played)."""
    dsl = DSL_TITLES[ctx.dsl]
    look_note = (" The instruction ends with notes from an attempt in the other DSL; I read them first."
                 if ctx.notes_given else "")
    return [
        Step(name="look", analysis=f"A fresh sandbox for {ctx.task}.{look_note}",
             plan="See the files and the submission budget.",
             commands=[Keys(keystrokes="cd /app && ls /app /app/docs && submit --status\n", duration=2.0)]),
        Step(name="write-kernel", analysis=f"The problem asks for a {dsl} kernel in /app/kernel.py.",
             plan="Write the kernel.",
             commands=[Keys(keystrokes=heredoc("/app/kernel.py", ctx.kernel), duration=1.0)]),
        Step(name="check-kernel", analysis="The kernel is written; the CPU can run the small workload.",
             plan="Run it against the reference on the CPU before spending a submission.",
             commands=[Keys(keystrokes=f"python - <<'MKB_EOF'; echo \"[local check exit code $?]\"\n"
                                       f"{LOCAL_CHECK}MKB_EOF\n", duration=POLL_SECONDS)],
             wait_for=CHECK_EXIT_RE),
        Step(name="submit", analysis="The local check has finished.",
             plan="Submit the kernel to the judge for a GPU report.",
             commands=[Keys(keystrokes="submit; echo \"[submit exit code $?]\"\n", duration=POLL_SECONDS)],
             wait_for=SUBMIT_EXIT_RE),
        Step(name="write-skill", analysis="The judge's report is in.",
             plan="Write the skill file from the check and the report.",
             commands=[Keys(keystrokes=heredoc("/app/SKILL.md", skill_text(ctx)), duration=1.0)]),
        Step(name="finish", analysis="Kernel and skill file are on disk.", plan="Mark the task complete.",
             commands=[], task_complete=True),
    ]


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def next_reply(messages: list[dict], kernels: dict[str, Path]) -> str:
    """The assistant's next message for this conversation (Terminus-2's JSON format)."""
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    if not users:
        raise ValueError("the conversation has no user message")
    found = task_of(users[0])
    if found is None:
        raise ValueError("the first message names no MetaKernelBench task")
    task, dsl = found
    if task not in kernels:
        raise ValueError(f"no kernel is prepared for task {task}")
    # the history: which steps were played, and the terminal output since the last one
    played: list[str] = []
    since_last: list[str] = []
    polls = 0
    for m in messages[1:]:
        text = _text(m.get("content"))
        if m.get("role") == "assistant":
            name = step_name(text)
            if name is not None:
                played.append(name)
                since_last, polls = [], 0
            else:
                polls += 1
        elif m.get("role") == "user":
            since_last.append(text)
    ctx = AttemptContext(task=task, dsl=dsl, kernel=kernels[task].read_text(), notes_given=NOTES_HEADER in users[0],
                         terminal="\n".join(users[1:]))
    script = steps(ctx)
    if CONFIRM in users[-1] or len(played) >= len(script):
        return script[-1].model_copy(update={"name": "confirm"}).reply()
    last = next((s for s in script if played and s.name == played[-1]), None)
    if last is not None and last.wait_for and polls < MAX_POLLS and not re.search(last.wait_for,
                                                                                   "\n".join(since_last)):
        return json.dumps({"analysis": "The command is still running.",
                           "plan": f"{WAIT_PREFIX}{last.name} to finish)",
                           "commands": [{"keystrokes": "", "duration": POLL_SECONDS}], "task_complete": False})
    return script[len(played)].reply()


def step_name(reply: str) -> str | None:
    """The scripted step a reply played (its plan starts with it), or None for a wait."""
    try:
        plan = json.loads(reply).get("plan", "")
    except (ValueError, AttributeError):
        return None
    m = STEP_RE.match(plan) if isinstance(plan, str) else None
    return m["name"] if m else None
