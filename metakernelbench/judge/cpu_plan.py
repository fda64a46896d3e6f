"""Which CPUs each device slot's evaluations run on: whole physical cores, disjoint across slots.

Why: a grading times every call on the host's clock, and half of a small kernel's call is host-side
launch work. Inside one evaluation the grader already keeps its spinning clock on a CPU of its own
and the workers off that CPU and its hyper-thread sibling (``launch.core_plan``). With several GPUs
graded at once, two evaluations must not meet on a physical core either, or one timing loop slows
the other. So the judge partitions the host's CPUs (those it may run on) into one share per device
slot, each a set of whole physical cores, and every evaluation of that slot runs inside its share.

Where Linux exposes it in sysfs, each GPU's share is taken from the cores local to it (the PCI
device's ``local_cpulist``: its NUMA node), so a grader never reaches its GPU across the socket
link. Where it does not (no sysfs entry, a CPU device, ``CUDA_VISIBLE_DEVICES`` given as UUIDs, GPUs
whose local CPUs overlap unevenly, or too few local cores), the cores are split evenly, in NUMA order.
Fewer cores than slots cannot be partitioned: the plan says the slots share CPUs (``shared``), the
judge logs it and ``/v1/health`` shows it.

GPU numbering: ``cuda:N`` is the N-th NVIDIA GPU by PCI bus id (NVML's order, which Docker's device
requests use; the subprocess isolation sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA agrees), after
``CUDA_VISIBLE_DEVICES`` where it lists indices.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from metakernelbench.verifier.cpu_list import parse_cpu_list

__all__ = [
    "CpuPlan", "DEVICE_RE", "GPU_CLASSES", "NVIDIA_VENDOR", "SlotCpus", "Topology", "gpu_index",
    "host_plan", "plan_cpus", "read_topology",
]

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers (not NVSwitch bridges or audio functions)
DEVICE_RE = re.compile(r"^cuda:(\d+)$")


class Topology(BaseModel):
    """The host's CPUs as sysfs describes them, limited to the CPUs the judge may run on."""

    model_config = ConfigDict(frozen=True)
    cores: list[list[int]]  # physical cores: each the available hyper-threads of one core
    node_of: dict[int, int]  # CPU -> NUMA node (0 where unknown)
    gpu_local: list[list[int] | None]  # per NVIDIA GPU in PCI bus order: its local CPUs, or None if unknown
    gpu_bus_ids: list[str]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_topology(available: set[int], sysfs: Path = Path("/sys")) -> Topology:
    """The physical cores, NUMA nodes and GPU-local CPUs of this host (``sysfs``: a fake tree in tests)."""
    cpu_root = sysfs / "devices" / "system" / "cpu"
    cores: dict[tuple[int, ...], list[int]] = {}
    for cpu in sorted(available):
        text = _read(cpu_root / f"cpu{cpu}" / "topology" / "core_cpus_list") or \
            _read(cpu_root / f"cpu{cpu}" / "topology" / "thread_siblings_list")
        siblings = parse_cpu_list(text) if text else {cpu}
        key = tuple(sorted(siblings | {cpu}))
        cores.setdefault(key, []).append(cpu)
    node_of: dict[int, int] = {}
    node_root = sysfs / "devices" / "system" / "node"
    for node in sorted(node_root.glob("node[0-9]*")) if node_root.is_dir() else []:
        text = _read(node / "cpulist")
        for cpu in parse_cpu_list(text) if text else set():
            if cpu in available:
                node_of[cpu] = int(node.name[4:])
    gpu_local: list[list[int] | None] = []
    bus_ids: list[str] = []
    pci = sysfs / "bus" / "pci" / "devices"
    for dev in sorted(pci.iterdir()) if pci.is_dir() else []:
        if _read(dev / "vendor") != NVIDIA_VENDOR or not (_read(dev / "class") or "").startswith(GPU_CLASSES):
            continue
        bus_ids.append(dev.name)
        text = _read(dev / "local_cpulist")
        local = sorted(parse_cpu_list(text) & available) if text else []
        gpu_local.append(local or None)
    ordered = sorted(cores.values(), key=lambda c: (node_of.get(c[0], 0), c[0]))
    return Topology(cores=ordered, node_of={c: node_of.get(c, 0) for c in available}, gpu_local=gpu_local,
                    gpu_bus_ids=bus_ids)


class SlotCpus(BaseModel):
    """One device slot's share of the host's CPUs."""

    model_config = ConfigDict(frozen=True)
    slot: int
    device: str
    cpus: list[int]  # empty: not pinned (one slot, or too few cores to partition)
    gpu_bus_id: str | None = None


