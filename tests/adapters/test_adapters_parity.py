"""Harbor's parity form, filled from fabricated per-kernel records (the GPU run supplies real ones)."""

import json
import math
from pathlib import Path

import harbor
import pytest

from metakernelbench.adapters.parity import Grade, KernelRun, kernel_table, parity_experiment

TEMPLATE = Path(harbor.__file__).parent / "cli" / "template-adapter" / "parity_experiment.json"


def _grade(speedup: float | None) -> Grade:
    return Grade(passed=speedup is not None, status="PASSED" if speedup is not None else "INCORRECT",
                 speedup=speedup)


RECORDS = [
    KernelRun(task="28_x_tirx", run=0, harbor=_grade(2.0), original=_grade(4.0)),
    KernelRun(task="28_x_tirx", run=1, harbor=_grade(2.0), original=_grade(4.0)),
    KernelRun(task="25_y_tirx", run=0, harbor=_grade(8.0), original=_grade(8.0)),
    KernelRun(task="25_y_tirx", run=1, harbor=_grade(8.0), original=_grade(8.0)),
    KernelRun(task="26_z_tirx", run=0, harbor=_grade(3.0), original=_grade(None)),
    KernelRun(task="26_z_tirx", run=1, harbor=_grade(3.0), original=_grade(None)),
]


def test_the_form_has_harbors_fields_and_the_figures():
    entry = parity_experiment(RECORDS, date="2026-01-01", device="NVIDIA H200", notes="n",
                              adapted_benchmark_size=148)[0]
    template = json.loads(TEMPLATE.read_text())[0]
    assert set(template) <= set(entry)
    assert set(template["metrics"][0]) <= set(entry["metrics"][0])
    assert entry["number_of_runs"] == 2 and entry["parity_benchmark_size"] == 3
    pass_rate, geomean = entry["metrics"]
    assert pass_rate["harbor_runs"] == [1.0, 1.0] and pass_rate["original_runs"] == pytest.approx([2 / 3, 2 / 3])
    assert pass_rate["harbor"] == "100.00% +/- 0.00%"
    # only kernels both graders passed: 28 and 25
    assert geomean["harbor_runs"] == pytest.approx([4.0, 4.0])  # sqrt(2 * 8)
    assert geomean["original_runs"] == pytest.approx([math.sqrt(32)] * 2)
    json.dumps(entry)  # the file is plain JSON


def test_the_kernel_table_names_each_difference():
    rows = {r.task: r for r in kernel_table(RECORDS)}
    assert rows["28_x_tirx"].speedup_ratio == pytest.approx(0.5)
    assert rows["26_z_tirx"].original_status == "INCORRECT" and rows["26_z_tirx"].speedup_ratio is None


def test_nothing_measured_writes_nothing():
    with pytest.raises(ValueError, match="nothing has been measured"):
        parity_experiment([], date="", device="", notes="", adapted_benchmark_size=0)
