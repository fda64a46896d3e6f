"""The grading contract in one place: the names, numbers and tables that more than one part reads.

What an agent is told (``adapters``: ``instruction.md``, ``tests/grading.json``, each task's README),
what the grader does (``verifier``) and what the judge runs (``judge``) must never disagree,
so every figure they share is defined here once and imported from here (design.md §4):

- the two DSLs (``DslName``, ``DSLS``) and the package each one's kernels import (``DSL_PACKAGES``);
- the grader's statuses (``Status``) and the exception that ends an evaluation with one (``Verdict``);
- the grader's counts and limits (``GradeConfig``: draws, warmup, timed calls, rechecks, time limits);
- the score's cap (``SPEEDUP_CAP``), the default tolerance factor F (``DEFAULT_TOLERANCE_FACTOR``), the
  least share of a call's time in DSL kernels (``MIN_DSL_SHARE``);
- an attempt's budget as the judge enforces it and the instructions state it (``SUBMISSIONS``,
  ``ATTEMPT_MINUTES``) and the grader images the judge evaluates in (``GRADER_IMAGES``);
- the modules the audit hook refuses, and the row of the table of every forbidden module with where it
  is refused (``ForbiddenImport``; ``verifier.forbidden`` builds the table from both enforcers).

Standard library only, torch and pydantic included: the adapters, ``mkb grade --help`` and the judge's
runner (before it imports torch) read it. ``verifier.result``, ``verifier.launch`` and
``verifier.grader`` re-export what they used to define (``Status``, ``SPEEDUP_CAP``, ``GradeConfig``,
``Verdict``), so their old import paths keep working.

Files shipped verbatim into each task's sandbox (``verifier/rules.py``, ``judge/check.py``,
the judge client) must run there without this module, so they keep their own literals; tests hold
them to the ones here (``tests/test_contract.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "ATTEMPT_MINUTES", "AUDIT_FORBIDDEN_IMPORTS", "AUDIT_ONLY", "AUDIT_SUBMISSION_ONLY", "DEFAULT_TOLERANCE_FACTOR",
    "DSLS", "DSL_PACKAGES", "DSL_PATTERN", "DslName", "Enforcer", "FOREIGN_DSL_PACKAGES", "ForbiddenImport",
    "GRADER_IMAGES", "GradeConfig", "MIN_DSL_SHARE", "SPEEDUP_CAP", "SUBMISSIONS", "Status", "Verdict", "other_dsl",
]


class DslName(StrEnum):
    """The two kernel DSLs; a task name ends in ``_<value>``."""

    CUTEDSL = "cutedsl"
    TIRX = "tirx"


DSLS: tuple[str, ...] = tuple(d.value for d in DslName)  # plain strings, in this order everywhere
DSL_PATTERN = "|".join(DSLS)  # the names as a regular-expression alternation (task names end in _<dsl>)
# the top-level package a kernel of each DSL imports (the static scan requires it; the other DSL's is refused)
DSL_PACKAGES: dict[str, str] = {DslName.CUTEDSL.value: "cutlass", DslName.TIRX.value: "tvm"}


def other_dsl(dsl: str) -> str:
    """The DSL paired with ``dsl`` (a skill from one is transferred to the other)."""
    if dsl not in DSLS:
        raise ValueError(f"unknown DSL {dsl!r}; expected one of {DSLS}")
    return DSLS[1 - DSLS.index(dsl)]


class Status(StrEnum):
    """A grade's verdict (design.md §4, "Statuses"); only INFRA_ERROR is never scored nor charged."""

    PASSED = "PASSED"
    INCORRECT = "INCORRECT"
    COMPILE_ERROR = "COMPILE_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    RULE_VIOLATION = "RULE_VIOLATION"
    REWARD_HACK = "REWARD_HACK"
    INFRA_ERROR = "INFRA_ERROR"


