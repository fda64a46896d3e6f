"""A hand-computed annotation fixture: records of two annotators and the comparisons they are about.

Model ``m``; families by problem: 01 attention, 20 kv_cache, 28 mlp_norm, 45 moe, 53 quantization,
63 linear_attention.

Comparisons (r) and the first annotator's follow levels:

    cutedsl2tirx: 01 r=2 full (helped), 20 r=5/4 partial (helped), 28 r=1 none (neutral),
                  45 r=1/4 partial (harmed), 53 r=1/2 none (harmed), 63 r=4/5 unlabelled (harmed)
    tirx2cutedsl: 01 r=4 full (helped), 20 r=1/4 none (harmed)

    follow, cutedsl2tirx: helped n=2 (1 full, 1 partial) -> full share 1/2; neutral n=1 (none) -> 0;
                          harmed n=2 (1 partial, 1 none) -> 0 (63 is unlabelled and not counted)
    follow, tirx2cutedsl: helped n=1 full -> 1; harmed n=1 none -> 0

Spearman over (model, family) cells with a labelled follow (63 has none, so linear_attention drops):

    cutedsl2tirx: x (full share) = attention 1, kv_cache 0, mlp_norm 0, moe 0, quantization 0
                  y (lift = r - 1) = 1, 1/4, 0, -3/4, -1/2
                  ranks x = 5, 2.5, 2.5, 2.5, 2.5; ranks y = 5, 4, 3, 1, 2
                  rho = 5 / sqrt(5 * 10) = 0.70711
    both:         attention: levels full, full -> 1; ratios 2, 4 -> lift sqrt(8) - 1 = 1.828
                  kv_cache: partial, none -> 0; ratios 5/4, 1/4 -> lift sqrt(5/16) - 1 = -0.441
                  mlp_norm 0 / 0, moe 0 / -3/4, quantization 0 / -1/2
                  ranks y = 5, 3, 4, 1, 2 -> rho = 5 / sqrt(50) = 0.70711
    tirx2cutedsl: two cells only -> undefined

Labels: cutedsl2tirx skills 01 {evidence_backed_finding, work_partitioning}, 20
{evidence_backed_finding, unverified_claim}, 28 {attempt_narrative}, 45 unlabelled -> of 3 skills,
evidence 2/3, the others 1/3; tirx2cutedsl skill 01 {open_question} -> 1/1.

Propagation, cutedsl2tirx: 01 claims (verified; unverified, repeated; unverified, not repeated),
20 (verified), 28 (unverified, not repeated) -> attempts 3, with an unverified claim 2, propagating
1: attempt rate 1/2; unverified claims 3, propagated 1: claim rate 1/3.

Failure, cutedsl2tirx: 45 faulty_execution, 53 unverified_adoption, 63 unverified_adoption ->
unverified_adoption 2/3, faulty_execution 1/3.

Second annotator: labels 01 lacks work_partitioning; follow 20 cutedsl2tirx is full; failure 53 is
faulty_execution; all else equal.

    labels: 44 decisions (4 skills x 11), 1 disagreement; trues 6 and 5:
            p_o = 43/44, p_e = (6*5 + 38*39) / 44^2 = 1512/1936, kappa = 380/424 = 0.89623
    follow: 7 items, 6 agree; first full 2 partial 2 none 3, second 3 / 1 / 3:
            p_e = 17/49, kappa = (42/49 - 17/49) / (32/49) = 25/32
    propagation: any-repeated decisions yes, no, no on both sides: kappa 1
    failure: p_o = 2/3, p_e = (2*1 + 1*2)/9 = 4/9, kappa = (2/9) / (5/9) = 2/5
"""

from metakernelbench.skill_transfer.annotation_models import (
    AnnotationRecord,
    FailureAnswer,
    FollowAnswer,
    PropagationAnswer,
    SkillLabels,
)
from metakernelbench.skill_transfer.models import Comparison

