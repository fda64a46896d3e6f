"""``scripts/docker_e2e_record.py``: CI skips the Docker end-to-end test only for a tree a passing run covers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker_e2e_record.py"


@pytest.fixture
def record_module(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("docker_e2e_record", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RECORD", tmp_path / "docker-e2e.json")
    monkeypatch.setattr(module, "uncommitted", lambda: [])
    return module


def test_a_record_of_this_tree_covers_it_and_any_changed_path_makes_it_run(record_module, capsys):
    hashes = record_module.tree_hashes()
    assert hashes["images"] and hashes["metakernelbench/judge"]  # real git objects of this checkout
    assert record_module.main(["check"]) == 1  # no record yet
    record_module.RECORD.write_text(json.dumps({"commit": "c" * 40, "date": "d", "seconds": 300.0, "tree": hashes}))
    assert record_module.main(["check"]) == 0
    assert "covers this tree" in capsys.readouterr().out
    stale = {**hashes, "images": "0" * 40}
    record_module.RECORD.write_text(json.dumps({"commit": "c" * 40, "date": "d", "seconds": 300.0, "tree": stale}))
    assert record_module.main(["check"]) == 1
    out = capsys.readouterr().out
    assert "changed since" in out and "images" in out and "tasks" not in out


def test_uncommitted_changes_make_it_run_and_are_never_recorded(record_module, monkeypatch, capsys):
    monkeypatch.setattr(record_module, "uncommitted", lambda: ["metakernelbench/judge/server.py"])
    hashes = record_module.tree_hashes()
    record_module.RECORD.write_text(json.dumps({"commit": "c" * 40, "date": "d", "seconds": 1.0, "tree": hashes}))
    assert record_module.main(["check"]) == 1
    record_module.RECORD.unlink()
    assert record_module.main(["write", "--seconds", "300"]) == 0
    assert not record_module.RECORD.exists() and "not recorded" in capsys.readouterr().out


def test_a_written_record_names_the_commit_and_every_covered_path(record_module):
    assert record_module.main(["write", "--seconds", "312.4", "--docker", "Docker 20.10"]) == 0
    record = json.loads(record_module.RECORD.read_text())
    assert record["passed"] is True and len(record["commit"]) == 40 and record["seconds"] == 312.4
    assert set(record["tree"]) == set(record_module.COVERED)
    assert record_module.main(["check"]) == 0
