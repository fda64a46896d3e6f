"""The kernel's CPU-list text read and written (``verifier.cpu_list``)."""

from __future__ import annotations

from metakernelbench.verifier.cpu_list import cpu_list_text, parse_cpu_list


def test_ranges_singles_and_newlines_parse():
    assert parse_cpu_list("0-3,8") == {0, 1, 2, 3, 8}
    assert parse_cpu_list("5\n") == {5}
    assert parse_cpu_list(" 0-1, 10-11 ") == {0, 1, 10, 11}


def test_empty_text_is_no_cpu():
    assert parse_cpu_list("") == set()
    assert parse_cpu_list("\n") == set()


def test_text_lists_every_cpu_in_order_and_reads_back():
    cpus = {8, 0, 2, 1}
    assert cpu_list_text(cpus) == "0,1,2,8"
    assert cpu_list_text([3, 1]) == "1,3"
    assert parse_cpu_list(cpu_list_text(cpus)) == cpus
