"""Grading across hosts on Ray: one device-pinned actor per GPU, one judge, one store.

The judge service (HTTP, tokens, budgets, the queue) stays a single process on one host; its store
is the only record of what was charged, so the trials of a study may run on any number of hosts and
submit to that one endpoint. What Ray adds is where an evaluation runs: every node of the Ray
cluster that offers the custom resource ``mkb_device`` gets one long-lived actor per unit, pinned
to that node (and, on a GPU node, to one GPU through Ray's ``num_gpus``). An actor grades exactly as
the single-host judge does -- it holds a ``SubprocessIsolation`` of its own on its own host (a
fresh runner process per evaluation, the evaluation uid of its slot, the CPU cores of its GPU from
that host's CPU plan) -- and returns the same ``EvalOutcome``. The judge's ``Scheduler`` sees each
actor as one device slot named ``<node>/<device>``, so per-device queueing, finals first, charging
and restart safety are unchanged.

Every node must run the same code: each actor reports a fingerprint of the grader and the problem
files of its checkout, and the judge refuses to start when any differs from its own (a grade must
not depend on which host ran it). Two commands on a set of hosts (``docs/running.md``): ``ray start
--head --resources '{"mkb_device": N}'`` then the judge with ``--engine ray`` on the head, and
``ray start --address HEAD:6379 --resources '{"mkb_device": N}'`` on every other host.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metakernelbench.problems import REPO_ROOT, problems_dir
from metakernelbench.verifier.result import Status, failure

from .cpu_plan import CpuPlan, host_plan
from .isolation import EvalOutcome, EvalRequest, GradeSettings, SubprocessIsolation

__all__ = [
    "ActorPlan", "DEVICE_RESOURCE", "DeviceGrader", "RayIsolation", "STAGE_POLL_S", "code_fingerprint", "plan_actors",
    "wait_for_devices",
]

log = logging.getLogger("metakernelbench.judge")
DEVICE_RESOURCE = "mkb_device"
STAGE_POLL_S = 1.0


def code_fingerprint(package: Path = REPO_ROOT / "metakernelbench", problems: Path | None = None) -> str:
    """sha256 over the grader's Python files and the problem files with their captured values."""
    problems = problems_dir() if problems is None else problems
    digest = hashlib.sha256()
    for root, pattern in ((package, "**/*.py"), (problems, "**/*.py"), (problems, "**/*.captured.json")):
        for path in sorted(root.glob(pattern)):
            if "__pycache__" in path.parts:
                continue
            digest.update(f"{root.name}/{path.relative_to(root)}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class ActorPlan:
    """What one actor is: its node, its place among that node's devices, how it grades."""

    node_id: str
    index: int  # among the node's devices: the evaluation uid and CPU slot it uses there
    node_devices: int  # how many devices the node offers
    gpus: bool  # whether the node's devices are GPUs (else fake devices graded on the CPU: tests)
    work_root: str  # on that node
    settings: GradeSettings


class DeviceGrader:
    """The actor's body (``ray.remote`` is applied in ``_actor_class``, so importing this module
    does not need Ray): one device of one node, grading one evaluation at a time."""

    def __init__(self, plan: ActorPlan):
        if plan.gpus:
            import ray

            # Ray narrowed CUDA_VISIBLE_DEVICES to this actor's GPU; the evaluation addresses it by
            # its index on the host instead (PCI bus order, as the CPU plan and NVML count them)
            physical = int(ray.get_gpu_ids()[0])
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            self.device = f"cuda:{physical}"
            devices = [f"cuda:{i}" for i in range(plan.node_devices)]
        else:
            self.device, devices = "cpu", ["cpu"] * plan.node_devices
        self.plan = plan
        self.slot = plan.index
        self.iso = SubprocessIsolation(Path(plan.work_root) / f"slot-{plan.index}", plan.settings)
        self.iso.cpu_plan = host_plan(devices)
        self._stage = ""

    def describe(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "node_id": self.plan.node_id, "device": self.device,
                "slot": self.slot, "fingerprint": code_fingerprint(), "isolation": self.iso.describe()}

    def stage(self) -> str:
        return self._stage

    def evaluate(self, req: EvalRequest) -> EvalOutcome:
        self._stage = ""

        def on_stage(stage: str) -> None:
            self._stage = stage

        return self.iso.evaluate(req, self.device, self.slot, on_stage)

    def kill_all(self) -> list[int]:
        return self.iso.kill_all()


def _actor_class():
    import ray

    # max_concurrency 2: the judge polls ``stage`` while ``evaluate`` runs
    return ray.remote(max_concurrency=2)(DeviceGrader)


def plan_actors(nodes: list[dict[str, Any]], work_root: str, settings: GradeSettings) -> list[ActorPlan]:
    """One actor per unit of ``mkb_device`` on every live node (``ray.nodes()`` entries)."""
    plans = []
    for node in sorted(nodes, key=lambda n: n["NodeID"]):
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        count = int(resources.get(DEVICE_RESOURCE, 0))
        gpus = resources.get("GPU", 0) >= count > 0
        plans += [ActorPlan(node["NodeID"], i, count, gpus, work_root, settings) for i in range(count)]
    return plans


class RayIsolation:
    """The judge's isolation backend when evaluations run on a Ray cluster's device actors."""

    name = "ray"

    def __init__(self, settings: GradeSettings, address: str | None = "auto", work_root: str | None = None,
                 init_kwargs: dict[str, Any] | None = None):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            ray.init(address=address, **(init_kwargs or {}))
        work_root = work_root or str(Path.home() / ".cache" / "metakernelbench" / "ray-judge")
        plans = plan_actors(ray.nodes(), work_root, settings)
        if not plans:
            raise SystemExit(f"no node of the Ray cluster offers the resource {DEVICE_RESOURCE!r}: start each "
                             f"host with ray start ... --resources '{{\"{DEVICE_RESOURCE}\": N}}'")
        actor = _actor_class()
        self.actors: dict[str, Any] = {}
        self.described: dict[str, dict[str, Any]] = {}
        handles = []
        for plan in plans:
            options = {"resources": {DEVICE_RESOURCE: 1}, "num_cpus": 0, "num_gpus": 1 if plan.gpus else 0,
                       "scheduling_strategy": NodeAffinitySchedulingStrategy(plan.node_id, soft=False)}
            handles.append(actor.options(**options).remote(plan))
        mine = code_fingerprint()
        described = ray.get([h.describe.remote() for h in handles])
        stale = [f"{d['host']} ({d['node_id'][:8]})" for d in described if d["fingerprint"] != mine]
        if stale:
            for h in handles:
                ray.kill(h)
            raise SystemExit("these Ray nodes run other grader or problem files than the judge's host: "
                             + ", ".join(stale) + " (install the same commit on every host)")
        for handle, desc in zip(handles, described, strict=True):
            name = f"{desc['host']}-{desc['node_id'][:8]}/{desc['device']}"
            if desc["device"] == "cpu":
                name += f"#{desc['slot']}"
            self.actors[name] = handle
            self.described[name] = desc
        self.dead: set[str] = set()
        log.info("Ray engine: %d device actors: %s", len(self.actors), ", ".join(self.actors))

    cpu_plan: CpuPlan | None = None  # each actor plans its own host's CPUs (``DeviceGrader``)

    @property
    def devices(self) -> list[str]:
        return list(self.actors)

    def device_slots(self, configured: list[str]) -> list[str]:
        """The cluster's device actors, whatever ``--devices`` said."""
        return self.devices

    def idle(self, slot: int, device: str) -> None:
        """Nothing to prepare here: each actor's runner starts per evaluation on its host."""

    def available(self, device: str) -> bool:
        """Whether the device's actor is still there (the scheduler stops claiming work for a lost one)."""
        return device not in self.dead

    def describe(self) -> dict[str, Any]:
        return {"engine": "ray", "devices": {name: {k: d[k] for k in ("host", "device", "slot")}
                                             for name, d in self.described.items()}}

    def evaluate(self, req: EvalRequest, device: str, slot: int,
                 on_stage: Callable[[str], None]) -> EvalOutcome:
        import ray

        handle = self.actors[device]
        ref = handle.evaluate.remote(req)
        last = ""
        try:
            while True:
                done, _ = ray.wait([ref], timeout=STAGE_POLL_S)
                if done:
                    return ray.get(ref)
                stage = ray.get(handle.stage.remote())
                if stage and stage != last:
                    on_stage(stage)
                    last = stage
        except ray.exceptions.RayActorError as exc:
            # the node or its actor is gone: not the submission's doing, so never charged; the slot
            # claims nothing more until the judge is restarted with the cluster it then finds
            self.dead.add(device)
            log.error("device actor %s died during submission %s: %s", device, req.submission_id, exc)
            res = failure(Status.INFRA_ERROR, req.problem, req.dsl,
                          f"the grading host of {device} was lost during the evaluation; grade again")
            return EvalOutcome(res.model_dump(mode="json"), charged=False)

    def shutdown(self) -> list[int]:
        return self.kill_all()

    def kill_all(self) -> list[int]:
        import ray

        killed: list[int] = []
        for handle in self.actors.values():
            try:
                killed += ray.get(handle.kill_all.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - a lost node has nothing left to kill here
                pass
        return killed


def wait_for_devices(address: str, want: int, timeout_s: float = 60.0) -> int:
    """Block until the cluster offers ``want`` device units (hosts joining late); returns the count."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address)
    deadline = time.monotonic() + timeout_s
    while True:
        have = int(ray.cluster_resources().get(DEVICE_RESOURCE, 0))
        if have >= want or time.monotonic() > deadline:
            return have
        time.sleep(1.0)
