"""Where one evaluation runs: a fresh container (Docker SDK) or a fresh process tree (no Docker).

Nothing a submission writes may reach a later evaluation, or the eager baseline timed in the same
evaluation: a ``.pth`` file, a patched package, a daemon left running on the GPU.

- ``DockerIsolation``: every evaluation gets a new container of the DSL's grader image (no network,
  one GPU, a non-root user, no capabilities beyond what lets the grader read its own worker, limits
  on memory and processes), removed afterwards with everything it wrote and every process it left.
- ``SubprocessIsolation``: every evaluation gets a new runner process in a fresh directory (its own
  HOME and TMPDIR, user site-packages off). Run by root, the runner drops to a dedicated unprivileged
  uid per device slot, so the submission cannot write to the installed packages, the repository or
  the judge's files, nor signal the judge; every process of that uid is killed afterwards. Run by
  another user it cannot drop, so after each evaluation the import roots are scanned for files
  created or changed during it: any is a REWARD_HACK verdict, and the judge refuses to evaluate
  further until they are removed. Leftover processes are found by a marker in their environment.

  With ``pool`` (the judge's default), each device slot keeps one **warm runner**: the next
  evaluation's runner (``runner --warm``), started while the slot is idle in that evaluation's own
  fresh folders, uid and CPUs, with its workers loading torch, the device and each DSL. It holds
  nothing of a submission until it is dispatched one (the kernel file into its folder, one line on
  its stdin); from there it grades exactly as a cold runner, applies the evaluation's audit hook and
  OS limits before the kernel file is imported, and is ended with everything of its uid afterwards,
  never reused. The slot's next warm runner starts only after that cleanup: so it never shares a uid
  with a running submission, never holds the GPU or the slot's cores while another evaluation of the
  slot is timed, and an evaluation that arrives while it still starts is dispatched to it anyway
  (the rest of its start is still less than a cold one). One that dies or is not ready within its
  start limit is replaced, and so is one that has waited ``pool_max_age_s``; with none to hand, an
  evaluation starts cold, as without the pool.

Both run an evaluation on its device slot's own physical cores (``cpu_plan``: no two slots' timing
loops meet on a core), read the runner's report (``runner``) and apply the same blame rule
(``outcome_without_result``): a failure before the submission's code could run is an infrastructure
fault (never charged); after it, a grader that was killed, stopped, timed out or went silent is a
charged verdict.
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from metakernelbench.contract import DSLS, GradeConfig
from metakernelbench.verifier.cpu_list import cpu_list_text
from metakernelbench.verifier.result import Status, failure

from .cpu_plan import CpuPlan
from .import_watch import changed_since, import_roots, listings
from .runner import config_flags
from .uid_locks import BASE_EVAL_UID, UID_BLOCK, UidInUse, UidLocks

__all__ = [
    "BASE_EVAL_UID", "DockerIsolation", "EVAL_MARKER", "EvalDirs", "EvalOutcome", "EvalRequest", "GradeSettings",
    "Isolation", "RunnerReport", "SubprocessIsolation", "WarmRunner", "changed_since",
    "docker_client", "import_roots", "kill_leftovers", "outcome_from_result", "outcome_without_result",
    "processes_of",
]

log = logging.getLogger("metakernelbench.judge")
EVAL_MARKER = "MKB_EVAL_ID"
# the judge's own secrets never reach an evaluation
_ENV_DENY_PREFIXES = ("MKB_JUDGE", "MKB_ATTEMPT", "MKB_EVAL")


@dataclass(frozen=True)
class GradeSettings:
    """How evaluations are graded: the ``GradeConfig`` fields a judge sets (the contract's counts, smaller
    only in tests; the compile and call budgets) and the wall limit of a whole evaluation.

    None keeps GradeConfig's default, as ``mkb grade`` uses; each evaluation's runner builds its
    ``GradeConfig`` from the flags ``runner_flags`` writes, which is ``grade_config()``.
    """

    small: bool = False
    draws: int | None = None
    warmup: int | None = None
    timed: int | None = None
    rechecks: int | None = None
    wall_limit_s: float = 1800.0
    compile_timeout_s: float | None = None
    call_timeout_s: float | None = None
    interleave_eager: bool = False  # GradeConfig.interleave_eager (the demo study on the CPU)

    def overrides(self) -> dict[str, Any]:
        """The GradeConfig fields these settings set (field -> value)."""
        fields = (("correctness_draws", self.draws), ("warmup", self.warmup), ("timed", self.timed),
                  ("rechecks", self.rechecks), ("compile_timeout_s", self.compile_timeout_s),
                  ("call_timeout_s", self.call_timeout_s), ("interleave_eager", self.interleave_eager or None))
        return {name: value for name, value in fields if value is not None}

    def grade_config(self) -> GradeConfig:
        """The GradeConfig each evaluation is graded with."""
        return GradeConfig(**self.overrides())

    def runner_flags(self) -> list[str]:
        return (["--small"] if self.small else []) + config_flags(self.overrides())


@dataclass(frozen=True)
class EvalRequest:
    submission_id: int
    problem: str
    dsl: str
    source: bytes


@dataclass
class EvalOutcome:
    result: dict[str, Any]
    charged: bool
    log_tail: str = ""


class Isolation(Protocol):
    """Everything the judge asks of an isolation backend (``SubprocessIsolation``, ``DockerIsolation``,
    ``engine_ray.RayIsolation``): the server, the scheduler and the health answer use these members and
    no others, so a backend is whatever implements them all."""

    name: str
    # each device slot's own CPUs: set by the judge (``cpu_plan.host_plan``) for a backend that grades on
    # the judge's host; None where the backend places evaluations itself (Ray's actors plan their hosts')
    cpu_plan: CpuPlan | None

    def device_slots(self, configured: list[str]) -> list[str]:
        """The devices the judge schedules, one slot each: ``configured`` (its ``--devices``) where the
        evaluations run on this host, the backend's own where it finds them (a Ray cluster's actors)."""
        ...

    def evaluate(self, req: EvalRequest, device: str, slot: int,
                 on_stage: Callable[[str], None]) -> EvalOutcome: ...

    def available(self, device: str) -> bool:
        """Whether ``device`` can still take work (False: its slot claims no more)."""
        ...

    def idle(self, slot: int, device: str) -> None:
        """The slot has nothing queued: prepare its next evaluation, if the backend does that."""
        ...

    def describe(self) -> dict[str, Any]:
        """The backend's state for the judge's health answer (JSON)."""
        ...

    def shutdown(self) -> list[int]:
        """The judge stops: end every process of every evaluation; the pids ended."""
        ...


@dataclass
class RunnerReport:
    """What the runner said on its report channel."""

    stages: list[str] = field(default_factory=list)
    result: dict | None = None
    infra: str | None = None
    warm_ready: bool = False  # a warm runner (``runner --warm``) is ready for its dispatch
    finished: threading.Event = field(default_factory=threading.Event)  # the result arrived

    def feed(self, line: str, on_stage: Callable[[str], None] | None = None) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        if isinstance(obj.get("stage"), str):
            self.stages.append(obj["stage"])
            if on_stage:
                on_stage(obj["stage"])
        if isinstance(obj.get("result"), dict):
            self.result = obj["result"]
            self.finished.set()
        if isinstance(obj.get("infra"), str):
            self.infra = obj["infra"]
        if obj.get("warm") == "ready":
            self.warm_ready = True

    @property
    def grading(self) -> bool:
        return "grading" in self.stages


def outcome_without_result(req: EvalRequest, report: RunnerReport, how: str, log_tail: str = "",
                           timed_out: bool = False, stopped: bool = False,
                           signalled: int | None = None) -> EvalOutcome:
    """The verdict when the runner produced no result, with the blame rule of the module docstring."""
    if not report.grading:
        reason = report.infra or how
        res = failure(Status.INFRA_ERROR, req.problem, req.dsl,
                      f"the grader could not start ({reason}); this submission is not charged")
        return EvalOutcome(res.model_dump(mode="json"), charged=False, log_tail=log_tail)
    if timed_out:
        status, msg = Status.TIMEOUT, f"the evaluation did not finish within its wall limit ({how})"
    elif stopped:
        status, msg = Status.REWARD_HACK, "the grading process was stopped while your code ran"
    elif signalled is not None:
        status, msg = Status.REWARD_HACK, (f"the grading process was killed (signal {signalled}) while your "
                                           "code ran; a submission may not signal the grader")
    else:
        status, msg = Status.RUNTIME_ERROR, f"the grading process ended without a verdict while your code ran ({how})"
    return EvalOutcome(failure(status, req.problem, req.dsl, msg).model_dump(mode="json"), charged=True,
                       log_tail=log_tail)


def outcome_from_result(result: dict) -> EvalOutcome:
    return EvalOutcome(result, charged=result.get("status") != Status.INFRA_ERROR.value)


# ---- process helpers (Linux /proc) ----------------------------------------------------------------
def _proc_state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split(" ", 1)[0]


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _uid_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _has_marker_prefix(pid: int, prefix: bytes) -> bool:
    try:
        return any(v.startswith(prefix) for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return False


def processes_of(marker: str, uid: int | None, prefix: bool = False) -> list[int]:
    """The processes of an evaluation: by its dedicated uid, else by its environment marker (``prefix=True``:
    every evaluation whose marker starts with ``marker``); never this process."""
    me = os.getpid()
    token = f"{EVAL_MARKER}={marker}".encode()

    def ours(pid: int) -> bool:
        if uid is not None:
            return _uid_of(pid) == uid
        return _has_marker_prefix(pid, token) if prefix else _has_marker(pid, token)

    return [p for p in _pids() if p != me and ours(p)]


def kill_leftovers(marker: str, uid: int | None, prefix: bool = False) -> list[int]:
    """SIGKILL every process of this evaluation (``processes_of``)."""
    killed = []
    for _ in range(5):  # processes may fork while we look: repeat until none is left
        found = processes_of(marker, uid, prefix)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    for pid in killed:  # orphans re-parented to the judge (a subreaper) are reaped here
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return killed


def _uid_in_use(uid: int) -> bool:
    return any(_uid_of(p) == uid for p in _pids())


def _child_env(marker: str, home: Path, tmp: Path, eager_cache: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_DENY_PREFIXES)}
    if eager_cache is not None:  # the eager baselines outlive one evaluation (grader.eager_baseline)
        env["MKB_EAGER_CACHE"] = str(eager_cache)
    # cuda:N is the N-th GPU by PCI bus id, as for NVML, Docker and the judge's CPU plan (cpu_plan)
    env.update({EVAL_MARKER: marker, "HOME": str(home), "TMPDIR": str(tmp), "PYTHONNOUSERSITE": "1",
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return env


@dataclass
class EvalDirs:
    """One evaluation's own folder (the runner's cwd, where the kernel file goes), HOME, TMPDIR, process
    marker and uid (None: the judge's own), the runner's log and the slot's eager-baseline cache."""

    marker: str
    folder: Path
    home: Path
    tmp: Path
    uid: int | None
    log: Path
    cache: Path

    @property
    def kernel(self) -> Path:
        return self.folder / "kernel.py"


@dataclass
class WarmRunner:
    """A runner started before its evaluation (``runner --warm``) in that evaluation's own folders, uid
    and CPUs; dispatched one evaluation through its stdin, then ended like any other."""

    dirs: EvalDirs
    proc: subprocess.Popen
    report: RunnerReport
    started: float  # time.monotonic() at its start
    reader: threading.Thread | None = None
    on_stage: Callable[[str], None] | None = None  # the evaluation's, once dispatched
    dispatched_ns: int = 0

    @property
    def ready(self) -> bool:
        return self.report.warm_ready

    def stage(self, name: str) -> None:
        if self.on_stage is not None:
            self.on_stage(name)


class SubprocessIsolation:
    """A fresh runner process per evaluation (see the module docstring)."""

    name = "subprocess"

    def __init__(self, work_root: Path, settings: GradeSettings, problems_root: Path | None = None,
                 drop_privileges: bool | None = None, watch_imports: bool | None = None, watch_scope: str = "all",
                 pool: bool = False, pool_dsls: tuple[str, ...] = DSLS, pool_max_age_s: float = 3600.0,
                 eval_uids: int = BASE_EVAL_UID):
        # each slot's evaluations run as one uid of the block from eval_uids that no other judge on this
        # host holds (uid_locks), taken at the slot's first use
        self.eval_uids, self.uid_locks, self._slot_uids = eval_uids, UidLocks(), {}
        self.pool, self.pool_dsls, self.pool_max_age_s = pool, tuple(pool_dsls), pool_max_age_s
        self._warm: dict[int, WarmRunner] = {}  # each slot's warm runner (``idle``)
        self._failures: dict[int, int] = {}
        self._next_try: dict[int, float] = {}
        self._pool_lock = threading.Lock()
        self._closed = False
        self.work_root = Path(work_root)
        self.work_root.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.problems_root = problems_root
        root = os.geteuid() == 0
        if drop_privileges and not root:
            raise ValueError("dropping privileges for evaluations needs the judge to run as root")
        self.drop = root if drop_privileges is None else drop_privileges
        if self.drop:
            try:
                why = self._probe_uid(self._take_uid(0))
            except UidInUse as exc:
                why = str(exc)
            if why:
                # a judge whose evaluations keep its own uid holds none of the evaluation uids
                self.uid_locks.release()
                self._slot_uids.clear()
                if drop_privileges:
                    raise ValueError(f"an unprivileged uid cannot run the grader here: {why}")
                # e.g. the interpreter lives under a private home: fall back, and watch instead
                self.drop = False
                self.drop_refused = why
        self.watch = (not self.drop) if watch_imports is None else watch_imports
        self.roots = import_roots(watch_scope) if self.watch else []
        # what the watched folders held before any evaluation ran: a folder whose entries differ later
        # was changed by one (import_watch)
        self.listings = listings(self.roots) if self.watch else {}
        self.tainted: list[str] = []
        if self.drop:  # the evaluation uid must be able to reach its folder
            os.chmod(self.work_root, 0o711)
        # evaluation processes carry a marker unique to this judge's work folder; a judge that died
        # may have left some running (the runner dies with its judge, its workers may not): end them
        import hashlib

        self.instance = hashlib.sha256(str(self.work_root.resolve()).encode()).hexdigest()[:10]
        self.kill_all()  # by marker; a uid's leftovers are ended when this judge takes the uid (_take_uid)

    def device_slots(self, configured: list[str]) -> list[str]:
        return list(configured)

    def available(self, device: str) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {"drop_privileges": self.drop, "drop_refused": (self.drop_refused or "")[:200] or None,
                "eval_uids": f"{self.eval_uids}-{self.eval_uids + UID_BLOCK - 1}" if self.drop else None,
                "watch_imports": self.watch, "watched_roots": len(self.roots), "tainted": self.tainted[:5],
                "pool": self.pool_state() if self.pool else None}

    def kill_all(self) -> list[int]:
        """End every process of every evaluation of this judge (at start and at shutdown): those that
        carry its marker, and every process of the evaluation uids it holds (never another judge's)."""
        killed = kill_leftovers(f"{self.instance}-", None, prefix=True)
        for uid in self.uid_locks.held:
            killed += kill_leftovers("", uid) if _uid_in_use(uid) else []
        return killed

    def _take_uid(self, slot: int) -> int:
        """The slot's evaluation uid: ``eval_uids + slot`` when no other judge on this host holds it, else
        the next uid of the block that none holds (``UidInUse`` when every one is held); this judge holds
        it from the slot's first use on, and what a judge that held it before left running is ended."""
        if slot in self._slot_uids:
            return self._slot_uids[slot]
        if not 0 <= slot < UID_BLOCK:
            raise UidInUse(f"device slot {slot}: a judge has {UID_BLOCK} evaluation uids, one per slot")
        mine = set(self._slot_uids.values())
        for k in [*range(slot, UID_BLOCK), *range(slot)]:
            uid = self.eval_uids + k
            if uid in mine:
                continue
            try:
                fresh = self.uid_locks.acquire(uid)
            except UidInUse:
                continue
            if fresh and _uid_in_use(uid):
                kill_leftovers("", uid)
            self._slot_uids[slot] = uid
            return uid
        raise UidInUse(f"every evaluation uid from {self.eval_uids} to {self.eval_uids + UID_BLOCK - 1} belongs to "
                       "another judge on this host")

    drop_refused: str | None = None
    cpu_plan: CpuPlan | None = None  # each device slot's own CPUs (set by the judge: cpu_plan.host_plan)

    @staticmethod
    def _probe_uid(uid: int) -> str | None:
        """Why ``uid`` cannot import the grader with this interpreter (None when it can)."""
        try:
            done = subprocess.run([sys.executable, "-c", "import metakernelbench.verifier.result, torch"],
                                  user=uid, group=uid, extra_groups=[], capture_output=True, timeout=120,
                                  cwd="/", env={**os.environ, "HOME": "/nonexistent", "PYTHONNOUSERSITE": "1"})
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        return None if done.returncode == 0 else done.stderr.decode(errors="replace")[-300:]

    def command(self, req: EvalRequest, kernel: Path, device: str) -> list[str]:
        cmd = [sys.executable, "-m", "metakernelbench.judge.runner", "--problem", req.problem,
               "--dsl", req.dsl, "--kernel", str(kernel), "--device", device, *self.settings.runner_flags()]
        if self.problems_root:
            cmd += ["--problems-root", str(self.problems_root)]
        return cmd

    def warm_command(self, device: str) -> list[str]:
        """A runner started before its evaluation (``runner --warm``): the evaluation comes on its stdin."""
        cmd = [sys.executable, "-m", "metakernelbench.judge.runner", "--warm", "--device", device,
               "--warm-dsls", ",".join(self.pool_dsls), *self.settings.runner_flags()]
        if self.problems_root:
            cmd += ["--problems-root", str(self.problems_root)]
        return cmd

    # ---- one evaluation's folders and runner process ------------------------------------------------
    def _new_dirs(self, slot: int, tag: str) -> EvalDirs:
        """A fresh folder (the runner's cwd, where the kernel file goes), HOME, TMPDIR and marker, owned by
        the slot's uid when evaluations drop privileges."""
        marker = f"{self.instance}-{tag}-{secrets.token_hex(6)}"
        folder = self.work_root / f"eval-{tag}-{marker[-6:]}"
        home = folder / "home"
        for d in (folder, home):
            d.mkdir(mode=0o700)
        # a short TMPDIR: multiprocessing puts unix sockets there, and their paths must stay under 108 bytes
        tmp = Path(tempfile.mkdtemp(prefix=f"mkb-{marker[-6:]}-", dir="/tmp" if os.path.isdir("/tmp") else None))
        uid = self._take_uid(slot) if self.drop else None
        # one eager-baseline cache per device slot, kept across evaluations; only the grader writes it
        # (the candidate's worker is confined to its scratch folder by landlock)
        cache = self.work_root.parent / f"{self.work_root.name}.eager-cache" / f"slot-{slot}"
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        if uid is not None:
            os.chmod(cache.parent, 0o711)
            for path in (folder, home, tmp, cache):
                os.chown(path, uid, uid)
        return EvalDirs(marker, folder, home, tmp, uid, folder.parent / f"{folder.name}.log", cache)

    def _write_kernel(self, dirs: EvalDirs, source: bytes) -> None:
        dirs.kernel.write_bytes(source)
        if dirs.uid is not None:
            os.chown(dirs.kernel, dirs.uid, dirs.uid)

    @staticmethod
    def _remove(dirs: EvalDirs) -> None:
        """End every process of the evaluation and remove its folders."""
        kill_leftovers(dirs.marker, dirs.uid)
        shutil.rmtree(dirs.folder, ignore_errors=True)
        shutil.rmtree(dirs.tmp, ignore_errors=True)
        dirs.log.unlink(missing_ok=True)

    def _popen(self, cmd: list[str], dirs: EvalDirs, slot: int, stdin: int) -> subprocess.Popen | str:
        """Start a runner in ``dirs`` on the slot's CPUs; why not (a string) when it cannot start or be pinned."""
        extra: dict[str, Any] = {}
        if dirs.uid is not None:
            extra = {"user": dirs.uid, "group": dirs.uid, "extra_groups": []}
        with open(dirs.log, "wb") as err:
            try:
                cpus = self.cpu_plan.cpus_for(slot) if self.cpu_plan else None
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=stdin, cwd=dirs.folder,
                                        env=_child_env(dirs.marker, dirs.home, dirs.tmp, dirs.cache),
                                        start_new_session=True, **extra)
            except OSError as exc:
                return f"cannot start the runner: {exc}"
        if cpus:  # before the runner starts its workers (they inherit it); no preexec_fn in a threaded judge
            try:
                os.sched_setaffinity(proc.pid, cpus)
            except ProcessLookupError:
                pass  # it has already exited: its exit status tells what happened
            except OSError as exc:  # unpinned, it could share cores with another slot's timing loop
                _kill_group(proc)
                return f"cannot pin the runner to CPUs {cpu_list_text(cpus)}: {exc}"
        return proc

    @staticmethod
    def _read_reports(proc: subprocess.Popen, report: RunnerReport,
                      on_stage: Callable[[str], None]) -> threading.Thread:
        reader = threading.Thread(target=lambda: [report.feed(line.decode(errors="replace"), on_stage)
                                                  for line in proc.stdout], daemon=True)
        reader.start()
        return reader

    # ---- evaluations ------------------------------------------------------------------------------
    def evaluate(self, req: EvalRequest, device: str, slot: int,
                 on_stage: Callable[[str], None]) -> EvalOutcome:
        if self.tainted:
            res = failure(Status.INFRA_ERROR, req.problem, req.dsl,
                          "the judge refuses to evaluate: an earlier submission changed installed files ("
                          + ", ".join(self.tainted[:3]) + "); an operator must restore them")
            return EvalOutcome(res.model_dump(mode="json"), charged=False)
        try:
            return self._evaluate(req, device, slot, on_stage)
        finally:
            if self.pool:  # the next evaluation's runner starts now, after this one's processes are gone
                self.idle(slot, device)

    def _evaluate(self, req: EvalRequest, device: str, slot: int,
                  on_stage: Callable[[str], None]) -> EvalOutcome:
        warm = self._dispatch(req, slot, on_stage) if self.pool else None
        if warm is not None:
            dirs, proc, report, reader, started_ns = warm.dirs, warm.proc, warm.report, warm.reader, warm.dispatched_ns
        else:
            report = RunnerReport()
            try:
                dirs = self._new_dirs(slot, str(req.submission_id))
            except UidInUse as exc:
                return outcome_without_result(req, report, str(exc))
            self._write_kernel(dirs, req.source)
            started_ns = time.time_ns()
            proc = self._popen(self.command(req, dirs.kernel, device), dirs, slot, subprocess.DEVNULL)
            if isinstance(proc, str):
                self._remove(dirs)
                return outcome_without_result(req, report, proc)
            reader = self._read_reports(proc, report, on_stage)
        try:
            return self._watch(req, proc, report, reader, dirs, started_ns)
        finally:
            self._remove(dirs)

    def _watch(self, req: EvalRequest, proc: subprocess.Popen, report: RunnerReport, reader: threading.Thread,
               dirs: EvalDirs, started_ns: int) -> EvalOutcome:
        """Wait for the runner within the wall limit, ending it when it stops or overruns; its verdict."""
        deadline = time.monotonic() + self.settings.wall_limit_s
        timed_out = stopped = False
        while proc.poll() is None:
            if time.monotonic() > deadline:
                timed_out = True
                break
            if _proc_state(proc.pid) in ("T", "t"):
                time.sleep(1.0)  # a stop long enough to notice twice is not a scheduling blip
                if _proc_state(proc.pid) in ("T", "t"):
                    stopped = True
                    break
            if report.finished.wait(0.2):
                break  # the verdict is in (its workers already ended): its interpreter's exit is not waited for
        if proc.poll() is None:
            _kill_group(proc)
        reader.join(5)
        tail = _tail(dirs.log)
        if self.watch:
            changed = changed_since(self.roots, started_ns, before=self.listings)
            if changed:
                self.tainted = changed
                res = failure(Status.REWARD_HACK, req.problem, req.dsl,
                              "the submission created or changed files Python imports from: " + ", ".join(changed[:5]))
                return EvalOutcome(res.model_dump(mode="json"), charged=True, log_tail=tail)
        if report.result is not None and not (timed_out or stopped):
            out = outcome_from_result(report.result)
            out.log_tail = tail
            return out
        code = proc.returncode
        return outcome_without_result(req, report, f"exit status {code}", tail, timed_out=timed_out,
                                      stopped=stopped, signalled=-code if code and code < 0 and not timed_out
                                      and not stopped else None)

    # ---- the pool of warm runners -----------------------------------------------------------------
    @property
    def warm_limit_s(self) -> float:
        """How long a warm runner may take to be ready: its workers' start limit, plus its own imports."""
        return self.settings.grade_config().start_timeout_s + 60.0

    def _start_warm(self, slot: int, device: str) -> WarmRunner | None:
        try:
            dirs = self._new_dirs(slot, f"warm{slot}")
        except UidInUse as exc:
            log.warning("slot %s: no warm runner: %s", slot, exc)
            return None
        proc = self._popen(self.warm_command(device), dirs, slot, subprocess.PIPE)
        if isinstance(proc, str):
            log.warning("slot %s: no warm runner: %s", slot, proc)
            self._remove(dirs)
            return None
        warm = WarmRunner(dirs, proc, RunnerReport(), time.monotonic())
        warm.reader = self._read_reports(proc, warm.report, warm.stage)
        return warm

    def _discard(self, warm: WarmRunner) -> None:
        if warm.proc.poll() is None:
            _kill_group(warm.proc)
        self._remove(warm.dirs)
        warm.reader.join(5)
        if warm.proc.stdin:
            try:
                warm.proc.stdin.close()
            except OSError:
                pass

    def idle(self, slot: int, device: str) -> None:
        """Keep one warm runner for the slot (the judge's slot thread calls this whenever it has no work,
        and after each evaluation): start one where there is none, replace one that died or was not
        ready within ``warm_limit_s`` (after a pause that doubles with each such failure in a row), and
        one older than ``pool_max_age_s`` (it grades with the code it imported when it started)."""
        if not self.pool or self.tainted:
            return
        with self._pool_lock:
            if self._closed:
                return
            warm, now = self._warm.get(slot), time.monotonic()
            if warm is None:
                if now >= self._next_try.get(slot, 0.0):
                    started = self._start_warm(slot, device)
                    if started is not None:
                        self._warm[slot] = started
                return
            alive = warm.proc.poll() is None
            if alive and warm.ready and now - warm.started < self.pool_max_age_s:
                self._failures[slot] = 0
                return
            if alive and not warm.ready and now - warm.started < self.warm_limit_s:
                return
            del self._warm[slot]
            if alive and warm.ready:  # idle for long: a fresh one (the files it imported may have changed)
                why = f"waited {now - warm.started:.0f} s"
            else:
                why = "ended" if not alive else "was not ready in time"
                self._failures[slot] = self._failures.get(slot, 0) + 1
                self._next_try[slot] = now + min(300.0, 2.0 ** self._failures[slot])
        log.log(logging.INFO if alive and warm.ready else logging.WARNING, "slot %s: warm runner %s %s; replaced",
                slot, warm.proc.pid, why)
        self._discard(warm)  # (its replacement starts at a later call: after this cleanup and any pause)

    def _dispatch(self, req: EvalRequest, slot: int, on_stage: Callable[[str], None]) -> WarmRunner | None:
        """Hand the evaluation to the slot's warm runner (ready or still starting): the kernel file into its
        folder, then one line on its stdin. None when there is none that can take it (a cold start then)."""
        with self._pool_lock:
            warm = self._warm.pop(slot, None)
        if warm is None:
            return None
        if warm.proc.poll() is not None or (not warm.ready and time.monotonic() - warm.started > self.warm_limit_s):
            self._discard(warm)
            return None
        self._write_kernel(warm.dirs, req.source)
        warm.on_stage = on_stage
        warm.dispatched_ns = time.time_ns()
        line = json.dumps({"problem": req.problem, "dsl": req.dsl, "kernel": str(warm.dirs.kernel)}) + "\n"
        try:
            assert warm.proc.stdin is not None
            warm.proc.stdin.write(line.encode())
            warm.proc.stdin.close()
        except OSError:  # it ended meanwhile
            self._discard(warm)
            return None
        return warm

    def warm_runner(self, slot: int) -> WarmRunner | None:
        """The slot's warm runner, if it has one now."""
        with self._pool_lock:
            return self._warm.get(slot)

    def pool_state(self) -> dict[str, str]:
        """Each slot's warm runner: ready, starting, or none."""
        with self._pool_lock:
            return {str(slot): ("ready" if w.ready else "starting") for slot, w in sorted(self._warm.items())}

    def shutdown(self) -> list[int]:
        """The judge stops: no more warm runners, and every process of every evaluation ended."""
        with self._pool_lock:
            self._closed = True
            warm, self._warm = list(self._warm.values()), {}
        for w in warm:
            self._discard(w)
        killed = self.kill_all()
        self.uid_locks.release()
        self._slot_uids.clear()
        return killed


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _tail(path: Path, n: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode(errors="replace")


class DockerIsolation:
    """A fresh container of the DSL's grader image per evaluation (see the module docstring)."""

    name = "docker"

    def __init__(self, client: Any, images: dict[str, str], settings: GradeSettings, mem_limit: str = "64g",
                 pids_limit: int = 4096, user: str = "grader", uid: int = BASE_EVAL_UID,
                 problems_root: str = "/opt/mkb/problems"):
        self.client, self.images, self.settings = client, images, settings
        self.mem_limit, self.pids_limit, self.user, self.uid = mem_limit, pids_limit, user, uid
        self.problems_root = problems_root

    def device_slots(self, configured: list[str]) -> list[str]:
        return list(configured)

    def available(self, device: str) -> bool:
        return True

    def idle(self, slot: int, device: str) -> None:
        """Nothing to prepare: every evaluation starts a fresh container."""

    def describe(self) -> dict[str, Any]:
        return {"images": self.images, "user": self.user, "mem_limit": self.mem_limit}

    def shutdown(self) -> list[int]:
        """Nothing outlives its evaluation: each container is removed when its evaluation ends."""
        return []

    cpu_plan: CpuPlan | None = None  # each device slot's own CPUs (set by the judge: cpu_plan.host_plan)

    def container_spec(self, req: EvalRequest, device: str, cpus: set[int] | None = None) -> dict[str, Any]:
        """Keyword arguments of ``client.containers.create`` for one evaluation (on ``cpus`` when given)."""
        gpu = device.split(":", 1)[1] if device.startswith("cuda:") else None
        cmd = ["python", "-m", "metakernelbench.judge.runner", "--problem", req.problem, "--dsl", req.dsl,
               "--kernel", "/work/kernel.py", "--device", "cuda:0" if gpu is not None else "cpu",
               "--problems-root", self.problems_root, *self.settings.runner_flags()]
        spec: dict[str, Any] = dict(
            image=self.images[req.dsl], command=cmd, user=self.user, working_dir="/work",
            network_disabled=True, mem_limit=self.mem_limit, pids_limit=self.pids_limit, shm_size="8g",
            environment={"HOME": "/work/home", "TMPDIR": "/work/tmp", "PYTHONNOUSERSITE": "1",
                         "PYTHONDONTWRITEBYTECODE": "1"},
            labels={"metakernelbench.role": "evaluation", "metakernelbench.submission": str(req.submission_id)},
            detach=True, init=True,
            # The grader reads the frozen candidate worker's outputs with process_vm_readv
            # (verifier/outside.py). Docker's default seccomp profile allows that call only in a
            # container granted CAP_SYS_PTRACE; the runner's user is not root, so it holds no
            # capability itself and the kernel's own check (its child, same uid) still decides.
            # Every other capability is dropped and setuid programs gain nothing.
            cap_drop=["ALL"], cap_add=["SYS_PTRACE"], security_opt=["no-new-privileges:true"],
        )
        if cpus:
            spec["cpuset_cpus"] = cpu_list_text(cpus)
        if gpu is not None:
            request = {"Driver": "", "Count": 0, "DeviceIDs": [gpu], "Capabilities": [["gpu"]], "Options": {}}
            try:
                from docker.types import DeviceRequest

                request = DeviceRequest(device_ids=[gpu], capabilities=[["gpu"]])
            except ImportError:  # the SDK is only needed where Docker runs; the spec is the same dict
                pass
            spec["device_requests"] = [request]
        return spec

    @staticmethod
    def kernel_archive(source: bytes, uid: int = BASE_EVAL_UID) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in ("home", "tmp"):
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o700, uid, uid
                tar.addfile(info)
            info = tarfile.TarInfo("kernel.py")
            info.size, info.mode, info.uid, info.gid = len(source), 0o644, uid, uid
            tar.addfile(info, io.BytesIO(source))
        return buf.getvalue()

    def evaluate(self, req: EvalRequest, device: str, slot: int,
                 on_stage: Callable[[str], None]) -> EvalOutcome:
        report = RunnerReport()
        try:
            cpus = self.cpu_plan.cpus_for(slot) if self.cpu_plan else None
            container = self.client.containers.create(**self.container_spec(req, device, cpus))
        except Exception as exc:  # noqa: BLE001 - image missing, daemon down: infrastructure
            return outcome_without_result(req, report, f"cannot create the evaluation container: {exc}")
        try:
            try:
                container.put_archive("/work", self.kernel_archive(req.source, self.uid))
                container.start()
            except Exception as exc:  # noqa: BLE001
                return outcome_without_result(req, report, f"cannot start the evaluation container: {exc}")
            timed_out = False
            try:
                status = container.wait(timeout=self.settings.wall_limit_s)
                code = int(status.get("StatusCode", -1))
            except Exception:  # noqa: BLE001 - the wait timed out
                timed_out, code = True, -9
                container.kill()
            for line in container.logs(stdout=True, stderr=False).decode(errors="replace").splitlines():
                report.feed(line, on_stage)
            tail = container.logs(stdout=False, stderr=True, tail=60).decode(errors="replace")
            if report.result is not None and not timed_out:
                out = outcome_from_result(report.result)
                out.log_tail = tail
                return out
            # in a container the runner is PID 1's child; 137 = killed by SIGKILL from inside
            signalled = code - 128 if code > 128 and not timed_out else None
            return outcome_without_result(req, report, f"container exit status {code}", tail,
                                          timed_out=timed_out, signalled=signalled)
        finally:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


def docker_client() -> Any | None:
    """A Docker SDK client when the SDK is installed and a daemon answers, else None."""
    try:
        import docker
    except ImportError:
        return None
    try:
        client = docker.from_env()
        client.ping()
        return client
    except Exception:  # noqa: BLE001 - no daemon here
        return None
