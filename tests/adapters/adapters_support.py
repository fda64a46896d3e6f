"""Shared constants and helpers of the adapter tests (imported by conftest and the test modules)."""

import shutil
import subprocess
from pathlib import Path

from harbor.lint.models import COMPOSE_RULES, DEFAULT_RULES

from metakernelbench.problems import REPO_ROOT, problems_dir

ORACLES = REPO_ROOT / "oracles"
PILOTS = {
    "28": "mlp_norm/28_fused_add_rmsnorm_h4096_llama31_8b_bf16.py",
    "25": "kv_cache/25_batched_kv_cache_block_copy_remap_uint8.py",
}
T28 = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
T25 = "25_batched_kv_cache_block_copy_remap_uint8"


def copy_problems(root: Path, ids=("28", "25")) -> Path:
    """Copy the pilot problems ``ids`` into ``root/<family>/``; return ``root``."""
    for pid in ids:
        target = root / PILOTS[pid]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(problems_dir() / PILOTS[pid], target)
    return root


def compose_available() -> bool:
    """Harbor's lint parses docker-compose.yaml with the Docker Compose plugin (absent in CI here)."""
    try:
        return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    except OSError:
        return False


# The default lint rules this machine can check: without Compose, those that do not parse compose files.
LINT_RULES = set(DEFAULT_RULES) if compose_available() else set(DEFAULT_RULES) - COMPOSE_RULES
