"""The oracle sweep's memory figure comes from a process outside the grade: checked with a stand-in tool."""

from __future__ import annotations

import os
import stat
import time

from benchmarks.gpu_memory_watch import GpuMemoryWatch, parse_used_mib, smi_id


def test_parse_keeps_only_numbers():
    assert parse_used_mib("1024\n 2048 \nNo devices were found\n\n") == [1024, 2048]


def test_watch_reports_the_peak_of_what_the_tool_printed(tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"
    # prints a rising then falling series, as the driver would while a grade allocates and frees
    tool.write_text("#!/bin/sh\nfor v in 512 40960 81920 1024; do echo $v; done\nsleep 30\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with GpuMemoryWatch(every_ms=10) as watch:
        time.sleep(0.5)
    summary = watch.summary()
    assert summary["peak_gib"] == 80.0 and summary["first_gib"] == 0.5 and summary["samples"] == 4


def test_no_tool_gives_no_figure(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with GpuMemoryWatch() as watch:
        pass
    assert watch.summary() == {"peak_gib": None, "first_gib": None, "samples": 0, "error": "nvidia-smi not found"}


def test_the_device_is_named_as_nvidia_smi_counts_it():
    """cuda:1 under CUDA_VISIBLE_DEVICES=4,6 is the host's GPU 6 (a UUID passes through as it is)."""
    assert smi_id("cuda:1", "4,6") == "6"
    assert smi_id("cuda:0", "GPU-1a2b") == "GPU-1a2b"
    assert smi_id("cuda:2", "") == "2" and smi_id("cuda", "") == "0"
