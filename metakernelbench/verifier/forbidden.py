"""The table of every module a kernel file may not import, with who refuses it.

Two enforcers refuse modules (design.md §4): the static scan (``rules``, which keeps its own table
because it is copied verbatim into every sandbox) and the worker's audit hook (``guard``, which
reads the contract's list). This joins them, asking each enforcer's own table, so the table cannot
drift from what they do. It sits here, beside the enforcers it reads, so that the contract imports
nothing of the project.
"""

from __future__ import annotations

from functools import cache

from metakernelbench.contract import (
    AUDIT_FORBIDDEN_IMPORTS,
    AUDIT_ONLY,
    AUDIT_SUBMISSION_ONLY,
    DSLS,
    FOREIGN_DSL_PACKAGES,
    Enforcer,
    ForbiddenImport,
)

from . import rules  # standard library only, like the contract

__all__ = ["forbidden_imports"]


@cache
def forbidden_imports() -> tuple[ForbiddenImport, ...]:
    """Every module a kernel file may not import, in the static scan's order, then the audit hook's own
    entries, then the foreign DSL packages; each with where it is refused."""

    def row(module: str, dsl: str | None = None) -> ForbiddenImport:
        static = rules.module_rule(module, dsl or "")
        audit = module in AUDIT_FORBIDDEN_IMPORTS or (dsl is not None and module in FOREIGN_DSL_PACKAGES[dsl])
        by = frozenset(e for e, on in ((Enforcer.STATIC, static), (Enforcer.AUDIT, audit)) if on)
        return ForbiddenImport(module, static or AUDIT_ONLY.get(module, ""), by, dsl,
                               module in AUDIT_SUBMISSION_ONLY)

    modules = [*rules.FORBIDDEN_MODULES, *(m for m in AUDIT_FORBIDDEN_IMPORTS if m not in rules.FORBIDDEN_MODULES)]
    rows = [row(m) for m in modules]
    rows += [row(pkg, dsl) for dsl in DSLS for pkg in FOREIGN_DSL_PACKAGES[dsl]]
    return tuple(rows)
