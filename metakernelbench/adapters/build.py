"""``mkb build``: render every problem into its two task folders, and ``--check`` that tasks/ is current.

``build`` rewrites each selected task folder from scratch (so a file dropped from the templates
disappears too), removes the folders of problems that no longer exist, and rewrites
``tasks/dataset.toml`` and ``tasks/metric.py`` from the folders now present (with the repository
root given: also ``registry.json``, ``images/``, ``adapters/metakernelbench/adapter_metadata.json``, whose counts
come from those folders, so adding a problem file edits nothing else by hand, and the top-level
``dataset.toml``, a link to ``tasks/dataset.toml``). ``check`` renders
into a temporary directory and lists every path whose bytes or executable bit differ, every
missing or stale folder and a stale manifest; CI runs it, so a hand edit under tasks/ or a
forgotten rebuild fails the build.

Every task comes from a problem file. A task folder made another way (``harbor task init``, a
copy) would be published and run with the rest but graded by nothing the benchmark defines, so
``check`` reports it and ``build`` refuses to run until it is removed or turned into a problem.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from metakernelbench.contract import DSL_PATTERN
from metakernelbench.problems import Problem, ProblemError, load_problem, problem_paths

from .adapter_metadata import PATH as ADAPTER_METADATA
from .adapter_metadata import adapter_metadata_json
from .dataset_readme import dataset_readme
from .dsl import DSLS
from .manifest import manifest_toml, metric_bytes
from .registry import registry_json
from .render import TaskFile, image_files, render_task, task_dir_name

__all__ = [
    "BuildReport", "FOREIGN_HINT", "ForeignTaskError", "METRIC_FILE", "README_FILE", "TASK_DIR", "TOP_MANIFEST",
    "build", "check", "check_images", "check_top_manifest", "expected_dirs", "foreign_dirs", "link_top_manifest",
    "load_problems", "select", "write_dataset_files", "write_images", "write_task",
]

# A folder under tasks/ that the generator owns; anything else there is left alone.
TASK_DIR = re.compile(rf"^\d{{2}}_[a-z0-9_]+_({DSL_PATTERN})$")
_IGNORED = ("__pycache__", ".pyc")
METRIC_FILE = "metric.py"  # beside the manifest: Harbor's dataset-level metric file
README_FILE = "README.md"  # beside the manifest: the dataset's README, which Harbor publishes with it
FOREIGN_HINT = ("not generated from a problem: every task is rendered from problems/<family>/<NN>_<slug>.py "
                "by `mkb build` (docs/adding-a-problem.md); remove the folder or write it as a problem")


class ForeignTaskError(ValueError):
    """A task folder under tasks/ that no problem generates (e.g. made by ``harbor task init``)."""


@dataclass
class BuildReport:
    """What a build wrote and removed (task folder names)."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    manifest: Path | None = None


def load_problems(problems_root: Path) -> list[Problem]:
    """Every problem under ``problems_root``, sorted by id; ids must be unique."""
    if not problems_root.is_dir():
        raise ProblemError(f"{problems_root}: no such problems directory")
    problems = [load_problem(p) for p in problem_paths(problems_root)]
    seen: dict[str, Path] = {}
    for problem in problems:
        spec = problem.spec
        if spec.id in seen:
            raise ProblemError(f"problem id {spec.id} is used by both {seen[spec.id]} and {spec.path}")
        seen[spec.id] = spec.path
    return problems


def select(problems: list[Problem], only: list[str] | None) -> list[Problem]:
    """The problems named by ``--only`` (ids like ``28``, stems, or task folder names)."""
    if not only:
        return problems
    keys = {re.sub(rf"_({DSL_PATTERN})$", "", k) for k in only}
    chosen = [p for p in problems if p.spec.id in keys or p.spec.name in keys]
    found = {p.spec.id for p in chosen} | {p.spec.name for p in chosen}
    unknown = sorted(k for k in keys if k not in found)
    if unknown:
        raise ProblemError(f"--only names no problem: {', '.join(unknown)}")
    return chosen


