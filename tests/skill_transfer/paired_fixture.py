"""The hand-computed fixture shared by the comparison and report tests.

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

from datetime import UTC, datetime, timedelta

from metakernelbench.skill_transfer.models import Attempt

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
