"""The ``mkb`` command: one typer app; each part of the product registers its own commands."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _root() -> None:
    """MetaKernelBench: grade kernels, build tasks, compare skill transfer."""

# Each module defines ``register(app)``; a part that is not installed, or whose optional dependency
# is missing (the skill-transfer study needs Harbor; grading does not), simply adds no commands.
OPTIONAL_DEPENDENCIES = ("harbor", "docker", "matplotlib")
_PARTS = (
    "metakernelbench.verifier.cli",
    "metakernelbench.verifier.judge.cli",
    "metakernelbench.adapters.cli",
    "metakernelbench.skill_transfer.cli",
)
for _name in _PARTS:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as exc:
        # the part itself (or its parent package, as in the vendored grader) is absent, or one of
        # its optional dependencies: skip it
        missing = exc.name or ""
        part_absent = _name == missing or _name.startswith(missing + ".")
        if not missing or not (part_absent or missing.split(".")[0] in OPTIONAL_DEPENDENCIES):
            raise
        continue
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
