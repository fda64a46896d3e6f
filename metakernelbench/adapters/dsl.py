"""The two DSL variants of every problem: what differs between a ``_cutedsl`` and a ``_tirx`` task.

Everything DSL-specific that the generator emits comes from one ``Dsl`` record here plus the files
``templates/dsl/<key>.md`` (the DSL paragraph of the instructions) and ``templates/docs/<key>.md``
(the short guide copied into the sandbox). Keeping the variants in data rather than in branches of
the templates is what keeps the two instruction files identical outside the DSL paragraphs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from metakernelbench.contract import other_dsl

__all__ = ["DSLS", "Dsl"]


class Dsl(BaseModel):
    """One DSL variant: its task-name suffix, display name and the packages of its images."""

    model_config = ConfigDict(frozen=True)
    key: str
    name: str
    package: str
    packages: tuple[str, ...]
    smoke_import: str

    @property
    def other(self) -> Dsl:
        """The paired variant (the skill-transfer partner)."""
        return DSLS[other_dsl(self.key)]


DSLS: dict[str, Dsl] = {
    "cutedsl": Dsl(
        key="cutedsl",
        name="CuTe DSL",
        package="nvidia-cutlass-dsl 4.8.1 (CUDA 13 build)",
        packages=("nvidia-cutlass-dsl[cu13]==4.8.1",),
        smoke_import="import torch, cutlass, cutlass.cute",
    ),
    "tirx": Dsl(
        key="tirx",
        name="TIRx",
        package="apache-tvm 0.27.0.post1 (tvm.script.tirx)",
        packages=("apache-tvm==0.27.0.post1", "nvidia-cuda-cccl==13.0.85"),
        smoke_import="import torch, tvm; from tvm.script import tirx",
    ),
}
