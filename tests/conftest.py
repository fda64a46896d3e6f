"""Shared pytest setup: GPU-only tests are skipped on machines without CUDA.

The per-oracle files under tests/oracles/<family>/ compile every oracle kernel for sm_90a on the CPU:
their tests that need no GPU are marked ``oracle_compile``, the slower tier that the README's test command
(``scripts/test.sh``) leaves out and ``scripts/test-oracle-compile.sh`` runs (``.ci/run`` runs both).

On pytest-xdist's workers (``scripts/test.sh`` runs ``-n N --dist loadgroup``), tests that share work
run on one worker: those that use a module-scoped fixture of this suite, and those of one module under
tests/oracles (they load and build the same oracle kernels). Judges started by tests on different
workers need no care: each takes evaluation uids that no other judge on the host holds
(``metakernelbench.judge.uid_locks``). Tests marked ``slow`` (with the tests that share their work) are
handed out first, so that no long test starts last.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent


def pytest_itemcollected(item):  # before -m selects: the oracle compile tier
    if Path(item.path).parent.parent == TESTS / "oracles" and item.get_closest_marker("gpu") is None:
        item.add_marker(pytest.mark.oracle_compile)


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook (see _suffix_group_names)
def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):
        _suffix_group_names(config, items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; its facts are recorded under results/h200")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _suffix_group_names(config, items):
    """pytest-xdist 3.8 sends a group to one worker by appending ``@<group>`` to each test's nodeid, which
    it sets through ``Item._nodeid``; pytest 9 keeps the nodeid in ``Item._id``, so set it there."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest that keeps Item._nodeid, where pytest-xdist's own suffix holds
        return
    if not config.getvalue("loadgroup"):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid.rpartition("]")[2] and isinstance(getattr(item, "_id", None), NodeId):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def _shares_module_work(item) -> bool:
    if TESTS / "oracles" in Path(item.path).parents:
        return True
    fixtures = getattr(item, "_fixtureinfo", None)
    for defs in (fixtures.name2fixturedefs.values() if fixtures else ()):
        for fixturedef in defs:
            if fixturedef.scope == "function":
                continue
            try:
                source = Path(inspect.getsourcefile(fixturedef.func) or "")
            except TypeError:
                continue
            if source.is_relative_to(TESTS):
                return True
    return False


class WorkerOrder:
    """Groups and orders the collected tests on an xdist worker (every worker computes the same)."""

    @pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
    def pytest_collection_modifyitems(self, config, items):
        units = {}
        for item in items:
            group = item.nodeid.split("::")[0] if _shares_module_work(item) else None
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
            units[item] = group or item.nodeid
        slow = {units[item] for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: units[item] not in slow)  # stable: otherwise in collection order


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(WorkerOrder(), "mkb-worker-order")
