"""``submit``: the sandbox's one way to run a kernel on the GPU (standard library only).

It snapshots ``/app/kernel.py`` (the bytes read once, at the start), sends them to the judge, shows
where the submission stands in the judge's queue while it waits, and prints the judge's report:
status, first mismatch with how far it exceeds its allowance, times, speedup, submissions and
minutes left. A file that is missing, empty, too large or does not parse is refused here, before it
reaches the judge, and costs nothing (the judge applies the same checks, so skipping this command's
checks gains nothing either).

Exit status: 0 when the judge graded the submission (whatever its status), 2 when it was refused
without being charged, 3 when the judge could not be reached.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

# the judge's own limit (rules ships into the sandbox with this client)
from metakernelbench.verifier.rules import MAX_KERNEL_BYTES

from .client import JudgeClient, JudgeError, JudgeUnavailable, progress_line

__all__ = ["DEFAULT_KERNEL", "local_check", "main"]

DEFAULT_KERNEL = "/app/kernel.py"


def local_check(path: Path) -> tuple[bytes | None, str | None]:
    """The file's bytes, or why it cannot be submitted (then nothing is sent and nothing is charged)."""
    try:
        source = path.read_bytes()
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except OSError as exc:
        return None, f"cannot read {path}: {exc}"
    if not source.strip():
        return None, f"{path} is empty"
    if len(source) > MAX_KERNEL_BYTES:
        return None, f"{path} is {len(source)} bytes, over the {MAX_KERNEL_BYTES}-byte limit"
    try:
        ast.parse(source.decode("utf-8"), filename=str(path))
    except UnicodeDecodeError as exc:
        return None, f"{path} is not UTF-8 text ({exc})"
    except SyntaxError as exc:
        return None, f"{path} does not parse: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:
        return None, f"{path} does not parse: {exc}"
    return source, None


def _status(client: JudgeClient, as_json: bool) -> int:
    info = client.attempt()
    if as_json:
        print(json.dumps(info))
    else:
        left = info.get("minutes_left")
        print(f"submissions left: {info['submissions_left']} of {info['budget']}"
              + (f"\nminutes left: {left:.1f}" if left is not None else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="submit", description="Grade a kernel file on the GPU (costs one of your "
                                "submissions unless it is refused before grading).")
    p.add_argument("kernel", nargs="?", default=DEFAULT_KERNEL, help=f"the kernel file (default {DEFAULT_KERNEL})")
    p.add_argument("--status", action="store_true", help="show the submissions and minutes left, submit nothing")
    p.add_argument("--json", action="store_true", help="print the judge's full answer as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines while waiting")
    args = p.parse_args(argv)
    client = JudgeClient.from_env()
    try:
        if args.status:
            return _status(client, args.json)
        source, why = local_check(Path(args.kernel))
        if source is None:
            print(f"not submitted: {why}\nthis submission was not charged")
            return 2
        last = [0.0, ""]

        def progress(info: dict) -> None:
            line = progress_line(info)
            now = time.monotonic()
            if not args.quiet and (line.split(":")[0] != last[1].split(":")[0] or now - last[0] > 30):
                print(line, flush=True)
                last[0], last[1] = now, line

        def waiting(text: str) -> None:
            if not args.quiet:
                print(text, flush=True)

        answer = client.submit(source, reconnect_s=300, on_wait=waiting)
        if answer.get("state") not in ("done", "rejected"):
            print(f"submitted ({len(source)} bytes, sha256 {answer.get('sha256', '')[:12]})", flush=True)
            answer = client.wait(answer["id"], on_progress=progress, reconnect_s=900, on_wait=waiting)
    except JudgeUnavailable as exc:
        print(f"the judge is unreachable: {exc.message}\nnothing was charged; try again in a minute")
        return 3
    except JudgeError as exc:
        print(f"the judge refused the request: {exc.message}")
        return 2
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(answer.get("report") or json.dumps(answer, indent=2))
    return 2 if answer.get("state") == "rejected" else 0


if __name__ == "__main__":
    sys.exit(main())
