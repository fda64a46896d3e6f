"""Fake sysfs trees for the CPU-plan tests: hosts with the CPU, NUMA and GPU layout a test asks for."""

from __future__ import annotations

from pathlib import Path

from metakernelbench.verifier.cpu_list import cpu_list_text


def write_host(root: Path, cores: list[list[int]], nodes: dict[int, list[int]] | None = None,
               gpus: list[tuple[str, list[int] | None]] | None = None,
               others: list[tuple[str, str, str]] | None = None) -> Path:
    """A sysfs tree under ``root``: physical ``cores`` (each its hyper-threads), NUMA ``nodes`` (node ->
    CPUs), NVIDIA ``gpus`` as (PCI bus id, local CPUs or None for no ``local_cpulist``) and ``others``
    PCI functions as (bus id, vendor, class)."""
    cpu_root = root / "devices" / "system" / "cpu"
    for core in cores:
        for cpu in core:
            topo = cpu_root / f"cpu{cpu}" / "topology"
            topo.mkdir(parents=True)
            (topo / "thread_siblings_list").write_text(cpu_list_text(core) + "\n")
    for node, cpus in (nodes or {}).items():
        folder = root / "devices" / "system" / "node" / f"node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(cpu_list_text(cpus) + "\n")
    pci = root / "bus" / "pci" / "devices"
    pci.mkdir(parents=True)
    for bus, local in gpus or []:
        dev = pci / bus
        dev.mkdir()
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
        if local is not None:
            (dev / "local_cpulist").write_text(cpu_list_text(local) + "\n")
    for bus, vendor, klass in others or []:
        dev = pci / bus
        dev.mkdir()
        (dev / "vendor").write_text(vendor + "\n")
        (dev / "class").write_text(klass + "\n")
        (dev / "local_cpulist").write_text("0\n")
    return root


def two_socket_host(root: Path, gpus_per_socket: int = 4, cores_per_socket: int = 8,
                    local: bool = True) -> tuple[Path, set[int]]:
    """A two-socket host with hyper-threading numbered as Linux does on x86 (CPU c and c + N are one
    core), ``gpus_per_socket`` GPUs on each socket (with ``local_cpulist`` when ``local``)."""
    n = 2 * cores_per_socket
    cores = [[c, c + n] for c in range(n)]
    nodes = {s: [c for c in range(s * cores_per_socket, (s + 1) * cores_per_socket)]
             + [c + n for c in range(s * cores_per_socket, (s + 1) * cores_per_socket)] for s in (0, 1)}
    gpus = [(f"0000:{0x18 + 0x10 * g:02x}:00.0", nodes[g // gpus_per_socket] if local else None)
            for g in range(2 * gpus_per_socket)]
    # an NVSwitch bridge and a GPU's audio function: NVIDIA's vendor id, not GPUs
    others = [("0000:05:00.0", "0x10de", "0x068000"), ("0000:18:00.1", "0x10de", "0x040300")]
    return write_host(root, cores, nodes, gpus, others), set(range(2 * n))
