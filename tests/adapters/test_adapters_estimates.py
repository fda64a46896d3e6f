"""The difficulty rule: counted lines of code, fixed thresholds, unknown without an oracle."""

import textwrap

from metakernelbench.adapters.estimates import EASY_BELOW, MEDIUM_BELOW, code_lines, estimate


def test_code_lines_skip_docstrings_comments_and_blanks():
    source = textwrap.dedent('''
        """Module docstring
        over two lines."""

        # a comment
        def f(x):
            """Function docstring."""
            return x + 1


        class K:
            """Class docstring."""
    ''')
    assert code_lines(source) == 4  # def, return, class, and the pass standing in for the class body


def _kernel(tmp_path, lines: int):
    path = tmp_path / "kernel.py"
    path.write_text('"""doc"""\n' + "".join(f"x{i} = {i}\n" for i in range(lines)))
    return path


def test_thresholds_and_times(tmp_path):
    assert estimate(_kernel(tmp_path, EASY_BELOW - 1)).difficulty == "easy"
    assert estimate(_kernel(tmp_path, EASY_BELOW)).difficulty == "medium"
    hard = estimate(_kernel(tmp_path, MEDIUM_BELOW))
    assert hard.difficulty == "hard" and hard.oracle_code_lines == MEDIUM_BELOW
    assert hard.expert_time_estimate_min == 30 + MEDIUM_BELOW // 4  # 105: already a multiple of 5
    assert hard.junior_time_estimate_min == 3 * hard.expert_time_estimate_min
    assert estimate(_kernel(tmp_path, 1)).expert_time_estimate_min == 35  # 30.25 rounds up to 35


def test_no_oracle_means_unknown_and_no_times(tmp_path):
    found = estimate(tmp_path / "missing.py")
    assert found.difficulty == "unknown" and found.expert_time_estimate_min is None