class CpuPlan(BaseModel):
    """The judge's CPU partition, one share per device slot (shown by ``/v1/health``)."""

    model_config = ConfigDict(frozen=True)
    slots: list[SlotCpus]
    source: Literal["single", "gpu-affinity", "even-split", "shared"]
    shared: bool  # True: slots were given overlapping CPUs (too few cores); timings may bend
    note: str = ""

    def cpus_for(self, slot: int) -> set[int] | None:
        """The CPUs of ``slot``'s evaluations, or None to leave them where the judge runs."""
        if slot >= len(self.slots) or not self.slots[slot].cpus:
            return None
        return set(self.slots[slot].cpus)


def gpu_index(device: str, visible: str | None) -> int | None:
    """The PCI-order GPU index of ``cuda:N`` (after ``CUDA_VISIBLE_DEVICES`` given as indices), else None."""
    m = DEVICE_RE.match(device)
    if m is None:
        return None
    n = int(m[1])
    if visible is None:
        return n
    items = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(v.isdigit() for v in items) or n >= len(items):
        return None  # UUIDs or MIG names: no way to find the PCI device without NVML
    return int(items[n])


def _chunks(cores: list[list[int]], n: int) -> list[list[int]]:
    """``n`` equal runs of whole cores (the remainder is left to the judge's own threads)."""
    share = len(cores) // n
    return [sorted(c for core in cores[k * share:(k + 1) * share] for c in core) for k in range(n)]


def _by_affinity(devices: list[str], topo: Topology, visible: str | None) -> list[list[int]] | None:
    """Each device's share taken from the cores local to its GPU, or None where that cannot be done."""
    locals_: list[frozenset[int]] = []
    for device in devices:
        g = gpu_index(device, visible)
        if g is None or g >= len(topo.gpu_local) or topo.gpu_local[g] is None:
            return None
        local = set(topo.gpu_local[g] or [])
        locals_.append(frozenset(c for core in topo.cores if set(core) <= local for c in core))
    groups: dict[frozenset[int], list[int]] = {}
    for k, local in enumerate(locals_):
        groups.setdefault(local, []).append(k)
    domains = list(groups)
    if any(a & b for i, a in enumerate(domains) for b in domains[i + 1:]):
        return None  # GPUs whose local CPUs overlap without being equal: no clean split
    shares: list[list[int]] = [[] for _ in devices]
    for domain, members in groups.items():
        cores = [core for core in topo.cores if set(core) <= domain]
        if len(cores) < len(members):
            return None
        for k, chunk in zip(members, _chunks(cores, len(members)), strict=True):
            shares[k] = chunk
    return shares


def plan_cpus(devices: list[str], topo: Topology, visible: str | None = None) -> CpuPlan:
    """One disjoint share of whole physical cores per device slot (see the module docstring)."""
    n = len(devices)
    if n == 0:
        raise ValueError("no devices to plan CPUs for")

    def bus(device: str) -> str | None:
        g = gpu_index(device, visible)
        return topo.gpu_bus_ids[g] if g is not None and g < len(topo.gpu_bus_ids) else None

    def plan(shares: list[list[int]], source: str, shared: bool = False, note: str = "") -> CpuPlan:
        slots = [SlotCpus(slot=k, device=d, cpus=shares[k], gpu_bus_id=bus(d)) for k, d in enumerate(devices)]
        return CpuPlan(slots=slots, source=source, shared=shared, note=note)  # type: ignore[arg-type]

    if n == 1:
        return plan([[]], "single", note="one device slot: evaluations run on every CPU the judge may use")
    if len(topo.cores) < n:
        return plan([[] for _ in devices], "shared", shared=True,
                    note=f"{len(topo.cores)} physical cores for {n} device slots: evaluations share CPUs, "
                         "so concurrent timings may bend")
    shares = _by_affinity(devices, topo, visible)
    if shares is not None:
        return plan(shares, "gpu-affinity")
    return plan(_chunks(topo.cores, n), "even-split",
                note="no usable GPU-to-CPU affinity in sysfs: the cores are split evenly in NUMA order")


def host_plan(devices: list[str], sysfs: Path = Path("/sys"), environ: Mapping[str, str] | None = None,
              honour_visible: bool = True) -> CpuPlan:
    """The plan for this host: the CPUs this process may run on, its sysfs, ``CUDA_VISIBLE_DEVICES``
    (``honour_visible=False`` for Docker isolation, whose device requests name host GPUs directly)."""
    env = os.environ if environ is None else environ
    available = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    visible = env.get("CUDA_VISIBLE_DEVICES") if honour_visible else None
    return plan_cpus(devices, read_topology(available, sysfs), visible)
