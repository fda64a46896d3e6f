"""Which family a problem belongs to.

The problem file is the source of truth (its folder under ``problems/`` is its family), also for
problems added after the published 74. Results can outlive a checkout, or come from a run on
problems whose files are not in this tree, so the published set's id ranges are kept here as a
fallback: they are a fact of the 74 catalogued problems (numbered family by family), and say
nothing about ids added later.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from metakernelbench.contract import DSL_PATTERN
from metakernelbench.problems import FAMILIES, problem_paths, problems_dir

__all__ = ["FAMILY_ID_RANGES", "family_from_id", "family_of", "parse_task_name"]

# Inclusive id ranges of the 74 published problems, by family (catalog.toml numbering).
FAMILY_ID_RANGES: tuple[tuple[int, int, str], ...] = (
    (1, 18, "attention"),
    (19, 26, "kv_cache"),
    (27, 43, "mlp_norm"),
    (44, 51, "moe"),
    (52, 61, "quantization"),
    (62, 74, "linear_attention"),
)

_TASK_RE = re.compile(rf"^(?P<problem>(?P<id>\d{{2}})_[a-z0-9_]+?)_(?P<dsl>{DSL_PATTERN})$")


def parse_task_name(name: str) -> tuple[str, str]:
    """``(problem, dsl)`` from a task name such as ``metakernelbench/02_gqa_..._tirx``.

    Accepts the Harbor ``[task] name`` (``org/name``), a task folder name, or a trial folder's
    task path; raises ValueError for anything that is not ``NN_slug_<dsl>``.
    """
    stem = name.rstrip("/").rsplit("/", 1)[-1]
    match = _TASK_RE.match(stem)
    if match is None:
        raise ValueError(f"{name!r} is not a MetaKernelBench task name (NN_slug_{DSL_PATTERN})")
    return match["problem"], match["dsl"]


def family_from_id(problem_id: int) -> str:
    """The family of a problem number by the benchmark's fixed id ranges."""
    for lo, hi, family in FAMILY_ID_RANGES:
        if lo <= problem_id <= hi:
            return family
    raise ValueError(f"problem id {problem_id:02d} is outside the published 01-74 and has no problem file here")


@cache
def _families_from_files(root: Path) -> dict[str, str]:
    # Only the path is read (the folder is the family); loading the modules would import torch
    # and run 74 files just to learn their folder names.
    return {path.stem: path.parent.name for path in problem_paths(root)}


def family_of(problem: str, root: Path | None = None) -> str:
    """Family of ``NN_slug`` (or ``NN``): from its problem file when present, else by id range."""
    by_file = _families_from_files(problems_dir() if root is None else root)
    if len(problem) == 2:  # an id alone: the file with that id, if there is one
        problem = next((stem for stem in by_file if stem[:2] == problem), problem)
    if problem in by_file:
        family = by_file[problem]
    else:
        family = family_from_id(int(problem[:2]))
    if family not in FAMILIES:
        raise ValueError(f"problem {problem!r} sits in unknown family folder {family!r}")
    return family