class Verdict(Exception):
    """Ends an evaluation early with a status (raised inside ``grade``)."""

    def __init__(self, status: Status, message: str, **fields: Any):
        super().__init__(message)
        self.status, self.message, self.fields = status, message, fields


# The score: a passing grade's speedup (eager / kernel) counts up to this many times.
SPEEDUP_CAP = 100.0
# F: floating outputs may be off the float64 anchor by F times the reference's own error (a problem
# may set another F, with its reason: ``TOLERANCE_FACTOR`` and ``TOLERANCE_NOTE`` in its file).
DEFAULT_TOLERANCE_FACTOR = 3.0
# The least share of one profiled call's time that DSL kernels must take (``verifier.provenance``).
MIN_DSL_SHARE = 0.5

# An attempt (design.md §5): the judge's default budget of graded submissions and of wall time per
# attempt, as the instructions state them.
SUBMISSIONS = 10
ATTEMPT_MINUTES = 40

# The per-DSL images the judge starts one container of per evaluation (images/grader-<dsl>.Dockerfile).
GRADER_IMAGES: dict[str, str] = {dsl: f"metakernelbench/grader-{dsl}:0.1.0" for dsl in DSLS}


@dataclass(frozen=True)
class GradeConfig:
    """The grading contract's counts and the grader's limits (defaults: the contract, design.md §4)."""

    correctness_draws: int = 5
    warmup: int = 10
    timed: int = 50
    rechecks: int = 3
    # Time limits (docs/grading.md, "Time limits"), all kept by the grader's own clock. A worker's own
    # start (interpreter, torch, the DSL, its OS limits) is the grader's code: a start past
    # start_timeout_s is INFRA_ERROR. The compile budget runs from the moment the candidate worker
    # begins to import the kernel file: the import and the DSL's compile share it, wherever the
    # compile happens (at import, as TIRx kernels usually do, or inside the first call, where the
    # DSLs JIT-compile), so the first call may take what the import left of it plus the call budget.
    # Every other call gets the call budget. A kernel that never returns is TIMEOUT within
    # compile_timeout_s + call_timeout_s of its first line running.
    start_timeout_s: float = 300.0
    compile_timeout_s: float = 300.0
    call_timeout_s: float = 120.0
    eager_drift_flag: float = 0.10
    eager_baseline_warmup: int = 10
    eager_baseline_timed: int = 100
    eager_check_warmup: int = 3
    eager_check_timed: int = 20
    # a cached baseline's check takes fewer calls (at least eager_check_min) when eager_check_timed
    # calls of a slow reference would exceed this many seconds (upstream workloads reach seconds a call)
    eager_check_budget_s: float = 10.0
    eager_check_min: int = 5
    eager_cache: bool = True  # reuse a baseline measured earlier (baseline.default_cache_dir())
    max_bypass_sites: int = 16
    max_output_bytes: int = 8 << 30
    foreign_gpu_wait_s: float = 10.0
    exclusive_gpu: bool = True  # False only for verdict-only runs that grade several kernels at once
    pin_cores: bool = True  # the grader's spin on a core of its own, the workers off that core and its sibling
    require_sandbox: bool = False  # an OS limit that cannot be set is INFRA_ERROR instead of a note
    # After each reply a worker may poll for the next request this long instead of sleeping (only
    # with a core plan): a slept core runs the next call's host side slower, but polling workers
    # also compete for cores (docs/grading.md weighs the two; off by default).
    hot_wait_ms: float = 0.0
    # Time the eager reference call by call beside the candidate (ABBA order) instead of against a
    # baseline measured apart: for hosts whose speed moves between minutes (shared CPU machines,
    # where one kernel's gradings a few minutes apart read up to 2x apart while its time over the
    # eager call's holds within a few per cent). The speedup is then the ratio of the two medians of
    # one loop; the demo study on the CPU uses it. Off by default: the contract's GPU timing keeps
    # its measured baseline, and this mode trusts the kernel not to slow the reference's calls beside
    # it (docs/grading.md, "Interleaved eager timing").
    interleave_eager: bool = False
    # The device memory the grade plans its placement for (``verifier.memory``): None takes the CUDA
    # device's whole memory (a CPU grade plans nothing); a smaller figure grades as if on a smaller card.
    memory_budget_bytes: int | None = None


