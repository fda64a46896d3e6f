"""Write ``registry.json``: Harbor's legacy registry entry for the dataset (``harbor run -d``).

``harbor run -d metakernelbench@0.1.0 --registry-path registry.json`` (from the repository root)
resolves every task to its folder under ``tasks/``; ``harbor run --repo ORG/REPO@REF -d
metakernelbench@0.1.0`` reads the same file from a clone. The entries are validated with Harbor's
own ``DatasetSpec`` model before they are written.
"""

from __future__ import annotations

import json
from pathlib import Path

from harbor.models.registry import DatasetSpec

from . import config

REGISTRY_NAME = "metakernelbench"


def registry_json(task_dirs: list[Path]) -> str:
    """The registry file for the task folders given (paths relative to the repository root)."""
    spec = {
        "name": REGISTRY_NAME,
        "version": config.DATASET_VERSION,
        "description": config.DATASET_DESCRIPTION,
        "metrics": [{"type": "mean"}],
        "tasks": [{"name": d.name, "path": f"tasks/{d.name}", "git_url": None, "git_commit_id": None}
                  for d in sorted(task_dirs)],
    }
    DatasetSpec.model_validate(spec)
    return json.dumps([spec], indent=2) + "\n"
