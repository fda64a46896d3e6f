"""The comparison's text formatting: percentages, intervals and aligned Markdown tables."""

from metakernelbench.skill_transfer.tables import ci, md_table, pct


def test_percentages_and_missing_values():
    assert pct(0.1234) == "12.3%"
    assert pct(-0.05, signed=True) == "-5.0%"
    assert pct(None) == "–"


def test_an_interval_is_two_signed_percentages():
    assert ci((-0.1, 0.25)) == "[-10.0%, +25.0%]"
    assert ci(None) == "–"


def test_a_table_aligns_its_columns_to_the_widest_cell():
    lines = md_table(("a", "long header"), [[1, "x"], [12345, "yy"]]).splitlines()
    assert lines[0] == "| a     | long header |"
    assert lines[1] == "|-------|-------------|"
    assert lines[3] == "| 12345 | yy          |"
    assert len({len(line) for line in lines}) == 1


def test_a_table_without_rows_keeps_its_header():
    assert md_table(("model",), []).splitlines()[0] == "| model |"
