"""The no-Docker mode: a Harbor environment that runs a task's sandbox as local processes.

``harbor run -p tasks -e metakernelbench.harbor_env:LocalEnvironment ...`` works where
there is no Docker engine (the development machines, CI, the GPU machine). The host's Python
environment stands in for the image (it must have torch and the DSLs, as ``scripts/setup-dev.sh``
installs them); the task's files are laid out the way its Dockerfile's ``COPY`` lines say.

Each command runs in its own mount namespace (``unshare``) in which per-trial folders are
bind-mounted over ``/app``, ``/tests``, ``/solution``, ``/tmp`` and ``/logs/{agent,verifier,
artifacts}`` (so two trials never see each other's files), the judge's state, the job folder and the
repository's oracles, tests and tasks are hidden under empty tmpfs mounts, the network is a private
loopback only (``--net``: the judge is reached through its unix socket), and every capability is
dropped before the command starts (``setpriv``), so it cannot undo those mounts. It needs root, or
unprivileged user namespaces plus existing mount points. This is isolation between trials and from
the network, not a hardened sandbox: the host's other files stay readable.

The environment also starts the judge if none is running (``ensure_judge``: one judge per state
folder, shared by every trial, left running), registers the attempt (agent phase) or mints a
final-grade token linked to it (Harbor's separate verifier phase), and passes the judge's socket
and the token to the commands through ``MKB_JUDGE_URL`` and ``MKB_JUDGE_TOKEN``.

Options (``--ek key=value``): ``judge_state`` (default ``$MKB_JUDGE_STATE`` or
``~/.cache/metakernelbench/judge``), ``judge_args`` (extra ``serve`` arguments when it starts the
judge, e.g. ``"--devices cpu --small"``; default ``--devices cuda:0``), ``hide`` (extra
colon-separated host paths to hide).

This module is Harbor's side of the no-Docker mode, so it sits beside the judge rather than in it:
it imports Harbor, which the judge's hosts and images do not install (a GPU machine runs the judge
alone), and it reaches the judge only as a client (``judge.client``) and as a process it starts.
``metakernelbench.judge`` and ``metakernelbench.verifier`` therefore import no Harbor.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

from metakernelbench.judge.client import JudgeClient, JudgeUnavailable
from metakernelbench.judge.state import default_state_dir

__all__ = [
    "ENV_PASSTHROUGH", "LOCAL", "LocalEnvironment", "MARKER", "MOUNTS", "SOCKET_MOUNT",
    "dockerfile_copies", "ensure_judge", "socket_path", "stop_judge", "unshare_problem",
]

# /tmp last: the other mounts' host sources may live under the host's /tmp
# /opt/mkb-local holds the trial's `submit` command (bin/) and its HOME (home/).
MOUNTS = ("/app", "/tests", "/solution", "/opt/mkb-local", "/logs/agent", "/logs/verifier", "/logs/artifacts",
          "/tmp")
LOCAL = "/opt/mkb-local"
SOCKET_MOUNT = "/run/mkb-judge"
ENV_PASSTHROUGH = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_PATH", "CUDA_HOME", "LANG", "LC_ALL", "TZ",
                   "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
MARKER = "MKB_LOCAL_ENV"


def socket_path(state: Path) -> Path:
    """The judge's socket lives beside (not inside) its state folder, which sandboxes never see."""
    return state.parent / f"{state.name}.run" / "judge.sock"


def ensure_judge(state: Path, serve_args: list[str], timeout: float = 120.0) -> str:
    """The URL of the judge for ``state``, started (detached, logging to ``judge.log``) if not running."""
    state.mkdir(parents=True, exist_ok=True)
    sock = socket_path(state)
    url = f"unix:{sock}"
    with open(state / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            JudgeClient(url, timeout=5).health()
            return url
        except JudgeUnavailable:
            pass
        cmd = [sys.executable, "-m", "metakernelbench.judge", "serve", "--state", str(state),
               "--unix", str(sock), *serve_args]
        with open(state / "judge.log", "ab") as log:
            subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                             env={k: v for k, v in os.environ.items() if not k.startswith("MKB_JUDGE_TOKEN")})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                JudgeClient(url, timeout=5).health()
                return url
            except JudgeUnavailable:
                time.sleep(0.3)
    raise RuntimeError(f"the judge did not come up within {timeout:.0f} s; see {state / 'judge.log'}")


def stop_judge(state: Path, timeout: float = 30.0) -> bool:
    """Stop the judge of ``state`` (SIGTERM, then wait); False when none was running."""
    pid_file = state / "judge.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return True


