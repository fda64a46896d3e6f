"""The judge's CPU partition: whole physical cores per device slot, disjoint, near each slot's GPU."""

import random

from fake_sysfs import two_socket_host, write_host

from metakernelbench.judge.cpu_plan import CpuPlan, Topology, gpu_index, host_plan, plan_cpus, read_topology
from metakernelbench.verifier.launch import core_plan

CUDA8 = [f"cuda:{k}" for k in range(8)]


def assert_partition(plan: CpuPlan, topo: Topology) -> None:
    """The invariant the judge relies on: no CPU and no physical core in two slots, each slot non-empty."""
    assert not plan.shared
    owner: dict[int, int] = {}
    for share in plan.slots:
        assert share.cpus, f"slot {share.slot} got no CPU"
        for cpu in share.cpus:
            assert cpu not in owner, f"CPU {cpu} in slots {owner[cpu]} and {share.slot}"
            owner[cpu] = share.slot
    for core in topo.cores:
        assert len({owner.get(c) for c in core}) == 1, f"core {core} split across slots"


def test_eight_gpus_on_two_sockets_get_cores_of_their_own_socket(tmp_path):
    root, cpus = two_socket_host(tmp_path)
    topo = read_topology(cpus, root)
    assert topo.gpu_bus_ids == [f"0000:{0x18 + 0x10 * g:02x}:00.0" for g in range(8)]  # bridge, audio left out
    plan = plan_cpus(CUDA8, topo)
    assert plan.source == "gpu-affinity"
    assert_partition(plan, topo)
    for share in plan.slots:
        socket = share.slot // 4
        assert {topo.node_of[c] for c in share.cpus} == {socket}
        assert len(share.cpus) == 4  # 8 cores per socket, 4 GPUs: 2 cores with both hyper-threads each
        spin, workers = core_plan(set(share.cpus))  # the grader's own plan stays inside the share
        assert spin | workers <= set(share.cpus) and workers
        assert share.gpu_bus_id == topo.gpu_bus_ids[share.slot]


def test_an_index_split_would_put_siblings_in_two_slots_this_plan_does_not(tmp_path):
    root, cpus = two_socket_host(tmp_path, local=False)  # no local_cpulist: an even split
    topo = read_topology(cpus, root)
    plan = plan_cpus(CUDA8[:4], topo)
    assert plan.source == "even-split"
    assert_partition(plan, topo)
    naive = [set(sorted(cpus)[k * 8:(k + 1) * 8]) for k in range(4)]  # the split by CPU number
    assert any(len({k for c in core for k, share in enumerate(naive) if c in share}) > 1 for core in topo.cores)


def test_visible_devices_map_to_the_right_gpu(tmp_path):
    root, cpus = two_socket_host(tmp_path)
    topo = read_topology(cpus, root)
    plan = plan_cpus(["cuda:0", "cuda:1"], topo, visible="4,5")  # both on the second socket
    assert plan.source == "gpu-affinity"
    assert all(topo.node_of[c] == 1 for s in plan.slots for c in s.cpus)
    assert [s.gpu_bus_id for s in plan.slots] == topo.gpu_bus_ids[4:6]
    assert gpu_index("cuda:1", "GPU-1234,GPU-5678") is None and gpu_index("cpu", None) is None
    uuids = plan_cpus(["cuda:0", "cuda:1"], topo, visible="GPU-aaaa,GPU-bbbb")
    assert uuids.source == "even-split"
    assert_partition(uuids, topo)


def test_gpus_of_one_socket_beyond_its_cores_fall_back_to_an_even_split(tmp_path):
    cores = [[c] for c in range(4)]
    root = write_host(tmp_path, cores, {0: [0, 1], 1: [2, 3]},
                      gpus=[("0000:01:00.0", [0, 1]), ("0000:02:00.0", [0, 1]), ("0000:03:00.0", [0, 1])])
    topo = read_topology(set(range(4)), root)
    plan = plan_cpus(["cuda:0", "cuda:1", "cuda:2"], topo)
    assert plan.source == "even-split"  # three GPUs near two cores: spread over the host instead
    assert_partition(plan, topo)


