"""Pinned versions agree everywhere: pyproject.toml, requirements.lock, the images, the records.

Timings and numerics depend on torch (and, less, on the rest), so the environment ``scripts/setup-dev.sh``
builds must be the one the records under results/ and the grader images were made with. A pin moved in
one place only (a newer torch in pyproject, an image left behind) fails here; README "Pinned versions"
gives the update path.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;]+)")
# the images pin setuptools to build the project without build isolation; the lock holds the version
# torch's own requirement (setuptools>=77) resolved to, which no grading imports
IMAGE_ONLY = {"setuptools"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        m = PIN.match(line)
        if m:
            pins[_norm(m[1])] = m[2]
    return pins


def test_every_dependency_is_pinned_exactly():
    loose = [r for r in _pyproject_requirements() if not PIN.match(r)]
    assert loose == [], f"pin these exactly (name==version): {loose}"


def test_the_lock_holds_the_pyproject_versions():
    lock = _lock()
    for requirement in _pyproject_requirements():
        name, version = PIN.match(requirement).groups()
        assert lock.get(_norm(name)) == version, (
            f"{name}: pyproject {version}, requirements.lock {lock.get(_norm(name))}; regenerate the lock "
            "with the command at its top")


def test_the_grader_images_install_the_locked_versions():
    lock = _lock()
    checked = 0
    for dockerfile in sorted((REPO / "images").glob("*.Dockerfile")):
        text = dockerfile.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if "pip install" not in line:
                continue
            for name, version in re.findall(r'"?([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([0-9][^\s"]*)"?', line):
                if _norm(name) in IMAGE_ONLY or _norm(name) not in lock:
                    continue
                assert lock[_norm(name)] == version, f"{dockerfile.name}: {name}=={version}, lock {lock[_norm(name)]}"
                checked += 1
    assert checked >= 5, "the images' pip lines were not found"


def test_the_image_generator_pins_the_locked_versions():
    # images/ and every task's Dockerfiles are rendered from these by `mkb build`
    from metakernelbench.adapters import config

    lock = _lock()
    for requirement in (*config.COMMON_PINS, *config.JUDGE_PINS):
        name, version = PIN.match(requirement).groups()
        if _norm(name) not in IMAGE_ONLY:
            assert lock.get(_norm(name)) == version, f"adapters/config.py {requirement}, lock {lock.get(_norm(name))}"


def test_the_gpu_records_were_made_with_the_pinned_torch():
    torch = _lock()["torch"]
    seen = set()
    for record in sorted((REPO / "results" / "h200").glob("*.json")):
        seen |= set(re.findall(r'"torch": "([^"]+)"', record.read_text()))
    assert seen, "no record names its torch version"
    assert {v.split("+")[0] for v in seen} == {torch}, f"records made with {sorted(seen)}, pinned torch {torch}"

