"""The grader's one check helper: every stage that judges a call's results words an INCORRECT alike."""

from __future__ import annotations

import pytest

from metakernelbench.verifier.evaluation import Evaluation
from metakernelbench.verifier.launch import Verdict
from metakernelbench.verifier.result import Mismatch, Status


def test_a_correct_call_passes_silently():
    Evaluation.require_correct(None, "draw 0")


def test_an_incorrect_call_names_the_call_the_output_and_the_check():
    mismatch = Mismatch(output="y", draw=3, check="max_abs", detail="largest error too big")
    with pytest.raises(Verdict) as caught:
        Evaluation.require_correct(mismatch, "timed call 3 (rechecked after timing)")
    assert caught.value.status is Status.INCORRECT
    assert caught.value.message == ("timed call 3 (rechecked after timing): output 'y' failed the max_abs check: "
                                    "largest error too big")
    assert caught.value.fields["mismatch"] is mismatch
