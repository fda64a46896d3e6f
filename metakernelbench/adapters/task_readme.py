"""``tasks/<task>/README.md``: the task described for people (the agent reads instruction.md).

Harbor publishes a task folder's README.md with the task. Everything on the page comes from the
problem file, the adapter's config and the difficulty rule (``estimates``), so it is regenerated with
the task and can never disagree with its task.toml.
"""

from __future__ import annotations

from metakernelbench.problems import Problem

from . import config
from .dsl import Dsl
from .estimates import RULE, Estimate
from .templating import render

__all__ = ["task_readme"]


def _times(found: Estimate) -> str:
    if found.expert_time_estimate_min is None:
        return "none (no oracle kernel to derive them from)"
    return (f"expert {found.expert_time_estimate_min} min, junior {found.junior_time_estimate_min} min "
            f"(`expert_time_estimate_min`, `junior_time_estimate_min` in task.toml)")


def _basis(found: Estimate) -> str:
    if found.oracle_code_lines is None:
        return "This task has no oracle kernel yet, so its difficulty is unknown."
    return f"This task's oracle kernel has {found.oracle_code_lines} lines of code."


def task_readme(problem: Problem, dsl: Dsl, task: str, pair: str, found: Estimate) -> str:
    """The README of one task folder."""
    spec, prov = problem.spec, problem.spec.provenance
    return render(
        "README.md",
        title=spec.title.rstrip("."),
        dsl_name=dsl.name,
        task=task,
        dataset=config.DATASET_NAME,
        version=config.DATASET_VERSION,
        problem=spec.name,
        family=spec.family,
        problem_path=f"problems/{spec.family}/{spec.path.name}",
        pair=pair,
        source=prov.source,
        model=prov.model,
        license=prov.license,
        agent_minutes=str(config.AGENT_TIMEOUT_SEC // 60),
        sandbox_cpus=str(config.SANDBOX_CPUS),
        sandbox_memory_mb=str(config.SANDBOX_MEMORY_MB),
        submissions=str(config.SUBMISSIONS),
        speedup_cap=str(config.SPEEDUP_CAP),
        difficulty=found.difficulty,
        times=_times(found),
        rule=RULE,
        basis=_basis(found),
        folder=f"{spec.name}_{dsl.key}",
    )
