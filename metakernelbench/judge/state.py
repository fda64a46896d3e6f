"""Where a judge keeps its state (database, socket, tokens) unless told otherwise.

One definition for the judge's commands and Harbor's no-Docker environment, which starts the judge
and must find the same folder. ``MKB_JUDGE_STATE`` is read when the folder is asked for, not at
import, so a setting made after the import counts. Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_state_dir"]


def default_state_dir() -> Path:
    """``$MKB_JUDGE_STATE``, else ``~/.cache/metakernelbench/judge``."""
    configured = os.environ.get("MKB_JUDGE_STATE")
    return Path(configured) if configured else Path.home() / ".cache" / "metakernelbench" / "judge"