FAMILY = {"01": "attention", "20": "kv_cache", "28": "mlp_norm", "45": "moe", "53": "quantization",
          "63": "linear_attention"}
C2T, T2C = "cutedsl2tirx", "tirx2cutedsl"
RATIOS = {(C2T, "01"): 2.0, (C2T, "20"): 1.25, (C2T, "28"): 1.0, (C2T, "45"): 0.25, (C2T, "53"): 0.5,
          (C2T, "63"): 0.8, (T2C, "01"): 4.0, (T2C, "20"): 0.25}


def problem(p: str) -> str:
    return f"{p}_p"


def comparisons() -> list[Comparison]:
    out = []
    for (direction, p), r in RATIOS.items():
        outcome = "both_pass" if 0.25 < r < 4 else ("rescue" if r == 4 else "break")
        out.append(Comparison(model="m", problem=problem(p), family=FAMILY[p], direction=direction, r=r,
                              outcome=outcome, solo_status="PASSED", transfer_status="PASSED"))
    return out


def record(layer, direction, p, answer, annotator="ann/one"):
    target = direction.split("2")[1] if layer != "labels" else direction.split("2")[0]
    return AnnotationRecord(
        layer=layer, model="m", problem=problem(p), family=FAMILY[p], dsl=target, direction=direction,
        r=None if layer == "labels" else RATIOS[(direction, p)], annotator=annotator, rubric_version="1.0",
        input_hash=f"{layer}-{direction}-{p}", status="labelled" if answer is not None else "unlabelled",
        answer=answer, error=None if answer is not None else "malformed answer: test", tries=1)


def labels(*categories):
    return SkillLabels(labels=[{"category": c, "quote": "q"} for c in categories])


def follow(level):
    return FollowAnswer(level=level, evidence=["e"], rationale="r")


def claim(verified, repeated):
    return {"claim": "c", "verified": verified, "support": "s" if verified else None,
            "reappears": "t" if repeated else None}


def failure(name):
    return FailureAnswer(primary_class=name, evidence=["e"], rationale="r")


def first_annotator() -> list[AnnotationRecord]:
    return [
        record("labels", C2T, "01", labels("evidence_backed_finding", "work_partitioning")),
        record("labels", C2T, "20", labels("evidence_backed_finding", "unverified_claim")),
        record("labels", C2T, "28", labels("attempt_narrative")),
        record("labels", C2T, "45", None),
        record("labels", T2C, "01", labels("open_question")),
        record("follow", C2T, "01", follow("full")),
        record("follow", C2T, "20", follow("partial")),
        record("follow", C2T, "28", follow("none")),
        record("follow", C2T, "45", follow("partial")),
        record("follow", C2T, "53", follow("none")),
        record("follow", C2T, "63", None),
        record("follow", T2C, "01", follow("full")),
        record("follow", T2C, "20", follow("none")),
        record("propagation", C2T, "01", PropagationAnswer(
            claims=[claim(True, False), claim(False, True), claim(False, False)])),
        record("propagation", C2T, "20", PropagationAnswer(claims=[claim(True, False)])),
        record("propagation", C2T, "28", PropagationAnswer(claims=[claim(False, False)])),
        record("failure", C2T, "45", failure("faulty_execution")),
        record("failure", C2T, "53", failure("unverified_adoption")),
        record("failure", C2T, "63", failure("unverified_adoption")),
    ]


def second_annotator() -> list[AnnotationRecord]:
    changed = {
        ("labels", C2T, "01"): labels("evidence_backed_finding"),
        ("follow", C2T, "20"): follow("full"),
        ("failure", C2T, "53"): failure("faulty_execution"),
    }
    out = []
    for r in first_annotator():
        answer = changed.get((r.layer, r.direction, r.problem[:2]), r.answer)
        out.append(record(r.layer, r.direction, r.problem[:2], answer, annotator="ann/two"))
    return out