def test_overlapping_gpu_affinities_fall_back_to_an_even_split(tmp_path):
    cores = [[c] for c in range(8)]
    root = write_host(tmp_path, cores, gpus=[("0000:01:00.0", [0, 1, 2, 3, 4]), ("0000:02:00.0", [3, 4, 5, 6, 7])])
    topo = read_topology(set(range(8)), root)
    plan = plan_cpus(["cuda:0", "cuda:1"], topo)
    assert plan.source == "even-split"
    assert_partition(plan, topo)


def test_too_few_cores_are_shared_and_said_so(tmp_path):
    root = write_host(tmp_path, [[0, 1]])
    topo = read_topology({0, 1}, root)
    plan = plan_cpus(["cuda:0", "cuda:1"], topo)
    assert plan.shared and plan.source == "shared" and "share" in plan.note
    assert plan.cpus_for(0) is None and plan.cpus_for(1) is None


def test_one_slot_is_not_pinned(tmp_path):
    root, cpus = two_socket_host(tmp_path)
    plan = plan_cpus(["cuda:3"], read_topology(cpus, root))
    assert plan.source == "single" and plan.cpus_for(0) is None


def test_only_the_cpus_the_judge_may_use_are_planned(tmp_path):
    root, _ = two_socket_host(tmp_path)
    allowed = set(range(0, 8)) | set(range(16, 24))  # e.g. a cgroup: the first socket only
    topo = read_topology(allowed, root)
    plan = plan_cpus(CUDA8[:2], topo)
    assert_partition(plan, topo)
    assert set().union(*(s.cpus for s in plan.slots)) <= allowed
    lone = read_topology({0, 1, 2}, root)  # CPU 16, sibling of 0, is not ours: core (0) stands alone
    assert [0] in lone.cores


def test_random_hosts_always_partition_cleanly(tmp_path):
    """Invariants over many generated hosts (threads per core, nodes, GPUs with and without affinity)."""
    rng = random.Random(18)
    for case in range(60):
        n_cores, smt = rng.randint(1, 24), rng.choice([1, 2, 4])
        cores = [[c + k * n_cores for k in range(smt)] for c in range(n_cores)]
        n_nodes = rng.choice([1, 2, 4])
        nodes = {n: [c for core in cores if core[0] % n_nodes == n for c in core] for n in range(n_nodes)}
        n_gpus = rng.randint(1, 8)
        gpus = [(f"0000:{g + 1:02x}:00.0", rng.choice([None, nodes[g % n_nodes] or None])) for g in range(n_gpus)]
        root = write_host(tmp_path / str(case), cores, {n: c for n, c in nodes.items() if c}, gpus)
        all_cpus = {c for core in cores for c in core}
        available = set(rng.sample(sorted(all_cpus), rng.randint(1, len(all_cpus))))
        topo = read_topology(available, root)
        devices = [f"cuda:{k}" for k in range(rng.randint(1, n_gpus))]
        plan = plan_cpus(devices, topo)
        assert [s.device for s in plan.slots] == devices
        if len(devices) == 1 or len(topo.cores) < len(devices):
            assert all(plan.cpus_for(k) is None for k in range(len(devices)))
            assert plan.shared == (len(devices) > 1)
            continue
        assert_partition(plan, topo)
        assert set().union(*(s.cpus for s in plan.slots)) <= available


def test_this_host_has_a_plan():
    plan = host_plan(["cuda:0", "cuda:1"])
    assert [s.device for s in plan.slots] == ["cuda:0", "cuda:1"]
    if not plan.shared:
        assert not set(plan.slots[0].cpus) & set(plan.slots[1].cpus)
