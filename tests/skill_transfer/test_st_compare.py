"""The paired comparison against the hand-computed fixture in ``paired_fixture.py``.

That module's docstring works every number out on paper; these tests pin them.
"""

import json
import math

import pytest
from paired_fixture import FIXTURE, LIFT_C2T, LIFT_T2C, c2t, solo
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer.compare import compare
from metakernelbench.skill_transfer.tables import render_tables


@pytest.fixture(scope="module")
def result():
    return compare(FIXTURE, seed=0, n_boot=1000)


def cell(result, model, direction, family=None):
    (found,) = [c for c in result.cells if (c.model, c.direction, c.family) == (model, direction, family)]
    return found


def test_comparisons(result):
    got = {(c.model, c.problem, c.direction): (round(c.r, 9), c.outcome, c.standing) for c in result.comparisons}
    assert got == {
        ("m", "01_p_one", "cutedsl2tirx"): (2.0, "both_pass", "above"),
        ("m", "20_p_two", "cutedsl2tirx"): (1.25, "both_pass", "below"),
        ("m", "28_p_three", "cutedsl2tirx"): (1.0, "joint_fail", "above"),
        ("m", "45_p_four", "cutedsl2tirx"): (1.0, "skipped", "same"),
        ("m", "53_p_six", "cutedsl2tirx"): (0.5, "both_pass", "above"),
        ("m", "01_p_one", "tirx2cutedsl"): (0.8, "both_pass", "below"),
        ("m", "20_p_two", "tirx2cutedsl"): (4.0, "rescue", "above"),
        ("m", "28_p_three", "tirx2cutedsl"): (0.25, "break", "below"),
        ("m", "45_p_four", "tirx2cutedsl"): (4.0, "rescue", "same"),
        ("z", "01_p_one", "cutedsl2tirx"): (1.0, "joint_fail", "same"),
        ("z", "01_p_one", "tirx2cutedsl"): (1.0, "joint_fail", "same"),
        ("z", "28_p_three", "cutedsl2tirx"): (1.0, "skipped", "same"),
        ("z", "28_p_three", "tirx2cutedsl"): (1.0, "skipped", "same"),
    }


def test_pooled_cells(result):
    a = cell(result, "m", "cutedsl2tirx")
    assert (a.n, a.rescues, a.breaks, a.both_pass, a.joint_fail, a.skipped) == (5, 0, 0, 3, 1, 1)
    assert a.paired_lift == pytest.approx(LIFT_C2T)
    assert (a.help_rate, a.harm_rate) == pytest.approx((2 / 5, 1 / 5))
    b = cell(result, "m", "tirx2cutedsl")
    assert (b.n, b.rescues, b.breaks, b.both_pass, b.joint_fail, b.skipped) == (4, 2, 1, 1, 0, 0)
    assert b.paired_lift == pytest.approx(LIFT_T2C)
    assert (b.help_rate, b.harm_rate) == pytest.approx((2 / 4, 2 / 4))
    for c, ratios in ((a, [2, 1.25, 1, 1, 0.5]), (b, [0.8, 4, 0.25, 4])):
        lo, hi = c.lift_ci95
        assert min(ratios) - 1 <= lo <= c.paired_lift <= hi <= max(ratios) - 1


