"""The fixed numbers of every generated task: budgets, resources, images and the grading contract.

One place, because each number appears in several generated files (task.toml, the instructions,
the Dockerfiles, test.sh) and they must never disagree. The grading contract's numbers and the
attempt's budget are not restated here: they are the grader's and the judge's own
(``metakernelbench.contract``), so what an agent is told is what is done. The sandbox numbers restate
design.md §5.
"""

from __future__ import annotations

from metakernelbench import contract

__all__ = [
    "AGENT_TIMEOUT_SEC", "AUTHORS", "BASE_IMAGE", "BUILD_TIMEOUT_SEC", "CATEGORY", "COMMON_PINS", "CORRECTNESS_DRAWS",
    "DATASET_DESCRIPTION", "DATASET_NAME", "DATASET_VERSION", "DEFAULT_TOLERANCE_FACTOR", "GRADER_IMAGES",
    "GRADE_TIMEOUT_MARGIN_SEC", "HUB_DATASET_NAME", "JUDGE_IMAGE", "JUDGE_NETWORK", "JUDGE_PINS", "JUDGE_PORT",
    "JUDGE_SECRETS_VOLUME", "JUDGE_STATE_VOLUME", "JUDGE_URL", "MIN_DSL_SHARE", "ORG", "RECHECKS", "RELAY_URL",
    "SANDBOX_CPUS", "SANDBOX_MEMORY_MB", "SPEEDUP_CAP", "SUBMISSIONS", "TASK_LICENSE", "TIMED_CALLS", "VERIFIER_CPUS",
    "VERIFIER_MEMORY_MB", "VERIFIER_TIMEOUT_SEC", "WARMUP_CALLS",
]

# One dataset name everywhere: ``metakernelbench`` in registry.json (``harbor run --dataset
# metakernelbench``); Harbor Hub packages are ``org/name``, so there it is the same name under the
# organisation of the same name (``metakernelbench/metakernelbench``), as are the tasks.
ORG = "metakernelbench"
DATASET_NAME = "metakernelbench"
HUB_DATASET_NAME = f"{ORG}/{DATASET_NAME}"
DATASET_VERSION = "0.1.0"
# Harbor's [task] authors and the dataset's: the project, not a person (no address is published).
AUTHORS = ({"name": "MetaKernelBench contributors"},)
# Harbor's [metadata] category for every task, and the licence of the generated task files (the project's).
CATEGORY = "gpu-kernel-optimization"
TASK_LICENSE = "Apache-2.0"
DATASET_DESCRIPTION = (
    "MetaKernelBench: GPU kernel problems from production models, each in a CuTe DSL and a TIRx "
    "variant; the agent keeps a skill file whose transfer to the other DSL is measured."
)

# The attempt (design.md §5): a CPU-only sandbox with no network and a 40-minute budget, the judge's own.
AGENT_TIMEOUT_SEC = contract.ATTEMPT_MINUTES * 60
SANDBOX_CPUS = 2
SANDBOX_MEMORY_MB = 8192
SUBMISSIONS = contract.SUBMISSIONS

# Final grading: Harbor's verifier phase in a separate container without a GPU, which sends the
# collected kernel to the judge; its timeout covers waiting in the judge's queue.
VERIFIER_CPUS = 1
VERIFIER_MEMORY_MB = 2048
VERIFIER_TIMEOUT_SEC = 1800
# the final-grade client gives up this long before Harbor's own timeout, so it can still write reward.json.
GRADE_TIMEOUT_MARGIN_SEC = 60
BUILD_TIMEOUT_SEC = 1800

# The grading contract (design.md §4): the grader's defaults (GradeConfig) and its score's cap.
CORRECTNESS_DRAWS = contract.GradeConfig.correctness_draws
WARMUP_CALLS = contract.GradeConfig.warmup
TIMED_CALLS = contract.GradeConfig.timed
RECHECKS = contract.GradeConfig.rechecks
# printed as the generated files always have (100, not 100.0: instruction.md, README.md, grading.json)
SPEEDUP_CAP = int(contract.SPEEDUP_CAP) if float(contract.SPEEDUP_CAP).is_integer() else contract.SPEEDUP_CAP
DEFAULT_TOLERANCE_FACTOR = contract.DEFAULT_TOLERANCE_FACTOR
MIN_DSL_SHARE = contract.MIN_DSL_SHARE

# Images. nvidia/cuda's devel image gives the CUDA 13.0 toolkit headers (CCCL included) at
# /usr/local/cuda, which TIRx's NVRTC path needs, and Ubuntu 24.04's Python 3.12. Everything Python
# is pinned; torch 2.11.0 from PyPI is the CUDA 13.0 (cu130) build.
BASE_IMAGE = "nvidia/cuda:13.0.2-devel-ubuntu24.04"
COMMON_PINS = (
    "torch==2.11.0",
    "numpy==2.5.5",
    "pydantic==2.14.4",
    "typer==0.29.2",
    "rich==15.0.0",
    "setuptools==80.9.0",
)

# The judge (metakernelbench/judge): its image, the per-DSL grader images it starts one container of per
# evaluation, and the Docker network and volume that connect trials to it (images/judge-compose.yaml).
JUDGE_IMAGE = "metakernelbench/judge:0.1.0"
GRADER_IMAGES = contract.GRADER_IMAGES
JUDGE_NETWORK = "mkb-judge"
JUDGE_SECRETS_VOLUME = "mkb-judge-secrets"
JUDGE_STATE_VOLUME = "mkb-judge-state"
JUDGE_PORT = 8765
JUDGE_URL = f"http://{JUDGE_NETWORK}:{JUDGE_PORT}"
RELAY_URL = f"http://judge-relay:{JUDGE_PORT}"
JUDGE_PINS = ("docker==7.1.0", "pydantic==2.14.4", "typer==0.29.2", "rich==15.0.0", "setuptools==80.9.0")
