"""Fill ``{{ name }}`` placeholders in the files under ``adapters/templates/``.

The templates are shell scripts, Dockerfiles, TOML and Markdown, all of which use ``$`` for their own
purposes, so ``string.Template`` would clash; Jinja would add a dependency for what is only
substitution. A missing value or a placeholder left unfilled is an error that names the template,
so a typo can never ship a task with a literal ``{{ name }}`` in it.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

__all__ = ["TemplateError", "fill", "render", "template_text"]

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")


class TemplateError(KeyError):
    """A template names a value the renderer did not supply."""


@cache
def template_text(relpath: str) -> str:
    """The text of ``templates/<relpath>`` (package data, so it works from a wheel too)."""
    return (resources.files("metakernelbench.adapters") / "templates" / relpath).read_text()


def fill(text: str, values: dict[str, str], *, name: str = "<string>") -> str:
    """Replace every ``{{ key }}`` in ``text`` with ``values[key]``."""

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise TemplateError(f"template {name} uses {{{{ {key} }}}}, which was not supplied")
        return str(values[key])

    return _PLACEHOLDER.sub(substitute, text)


def render(relpath: str, **values: str) -> str:
    """Fill the template ``templates/<relpath>``."""
    return fill(template_text(relpath), values, name=relpath)
