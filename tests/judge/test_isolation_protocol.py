"""Every isolation backend implements the whole ``Isolation`` protocol: the judge calls its members
directly, never probing for them, so a backend that lacked one would fail only when that member is
first needed (a health answer, an idle slot, the judge's stop)."""

from __future__ import annotations

import pytest
from judge_support import FakeIsolation

from metakernelbench.judge.engine_ray import RayIsolation
from metakernelbench.judge.isolation import DockerIsolation, Isolation, SubprocessIsolation

MEMBERS = sorted(Isolation.__protocol_attrs__)


def test_the_protocol_names_what_the_judge_uses():
    assert MEMBERS == ["available", "cpu_plan", "describe", "device_slots", "evaluate", "idle", "name",
                       "shutdown"]


@pytest.mark.parametrize("backend", [SubprocessIsolation, DockerIsolation, RayIsolation, FakeIsolation])
def test_each_backend_has_every_member(backend):
    missing = [m for m in MEMBERS if not hasattr(backend, m)]
    assert not missing, f"{backend.__name__} lacks {missing}"
