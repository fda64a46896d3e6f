"""Rank correlation, kappa and share intervals on small cases worked out by hand."""

import numpy as np
import pytest

from metakernelbench.skill_transfer.stats import (
    bootstrap_share_ci,
    cohen_kappa,
    ranks,
    share,
    spearman,
)


def test_ranks_average_ties():
    assert list(ranks([3.0, 1.0, 3.0, 2.0])) == [3.5, 1.0, 3.5, 2.0]


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks x 1,2,3; ranks y 1,3,2: d = (-1,0,1) and (-1,1,0): rho = 1 / 2
    assert spearman([1, 2, 3], [5, 9, 7]) == pytest.approx(0.5)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_kappa():
    # 10 items: both yes 4, both no 3, first yes second no 2, first no second yes 1
    first = ["y"] * 4 + ["n"] * 3 + ["y"] * 2 + ["n"]
    second = ["y"] * 4 + ["n"] * 3 + ["n"] * 2 + ["y"]
    kappa, observed = cohen_kappa(first, second)
    # p_o = 0.7; p_e = 0.6 * 0.5 + 0.4 * 0.5 = 0.5; kappa = 0.2 / 0.5
    assert observed == pytest.approx(0.7) and kappa == pytest.approx(0.4)
    assert cohen_kappa(["a", "a"], ["a", "a"]) == (None, 1.0)
    assert cohen_kappa([], []) == (None, None)


def test_share_interval():
    assert share([1, 0, 2], [1, 1, 4]) == pytest.approx(0.5)
    assert share([0], [0]) is None and bootstrap_share_ci([0], [0], np.random.default_rng(0)) is None
    lo, hi = bootstrap_share_ci([1, 0, 1, 1], [1, 1, 1, 1], np.random.default_rng(0), 500)
    assert 0 <= lo < 0.75 < hi <= 1
