"""``adapters/metakernelbench/parity_experiment.json``: the same oracle kernels graded by this grader and by the
original benchmark's grader, in Harbor's parity form.

Harbor's adapter process asks for parity figures (``parity_experiment.json``: per metric the
original's and the adapter's ``mean +/- sample SEM`` and every run's value). Here the "agent" is the
oracle: each oracle kernel is graded ``runs`` times by both graders on the same GPU
(``benchmarks/h200_parity.py`` does the grading; the original's public code runs there as an
external tool from its own checkout and is never copied into this repository). This module turns
those per-kernel records into the file, so the form is tested on the CPU and the GPU run only
supplies numbers:

- ``pass_rate``: share of the kernels each grader passed, per run;
- ``geomean_speedup``: geometric mean speedup over the kernels both graders passed, per run (a
  kernel only one grader passed has no speedup to compare);
- ``kernels``: per kernel, each grader's status, median speedup over the runs and their ratio, so a
  difference can be traced to its kernel (and explained in ``notes``, e.g. a grader that times with
  a warm L2).

Nothing is written until records exist: the committed file says "not yet measured" until then.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from pydantic import BaseModel

from . import config

__all__ = ["BENCHMARK_NAME", "Grade", "KernelParity", "KernelRun", "ORIGINAL_REPO", "kernel_table", "parity_experiment"]

BENCHMARK_NAME = "MetaKernelBench"
ORIGINAL_REPO = "https://github.com/YIGE24/MetaKernelBench"


class Grade(BaseModel):
    """One grader's verdict on one kernel in one run."""

    passed: bool
    status: str
    speedup: float | None = None
    kernel_ms: float | None = None
    eager_ms: float | None = None
    error: str | None = None


class KernelRun(BaseModel):
    """Both graders on one oracle kernel in one run."""

    task: str
    run: int
    harbor: Grade
    original: Grade


class KernelParity(BaseModel):
    """Per kernel, over the runs: what ``kernels`` in the file holds."""

    task: str
    harbor_status: str
    original_status: str
    harbor_speedup: float | None
    original_speedup: float | None
    speedup_ratio: float | None  # harbor / original, medians over the runs


def _mean_sem(values: list[float], percent: bool = False) -> str:
    scale, unit = (100.0, "%") if percent else (1.0, "x")
    mean = statistics.fmean(values) * scale
    sem = statistics.stdev(values) * scale / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{mean:.2f}{unit} +/- {sem:.2f}{unit}"


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else 0.0


def _per_run(records: list[KernelRun]) -> dict[int, list[KernelRun]]:
    runs: dict[int, list[KernelRun]] = defaultdict(list)
    for record in records:
        runs[record.run].append(record)
    return dict(sorted(runs.items()))


def _status(grades: list[Grade]) -> str:
    statuses = sorted({g.status for g in grades})
    return statuses[0] if len(statuses) == 1 else "/".join(statuses)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def kernel_table(records: list[KernelRun]) -> list[KernelParity]:
    """One row per kernel: statuses and median speedups over the runs."""
    by_task: dict[str, list[KernelRun]] = defaultdict(list)
    for record in records:
        by_task[record.task].append(record)
    rows = []
    for task, runs in sorted(by_task.items()):
        ours = _median([r.harbor.speedup for r in runs if r.harbor.passed])
        theirs = _median([r.original.speedup for r in runs if r.original.passed])
        rows.append(KernelParity(
            task=task, harbor_status=_status([r.harbor for r in runs]),
            original_status=_status([r.original for r in runs]), harbor_speedup=ours, original_speedup=theirs,
            speedup_ratio=ours / theirs if ours and theirs else None))
    return rows


def parity_experiment(records: list[KernelRun], *, date: str, device: str, notes: str,
                      adapted_benchmark_size: int) -> list[dict]:
    """The file's content (a one-element list, as Harbor's template has it)."""
    if not records:
        raise ValueError("no parity records: nothing has been measured")
    runs = _per_run(records)
    pass_rates = {side: [statistics.fmean(getattr(r, side).passed for r in rs) for rs in runs.values()]
                  for side in ("original", "harbor")}
    geomeans: dict[str, list[float]] = {"original": [], "harbor": []}
    for rs in runs.values():
        both = [r for r in rs if r.harbor.passed and r.original.passed and r.harbor.speedup and r.original.speedup]
        for side in geomeans:
            geomeans[side].append(_geomean([getattr(r, side).speedup for r in both]))
    kernels = sorted({r.task for r in records})
    metrics = [
        {"benchmark_name": BENCHMARK_NAME, "metric": "pass_rate",
         "original": _mean_sem(pass_rates["original"], percent=True),
         "harbor": _mean_sem(pass_rates["harbor"], percent=True),
         "original_runs": pass_rates["original"], "harbor_runs": pass_rates["harbor"]},
        {"benchmark_name": BENCHMARK_NAME, "metric": "geomean_speedup (kernels both graders passed)",
         "original": _mean_sem(geomeans["original"]), "harbor": _mean_sem(geomeans["harbor"]),
         "original_runs": geomeans["original"], "harbor_runs": geomeans["harbor"]},
    ]
    return [{
        "adapter_name": config.DATASET_NAME,
        "status": "measured",
        "agent": "oracle",
        "model": None,
        "date": date,
        "device": device,
        "adapted_benchmark_size": adapted_benchmark_size,
        "parity_benchmark_size": len(kernels),
        "number_of_runs": len(runs),
        "notes": notes,
        "original_parity_repo": ORIGINAL_REPO,
        "adapter_pr": [],
        "dataset_pr": [],
        "parity_pr": [],
        "metrics": metrics,
        "kernels": [row.model_dump() for row in kernel_table(records)],
    }]
