"""The ``mkb`` command: one typer app; each part of the product registers its own commands."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _root() -> None:
    """MetaKernelBench: grade kernels, build tasks, compare skill transfer."""

# Each module defines ``register(app)``; a part that is not installed simply adds no commands.
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
        # the part itself (or its parent package, as in the vendored grader) is absent: skip it
        if exc.name is None or not (_name == exc.name or _name.startswith(exc.name + ".")):
            raise
        continue
    _module.register(app)


def main() -> None:
    app()
