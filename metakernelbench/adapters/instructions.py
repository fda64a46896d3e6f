"""Render ``instruction.md``: the problem, the rules, the grading contract, the skill file, the budget.

The text lives in ``templates/instruction.md``; this module only computes the problem-specific
values (inputs table, return convention, comparison rules) and the one DSL paragraph
(``templates/dsl/<dsl>.md``). Both variants of a problem therefore share every sentence except
that paragraph and the DSL's name. Every number of the grading contract the text states (draws,
calls, rechecks, F, the cap, the DSL share, the file size limit) is the grader's own, taken from
``metakernelbench.contract`` (through ``config``) and ``verifier.rules``.
"""

from __future__ import annotations

from metakernelbench.problems import Problem
from metakernelbench.verifier.rules import MAX_KERNEL_BYTES

from . import config
from .dsl import Dsl
from .templating import render
from .text_numbers import check_description
from .workload import VARIES, InputInfo, describe_inputs

__all__ = ["instruction_md"]


def _code_list(names: tuple[str, ...] | list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


_COUNT_WORDS = ("One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten")


def _count_word(n: int) -> str:
    """A small count as a word at the start of a sentence (``Three``), else its digits."""
    return _COUNT_WORDS[n - 1] if 1 <= n <= len(_COUNT_WORDS) else str(n)


def _share_text(share: float) -> str:
    """The least DSL share as the instructions state it: ``half (50 %)``."""
    percent = f"{100 * share:g} %"
    return f"half ({percent})" if share == 0.5 else percent


def _description(problem: Problem) -> str:
    lines = (problem.module.__doc__ or "").strip().splitlines()[1:]
    return "\n".join(lines).strip()


def _provenance(problem: Problem) -> str:
    p = problem.spec.provenance
    text = f"{p.source}; model {p.model}; upstream {p.upstream}; licence {p.license}"
    if p.notes:
        text += f". {p.notes.rstrip('.')}"
    return text


def _input_row(index: int, info: InputInfo, inplace: bool) -> str:
    if info.kind == "tensor":
        shape = info.shape if info.shape == VARIES else f"`{info.shape}`"
        kind, dtype = "tensor", f"`{info.dtype}`"
    elif info.kind:
        kind, shape, dtype = f"`{info.kind}`", "", ""
    else:
        kind, shape, dtype = "see `make_inputs`", "", ""
    notes = []
    if info.kind and info.kind != "tensor":
        notes.append(f"always `{info.value}`" if info.value else f"value {VARIES}")
    if inplace:
        notes.append("**updated in place** (graded)")
    return f"| {index} | `{info.name}` | {kind} | {shape} | {dtype} | {'; '.join(notes)} |"


def _inputs_table(problem: Problem) -> str:
    inplace = set(problem.spec.inplace)
    rows = ["| # | input | kind | shape | dtype | notes |", "|---|---|---|---|---|---|"]
    for i, info in enumerate(describe_inputs(problem)):
        rows.append(_input_row(i, info, info.name in inplace))
    return "\n".join(rows)


def _returns(problem: Problem) -> str:
    outputs = problem.spec.outputs
    if not outputs:
        return "It returns `None`: the results are the inputs it updates in place."
    if len(outputs) == 1:
        return f"It returns one tensor, `{outputs[0]}`."
    return f"It returns the tuple `({', '.join(outputs)})`, in this order."


def _inplace(problem: Problem) -> str:
    names = problem.spec.inplace
    if not names:
        return ""
    verb = "is" if len(names) == 1 else "are"
    return (f"It must update {_code_list(names)} in place; {'its' if len(names) == 1 else 'their'} "
            f"contents after the call {verb} graded. ")


def _comparison(problem: Problem) -> str:
    spec = problem.spec
    parts = [
        "Integer and boolean outputs must be exactly equal; floating outputs are compared with the "
        "float64-anchored tolerance described under grading."
    ]
    if spec.exact:
        parts.append(f"Floating {_code_list(spec.exact)} must match bit for bit.")
    for name, rule in sorted(spec.sets.items()):
        text = f"`{name}` is compared as a set along dimension {rule.dim} (its order does not matter)"
        if rule.with_:
            text += f"; {_code_list(rule.with_)} {'is' if len(rule.with_) == 1 else 'are'} permuted the same way"
        parts.append(text + ".")
    if spec.tolerance_factor != config.DEFAULT_TOLERANCE_FACTOR:
        parts.append(f"This problem uses F = {spec.tolerance_factor:g}: {spec.tolerance_note.strip()}")
    return " ".join(parts)


def _floor(problem: Problem) -> str:
    floor = problem.physical_floor()
    if not floor:
        return ""
    text = f"any correct implementation moves at least {int(floor['bytes']):,} bytes"
    if int(floor.get("flops", 0)):
        text += f" and does at least {int(floor['flops']):,} operations ({floor.get('math', 'fp32')})"
    return (f"\n\n**Physical floor.** {text[0].upper()}{text[1:]}; a measured time that would beat "
            "it is rejected.")


def instruction_md(problem: Problem, dsl: Dsl, task_name: str) -> str:
    """The full ``instruction.md`` of one task; refuses a description that quotes numbers the workload
    does not back (``text_numbers``)."""
    check_description(problem)
    spec = problem.spec
    values = {
        "dsl": dsl.key,
        "dsl_name": dsl.name,
        "task": task_name,
    }
    workload = ", ".join(f"`{k}={v!r}`" for k, v in spec.workload.items()) or "no arguments"
    values |= {
        "title": spec.title,
        "problem": spec.name,
        "family": spec.family,
        "description": _description(problem),
        "provenance": _provenance(problem),
        "workload": workload,
        "inputs_table": _inputs_table(problem),
        "arguments": ", ".join(spec.inputs),
        "returns": _returns(problem),
        "inplace": _inplace(problem),
        "comparison": _comparison(problem),
        "floor": _floor(problem),
        "dsl_rules": render(f"dsl/{dsl.key}.md", **values).strip(),
        "draws": str(config.CORRECTNESS_DRAWS),
        "tolerance_factor": f"{spec.tolerance_factor:g}",
        "warmup": str(config.WARMUP_CALLS),
        "timed": str(config.TIMED_CALLS),
        "speedup_cap": str(config.SPEEDUP_CAP),
        "rechecks": _count_word(config.RECHECKS),
        "dsl_share": _share_text(config.MIN_DSL_SHARE),
        "max_kernel_kib": f"{MAX_KERNEL_BYTES / 1024:g}",
        "minutes": str(config.AGENT_TIMEOUT_SEC // 60),
        "cpus": str(config.SANDBOX_CPUS),
        "memory_gb": str(config.SANDBOX_MEMORY_MB // 1024),
        "submissions": str(config.SUBMISSIONS),
    }
    return render("instruction.md", **values)
