"""A hand-computed fixture pins every number of the paired comparison.

Model ``m`` attempts six problems (eager time 8 ms everywhere, so speedup = 8 / runtime):

    problem          family            solo CuTe   solo TIRx   CuTe->TIRx   TIRx->CuTe
    01_p_one         attention         0.28 ms     4.0 ms      2.0 ms       0.35 ms
    20_p_two         kv_cache          INCORRECT   0.35 ms     0.28 ms      1.0 ms
    28_p_three       mlp_norm          1.0 ms      TIMEOUT     INCORRECT    INCORRECT
    45_p_four        moe               INCORRECT   INCORRECT   skipped      10.0 ms
    63_p_five        linear_attention  INFRA       2.0 ms      (not run)    1.0 ms
    53_p_six         quantization      1.0 ms      2.0 ms      4.0 ms       (not run)

plus an older, superseded solo CuTe attempt on 01 (8 ms) and a later INFRA_ERROR rerun of solo
TIRx on 01 (ignored: a valid attempt exists).

Ratios r (solo time / transfer time, or the fixed values):

    CuTe->TIRx: 01 4/2 = 2 (help), 20 0.35/0.28 = 5/4 (help, tie), 28 joint failure 1,
                45 skipped 1, 53 2/4 = 1/2 (harm); 63 unpaired (no transfer attempt)
    TIRx->CuTe: 01 0.28/0.35 = 4/5 (harm, tie), 20 rescue 4, 28 break 1/4, 45 rescue 4;
                63 lost to infra (its solo CuTe attempt failed for infrastructure reasons);
                53 unpaired

    lift CuTe->TIRx = (2 * 5/4 * 1 * 1 * 1/2)^(1/5) - 1 = (5/4)^(1/5) - 1
    lift TIRx->CuTe = (4/5 * 4 * 1/4 * 4)^(1/4) - 1 = (16/5)^(1/4) - 1

Standing (source solo against target solo; speedups 8/runtime):

    CuTe->TIRx: 01 above (28.6 vs 2), 20 below (fails vs passes), 28 above (passes vs fails),
                45 same (both fail), 53 above (8 vs 4)
    TIRx->CuTe: 01 below, 20 above, 28 below, 45 same

Model ``z`` fails everything (two problems, one with both treatments skipped): all r = 1.
"""

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from metakernelbench.skill_transfer.compare import compare, render_tables
from metakernelbench.skill_transfer.models import Attempt
from typer.testing import CliRunner

from metakernelbench.cli import app

T0 = datetime(2026, 1, 1, tzinfo=UTC)
E = 8.0
FAMILY = {"01": "attention", "20": "kv_cache", "28": "mlp_norm", "45": "moe", "63": "linear_attention",
          "53": "quantization"}


def att(model, problem, dsl, arm, result, hours=1, source=None):
    """One attempt row; ``result`` is a runtime in ms (a pass) or a status string."""
    passed = isinstance(result, float)
    return Attempt(
        model=model,
        problem=problem,
        family=FAMILY[problem[:2]],
        dsl=dsl,
        arm=arm,
        source_dsl=source if arm == "transfer" else None,
        passed=passed,
        runtime_ms=result if passed else None,
        speedup=E / result if passed else None,
        skill_chars=0 if result == "skipped" else 100,
        status="PASSED" if passed else result,
        finished_at=T0 + timedelta(hours=hours),
    )


def c2t(model, problem, result):
    return att(model, problem, "tirx", "transfer", result, source="cutedsl")


def t2c(model, problem, result):
    return att(model, problem, "cutedsl", "transfer", result, source="tirx")


def solo(model, problem, dsl, result, hours=1):
    return att(model, problem, dsl, "solo", result, hours)


FIXTURE = [
    solo("m", "01_p_one", "cutedsl", 8.0, hours=0),  # superseded by the later attempt below
    solo("m", "01_p_one", "cutedsl", 0.28),
    solo("m", "01_p_one", "tirx", 4.0),
    solo("m", "01_p_one", "tirx", "INFRA_ERROR", hours=5),  # a failed rerun; the valid one stands
    c2t("m", "01_p_one", 2.0),
    t2c("m", "01_p_one", 0.35),
    solo("m", "20_p_two", "cutedsl", "INCORRECT"),
    solo("m", "20_p_two", "tirx", 0.35),
    c2t("m", "20_p_two", 0.28),
    t2c("m", "20_p_two", 1.0),
    solo("m", "28_p_three", "cutedsl", 1.0),
    solo("m", "28_p_three", "tirx", "TIMEOUT"),
    c2t("m", "28_p_three", "INCORRECT"),
    t2c("m", "28_p_three", "INCORRECT"),
    solo("m", "45_p_four", "cutedsl", "INCORRECT"),
    solo("m", "45_p_four", "tirx", "INCORRECT"),
    c2t("m", "45_p_four", "skipped"),
    t2c("m", "45_p_four", 10.0),
    solo("m", "63_p_five", "cutedsl", "INFRA_ERROR"),
    solo("m", "63_p_five", "tirx", 2.0),
    t2c("m", "63_p_five", 1.0),
    solo("m", "53_p_six", "cutedsl", 1.0),
    solo("m", "53_p_six", "tirx", 2.0),
    c2t("m", "53_p_six", 4.0),
    solo("z", "01_p_one", "cutedsl", "COMPILE_ERROR"),
    solo("z", "01_p_one", "tirx", "INCORRECT"),
    c2t("z", "01_p_one", "RUNTIME_ERROR"),
    t2c("z", "01_p_one", "INCORRECT"),
    solo("z", "28_p_three", "cutedsl", "INCORRECT"),
    solo("z", "28_p_three", "tirx", "INCORRECT"),
    c2t("z", "28_p_three", "skipped"),
    t2c("z", "28_p_three", "skipped"),
]

LIFT_C2T = (5 / 4) ** (1 / 5) - 1
LIFT_T2C = (16 / 5) ** (1 / 4) - 1


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
