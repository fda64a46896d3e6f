"""Every annotation table against the hand-computed fixture (annotation_fixture.py's docstring)."""

import math

import pytest
from annotation_fixture import C2T, T2C, comparisons, first_annotator, second_annotator

from metakernelbench.skill_transfer.annotation_tables import annotation_tables

N_BOOT = 300


@pytest.fixture(scope="module")
def tables():
    return annotation_tables(first_annotator(), comparisons(), seed=0, n_boot=N_BOOT, second=second_annotator())


def test_provenance_and_coverage(tables):
    assert (tables.annotator, tables.rubric_version, tables.pass_id) == ("ann/one", "1.0", 1)
    assert tables.second_annotator == "ann/two (pass 1)"
    cov = {c.layer: (c.items, c.labelled, c.unlabelled) for c in tables.coverage}
    assert cov == {"labels": (5, 4, 1), "follow": (8, 7, 1), "propagation": (3, 3, 0), "failure": (3, 3, 0)}


def test_label_frequencies(tables):
    rows = {(r.direction, r.category): r for r in tables.labels}
    assert len(rows) == 22  # 11 categories in each direction
    assert rows[(C2T, "evidence_backed_finding")].share == pytest.approx(2 / 3)
    assert rows[(C2T, "evidence_backed_finding")].skills == 3
    for c in ("work_partitioning", "unverified_claim", "attempt_narrative"):
        assert rows[(C2T, c)].share == pytest.approx(1 / 3) and rows[(C2T, c)].with_category == 1
    assert rows[(C2T, "open_question")].share == 0 and rows[(C2T, "open_question")].ci95 == (0.0, 0.0)
    assert rows[(T2C, "open_question")].share == 1 and rows[(T2C, "failure_reason")].share == 0
    lo, hi = rows[(C2T, "evidence_backed_finding")].ci95
    assert 0 <= lo <= 2 / 3 <= hi <= 1


def test_follow_by_outcome(tables):
    rows = {(r.direction, r.group): (r.n, r.full, r.partial, r.none, r.full_share) for r in tables.follow}
    assert rows[(C2T, "helped")] == (2, 1, 1, 0, 0.5)
    assert rows[(C2T, "neutral")] == (1, 0, 0, 1, 0.0)
    assert rows[(C2T, "harmed")] == (2, 0, 1, 1, 0.0)
    assert rows[(T2C, "helped")] == (1, 1, 0, 0, 1.0)
    assert rows[(T2C, "harmed")] == (1, 0, 0, 1, 0.0)
    assert rows[(T2C, "neutral")] == (0, 0, 0, 0, None)


def test_spearman_over_family_cells(tables):
    rows = {r.direction: r for r in tables.spearman}
    assert rows[C2T].cells == 5 and rows[C2T].rho == pytest.approx(5 / math.sqrt(50))
    assert rows["both"].cells == 5 and rows["both"].rho == pytest.approx(5 / math.sqrt(50))
    assert rows[T2C].cells == 2 and rows[T2C].rho is None and rows[T2C].ci95 is None
    lo, hi = rows[C2T].ci95
    assert -1 <= lo <= hi <= 1


def test_propagation(tables):
    (row,) = [r for r in tables.propagation if r.direction == C2T]
    assert (row.attempts, row.with_unverified, row.propagating) == (3, 2, 1)
    assert row.attempt_rate == 0.5 and row.claim_rate == pytest.approx(1 / 3)
    assert (row.unverified_claims, row.propagated_claims) == (3, 1)
    assert not [r for r in tables.propagation if r.direction == T2C]


def test_failure_class_shares(tables):
    rows = {r.failure_class: r for r in tables.failure if r.direction == C2T}
    assert len(rows) == 6 and all(r.harmed == 3 for r in rows.values())
    assert rows["unverified_adoption"].share == pytest.approx(2 / 3)
    assert rows["faulty_execution"].share == pytest.approx(1 / 3)
    assert rows["search_truncation"].share == 0


def test_kappa_per_layer(tables):
    rows = {r.layer: r for r in tables.agreement}
    assert rows["labels"].items == 4 and rows["labels"].observed == pytest.approx(43 / 44)
    assert rows["labels"].kappa == pytest.approx(380 / 424)
    assert rows["follow"].items == 7 and rows["follow"].kappa == pytest.approx(25 / 32)
    assert rows["propagation"].kappa == pytest.approx(1.0)
    assert rows["failure"].kappa == pytest.approx(2 / 5)


def test_intervals_are_reproducible_and_seeded(tables):
    again = annotation_tables(first_annotator(), comparisons(), seed=0, n_boot=N_BOOT)
    other = annotation_tables(first_annotator(), comparisons(), seed=1, n_boot=N_BOOT)
    assert [r.ci95 for r in again.labels] == [r.ci95 for r in tables.labels]
    assert [r.ci95 for r in other.labels] != [r.ci95 for r in tables.labels]


def test_mixed_or_identical_files_are_refused():
    mixed = first_annotator() + second_annotator()
    with pytest.raises(ValueError, match="one annotator"):
        annotation_tables(mixed, comparisons(), n_boot=10)
    with pytest.raises(ValueError, match="second annotator or a second pass"):
        annotation_tables(first_annotator(), comparisons(), n_boot=10, second=first_annotator())
