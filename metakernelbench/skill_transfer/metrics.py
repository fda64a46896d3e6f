"""The paired metrics of design.md §6, as small pure functions.

Per (model, problem, direction) the transfer attempt is compared with the solo attempt on the same
target task:

- both pass: r = t_solo / t_transfer, clipped to [1/4, 4];
- rescue (solo fails, transfer passes): r = 4;  break (solo passes, transfer fails): r = 1/4;
- joint failure, or a skipped treatment (the source left no skill): r = 1.

Paired lift = geometric mean of r minus 1; help rate = share of r >= 5/4; harm rate = share of
r <= 4/5. Thresholds are compared with a relative tolerance of 1e-9 so that a ratio that is 5/4 on
paper (0.35 ms against 0.28 ms, say) counts as help although floating point gives 1.2499999999999998.

The bootstrap resamples the problems of a cell with replacement (the problem is the unit that was
sampled), recomputes the lift, and reports the 2.5 and 97.5 percentiles. Each cell gets its own
generator derived from the seed and the cell's name, so a cell's interval does not depend on
which other cells are in the file.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "CLIP", "HARM", "HELP", "REL_TOL", "at_least", "at_most", "bootstrap_lift_ci", "cell_rng", "harm_rate", "harmed",
    "help_rate", "helped", "lift", "paired_ratio", "standing",
]

CLIP = 4.0
HELP = 5 / 4
HARM = 4 / 5
REL_TOL = 1e-9


def paired_ratio(
    solo_passed: bool,
    solo_ms: float | None,
    transfer_passed: bool,
    transfer_ms: float | None,
    skipped: bool = False,
) -> tuple[float, str]:
    """(r, outcome) for one comparison; outcome is both_pass|rescue|break|joint_fail|skipped."""
    if skipped:
        return 1.0, "skipped"
    if solo_passed and transfer_passed:
        if not (solo_ms and transfer_ms and solo_ms > 0 and transfer_ms > 0):
            raise ValueError("both attempts passed but a runtime is missing or not positive")
        return min(CLIP, max(1 / CLIP, solo_ms / transfer_ms)), "both_pass"
    if transfer_passed:
        return CLIP, "rescue"
    if solo_passed:
        return 1 / CLIP, "break"
    return 1.0, "joint_fail"


def at_least(value: float, threshold: float) -> bool:
    """value >= threshold, forgiving a floating-point hair below it."""
    return value >= threshold * (1 - REL_TOL)


def at_most(value: float, threshold: float) -> bool:
    """value <= threshold, forgiving a floating-point hair above it."""
    return value <= threshold * (1 + REL_TOL)


def helped(r: float) -> bool:
    return at_least(r, HELP)


def harmed(r: float) -> bool:
    return at_most(r, HARM)


def lift(ratios: Sequence[float]) -> float | None:
    """Geometric mean of the ratios minus 1 (None for no ratios)."""
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) - 1


def help_rate(ratios: Sequence[float]) -> float | None:
    return sum(helped(r) for r in ratios) / len(ratios) if ratios else None


def harm_rate(ratios: Sequence[float]) -> float | None:
    return sum(harmed(r) for r in ratios) / len(ratios) if ratios else None


def cell_rng(seed: int, *name: object) -> np.random.Generator:
    """A generator for one cell: the same (seed, name) always gives the same stream."""
    digest = hashlib.sha256("\x1f".join(map(str, name)).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def bootstrap_lift_ci(
    ratios: Sequence[float], rng: np.random.Generator, n_boot: int = 2000
) -> tuple[float, float] | None:
    """95 % percentile interval of the lift, resampling the ratios (problems) with replacement."""
    if not ratios:
        return None
    logs = np.log(np.asarray(ratios, dtype=float))
    idx = rng.integers(0, len(logs), size=(n_boot, len(logs)))
    lifts = np.exp(logs[idx].mean(axis=1)) - 1
    lo, hi = np.percentile(lifts, [2.5, 97.5])
    return float(lo), float(hi)


def standing(
    source_passed: bool,
    source_speedup: float | None,
    solo_passed: bool,
    solo_speedup: float | None,
) -> str:
    """Where the source attempt stood against the target's solo attempt: above|same|below.

    Above: the source passed where the solo failed, or both passed and the source's speedup is at
    least 5/4 of the solo's. Below: the mirror image. Otherwise (both failed, or both passed within
    a factor 5/4, or a speedup is unknown) same.
    """
    if source_passed and not solo_passed:
        return "above"
    if solo_passed and not source_passed:
        return "below"
    if source_passed and solo_passed and source_speedup and solo_speedup:
        if at_least(source_speedup, HELP * solo_speedup):
            return "above"
        if at_least(solo_speedup, HELP * source_speedup):
            return "below"
    return "same"
