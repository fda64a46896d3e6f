"""The GPU's used memory, watched from outside every grading process.

A final grade spreads its memory over several processes (the judge's workers: the trusted reference
worker, the candidate's worker), so no one of them can report the grade's peak. ``nvidia-smi`` in its
own process samples the device's used memory (all processes together, the driver's figure) every
``every_ms`` while a ``with GpuMemoryWatch(...)`` block runs; nothing in the watched processes is asked.
A host without ``nvidia-smi`` gets ``None`` figures and the reason, never a guess.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

MIB = 2**20
GIB = 2**30


def parse_used_mib(text: str) -> list[int]:
    """The MiB values of ``nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits`` lines."""
    values = []
    for line in text.splitlines():
        line = line.strip()
        if line.isdigit():
            values.append(int(line))
    return values


def smi_id(device: str, visible: str | None = None) -> str:
    """nvidia-smi's ``--id`` for a torch device name: ``cuda:N`` counts the devices CUDA_VISIBLE_DEVICES
    leaves (an index or a UUID each), while nvidia-smi counts every GPU of the host."""
    index = int(device.partition(":")[2] or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    listed = [v.strip() for v in (visible or "").split(",") if v.strip()]
    return listed[index] if index < len(listed) else str(index)


class GpuMemoryWatch:
    """Samples one GPU's used memory with ``nvidia-smi --loop-ms`` while the block runs.

    ``summary()`` gives the peak and the first sample (GiB), the sample count and period, and the tool
    that measured; or the reason there is no figure.
    """

    def __init__(self, gpu: str = "0", every_ms: int = 50, tool: str = "nvidia-smi"):
        self.gpu, self.every_ms, self.tool = gpu, every_ms, tool
        self.samples: list[int] = []
        self.error: str | None = None
        self._proc: subprocess.Popen | None = None
        self._log: Path | None = None

    def __enter__(self) -> GpuMemoryWatch:
        exe = shutil.which(self.tool)
        if exe is None:
            self.error = f"{self.tool} not found"
            return self
        self._log = Path(tempfile.mkstemp(prefix="mkb-gpu-memory-", suffix=".csv")[1])
        cmd = [exe, f"--id={self.gpu}", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
               f"--loop-ms={self.every_ms}"]
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            text = self._log.read_text(errors="replace")
            self._log.unlink(missing_ok=True)
            self.samples = parse_used_mib(text)
            if not self.samples and self.error is None:
                self.error = f"{self.tool} gave no sample: {text.strip()[-200:]}"

    def summary(self) -> dict:
        if not self.samples:
            return {"peak_gib": None, "first_gib": None, "samples": 0, "error": self.error}
        return {"peak_gib": round(max(self.samples) * MIB / GIB, 2), "first_gib": round(self.samples[0] * MIB / GIB, 2),
                "samples": len(self.samples), "every_ms": self.every_ms, "tool": self.tool}
