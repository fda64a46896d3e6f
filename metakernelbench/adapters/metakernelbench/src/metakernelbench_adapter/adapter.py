"""``MetaKernelBenchAdapter``: Harbor's adapter class, over the generator of ``mkb build``.

Harbor's adapters share one interface (``harbor adapter init``): an adapter class taking
``output_dir``, ``limit``, ``overwrite`` and ``task_ids`` whose ``run()`` writes task folders. Here the
"original dataset" is the repository's problem files, and each task is rendered by the same
function ``mkb build`` uses (``metakernelbench.adapters.render.render_task``), so both routes write
byte-identical folders. After writing, the folder's ``dataset.toml``, ``metric.py`` and ``README.md``
are rewritten for the task folders present, as ``mkb build`` does.

- ``task_ids``: task folder names (``28_..._tirx``), problem stems or problem ids (``28``: both DSLs);
- ``limit``: at most this many tasks, in sorted order, after ``task_ids``;
- ``overwrite``: rewrite task folders that exist (without it they are left as they are, Harbor's
  convention; ``mkb build`` always rewrites).
"""

from __future__ import annotations

from pathlib import Path

from metakernelbench.adapters.build import TASK_DIR, load_problems, write_dataset_files, write_task
from metakernelbench.adapters.dsl import DSLS
from metakernelbench.adapters.render import render_task, task_dir_name
from metakernelbench.problems import REPO_ROOT, ProblemError
from metakernelbench.problems import problems_dir as default_problems_dir

ORACLES_DIR = REPO_ROOT / "oracles"


class MetaKernelBenchAdapter:
    """Generate MetaKernelBench's Harbor tasks into ``output_dir`` (see the module docstring)."""

    def __init__(self, output_dir: Path, limit: int | None = None, overwrite: bool = False,
                 task_ids: list[str] | None = None, *, problems_dir: Path | None = None,
                 oracles_dir: Path = ORACLES_DIR, **kwargs):
        self.output_dir = Path(output_dir)
        self.limit = limit
        self.overwrite = overwrite
        self.task_ids = task_ids
        self.problems_dir = default_problems_dir() if problems_dir is None else problems_dir
        self.oracles_dir = oracles_dir

    def _wanted(self, name: str, problem_id: str, stem: str) -> bool:
        if not self.task_ids:
            return True
        return any(key in (name, problem_id, stem) for key in self.task_ids)

    def selected(self) -> list[tuple[str, object, object]]:
        """(task folder name, problem, DSL) of every task to write, sorted, after task_ids and limit."""
        chosen = []
        for problem in load_problems(self.problems_dir):
            for dsl in DSLS.values():
                name = task_dir_name(problem, dsl)
                if self._wanted(name, problem.spec.id, problem.spec.name):
                    chosen.append((name, problem, dsl))
        chosen.sort(key=lambda item: item[0])
        if self.task_ids:
            known = {n for n, _, _ in chosen} | {p.spec.id for _, p, _ in chosen} | {p.spec.name for _, p, _ in chosen}
            unknown = sorted(k for k in self.task_ids if k not in known)
            if unknown:
                raise ProblemError(f"--task-ids names no task: {', '.join(unknown)}")
        return chosen[: self.limit] if self.limit is not None else chosen

    def run(self) -> list[str]:
        """Write the selected tasks; return the names of the folders written (skipped ones excluded)."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name, problem, dsl in self.selected():
            target = self.output_dir / name
            if target.exists() and not self.overwrite:
                continue
            write_task(target, render_task(problem, dsl, self.oracles_dir))
            written.append(name)
        present = sorted(p for p in self.output_dir.iterdir() if p.is_dir() and TASK_DIR.match(p.name))
        write_dataset_files(self.output_dir / "dataset.toml", present)
        return written


__all__ = ["MetaKernelBenchAdapter"]