def test_family_cells(result):
    expected = {
        ("cutedsl2tirx", "attention"): 1.0,
        ("cutedsl2tirx", "kv_cache"): 0.25,
        ("cutedsl2tirx", "mlp_norm"): 0.0,
        ("cutedsl2tirx", "moe"): 0.0,
        ("cutedsl2tirx", "quantization"): -0.5,
        ("tirx2cutedsl", "attention"): -0.2,
        ("tirx2cutedsl", "kv_cache"): 3.0,
        ("tirx2cutedsl", "mlp_norm"): -0.75,
        ("tirx2cutedsl", "moe"): 3.0,
    }
    fam_cells = {(c.direction, c.family): c for c in result.cells if c.model == "m" and c.family}
    # linear_attention has no comparison at all, so it has no cells; quantization is one-sided.
    assert set(fam_cells) == set(expected) | {("tirx2cutedsl", "quantization")}
    for key, lift in expected.items():
        c = fam_cells[key]
        assert c.n == 1
        assert c.paired_lift == pytest.approx(lift)
        assert c.lift_ci95 == pytest.approx((lift, lift))  # one problem: nothing to resample
    empty = fam_cells[("tirx2cutedsl", "quantization")]
    assert (empty.n, empty.paired_lift, empty.help_rate, empty.harm_rate, empty.lift_ci95) == (0, None, None,
                                                                                               None, None)
    assert fam_cells[("cutedsl2tirx", "kv_cache")].help_rate == 1.0  # the tie at exactly 5/4 helps
    assert fam_cells[("tirx2cutedsl", "attention")].harm_rate == 1.0  # the tie at exactly 4/5 harms


