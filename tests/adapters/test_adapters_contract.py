"""What an agent reads is what is done: the contract's numbers in a generated task, held to the grader's.

Each number is read out of the committed task files an agent and Harbor see (``tasks/``, which
``mkb build --check`` holds to the generator) and compared with what the grader, its score stage and
the judge actually use, not with ``adapters.config``.
"""

from __future__ import annotations

import json
import re

import pytest
from adapters_support import T28

from metakernelbench import contract
from metakernelbench.problems import REPO_ROOT, find_problem
from metakernelbench.verifier import provenance, rules
from metakernelbench.verifier import score as score_mod
from metakernelbench.verifier.grader import GradeConfig
from metakernelbench.verifier.result import Findings, Status, Timing
from metakernelbench.verifier.timing import EagerBaseline

TASKS = REPO_ROOT / "tasks"
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def _one(pattern: str, text: str) -> re.Match[str]:
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, f"{pattern!r} found {len(found)} times"
    return found[0]


def _scored_cap() -> float:
    """The score stage's cap, observed: the scored speedup of a kernel 10,000 times faster than eager."""
    problem = find_problem("28")
    eager = EagerBaseline(Timing.from_samples([1e4]), Timing.from_samples([1e4]), 0.0, False, "cached", 1.0)
    saved = score_mod.floor_mod.floor_ms
    score_mod.floor_mod.floor_ms = lambda p: None
    try:
        found = Findings(stages_s={}, details={})
        result = score_mod.score(problem, "tirx", Timing.from_samples([1.0]), eager, GradeConfig(), found)
    finally:
        score_mod.floor_mod.floor_ms = saved
    assert result.status is Status.PASSED and result.speedup == pytest.approx(1e4)
    return result.score_speedup


@pytest.mark.parametrize("dsl", contract.DSLS)
def test_the_instructions_state_the_graders_numbers(dsl):
    text = " ".join((TASKS / f"{T28}_{dsl}" / "instruction.md").read_text().split())  # lines joined
    config = GradeConfig()  # what ``grade`` runs with unless told otherwise (mkb grade, the judge)
    assert int(_one(r"\*\*Correctness\*\* on (\d+) independent fresh draws", text)[1]) == config.correctness_draws
    timing = _one(r"\*\*Timing\*\*: (\d+) warmup calls, then (\d+) timed calls", text)
    assert (int(timing[1]), int(timing[2])) == (config.warmup, config.timed)
    assert WORDS[_one(r"(\w+) of the timed outputs, chosen in secret", text)[1].lower()] == config.rechecks
    spec = find_problem("28").spec
    assert spec.tolerance_factor == contract.DEFAULT_TOLERANCE_FACTOR  # problem 28 keeps the default F
    assert float(_one(r"F = ([0-9.]+), where ref is the reference", text)[1]) == spec.tolerance_factor
    assert float(_one(r"capped at (\d+)x", text)[1]) == _scored_cap() == contract.SPEEDUP_CAP
    share = _one(r"kernels must take at least half \((\d+) %\) of that call's GPU time", text)
    assert int(share[1]) / 100 == provenance.MIN_DSL_SHARE == 0.5
    assert int(_one(r"larger than (\d+) KiB", text)[1]) * 1024 == rules.MAX_KERNEL_BYTES
    statuses = _one(r"Statuses: ((?:[A-Z_]+, )+)and ([A-Z_]+) \(a fault", text)
    assert [*statuses[1].rstrip(", ").split(", "), statuses[2]] == [s.value for s in Status]


@pytest.mark.parametrize("dsl", contract.DSLS)
def test_the_instructions_state_the_judges_budget(dsl):
    """The minutes and submissions an agent is told are the judge's defaults for an attempt."""
    from metakernelbench.judge.__main__ import build_parser
    from metakernelbench.judge.service import DEFAULT_BUDGET, DEFAULT_MINUTES

    text = " ".join((TASKS / f"{T28}_{dsl}" / "instruction.md").read_text().split())
    serve = build_parser().parse_args(["serve"])
    minutes = int(_one(r"You have (\d+) minutes of wall time", text)[1])
    assert minutes == DEFAULT_MINUTES == serve.minutes == contract.ATTEMPT_MINUTES
    submissions = int(_one(r"You have up to (\d+) submissions", text)[1])
    assert submissions == DEFAULT_BUDGET == serve.budget == contract.SUBMISSIONS


@pytest.mark.parametrize("dsl", contract.DSLS)
def test_grading_json_and_the_readme_state_the_graders_numbers(dsl):
    task = TASKS / f"{T28}_{dsl}"
    grading = json.loads((task / "tests" / "grading.json").read_text())
    config = GradeConfig()
    assert grading["dsl"] == dsl
    assert grading["contract"] == {
        "correctness_draws": config.correctness_draws, "warmup_calls": config.warmup, "timed_calls": config.timed,
        "speedup_cap": _scored_cap(), "tolerance_factor": find_problem("28").spec.tolerance_factor,
    }
    readme = " ".join((task / "README.md").read_text().split())
    assert float(_one(r"capped at (\d+), when the kernel passes", readme)[1]) == contract.SPEEDUP_CAP


def test_the_grader_images_the_judge_starts_are_the_ones_built():
    """The judge's default images (serve's flags, JudgeConfig) are the images ``mkb build`` writes."""
    from metakernelbench.judge.__main__ import build_parser
    from metakernelbench.judge.server import DEFAULT_IMAGES

    serve = build_parser().parse_args(["serve"])
    for dsl in contract.DSLS:
        image = contract.GRADER_IMAGES[dsl]
        assert DEFAULT_IMAGES[dsl] == getattr(serve, f"image_{dsl}") == image
        assert f"-t {image} ." in (REPO_ROOT / "images" / f"grader-{dsl}.Dockerfile").read_text()
