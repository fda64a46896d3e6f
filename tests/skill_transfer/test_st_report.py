"""``mkb report``: every file is written, the page is self-contained, the charts are valid SVG."""

import csv
import re
import xml.etree.ElementTree as ET

from paired_fixture import FIXTURE, LIFT_C2T
from typer.testing import CliRunner

from metakernelbench.cli import app
from metakernelbench.skill_transfer import svg
from metakernelbench.skill_transfer.report import hygiene_rows, pass_rate_rows, write_report


def test_report_files(tmp_path):
    result = write_report(FIXTURE, tmp_path, seed=0, n_boot=200, note="SYNTHETIC DATA")
    names = {p.name for p in tmp_path.iterdir()}
    assert names >= {"index.html", "report.md", "compare.json", "cells.csv", "standing.csv", "reverse.csv",
                     "excluded.csv", "comparisons.csv", "pass_rates.csv", "hygiene.csv", "lift.svg",
                     "families.svg", "standing.svg", "problems.svg"}
    md = (tmp_path / "report.md").read_text()
    assert "SYNTHETIC DATA" in md and f"{LIFT_C2T * 100:+.1f}%" in md
    with open(tmp_path / "cells.csv") as fh:
        cells = list(csv.DictReader(fh))
    assert len(cells) == len(result.cells)
    pooled = [c for c in cells if c["model"] == "m" and c["direction"] == "cutedsl2tirx" and c["family"] == "all"]
    assert float(pooled[0]["paired_lift"]) == result.cells[0].paired_lift
    with open(tmp_path / "comparisons.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(result.comparisons) == 13


def test_html_is_self_contained(tmp_path):
    write_report(FIXTURE, tmp_path, n_boot=100, note="SYNTHETIC DATA")
    html = (tmp_path / "index.html").read_text()
    assert html.count("<svg") == 4
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html
    assert "SYNTHETIC DATA" in html
    for chart in ("lift", "families", "standing", "problems"):
        root = ET.fromstring((tmp_path / f"{chart}.svg").read_text())
        assert root.tag.endswith("svg")
    for block in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        ET.fromstring(block)


def test_descriptive_tables():
    rows = {(r[0], r[1], r[2]): r for r in pass_rate_rows(FIXTURE)}
    solo_cute = rows[("m", "solo", "cutedsl")]
    # 01 (the latest of two valid attempts), 20, 28, 45, 53 graded; 63 is an infra error.
    # Passed: 01 (0.28 ms, speedup 28.57), 28 and 53 (1 ms, speedup 8): median 8.
    assert solo_cute[3:] == [5, 3, "60.0%", "8.00x", 0, 1]
    assert rows[("m", "solo", "tirx")][3:] == [6, 4, "66.7%", "4.00x", 0, 1]  # speedups 2, 22.9, 4, 4
    assert rows[("m", "cutedsl→tirx", "tirx")][3:] == [4, 3, "75.0%", "4.00x", 1, 0]
    # The fixture carries skill lengths but no hygiene counts; z's 28 skipped both ways.
    assert hygiene_rows(FIXTURE) == [["m", 0, 0, "–", "–", "–", "–", "–", "–"],
                                     ["z", 0, 0, "–", "–", "–", "–", "–", "–"]]


def test_charts_escape_labels_and_handle_empty_cells():
    out = svg.heatmap(["a<b"], ["moe"], {})
    ET.fromstring(out)
    assert "a&lt;b" in out and "–" in out
    ET.fromstring(svg.lift_forest([("x & y", None, None, 0)]))
    ET.fromstring(svg.standing_bars([("g", {"above": (None, None, 0)})]))
    ET.fromstring(svg.problem_strip([("g", [("01_x", 4.0, "moe")] * 30)]))


def test_cli_report(tmp_path):
    path = tmp_path / "attempts.jsonl"
    path.write_text("".join(a.model_dump_json() + "\n" for a in FIXTURE))
    out = CliRunner().invoke(app, ["report", str(path), "-o", str(tmp_path / "r"), "--n-boot", "100",
                                   "--note", "synthetic"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "r" / "index.html").exists()
