"""Which processes hold a context on the grading GPU (NVML), so timing never runs beside another.

A process left computing on the GPU (by an earlier submission, another job, a second grader) slows
every timed call and would go unnoticed. Before the timing loops and after the kernel's loop the
grader lists the device's compute processes: any that is not the grader or one of its workers means
re-time once after waiting, and INFRA_ERROR if it persists -- never a silently slow grade.

NVML reports host PIDs; inside a container's PID namespace they do not match ours. Then the check
counts instead: more processes than the grader and its workers means someone else is there.
NVML is read through ``ctypes`` in the trusted grader process (no Python package needed).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

__all__ = ["GpuProcesses", "NVML_ERROR_INSUFFICIENT_SIZE", "NVML_SUCCESS", "pci_bus_id"]

NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE = 0, 7


class _ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


@dataclass
class GpuProcesses:
    """A handle on one GPU through NVML; ``available`` is False where NVML is absent (then: no check)."""

    handle: ctypes.c_void_p | None = None
    nvml: object | None = None
    why: str = ""

    @classmethod
    def for_device(cls, pci_bus_id: str) -> GpuProcesses:
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() != NVML_SUCCESS:
                return cls(why="nvmlInit failed")
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle)) != NVML_SUCCESS:
                return cls(why=f"no NVML device at {pci_bus_id}")
            return cls(handle=handle, nvml=nvml)
        except (OSError, AttributeError) as exc:
            return cls(why=f"NVML unavailable: {exc}")

    @property
    def available(self) -> bool:
        return self.handle is not None

    def pids(self) -> list[int]:
        """PIDs with a compute context on the device (host namespace)."""
        if not self.available:
            return []
        count = ctypes.c_uint(0)
        fn = getattr(self.nvml, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            self.nvml.nvmlDeviceGetComputeRunningProcesses_v2
        for _ in range(4):
            infos = (_ProcessInfo * max(count.value, 1))()
            size = ctypes.c_uint(len(infos))
            rc = fn(self.handle, ctypes.byref(size), infos)
            if rc == NVML_SUCCESS:
                return [infos[i].pid for i in range(size.value)]
            if rc != NVML_ERROR_INSUFFICIENT_SIZE:
                return []
            count = ctypes.c_uint(size.value + 4)
        return []

    def foreign(self, ours: set[int]) -> list[int]:
        """Processes on the device that are not ours (by PID, or by count across namespaces)."""
        pids = self.pids()
        if not pids:
            return []
        if ours & set(pids):
            return sorted(p for p in pids if p not in ours)
        return sorted(pids) if len(pids) > len(ours) else []


def pci_bus_id(device_index: int) -> str:
    import torch

    props = torch.cuda.get_device_properties(device_index)
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