def dockerfile_copies(dockerfile: Path) -> tuple[list[tuple[list[str], str]], str | None, dict[str, str]]:
    """``COPY``/``ADD`` pairs, the last ``WORKDIR`` and the ``MKB_*`` ``ENV`` values of a Dockerfile."""
    copies: list[tuple[list[str], str]] = []
    workdir, env = None, {}
    text = re.sub(r"\\\n", " ", dockerfile.read_text()) if dockerfile.is_file() else ""
    for line in text.splitlines():
        words = shlex.split(line, comments=True) if line.strip() and not line.lstrip().startswith("#") else []
        if not words:
            continue
        op, rest = words[0].upper(), [w for w in words[1:] if not w.startswith("--")]
        if op in ("COPY", "ADD") and len(rest) >= 2:
            copies.append((rest[:-1], rest[-1]))
        elif op == "WORKDIR" and rest:
            workdir = rest[0]
        elif op == "ENV":
            for word in rest:
                key, _, value = word.partition("=")
                if key.startswith("MKB_"):
                    env[key] = value
    return copies, workdir, env



def _git_dirs_of_worktree(dot_git: Path) -> list[Path]:
    """A git worktree's ``.git`` is a file naming its git folder inside the main checkout's ``.git``;
    that folder (the whole repository's history, oracles included) is hidden as well."""
    if not dot_git.is_file():
        return []
    text = dot_git.read_text(errors="replace").strip()
    if not text.startswith("gitdir:"):
        return []
    gitdir = (dot_git.parent / text.removeprefix("gitdir:").strip()).resolve()
    common = gitdir.parent.parent if gitdir.parent.name == "worktrees" else gitdir
    return [gitdir, common] if common != gitdir else [gitdir]