# ---- Forbidden imports --------------------------------------------------------------------------
#
# Two enforcers refuse modules, each with its own list, because they see different things:
#
# - the static scan (``verifier.rules.FORBIDDEN_MODULES`` and its ``DSL_FOREIGN``, plus a catch-all
#   for ``metakernelbench.*`` except ``problem_kit``) reads the kernel file's source before any of it
#   runs and refuses every listed name, whoever would use it. Its table lives in ``rules.py``, not
#   here: that file is copied verbatim into every task's sandbox (the agent's ``check``), where this
#   module does not exist.
# - the audit hook (``verifier.guard``) runs inside the candidate's worker and refuses the import, or
#   the module code, of the packages below at run time, however they are reached (``importlib``,
#   strings the scan cannot see). Its list is shorter on purpose: torch and the DSLs themselves use
#   ``threading``, ``ctypes``, ``inspect``, ``importlib`` and the like, so those are policed there by
#   the events a submission's own frames raise (threads, processes, native loads, frame walking),
#   not by module. It is defined here and ``guard`` reads it.
#
# ``verifier.forbidden.forbidden_imports()`` joins the two into one table that says, for every module,
# who refuses it (it reads ``rules``, so it lives beside the enforcers: this module imports nothing of
# the project).

class Enforcer(StrEnum):
    STATIC = "static scan"  # verifier.rules: the AST scan of the source, before anything runs
    AUDIT = "audit hook"  # verifier.guard: the worker's audit hook, at run time


# refused by the audit hook whoever imports them (guard.FORBIDDEN_IMPORTS)
AUDIT_FORBIDDEN_IMPORTS: tuple[str, ...] = (
    "triton", "cupy", "numba", "tilelang", "jax", "cuda.core", "cuda.cccl", "cuda.compute",
    "nvmath", "quack", "flash_attn", "flashinfer", "cudnn", "cutlass_cppgen", "cutlass_library",
    "liger_kernel", "sgl_kernel", "deep_gemm", "tvm_tirx", "torch._inductor", "torch._dynamo", "cffi",
    "_cffi_backend",
    "metakernelbench.verifier", "metakernelbench.problems", "metakernelbench.adapters",
    "metakernelbench.skill_transfer", "mkb_problem",
)
# torch itself loads these lazily (its profiler, its own compile paths): the audit hook refuses their
# code only when the submission asks for it (guard.TORCH_LAZY)
AUDIT_SUBMISSION_ONLY: tuple[str, ...] = ("torch._inductor", "torch._dynamo")
# the other DSL's package, refused by both enforcers in a task of this DSL (guard.DSL_FOREIGN)
FOREIGN_DSL_PACKAGES: dict[str, tuple[str, ...]] = {
    dsl: tuple(pkg for other, pkg in DSL_PACKAGES.items() if other != dsl) for dsl in DSLS}
# audit-hook entries the static scan does not name, and why that is acceptable
AUDIT_ONLY: dict[str, str] = {
    "_cffi_backend": "cffi's C backend: the static scan refuses cffi itself; the hook also catches its backend",
}


@dataclass(frozen=True)
class ForbiddenImport:
    """One refused module prefix (the module and everything under it) and who refuses it."""

    module: str
    reason: str  # the static scan's message (for an audit-only entry: why the scan does not name it)
    enforced_by: frozenset[Enforcer]
    dsl: str | None = None  # refused only in a task of this DSL (the other DSL's package)
    submission_only: bool = False  # the audit hook refuses it only when the submission asks (torch loads it)

    @property
    def where(self) -> str:
        """``static scan``, ``audit hook`` or ``static scan + audit hook``."""
        return " + ".join(e.value for e in Enforcer if e in self.enforced_by)
