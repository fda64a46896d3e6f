"""Started by Python in every process of an image check (``image_env.run_in_image``): it lets
imports find only what the image being checked installs.

Why: the judge image once shipped a server that imported torch, which that image does not install;
its build check (``serve --help``) never imported the server, so nothing noticed until the judge
container restarted in a loop. Here every module an image's entry point imports must come from the
standard library, from a distribution the image's Dockerfile installs (with its dependencies), or
from the project files the image copies. Anything else raises ``ModuleNotFoundError`` naming the
image, as it would inside the image. ``MKB_IMAGE_GUARD`` names a JSON file written by
``image_env``: the image's name, the allowed top-level names, and the folders that hold the project
packages (the only places ``metakernelbench`` may come from). Child processes inherit it through
``PYTHONPATH`` and the variable, so workers an entry point starts are checked too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import sysconfig


class ImageImports(importlib.abc.MetaPathFinder):
    """Refuse top-level modules the image does not install; find project packages only in its copy."""

    def __init__(self, image: str, allowed: set[str], project: dict[str, str]):
        self.image, self.allowed, self.project = image, allowed, project
        lib = sysconfig.get_path("platstdlib")
        self.stdlib = [sysconfig.get_path("stdlib"), lib, os.path.join(lib, "lib-dynload")]

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in self.project:  # found here, before an editable install's finder maps it to a checkout
            parent = name.rpartition(".")[0]
            where = sys.modules[parent].__path__ if parent else [self.project[top]]
            spec = importlib.machinery.PathFinder.find_spec(name, where)
            if spec is None:
                raise ModuleNotFoundError(f"No module named {name!r} in the files {self.image} copies", name=name)
            return spec
        if top in self.allowed or top in sys.builtin_module_names:
            return None
        if importlib.machinery.PathFinder.find_spec(top, self.stdlib) is not None:
            return None  # the interpreter's own (e.g. _sysconfigdata_*), not in stdlib_module_names
        raise ModuleNotFoundError(f"No module named {name!r}: {self.image} does not install it", name=name)


def _install() -> None:
    guard = os.environ.get("MKB_IMAGE_GUARD")
    if not guard:
        return
    with open(guard) as f:
        spec = json.load(f)
    allowed = set(spec["allowed"]) | set(sys.stdlib_module_names) | {"sitecustomize", "usercustomize"}
    sys.meta_path.insert(0, ImageImports(spec["image"], allowed, spec["project"]))


_install()