def test_standing(result):
    got = {(s.model, s.direction, s.standing): (s.n, s.help_rate, s.harm_rate) for s in result.standing}
    m = {k[1:]: v for k, v in got.items() if k[0] == "m"}
    assert m[("cutedsl2tirx", "above")] == (3, pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert m[("cutedsl2tirx", "same")] == (1, 0.0, 0.0)
    assert m[("cutedsl2tirx", "below")] == (1, 1.0, 0.0)
    assert m[("tirx2cutedsl", "above")] == (1, 1.0, 0.0)
    assert m[("tirx2cutedsl", "same")] == (1, 1.0, 0.0)
    assert m[("tirx2cutedsl", "below")] == (2, 0.0, 1.0)
    z = {k[1:]: v for k, v in got.items() if k[0] == "z"}
    assert z[("cutedsl2tirx", "same")] == (2, 0.0, 0.0)
    assert z[("cutedsl2tirx", "above")] == (0, None, None)


def test_reverse(result):
    rows = {r.model: r for r in result.reverse}
    m = rows["m"]
    # Helped: CuTe->TIRx on 01 and 20, TIRx->CuTe on 20 and 45. Reverses: 01 harmed (4/5),
    # 20 helped both ways, 45 neither (r = 1).
    assert (m.helped, m.with_reverse) == (4, 4)
    assert (m.reverse_helped, m.reverse_harmed) == pytest.approx((2 / 4, 1 / 4))
    z = rows["z"]
    assert (z.helped, z.with_reverse, z.reverse_helped, z.reverse_harmed) == (0, 0, None, None)


def test_exclusions(result):
    rows = {e.model: e for e in result.excluded}
    m = rows["m"]
    assert (m.infra_error_attempts, m.comparisons_lost_to_infra, m.unpaired, m.superseded) == (2, 1, 2, 1)
    z = rows["z"]
    assert (z.infra_error_attempts, z.comparisons_lost_to_infra, z.unpaired, z.superseded) == (0, 0, 0, 0)


def test_all_failures_give_zero_lift(result):
    for direction in ("cutedsl2tirx", "tirx2cutedsl"):
        c = cell(result, "z", direction)
        assert (c.n, c.paired_lift, c.help_rate, c.harm_rate, c.rescues, c.breaks) == (2, 0.0, 0.0, 0.0, 0, 0)
        assert c.lift_ci95 == pytest.approx((0.0, 0.0))
        assert c.skipped == 1 and c.joint_fail == 1


def test_seeded_and_deterministic():
    a = compare(FIXTURE, seed=5, n_boot=300)
    b = compare(list(reversed(FIXTURE)), seed=5, n_boot=300)
    assert a.model_dump() == b.model_dump()
    c = compare(FIXTURE, seed=6, n_boot=300)
    assert cell(a, "m", "cutedsl2tirx").lift_ci95 != cell(c, "m", "cutedsl2tirx").lift_ci95


def test_a_later_infra_error_never_replaces_a_result():
    rows = [solo("m", "01_p_one", "tirx", 4.0), solo("m", "01_p_one", "tirx", "INFRA_ERROR", hours=9),
            c2t("m", "01_p_one", 2.0)]
    (comp,) = compare(rows, n_boot=10).comparisons
    assert comp.r == 2.0


def test_readable_tables(result):
    text = render_tables(result)
    for heading in ("Paired lift, all families", "Paired lift by family", "Source standing",
                    "Reverse-direction agreement", "Left out"):
        assert heading in text
    assert f"{LIFT_C2T * 100:+.1f}%" in text


def test_cli_compare_json_and_text(tmp_path):
    path = tmp_path / "attempts.jsonl"
    path.write_text("".join(a.model_dump_json() + "\n" for a in FIXTURE))
    runner = CliRunner()
    out = runner.invoke(app, ["compare", str(path), "--json", "--seed", "0", "--n-boot", "200"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert set(data) >= {"cells", "standing", "reverse"}
    pooled = {(c["model"], c["direction"]): c for c in data["cells"] if c["family"] is None}
    got = pooled[("m", "cutedsl2tirx")]
    assert got["n"] == 5 and math.isclose(got["paired_lift"], LIFT_C2T)
    assert len(got["lift_ci95"]) == 2
    assert {s["standing"] for s in data["standing"]} == {"above", "same", "below"}
    assert {r["model"] for r in data["reverse"]} == {"m", "z"}
    text = runner.invoke(app, ["compare", str(path)])
    assert text.exit_code == 0 and "| model" in text.stdout


def test_bad_attempt_line_names_its_line(tmp_path):
    path = tmp_path / "attempts.jsonl"
    good = FIXTURE[1].model_dump()
    bad = dict(good, runtime_ms=None)  # a pass without a time
    path.write_text(json.dumps(good, default=str) + "\n" + json.dumps(bad, default=str) + "\n")
    out = CliRunner().invoke(app, ["compare", str(path)])
    assert out.exit_code != 0
    assert ":2:" in str(out.exception)


def _passed(arm, ms, speedup, interleaved):
    from metakernelbench.skill_transfer.models import Attempt
    return Attempt(model="m", problem="28_p", family="mlp_norm", dsl="tirx", arm=arm,
                   source_dsl="cutedsl" if arm == "transfer" else None, passed=True, runtime_ms=ms, speedup=speedup,
                   eager_interleaved=interleaved, status="PASSED")


@pytest.mark.parametrize("interleaved, basis, r", [
    ((True, True), "speedup", 1.0),  # each grading's eager call timed beside it: the host's 2x cancels
    ((False, False), "time", 0.5),  # the design's t_solo / t_transfer
    ((True, False), "time", 0.5),  # one grade of each kind: times, as the design says
])
def test_a_pair_timed_beside_the_eager_call_compares_speedups(interleaved, basis, r):
    """One kernel graded twice on a host that ran 2x slower for the second grading: 0.03 ms and 0.06 ms,
    with eager calls of 0.04 and 0.08 ms timed beside them (speedup 1.33 both times)."""
    from metakernelbench.skill_transfer.compare import build_comparisons

    attempts = [_passed("solo", 0.03, 0.04 / 0.03, interleaved[0]),
                _passed("transfer", 0.06, 0.08 / 0.06, interleaved[1])]
    (comparison,), _ = build_comparisons(attempts)
    assert comparison.basis == basis and math.isclose(comparison.r, r)
    assert (comparison.solo_ms, comparison.transfer_ms) == (0.03, 0.06)  # the record keeps the measured times


def test_an_attempt_timed_beside_the_eager_call_needs_its_speedup():
    with pytest.raises(ValueError, match="eager_interleaved"):
        _passed("solo", 0.03, None, True)
