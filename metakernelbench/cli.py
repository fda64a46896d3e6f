"""The ``mkb`` command: one typer app; each part of the product registers its own commands.

``mkb --help`` (and every command's ``--help``) must answer at once, so the part modules import only
typer and light helpers at the top; torch, Harbor, LiteLLM and the grader are imported inside the
command functions that need them (tests/metakernelbench/test_cli_help.py checks it).
"""

from __future__ import annotations

import importlib
import importlib.util

import typer

__all__ = ["HELP", "OPTIONAL_DEPENDENCIES", "app", "main"]

HELP = ("MetaKernelBench: grade GPU kernels written in CuTe DSL or TIRx, build the Harbor tasks, and "
        "measure whether an agent's skill file transfers between the two DSLs.")

app = typer.Typer(no_args_is_help=True, add_completion=False, help=HELP)


@app.callback()
def _root() -> None:
    # typer shows the app's help= text; this callback only makes ``mkb`` a group of commands
    pass


# Each module defines ``register(app)``. A part whose optional dependency is not installed adds no
# commands (the skill-transfer study needs Harbor; grading does not). The check looks the package up
# without importing it, since the parts import their heavy dependencies only when a command runs.
OPTIONAL_DEPENDENCIES = ("harbor", "docker", "matplotlib")
_PARTS: dict[str, str | None] = {
    "metakernelbench.verifier.cli": None,
    "metakernelbench.judge.cli": None,
    "metakernelbench.adapters.cli": None,
    "metakernelbench.skill_transfer.cli": "harbor",
}


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


for _name, _needs in _PARTS.items():
    if _needs and not _installed(_needs):
        continue
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