class LocalEnvironment(BaseEnvironment):
    """Harbor environment: the task's sandbox as local processes, the judge started locally."""

    def __init__(self, *args, judge_state: str | None = None, judge_args: str | None = None,
                 hide: str | None = None, **kwargs):
        self._state = Path(judge_state).expanduser() if judge_state else default_state_dir()
        self._serve_args = shlex.split(judge_args) if judge_args else ["--devices", "cuda:0"]
        self._extra_hide = [Path(p) for p in (hide or "").split(":") if p]
        self._exec_env: dict[str, str] = {}
        self._workdir = "/app"
        super().__init__(*args, **kwargs)

    # ---- Harbor's contract -------------------------------------------------------------------
    @staticmethod
    def type() -> str:
        return "metakernelbench-local"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(mounted=True, disable_internet=_can_unshare())

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(f"{self.environment_dir}: no Dockerfile to lay the task's files out from")

    @property
    def is_verifier(self) -> bool:
        return "__verifier__" in self.session_id

    @property
    def trial_name(self) -> str:
        """The trial's folder name: Harbor names the agent's session ``<trial>__env`` and the separate
        verifier's ``<trial>__verifier__<key>``."""
        return self.session_id.split("__verifier__", 1)[0].removesuffix("__env")

    @property
    def _root(self) -> Path:
        return self.trial_paths.trial_dir / (".local-verifier" if self.is_verifier else ".local-sandbox")

    def _host(self, path: str) -> Path:
        """Where a path of the sandbox lives on the host."""
        # Harbor's own mounts first (they say where it expects the log folders on the host), then
        # this environment's private folders
        logs = {m["target"]: Path(m["source"]) for m in self._mounts if m.get("type") == "bind"}
        text = str(path)
        for inside, host in sorted(logs.items(), key=lambda kv: -len(kv[0])):
            if text == inside or text.startswith(inside + "/"):
                return host / text[len(inside):].lstrip("/")
        for inside in ("/app", "/tests", "/solution", "/tmp", LOCAL, "/logs"):
            if text == inside or text.startswith(inside + "/"):
                return self._root / inside.lstrip("/") / text[len(inside):].lstrip("/")
        return Path(text)  # anything else is the host's own file system (the stand-in image)

    def _task(self) -> tuple[str, float | None]:
        config = tomllib.loads((self.environment_dir.parent / "task.toml").read_text())
        timeout = config.get("agent", {}).get("timeout_sec")
        return config["task"]["name"], (timeout / 60 if timeout else None)

    async def start(self, force_build: bool) -> None:
        why = unshare_problem()
        if why:
            raise RuntimeError(f"the local environment cannot isolate commands here: {why}")
        _ensure_mount_points()
        for name in ("app", "tests", "solution", "tmp", "opt/mkb-local/home", "opt/mkb-local/bin"):
            (self._root / name).mkdir(parents=True, exist_ok=True)
        for inside in MOUNTS:
            self._host(inside).mkdir(parents=True, exist_ok=True)
        os.chmod(self._root / "tmp", 0o1777)
        self.trial_paths.mkdir()
        copies, workdir, env = dockerfile_copies(self.environment_dir / "Dockerfile")
        for sources, target in copies:
            self._lay_out(sources, target)
        await asyncio.to_thread(self._dsl_docs)
        self._workdir = workdir or "/app"
        submit = self._host(f"{LOCAL}/bin/submit")
        submit.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m metakernelbench.judge.submit "
                          '"$@"\n')
        submit.chmod(0o755)
        self._write_login_profile()
        url = await asyncio.to_thread(ensure_judge, self._state, self._serve_args)
        admin = JudgeClient(url, (self._state / "admin.token").read_text().strip())
        task, minutes = self._task()
        if self.is_verifier:
            token = admin.request("POST", "/v1/tokens", {"scope": "final", "label": self.trial_name})["token"]
            env["MKB_ATTEMPT_KEY"] = self.trial_name
        else:
            token = admin.register(self.trial_name, task, minutes)["token"]
        env.update({"MKB_JUDGE_URL": f"unix:{SOCKET_MOUNT}/judge.sock", "MKB_JUDGE_TOKEN": token, "MKB_TASK": task})
        self._exec_env = env

    def _write_login_profile(self) -> None:
        """A ``~/.bash_profile`` that puts the sandbox's PATH back after ``/etc/profile``.

        Terminus-2 runs its commands in ``bash --login`` inside tmux; the host's ``/etc/profile``
        resets PATH (Debian's does), which would hide ``submit`` and the Python environment that
        stands in for the image. A login shell reads ``~/.bash_profile`` after ``/etc/profile``.
        """
        path = self._environment(None)["PATH"]
        self._host(f"{LOCAL}/home/.bash_profile").write_text(
            "# Written by the local environment: /etc/profile may have reset PATH.\n"
            f"export PATH={shlex.quote(path)}\n"
            '[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"\n')

    def _dsl_docs(self) -> None:
        """The image's generated DSL API reference (its one RUN step the sandbox needs), cached per DSL."""
        text = (self.environment_dir / "Dockerfile").read_text()
        m = re.search(r"mkb_dsl_docs\.py --dsl (\w+) --out (\S+)", text)
        if not m or not (self.environment_dir / "dsl_docs.py").is_file():
            return
        cache = self._state.parent / f"{self._state.name}.cache" / "dsl-docs" / m[1]
        with open(self._state.parent / f"{self._state.name}.docs.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (cache / "index.md").is_file():
                subprocess.run([sys.executable, str(self.environment_dir / "dsl_docs.py"), "--dsl", m[1],
                                "--out", str(cache)], capture_output=True, timeout=600)
        if (cache / "index.md").is_file():
            shutil.copytree(cache, self._host(m[2]), dirs_exist_ok=True)

    def _lay_out(self, sources: list[str], target: str) -> None:
        dest = self._host(target)
        if dest == Path(target) and not target.startswith(("/app", "/tests", "/solution")):
            return  # software of the image: the host provides it
        for src in sources:
            path = (self.environment_dir / src).resolve()
            if not path.is_relative_to(self.environment_dir.resolve()) or not path.exists():
                continue
            if path.is_dir():
                shutil.copytree(path, dest, dirs_exist_ok=True)
            else:
                out = dest / path.name if target.endswith("/") else dest
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)

    async def stop(self, delete: bool) -> None:
        await asyncio.to_thread(_kill_marked, self.session_id)
        if delete:
            shutil.rmtree(self._root, ignore_errors=True)

    async def upload_file(self, source_path, target_path) -> None:
        dest = self._host(target_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(source_path).resolve() != dest.resolve():
            shutil.copy(source_path, dest)

    async def upload_dir(self, source_dir, target_dir) -> None:
        dest = self._host(target_dir)
        if Path(source_dir).resolve() != dest.resolve():
            shutil.copytree(source_dir, dest, dirs_exist_ok=True)

    async def download_file(self, source_path, target_path) -> None:
        src = self._host(source_path)
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        if src.resolve() != Path(target_path).resolve():
            shutil.copy(src, target_path)

    async def download_dir(self, source_dir, target_dir) -> None:
        src, dst = self._host(source_dir).resolve(), Path(target_dir).resolve()
        if dst != src and not dst.is_relative_to(src):  # already there (a mounted folder) or a copy into itself
            shutil.copytree(src, dst, dirs_exist_ok=True)

    def _hidden(self) -> list[Path]:
        import metakernelbench

        repo = Path(metakernelbench.__file__).resolve().parent.parent
        paths = [self._state, self.trial_paths.trial_dir.parent, *self._extra_hide]
        paths += [repo / name for name in ("oracles", "tests", "tasks", "results", ".git")]
        paths += _git_dirs_of_worktree(repo / ".git")
        return [p for p in paths if p.exists()]

    @staticmethod
    def _kept_under_tmp() -> list[Path]:
        """Host folders the sandbox's Python needs that live under /tmp (a venv or a checkout there).

        The sandbox gets a private /tmp, which would hide them; ``wrap`` binds them back in place.
        """
        import metakernelbench

        repo = Path(metakernelbench.__file__).resolve().parent.parent
        keep = sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), repo})
        under = [p for p in keep if p.is_relative_to("/tmp")]
        return [p for p in under if not any(p != q and p.is_relative_to(q) for q in under)]

    def _environment(self, env: dict[str, str] | None) -> dict[str, str]:
        out = {k: os.environ[k] for k in ENV_PASSTHROUGH if k in os.environ}
        out["PATH"] = os.pathsep.join([f"{LOCAL}/bin", str(Path(sys.executable).parent),
                                       out.get("PATH", "/usr/bin:/bin")])
        out.update({"HOME": f"{LOCAL}/home", "TERM": "xterm-256color", "TMPDIR": "/tmp",
                    MARKER: self.session_id})
        out.update(self._merge_env(env) or {})
        out.update(self._exec_env)  # the judge this environment registered with beats the task's defaults
        return out

    def wrap(self, command: str, cwd: str | None) -> list[str]:
        """The host command line that runs ``command`` inside this trial's namespace."""
        lines = ["set -e"]
        for inside in MOUNTS[:-1]:
            lines.append(f"mount --bind {shlex.quote(str(self._host(inside)))} {inside}")
        lines.append(f"mount --bind {shlex.quote(str(socket_path(self._state).parent))} {SOCKET_MOUNT}")
        kept = self._kept_under_tmp()
        for i, path in enumerate(kept):  # hold what must survive the private /tmp ...
            lines.append(f"mkdir -p {LOCAL}/.hold{i} && mount --bind {shlex.quote(str(path))} {LOCAL}/.hold{i}")
        lines.append(f"mount --bind {shlex.quote(str(self._host('/tmp')))} /tmp")
        for i, path in enumerate(kept):  # ... put it back where it was, and drop the holding mount
            lines.append(f"mkdir -p {shlex.quote(str(path))} && mount --bind {LOCAL}/.hold{i} "
                         f"{shlex.quote(str(path))} && umount {LOCAL}/.hold{i}")
        for path in self._hidden():  # (the rest of the host's /tmp is out of sight already)
            real = path.resolve()
            if not real.is_relative_to("/tmp") or any(real.is_relative_to(k) for k in kept):
                if path.is_dir():
                    lines.append(f"mount -t tmpfs -o size=64k,mode=0755 mkb-hidden {shlex.quote(str(path))}")
                else:  # a file (a git worktree's .git): nothing can be mounted over it but another file
                    lines.append(f"mount --bind /dev/null {shlex.quote(str(path))}")
        if self._network_disabled or self._network_is_allowlist:
            lines.append("ip link set lo up 2>/dev/null || true")
        lines.append(f"cd {shlex.quote(cwd or self._workdir)}")
        run = ["bash", "-c", command]
        if shutil.which("setpriv"):
            run = ["setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", *run]
        lines.append("exec " + " ".join(shlex.quote(w) for w in run))
        script = "\n".join(lines)
        flags = ["--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            flags = ["--user", "--map-root-user", *flags]
        if self._network_disabled or self._network_is_allowlist:
            flags.append("--net")
        return ["unshare", *flags, "bash", "-c", script]

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        proc = await asyncio.create_subprocess_exec(
            *self.wrap(command, cwd), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, env=self._environment(env), start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
        except TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
            raise RuntimeError(f"command timed out after {timeout_sec} seconds") from None
        return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
                          return_code=proc.returncode or 0)


@functools.cache
def unshare_problem() -> str | None:
    """Why this machine cannot give a trial its own mounts and network (None: it can); the demo and
    the end-to-end tests ask it before they start a trial."""
    if not shutil.which("unshare"):
        return "`unshare` (util-linux) is not installed"
    flags = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    done = subprocess.run(["unshare", *flags, "--net", "true"], capture_output=True, text=True)
    if done.returncode:
        return ("unshare failed (" + done.stderr.strip()[:200] + "); run as root or enable unprivileged "
                "user namespaces")
    if os.geteuid() != 0:
        missing = [m for m in (*MOUNTS, SOCKET_MOUNT) if not Path(m).is_dir()]
        if missing:
            return f"the mount points {', '.join(missing)} do not exist (create them once as root)"
    return None


def _can_unshare() -> bool:
    return unshare_problem() is None


def _ensure_mount_points() -> None:
    """Empty folders to mount over (created once; they stay empty on the host)."""
    for mount in (*MOUNTS, SOCKET_MOUNT):
        if not Path(mount).is_dir() and os.geteuid() == 0:
            Path(mount).mkdir(parents=True, exist_ok=True)


def _kill_marked(session: str) -> None:
    """End every process this environment left (tmux servers and the like), found by their marker."""
    token = f"{MARKER}={session}".encode()
    for _ in range(5):
        found = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                if token in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    found.append(pid)
            except OSError:
                continue
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
