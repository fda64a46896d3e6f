"""The plain-text report (``verifier.report``): an error names the submission's file and line.

A person running ``mkb grade`` without ``--json`` (and an agent reading the judge's reply) sees only
this text, so a RUNTIME_ERROR or COMPILE_ERROR must say where in the kernel file it arose, not only
the exception's message; frames of the grader and of installed libraries are not that place.
"""

from __future__ import annotations

from metakernelbench.verifier.report import kernel_frame, render_report
from metakernelbench.verifier.result import GradeResult, Status

GRADER = "/opt/mkb/metakernelbench/verifier/worker.py"
TRACEBACK = f"""Traceback (most recent call last):
  File "{GRADER}", line 388, in call
    returned = self.solve(*inputs)
               ^^^^^^^^^^^^^^^^^^^
  File "/scratch/eval-1/kernel.py", line 9, in solve
    return helper(inputs[0])
           ^^^^^^^^^^^^^^^^^
  File "/scratch/eval-1/kernel.py", line 5, in helper
    out = T.compile(x)
  File "/usr/lib/python3/dist-packages/tvm/driver.py", line 40, in compile
    raise ValueError("boom")
ValueError: boom
"""


def _runtime_error(traceback: str) -> GradeResult:
    return GradeResult(status=Status.RUNTIME_ERROR, passed=False, problem="25_block_copy", dsl="tirx",
                       message="ValueError: boom", details={"traceback": traceback})


def test_the_innermost_frame_of_the_submission_is_named():
    assert kernel_frame(TRACEBACK) == "/scratch/eval-1/kernel.py, line 5, in helper: out = T.compile(x)"


def test_the_human_report_shows_file_and_line():
    text = render_report(_runtime_error(TRACEBACK))
    assert "where: /scratch/eval-1/kernel.py, line 5, in helper" in text, text


def test_no_place_is_invented_when_only_library_frames_remain():
    only_grader = f'Traceback (most recent call last):\n  File "{GRADER}", line 1, in call\n    x()\nOSError: x\n'
    assert kernel_frame(only_grader) is None
    assert "where:" not in render_report(_runtime_error(only_grader))
