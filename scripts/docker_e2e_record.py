"""The record of the last passing Docker end-to-end run, and whether the tree has changed since.

The Docker end-to-end test (scripts/docker-e2e.sh) builds the judge and grader images and runs a Harbor
trial: about six minutes on a two-core CI machine, which would push ``.ci/run`` past its time goal. So CI
runs it whenever anything it exercises has changed since the last run that passed, and otherwise says
which passing run covers the tree. What it exercises is named in ``COVERED``; the record
(``results/docker-e2e.json``) holds git's hash of each of those paths at the run, so "unchanged" is a
fact git checks, not a judgement. A record is written only by a passing run on a clean checkout of
those paths; ``MKB_CI_DOCKER=always`` makes CI run it regardless.

    python scripts/docker_e2e_record.py check   # exit 0: the record covers this tree (it prints which run)
    python scripts/docker_e2e_record.py write --seconds S --docker "..."   # after a passing run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "results" / "docker-e2e.json"
# what the Docker mode runs: the images, the judge and the grader it serves, the task templates and
# generated tasks a trial starts from, the environment Harbor drives, the packages the images install,
# and the test and script themselves
COVERED = (
    "images", "metakernelbench/judge", "metakernelbench/verifier", "metakernelbench/adapters",
    "metakernelbench/contract.py", "metakernelbench/harbor_env.py", "metakernelbench/problems.py",
    "metakernelbench/problem_kit.py", "tasks", "pyproject.toml", "tests/docker", "scripts/docker-e2e.sh",
)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def tree_hashes() -> dict[str, str]:
    """git's object hash of each covered path at HEAD (a path HEAD lacks maps to "")."""
    hashes = {}
    for path in COVERED:
        try:
            hashes[path] = _git("rev-parse", f"HEAD:{path}")
        except subprocess.CalledProcessError:
            hashes[path] = ""
    return hashes


def uncommitted() -> list[str]:
    """Covered paths with changes git has not committed (a record must describe a commit)."""
    return [line[3:] for line in _git("status", "--porcelain", "--", *COVERED).splitlines()]


def covers(record: dict, hashes: dict[str, str]) -> list[str]:
    """The covered paths whose hash differs from the record's (empty: the record covers the tree)."""
    seen = record.get("tree", {})
    return [path for path in COVERED if seen.get(path) != hashes[path]]


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="exit 0 when the record covers this tree, 1 when the test must run")
    write = sub.add_parser("write", help="record a passing run of this tree")
    write.add_argument("--seconds", type=float, required=True)
    write.add_argument("--docker", default="", help="the Docker and Compose versions the run used")
    args = parser.parse_args(argv)

    hashes = tree_hashes()
    if args.command == "check":
        if not RECORD.is_file():
            print("Docker e2e: no record of a passing run; it runs")
            return 1
        record = json.loads(RECORD.read_text())
        changed = covers(record, hashes) + uncommitted()
        if changed:
            print(f"Docker e2e: changed since the passing run at {record.get('commit', '?')[:12]}: "
                  + ", ".join(sorted(set(changed))[:8]) + "; it runs")
            return 1
        print(f"Docker e2e: the passing run at {record['commit'][:12]} ({record['date']}, {record['seconds']:.0f} s) "
              f"covers this tree ({_shown(RECORD)}); not run again")
        return 0
    dirty = uncommitted()
    if dirty:
        print("Docker e2e passed, but not recorded: uncommitted changes in " + ", ".join(dirty[:8]))
        return 0
    RECORD.write_text(json.dumps({
        "command": "bash scripts/docker-e2e.sh", "commit": _git("rev-parse", "HEAD"),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "seconds": round(args.seconds, 1),
        "docker": args.docker, "passed": True, "tree": hashes,
    }, indent=2) + "\n")
    print(f"Docker e2e: recorded in {_shown(RECORD)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
