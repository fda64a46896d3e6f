"""Harbor's adapter entry point (``harbor adapter init``'s flags, unchanged): ``--output-dir``,
``--limit``, ``--overwrite``, ``--task-ids``. The repository's own command, ``mkb build``, renders the
same folders and also keeps ``registry.json``, ``images/`` and the adapter metadata current."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from metakernelbench.problems import REPO_ROOT, ProblemError

from .adapter import MetaKernelBenchAdapter

# Harbor's template writes to <repo>/datasets/<id>; this benchmark's generated tasks live in tasks/.
DEFAULT_OUTPUT_DIR = REPO_ROOT / "tasks"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate MetaKernelBench's Harbor tasks.")
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR,
                        help="Directory to write generated tasks")
    parser.add_argument("--limit", type=int, default=None, help="Generate only the first N tasks")
    parser.add_argument("--overwrite", action="store_true", help="Overwrite existing tasks")
    parser.add_argument("--task-ids", nargs="+", default=None,
                        help="Only generate these task IDs (task folder names, problem stems or ids)")
    args = parser.parse_args(argv)
    adapter = MetaKernelBenchAdapter(args.output_dir, overwrite=args.overwrite, limit=args.limit,
                                     task_ids=args.task_ids)
    try:
        written = adapter.run()
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} task folder(s) under {args.output_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
