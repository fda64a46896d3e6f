"""Assemble and run a judge: state folder, secrets, store, isolation, device slots, HTTP.

Device slots: one per ``--devices`` entry, each with its own CPUs (``cpu_plan.host_plan``); with
``--engine ray``, one per device actor of a Ray cluster, on any number of hosts (``engine_ray``).

State folder (``--state``): ``judge.db`` (the store), ``admin.token`` (mode 0600), ``work/`` (one
folder per running evaluation, removed afterwards), ``judge.pid``. With ``--secrets-dir`` the judge
also writes ``relay.token`` and ``final.token`` there: in the Docker mode that folder is a volume
mounted read-only into each trial's relay and verifier containers, never into a sandbox.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

from metakernelbench.contract import GRADER_IMAGES
from metakernelbench.problems import problems_dir

from .cpu_plan import host_plan
from .isolation import DockerIsolation, GradeSettings, Isolation, SubprocessIsolation, docker_client
from .queue import Scheduler
from .service import DEFAULT_BUDGET, DEFAULT_MINUTES, Judge, serve_http
from .store import Store

__all__ = [
    "DEFAULT_IMAGES", "JudgeConfig", "PR_SET_CHILD_SUBREAPER", "RunningJudge", "become_subreaper", "make_isolation",
    "read_or_create_token", "serve_forever",
]

log = logging.getLogger("metakernelbench.judge")
PR_SET_CHILD_SUBREAPER = 36
DEFAULT_IMAGES = GRADER_IMAGES  # the images `mkb build` writes (images/grader-<dsl>.Dockerfile)


@dataclass
class JudgeConfig:
    state: Path
    devices: list[str]
    listen: str | None = None
    unix: Path | None = None
    isolation: str = "auto"  # auto | docker | subprocess
    settings: GradeSettings = field(default_factory=GradeSettings)
    problems_root: Path = field(default_factory=problems_dir)
    secrets_dir: Path | None = None
    budget: int = DEFAULT_BUDGET
    minutes: float = DEFAULT_MINUTES
    images: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGES))
    drop_privileges: bool | None = None
    watch: str = "auto"  # auto | all | site | off: the import-root scan when evaluations cannot drop privileges
    pool: bool = False  # subprocess isolation: keep one warm runner per device slot (``SubprocessIsolation.idle``)
    engine: str = "local"  # local: the devices of this host | ray: the device actors of a Ray cluster
    ray_address: str | None = "auto"
    ray_devices: int = 0  # with ray: wait (up to a minute) until the cluster offers this many devices
    ray_init: dict | None = None  # with ray and no cluster to join: ray.init's arguments (tests)


def read_or_create_token(path: Path, prefix: str, mode: int = 0o600) -> str:
    import secrets

    if path.exists():
        return path.read_text().strip()
    token = f"mkb-{prefix}-{secrets.token_urlsafe(24)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def make_isolation(config: JudgeConfig) -> Isolation:
    if config.engine == "ray":
        from .engine_ray import RayIsolation, wait_for_devices

        if config.ray_devices:
            have = wait_for_devices(config.ray_address, config.ray_devices)
            if have < config.ray_devices:
                log.warning("Ray engine: %d of %d devices joined within a minute", have, config.ray_devices)
        return RayIsolation(config.settings, config.ray_address, init_kwargs=config.ray_init)
    if config.isolation in ("auto", "docker"):
        client = docker_client()
        if client is not None:
            return DockerIsolation(client, config.images, config.settings)
        if config.isolation == "docker":
            raise SystemExit("--isolation docker: no Docker daemon answers (or the docker SDK is missing)")
    watch = None if config.watch == "auto" else config.watch != "off"
    return SubprocessIsolation(config.state / "work", config.settings, config.problems_root,
                               drop_privileges=config.drop_privileges, watch_imports=watch,
                               watch_scope="site" if config.watch == "site" else "all", pool=config.pool)


class RunningJudge:
    """A started judge (in this process): ``stop()`` ends it; its state stays on disk."""

    def __init__(self, config: JudgeConfig):
        self.config = config
        config.state.mkdir(parents=True, exist_ok=True)
        self.store = Store(config.state / "judge.db")
        self.admin_token = read_or_create_token(config.state / "admin.token", "admin")
        self.store.add_token(self.admin_token, "admin", "admin.token")
        if config.secrets_dir:
            for scope in ("relay", "final"):
                token = read_or_create_token(config.secrets_dir / f"{scope}.token", scope, 0o644)
                self.store.add_token(token, scope, f"{scope}.token")
        requeued = self.store.recover()
        if requeued:
            log.warning("queued again after a restart: submissions %s", requeued)
        self.isolation = make_isolation(config)
        config.devices = self.isolation.device_slots(config.devices)
        if config.engine == "ray":  # each device actor planned its host's CPUs itself
            self.cpu_plan = None
        else:
            self.cpu_plan = host_plan(config.devices, honour_visible=self.isolation.name != "docker")
            if self.cpu_plan.shared:
                log.warning("CPU plan: %s", self.cpu_plan.note)
            self.isolation.cpu_plan = self.cpu_plan
        self.scheduler = Scheduler(self.store, self.isolation, config.devices)
        self.judge = Judge(self.store, self.scheduler, config.problems_root, config.budget, config.minutes)
        self.servers = serve_http(self.judge, config.listen, config.unix)
        self.scheduler.start()
        log.info("judge up: devices %s, isolation %s, listening on %s %s; CPUs per slot (%s): %s", config.devices,
                 self.isolation.name, config.listen or "", config.unix or "",
                 self.cpu_plan.source if self.cpu_plan else "each Ray actor's host",
                 [s.cpus for s in self.cpu_plan.slots] if self.cpu_plan else "-")

    @property
    def url(self) -> str:
        if self.config.unix:
            return f"unix:{self.config.unix}"
        host, port = self.servers[0].server_address[:2]
        return f"http://{host}:{port}"

    def stop(self, crash: bool = False) -> None:
        """Stop serving; ``crash=True`` abandons running evaluations as a killed judge would (tests)."""
        for server in self.servers:
            server.shutdown()
            server.server_close()
        if crash:
            self.scheduler.abandon()
        else:
            self.scheduler.abandon()  # what runs now is queued again at the next start
            self.isolation.shutdown()  # every evaluation's processes, and the warm runners of the pool
            self.scheduler.stop()
        self.store.close()


def become_subreaper() -> None:
    """Orphans of an evaluation are re-parented here (and reaped) instead of to init."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def serve_forever(config: JudgeConfig) -> None:
    """The judge's process: run until SIGTERM or SIGINT."""
    become_subreaper()
    judge = RunningJudge(config)
    (config.state / "judge.pid").write_text(f"{os.getpid()}\n")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    judge.stop()
    (config.state / "judge.pid").unlink(missing_ok=True)
