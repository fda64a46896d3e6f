# /// script
# requires-python = ">=3.10"
# dependencies = []
# ///
"""MetaKernelBench's dataset metric: Harbor's ``uv-script`` metric, shipped as ``tasks/metric.py``.

Harbor's default ``mean`` averages every key of ``reward.json`` (six of them, the first in the
progress bar being ``eager_ms``) and counts a trial without a grade as 0. This script is what
Harbor runs instead (``uv run metric.py -i rewards.jsonl -o metric.json``; one reward object or
``null`` per trial) and reports, in this order:

- ``score``: mean per-attempt reward (speedup capped at 100 when PASSED, else 0) over scored trials;
- ``pass_rate``: share of scored trials that PASSED;
- ``geomean_speedup``: geometric mean speedup of the PASSED trials (0 when none passed);
- ``scored``: trials with a grade;
- ``infra_errors``: trials whose grade is INFRA_ERROR (``infra_error = 1``): never scored, counted here;
- ``no_reward``: trials that ended without a ``reward.json`` (a Harbor-side failure): not scored either.

Standard library only, so that Harbor can run it anywhere ``uv`` is installed.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

__all__ = ["dataset_metric", "main", "read_rewards"]


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def dataset_metric(rewards: list[dict | None]) -> dict[str, float | int]:
    """The dataset-level figures for one agent's trials (see the module docstring)."""
    scored: list[dict] = []
    infra_errors = no_reward = 0
    for reward in rewards:
        if reward is None:
            no_reward += 1
        elif _number(reward.get("infra_error", 0)) > 0:
            infra_errors += 1
        else:
            scored.append(reward)
    passed = [r for r in scored if _number(r.get("passed", _number(r.get("reward", 0)) > 0)) > 0]
    speedups = [_number(r.get("speedup", 0)) for r in passed]
    logs = [math.log(s) for s in speedups if s > 0]
    return {
        "score": sum(_number(r.get("reward", 0)) for r in scored) / len(scored) if scored else 0.0,
        "pass_rate": len(passed) / len(scored) if scored else 0.0,
        "geomean_speedup": math.exp(sum(logs) / len(logs)) if logs else 0.0,
        "scored": len(scored),
        "infra_errors": infra_errors,
        "no_reward": no_reward,
    }


def read_rewards(path: Path) -> list[dict | None]:
    """Harbor's input: one JSON object (or ``null``) per line."""
    rewards = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        value = json.loads(line)
        if value is not None and not isinstance(value, dict):
            raise SystemExit(f"{path}:{number}: expected a reward object or null, got {type(value).__name__}")
        rewards.append(value)
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser(description="MetaKernelBench dataset metric (Harbor uv-script metric).")
    parser.add_argument("-i", "--input", type=Path, required=True, help="rewards.jsonl written by Harbor")
    parser.add_argument("-o", "--output", type=Path, required=True, help="metric.json to write")
    args = parser.parse_args()
    args.output.write_text(json.dumps(dataset_metric(read_rewards(args.input))))


if __name__ == "__main__":
    main()
