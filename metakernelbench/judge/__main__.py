"""``python -m metakernelbench.judge``: serve, relay, token, status, stop (argparse, no Harbor).

The same commands are available as ``mkb judge ...``; this entry point exists because the judge
runs where the ``mkb`` command's dependencies may be missing (the GPU machine, the judge image).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

from metakernelbench.contract import ATTEMPT_MINUTES, DSLS, GRADER_IMAGES, SUBMISSIONS

from .state import default_state_dir

# what `--help` shows a user (the module docstring above is for readers of the code)
DESCRIPTION = ("The judge: a service that grades submitted kernels on this host's GPUs for Harbor trials. "
               "serve runs it, relay forwards one trial's submissions to it (Docker mode), token mints an "
               "access token, status shows its health, stop ends a judge started with --state. "
               "`<command> --help` shows each command's options.")


def _serve(args: argparse.Namespace) -> int:
    from .isolation import GradeSettings
    from .server import JudgeConfig, serve_forever

    settings = GradeSettings(small=args.small, draws=args.draws, warmup=args.warmup, timed=args.timed,
                             rechecks=args.rechecks, wall_limit_s=args.wall_limit,
                             compile_timeout_s=args.compile_timeout, call_timeout_s=args.call_timeout,
                             interleave_eager=args.interleave_eager)
    images = {dsl: getattr(args, f"image_{dsl}") for dsl in DSLS}
    config = JudgeConfig(state=Path(args.state), devices=[d for d in args.devices.split(",") if d],
                         listen=args.listen, unix=Path(args.unix) if args.unix else None, isolation=args.isolation,
                         settings=settings, secrets_dir=Path(args.secrets_dir) if args.secrets_dir else None,
                         budget=args.budget, minutes=args.minutes, images=images,
                         drop_privileges={"auto": None, "yes": True, "no": False}[args.drop_privileges],
                         watch=args.watch, engine=args.engine, ray_address=args.ray_address,
                         ray_devices=args.ray_devices, pool=args.pool == "on")
    if args.problems_root:
        config.problems_root = Path(args.problems_root)
    if not (config.listen or config.unix):
        raise SystemExit("give --listen HOST:PORT and/or --unix PATH")
    serve_forever(config)
    return 0


def _relay(args: argparse.Namespace) -> int:
    from .relay import Relay, make_server

    token = os.environ.get("MKB_JUDGE_RELAY_TOKEN") or Path(args.token_file).read_text().strip()
    relay = Relay(args.judge, token, args.task, args.minutes, allow_final=args.allow_final)
    relay.register_in_background()
    server = make_server(relay, args.listen)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()
    return 0


def _admin_client(args: argparse.Namespace):
    from .client import JudgeClient

    token = (Path(args.state) / "admin.token").read_text().strip()
    url = args.url or (f"unix:{args.unix}" if args.unix else "http://127.0.0.1:8765")
    return JudgeClient(url, token)


def _token(args: argparse.Namespace) -> int:
    answer = _admin_client(args).request("POST", "/v1/tokens", {"scope": args.scope, "label": args.label})
    print(answer["token"])
    return 0


def _status(args: argparse.Namespace) -> int:
    print(json.dumps(_admin_client(args).health(), indent=2))
    return 0


def _stop(args: argparse.Namespace) -> int:
    pid_file = Path(args.state) / "judge.pid"
    if not pid_file.exists():
        print("no judge.pid: not running")
        return 1
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    print(f"sent SIGTERM to the judge (pid {pid})")
    return 0


def build_parser(prog: str = "python -m metakernelbench.judge") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the judge")
    s.add_argument("--state", default=str(default_state_dir()))
    s.add_argument("--listen", default=None, help="HOST:PORT (e.g. 0.0.0.0:8765)")
    s.add_argument("--unix", default=None, help="a unix socket path (the no-Docker mode)")
    s.add_argument("--devices", default="cuda:0", help="comma-separated: cuda:0,cuda:1 or cpu (tests)")
    s.add_argument("--isolation", default="auto", choices=("auto", "docker", "subprocess"))
    s.add_argument("--engine", default="local", choices=("local", "ray"),
                   help="local: grade on --devices of this host; ray: on the device actors of a Ray cluster "
                        "(every host started with ray start --resources '{\"mkb_device\": N}'; --devices ignored)")
    s.add_argument("--ray-address", default="auto", help="the Ray cluster to join (with --engine ray)")
    s.add_argument("--ray-devices", type=int, default=0,
                   help="with --engine ray: wait up to a minute for this many devices to join")
    s.add_argument("--drop-privileges", default="auto", choices=("auto", "yes", "no"),
                   help="subprocess isolation: run evaluations as a dedicated uid (default: when root)")
    s.add_argument("--watch", default="auto", choices=("auto", "all", "site", "off"),
                   help="scan import roots after each evaluation (auto: when evaluations run as the judge's "
                        "own user; site: installed packages only, not this checkout)")
    s.add_argument("--pool", default="off", choices=("on", "off"),
                   help="subprocess isolation: start each device slot's next evaluation (its runner and workers, "
                        "nothing of a submission) while the slot is idle, so a grading does not wait for their start")
    s.add_argument("--secrets-dir", default=None, help="write relay.token and final.token here (Docker mode)")
    s.add_argument("--budget", type=int, default=SUBMISSIONS)
    s.add_argument("--minutes", type=float, default=float(ATTEMPT_MINUTES))
    s.add_argument("--problems-root", default=None)
    for dsl in DSLS:
        s.add_argument(f"--image-{dsl}", default=GRADER_IMAGES[dsl])
    s.add_argument("--wall-limit", type=float, default=1800.0, help="seconds per evaluation, then TIMEOUT")
    s.add_argument("--compile-timeout", type=float, default=None,
                   help="seconds for a kernel file's import and DSL compile (default: mkb grade's)")
    s.add_argument("--call-timeout", type=float, default=None, help="seconds per call (default: mkb grade's)")
    s.add_argument("--small", action="store_true", help="grade at the small workloads (CPU tests only)")
    s.add_argument("--interleave-eager", action="store_true",
                   help="time the eager reference call by call beside each kernel, for a host whose speed moves "
                        "between minutes (a shared CPU machine); the speedup is then the ratio of the two medians "
                        "of one loop, and no cached eager baseline is used; it trusts the kernels not to slow "
                        "the reference's calls beside them (docs/grading.md)")
    for name in ("draws", "warmup", "timed", "rechecks"):
        s.add_argument(f"--{name}", type=int, default=None, help="override the contract (tests only)")
    s.set_defaults(fn=_serve)

    r = sub.add_parser("relay", help="the per-trial relay (Docker mode)")
    r.add_argument("--listen", default="0.0.0.0:8765")
    r.add_argument("--judge", default="http://mkb-judge:8765")
    r.add_argument("--token-file", default="/run/mkb-judge/relay.token")
    r.add_argument("--task", required=True)
    r.add_argument("--minutes", type=float, default=None)
    r.add_argument("--allow-final", action="store_true",
                   help="let the sandbox ask once for its final grade (the Terminal-Bench layout)")
    r.set_defaults(fn=_relay)

    for name, fn, text in (("token", _token, "mint a token"), ("status", _status, "the judge's health"),
                           ("stop", _stop, "stop a judge started with --state")):
        c = sub.add_parser(name, help=text)
        c.add_argument("--state", default=str(default_state_dir()))
        c.add_argument("--url", default=None)
        c.add_argument("--unix", default=None)
        if name == "token":
            c.add_argument("--scope", required=True, choices=("job", "final", "relay"))
            c.add_argument("--label", default="")
        c.set_defaults(fn=fn)
    return p


def main(argv: list[str] | None = None, prog: str = "python -m metakernelbench.judge") -> int:
    logging.basicConfig(level=os.environ.get("MKB_JUDGE_LOG", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = build_parser(prog).parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
