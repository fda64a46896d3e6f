"""Shared pytest setup: GPU-only tests are skipped on machines without CUDA."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; its facts are recorded under results/h200")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
