"""Oracle coverage from ``results/h200/oracles.json``: the summary the README shows.

    python -m benchmarks.oracle_coverage            # print the summary
    python -m benchmarks.oracle_coverage --write    # put it into README.md between its markers
    python -m benchmarks.oracle_coverage --check    # exit 1 when README.md differs from the record

An oracle counts as proven when the record says its final grade PASSED on the GPU and at least half
of its GPU kernel time ran in its own DSL kernels. Per DSL and per family: proven tasks, how many
tasks have an oracle file at all, and the geometric mean of the proven oracles' speedups. Nothing
here is typed by hand: the README block is regenerated from the record, and a test compares them.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from metakernelbench.contract import DSLS, MIN_DSL_SHARE  # the grader's own threshold and DSL names

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "results" / "h200" / "oracles.json"
README = REPO / "README.md"
START, END = "<!-- oracle-coverage:start -->", "<!-- oracle-coverage:end -->"
# The independent check of a grade's speedup (h200_oracles.py --independent): the grade's and the plain
# loop's speedups agree within AGREEMENT_TOLERANCE for kernels of AGREEMENT_MIN_KERNEL_MS or more (below
# that the two stopwatches may differ by launch overheads).
AGREEMENT_MIN_KERNEL_MS = 1.0
AGREEMENT_TOLERANCE = 0.10


def proven(entry: dict) -> bool:
    share = entry.get("dsl_share")
    return entry.get("status") == "PASSED" and isinstance(share, (int, float)) and share >= MIN_DSL_SHARE


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(entries: list[dict], tasks: dict[str, str], files: set[str]) -> list[dict]:
    """Rows (family, dsl): tasks, oracle files, proven, at or above 1.0x, geomean speedup of the proven.

    ``tasks``: task folder name -> family, for every task of the benchmark; ``files``: the task names
    that have an oracle file. The last row is the total per DSL (family ``all``).
    """
    by_task = {e["task"]: e for e in entries}
    families = sorted(set(tasks.values())) + ["all"]
    rows = []
    for family in families:
        for dsl in DSLS:
            names = [t for t, f in tasks.items() if t.endswith(f"_{dsl}") and family in (f, "all")]
            done = [by_task[t] for t in names if t in by_task and proven(by_task[t])]
            gm = _geomean([e.get("speedup") for e in done])
            rows.append({"family": family, "dsl": dsl, "tasks": len(names),
                         "oracle_files": sum(t in files for t in names), "proven": len(done),
                         "at_least_1x": sum((e.get("speedup") or 0) >= 1.0 for e in done),
                         "geomean_speedup": None if gm is None else round(gm, 2)})
    return rows


def independent_summary(entries: list[dict]) -> dict:
    """The independent check of the grade's speedups: the proven oracles that the plain loop timed too
    (``h200_oracles.py --independent``), the families and DSLs among them, and, where the check applies
    (kernels of a millisecond or more), how many agree within its tolerance."""
    checked = [e for e in entries if proven(e) and e.get("agreement")]
    applies = [e for e in checked if e["agreement"]["applies"]]
    return {"checked": len(checked), "families": sorted({e["family"] for e in checked}),
            "dsls": sorted({e["dsl"] for e in checked}), "applies": len(applies),
            "within": sum(bool(e["agreement"]["within"]) for e in applies)}


def render(record: dict | None) -> str:
    """The README block (markdown) for this record; ``record`` None when none was measured yet.

    Everything comes from the record, including the task list and the oracle files it saw when it
    was measured, so the block changes only when the record does (adding a problem or an oracle
    file does not make the README stale; measuring them does).
    """
    lines = [START]
    if record is None:
        lines += ["No oracle record yet: `results/h200/oracles.json` is written on a GPU by "
                  "`python3 -m benchmarks.h200_oracles`; no oracle counts as proven until it shows it.", END]
        return "\n".join(lines)
    tasks, files = record["tasks"], set(record["oracle_files"])
    rows = summary(record.get("entries", []), tasks, files)
    total = sum(r["proven"] for r in rows if r["family"] == "all")
    lines += [f"Proven oracles (final grade PASSED on the GPU with at least {MIN_DSL_SHARE:.0%} of GPU "
              f"kernel time in DSL kernels): {total} of {len(tasks)} tasks; oracle files existed for "
              f"{len(files)} when measured. From `results/h200/oracles.json` ({record.get('device', '?')}, "
              f"commit {str(record.get('commit', '?'))[:7]}).", "",
              "| family | DSL | tasks | oracle files | proven | proven at >= 1.0x | geomean speedup (proven) |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        gm = "-" if r["geomean_speedup"] is None else f"{r['geomean_speedup']:.2f}x"
        lines.append(f"| {r['family']} | {r['dsl']} | {r['tasks']} | {r['oracle_files']} | {r['proven']} | "
                     f"{r['at_least_1x']} | {gm} |")
    check = independent_summary(record.get("entries", []))
    if check["checked"]:
        lines += ["", f"Checked by the plain timing loop (`benchmarks/independent_loop.py`, no grader code): "
                      f"{check['checked']} proven oracles ({len(check['families'])} families; "
                      f"{', '.join(check['dsls'])}); for the {check['applies']} of them whose kernel takes "
                      f"{AGREEMENT_MIN_KERNEL_MS:g} ms or more, {check['within']} have the grade's speedup within "
                      f"{AGREEMENT_TOLERANCE:.0%} of the loop's."]
    else:
        lines += ["", "No proven oracle has been timed by the plain loop (`benchmarks/independent_loop.py`) yet."]
    lines.append(END)
    return "\n".join(lines)


def current(record_path: Path = RECORD) -> str:
    """The block for the record in the repository (or for its absence)."""
    return render(json.loads(record_path.read_text()) if record_path.is_file() else None)


def replace_block(text: str, block: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"README.md has no {START} ... {END} block")
    return text[:start] + block + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the README block from the record")
    mode.add_argument("--check", action="store_true", help="exit 1 when the README block is stale")
    args = p.parse_args(argv)
    block = current()
    if args.write:
        README.write_text(replace_block(README.read_text(), block))
    elif args.check:
        text = README.read_text()
        if replace_block(text, block) != text:
            print("README.md's oracle coverage differs from results/h200/oracles.json: run "
                  "python -m benchmarks.oracle_coverage --write")
            return 1
    else:
        print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
