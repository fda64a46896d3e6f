"""Shared constants and helpers of the adapter tests (imported by conftest and the test modules)."""

import shutil
from pathlib import Path

from metakernelbench.problems import PROBLEMS_DIR, REPO_ROOT

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
        shutil.copy(PROBLEMS_DIR / PILOTS[pid], target)
    return root
