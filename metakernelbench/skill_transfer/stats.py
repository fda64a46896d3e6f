"""Small statistics for the annotation tables: shares with bootstrap intervals, Spearman, Cohen's kappa.

Intervals are the same kind as the lift's (``metrics.bootstrap_lift_ci``): a 95 % percentile
bootstrap that resamples the sampled unit with replacement (the problem within a model and
direction; the cell for a correlation over cells), with a generator per table cell from
``metrics.cell_rng``, so each interval is reproducible and independent of the other cells.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

__all__ = ["bootstrap_share_ci", "bootstrap_spearman_ci", "cohen_kappa", "ranks", "share", "spearman"]


def share(numerators: Sequence[float], denominators: Sequence[float]) -> float | None:
    """sum(numerators) / sum(denominators), None when the denominator is 0."""
    total = float(sum(denominators))
    return float(sum(numerators)) / total if total > 0 else None


def bootstrap_share_ci(
    numerators: Sequence[float], denominators: Sequence[float], rng: np.random.Generator, n_boot: int = 2000
) -> tuple[float, float] | None:
    """95 % interval of ``share``, resampling the units (pairs of numerator and denominator)."""
    if not numerators or share(numerators, denominators) is None:
        return None
    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    idx = rng.integers(0, len(num), size=(n_boot, len(num)))
    tops, bottoms = num[idx].sum(axis=1), den[idx].sum(axis=1)
    valid = bottoms > 0
    lo, hi = np.percentile(tops[valid] / bottoms[valid], [2.5, 97.5])
    return float(lo), float(hi)


def ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    x = np.asarray(values, dtype=float)
    order = np.argsort(x, kind="mergesort")
    out = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        out[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson on tie-averaged ranks); None below 3 pairs or without spread."""
    if len(xs) != len(ys):
        raise ValueError("spearman needs pairs")
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt((rx**2).sum() * (ry**2).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else None


def bootstrap_spearman_ci(
    xs: Sequence[float], ys: Sequence[float], rng: np.random.Generator, n_boot: int = 2000
) -> tuple[float, float] | None:
    """95 % interval of Spearman's rho, resampling the pairs (cells); undefined resamples are dropped."""
    if spearman(xs, ys) is None:
        return None
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    rhos = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(x), size=len(x))
        rho = spearman(x[idx], y[idx])
        if rho is not None:
            rhos.append(rho)
    if not rhos:
        return None
    lo, hi = np.percentile(rhos, [2.5, 97.5])
    return float(lo), float(hi)


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> tuple[float | None, float | None]:
    """(kappa, observed agreement) of two raters over the same items.

    kappa = (p_o - p_e) / (1 - p_e) with p_e from each rater's own label shares; None when there are
    no items, or when chance agreement is already 1 (both raters used one and the same label).
    """
    if len(first) != len(second):
        raise ValueError("kappa needs the same items from both raters")
    n = len(first)
    if n == 0:
        return None, None
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / n
    labels = set(first) | set(second)
    expected = sum((list(first).count(k) / n) * (list(second).count(k) / n) for k in labels)
    if expected >= 1:
        return None, observed
    return (observed - expected) / (1 - expected), observed