def expected_dirs(problems: list[Problem]) -> list[str]:
    """Every task folder name the problems produce, sorted."""
    return sorted(task_dir_name(p, d) for p in problems for d in DSLS.values())


def write_task(task_dir: Path, files: dict[str, TaskFile]) -> None:
    """Replace ``task_dir`` with exactly ``files`` (modes 0644 / 0755, whatever the umask)."""
    if task_dir.exists():
        shutil.rmtree(task_dir)
    for rel, item in files.items():
        path = task_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(item.content)
        path.chmod(0o755 if item.executable else 0o644)


def _render_into(out: Path, problems: list[Problem], oracles: Path, remote_judge: str | None = None) -> list[str]:
    written = []
    for problem in problems:
        for dsl in DSLS.values():
            name = task_dir_name(problem, dsl)
            write_task(out / name, render_task(problem, dsl, oracles, remote_judge))
            written.append(name)
    return written


def _present_dirs(out: Path) -> list[str]:
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if p.is_dir() and TASK_DIR.match(p.name))


def foreign_dirs(out: Path) -> list[str]:
    """Task folders (they hold a ``task.toml``) whose names the generator never produces."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir()
                  if p.is_dir() and (p / "task.toml").exists() and not TASK_DIR.match(p.name))


def write_dataset_files(manifest: Path, task_dirs: list[Path]) -> None:
    """``dataset.toml`` for ``task_dirs``, and ``metric.py`` and ``README.md`` beside it."""
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(manifest_toml(task_dirs))
    (manifest.parent / METRIC_FILE).write_bytes(metric_bytes())
    (manifest.parent / README_FILE).write_text(dataset_readme(task_dirs))


TOP_MANIFEST = "dataset.toml"  # at the repository root (the design card's layout): a link to tasks/dataset.toml


def link_top_manifest(root: Path, manifest: Path) -> None:
    """``root/dataset.toml``: a relative symbolic link to ``manifest``, so the manifest the design card
    places at the top level and the one Harbor reads beside the tasks are one file, never two copies."""
    link = root / TOP_MANIFEST
    if link.absolute() == manifest.absolute():  # the manifest itself is written at the top level
        return
    target = Path(os.path.relpath(manifest.resolve(), root.resolve()))
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.unlink()
    link.symlink_to(target)


def check_top_manifest(root: Path, manifest: Path) -> list[str]:
    """A difference when ``root/dataset.toml`` is not the link to ``manifest``."""
    link = root / TOP_MANIFEST
    if link.absolute() == manifest.absolute():
        return []
    if not link.is_symlink():
        return [f"{'changed' if link.exists() else 'missing'}  {TOP_MANIFEST} (a link to {manifest.as_posix()})"]
    if link.resolve() != manifest.resolve():
        return [f"changed  {TOP_MANIFEST} (links to {os.readlink(link)}, not {manifest.as_posix()})"]
    return []


def write_images(root: Path) -> None:
    """Write ``images/`` (grader, judge) under ``root`` (the repository root)."""
    for rel, item in image_files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(item.content)


def check_images(root: Path) -> list[str]:
    """Differences between ``root/images`` and a fresh render."""
    return [f"changed  {rel}" if (root / rel).is_file() else f"missing  {rel}"
            for rel, item in image_files().items()
            if not (root / rel).is_file() or (root / rel).read_bytes() != item.content]


def build(problems_root: Path, out: Path, manifest: Path, oracles: Path,
          only: list[str] | None = None, images: Path | None = None,
          remote_judge: str | None = None) -> BuildReport:
    """Render the selected problems into ``out``, drop stale folders, rewrite the manifest (and
    ``images/`` under ``images`` when given)."""
    problems = load_problems(problems_root)
    chosen = select(problems, only)
    foreign = foreign_dirs(out)
    if foreign:
        raise ForeignTaskError(f"{out.name}/{foreign[0]}/ is {FOREIGN_HINT}"
                               + (f" ({len(foreign) - 1} more such folder(s))" if len(foreign) > 1 else ""))
    out.mkdir(parents=True, exist_ok=True)
    report = BuildReport(written=_render_into(out, chosen, oracles, remote_judge))
    expected = set(expected_dirs(problems))
    for name in _present_dirs(out):
        if name not in expected:
            shutil.rmtree(out / name)
            report.removed.append(name)
    present = [out / n for n in _present_dirs(out)]
    write_dataset_files(manifest, present)
    report.manifest = manifest
    if images is not None:
        write_images(images)
        (images / "registry.json").write_text(registry_json(present))
        (images / ADAPTER_METADATA).parent.mkdir(parents=True, exist_ok=True)
        (images / ADAPTER_METADATA).write_text(adapter_metadata_json(present, problems_root))
        link_top_manifest(images, manifest)
    return report


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or any(part in rel for part in _IGNORED):
            continue
        files[rel] = (path.read_bytes(), bool(path.stat().st_mode & 0o111))
    return files


def _compare_trees(label: str, want: Path, have: Path) -> list[str]:
    expected, actual = _tree(want), _tree(have)
    problems = []
    for rel in sorted(expected.keys() | actual.keys()):
        where = f"{label}/{rel}"
        if rel not in actual:
            problems.append(f"missing  {where}")
        elif rel not in expected:
            problems.append(f"extra    {where}")
        elif expected[rel][0] != actual[rel][0]:
            problems.append(f"changed  {where}")
        elif expected[rel][1] != actual[rel][1]:
            problems.append(f"mode     {where} (executable bit)")
    return problems


def check(problems_root: Path, out: Path, manifest: Path, oracles: Path,
          only: list[str] | None = None, images: Path | None = None) -> list[str]:
    """Every difference between ``out``/``manifest`` and a fresh render; empty when current.

    With ``only``, just those problems' folders are compared (the manifest needs every task).
    """
    problems = load_problems(problems_root)
    chosen = select(problems, only)
    differences: list[str] = check_images(images) if images is not None else []
    with tempfile.TemporaryDirectory(prefix="mkb-build-check-") as tmp:
        fresh = Path(tmp) / "tasks"
        fresh.mkdir()
        names = _render_into(fresh, chosen, oracles)
        for name in names:
            if not (out / name).is_dir():
                differences.append(f"missing  {out.name}/{name}/ (not generated)")
            else:
                differences += _compare_trees(f"{out.name}/{name}", fresh / name, out / name)
        if only:
            return differences
        for name in _present_dirs(out):
            if name not in names:
                differences.append(f"stale    {out.name}/{name}/ (no such problem)")
        for name in foreign_dirs(out):
            differences.append(f"foreign  {out.name}/{name}/ ({FOREIGN_HINT})")
        if images is not None:
            registry = images / "registry.json"
            if not registry.is_file() or registry.read_text() != registry_json([fresh / n for n in names]):
                differences.append("changed  registry.json")
            metadata = images / ADAPTER_METADATA
            want_metadata = adapter_metadata_json([fresh / n for n in names], problems_root)
            if not metadata.is_file() or metadata.read_text() != want_metadata:
                differences.append(f"changed  {ADAPTER_METADATA.as_posix()}")
            differences += check_top_manifest(images, manifest)
        want = manifest_toml([fresh / n for n in names])
        if not manifest.is_file():
            differences.append(f"missing  {manifest.name}")
        elif manifest.read_text() != want:
            differences.append(f"changed  {manifest.name}")
        metric = manifest.parent / METRIC_FILE
        if not metric.is_file():
            differences.append(f"missing  {METRIC_FILE}")
        elif metric.read_bytes() != metric_bytes():
            differences.append(f"changed  {METRIC_FILE}")
        readme = manifest.parent / README_FILE
        if not readme.is_file():
            differences.append(f"missing  {README_FILE}")
        elif readme.read_text() != dataset_readme([fresh / n for n in names]):
            differences.append(f"changed  {README_FILE}")
    return differences
