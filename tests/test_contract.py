"""The contract module (``metakernelbench.contract``): torch-free, the one definition its readers use, and
the copies that must stay literal (files shipped verbatim into the sandbox) held to it.

What the generated instructions state against what the grader does: tests/adapters/test_adapters_contract.py.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import subprocess
import sys
from typing import get_args

import pytest

from metakernelbench import contract
from metakernelbench.contract import DSLS, Enforcer, GradeConfig, Status
from metakernelbench.problems import REPO_ROOT
from metakernelbench.verifier.forbidden import forbidden_imports

# The contract's counts by the names they go by in the code that takes them as parameters or fields.
COUNT_NAMES = {f.name for f in dataclasses.fields(GradeConfig) if f.type == "int"} | {"draws"}


def test_it_imports_without_torch_or_pydantic():
    """The adapters, ``mkb grade --help`` and the judge's runner before torch read it."""
    code = ("import sys, metakernelbench.contract, metakernelbench.verifier.forbidden as f; f.forbidden_imports(); "
            "import metakernelbench.judge.runner; "
            "print(sorted(m for m in ('torch', 'pydantic', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_old_import_paths_give_the_contracts_objects():
    from metakernelbench.skill_transfer import submission
    from metakernelbench.verifier import grader, launch, provenance, result

    assert launch.GradeConfig is grader.GradeConfig is contract.GradeConfig
    assert launch.Verdict is grader.Verdict is contract.Verdict
    assert result.Status is grader.Status is contract.Status
    assert result.SPEEDUP_CAP is submission.SPEEDUP_CAP is contract.SPEEDUP_CAP
    assert provenance.MIN_DSL_SHARE is contract.MIN_DSL_SHARE


def test_the_problem_format_defaults_to_the_contracts_tolerance():
    from metakernelbench.problems import ProblemSpec

    assert ProblemSpec.model_fields["tolerance_factor"].default == contract.DEFAULT_TOLERANCE_FACTOR


# ---- DSL names and statuses -----------------------------------------------------------------------

def test_every_list_of_the_dsls_is_the_contracts():
    from metakernelbench.adapters import dsl_docs
    from metakernelbench.adapters.dsl import DSLS as VARIANTS
    from metakernelbench.judge import check
    from metakernelbench.skill_transfer import models, submission
    from metakernelbench.testing import controls
    from metakernelbench.verifier import hooks

    assert DSLS == tuple(d.value for d in contract.DslName) == ("cutedsl", "tirx")
    assert tuple(VARIANTS) == DSLS and all(VARIANTS[d].other.key == contract.other_dsl(d) for d in DSLS)
    assert get_args(models.Dsl) == DSLS
    assert models.DIRECTIONS == get_args(models.Direction) == tuple(f"{d}2{contract.other_dsl(d)}" for d in DSLS)
    assert submission.ARMS == (*(f"solo_{d}" for d in DSLS), *models.DIRECTIONS)
    assert tuple(hooks.INSTALLERS) == tuple(controls.DSL_IMPORT) == DSLS
    # shipped verbatim into the sandbox, so literal there: the agent's `check` and the offline API docs
    assert dsl_docs.PACKAGES == {dsl: [package] for dsl, package in contract.DSL_PACKAGES.items()}
    for dsl in DSLS:
        assert check.main(["--dsl", dsl, "/nonexistent/kernel.py"]) == 1  # accepted; then the file is missing
    with pytest.raises(SystemExit):
        check.main(["--dsl", "triton", "/nonexistent/kernel.py"])


def test_a_kernel_must_import_its_dsls_package_and_not_the_others():
    from metakernelbench.verifier import rules

    for dsl, package in contract.DSL_PACKAGES.items():
        missing = rules.scan_source("def solve():\n    pass\n", dsl)
        assert [v.rule for v in missing] == ["no DSL import"] and package in missing[0].detail
        assert rules.scan_source(f"import {package}\ndef solve():\n    pass\n", dsl) == []
        (other,) = contract.FOREIGN_DSL_PACKAGES[dsl]
        assert other == contract.DSL_PACKAGES[contract.other_dsl(dsl)]
        assert set(rules.DSL_FOREIGN[dsl]) == {other}


def test_the_statuses_are_the_contracts():
    from metakernelbench.skill_transfer import models

    assert models.GRADER_STATUSES == tuple(s.value for s in Status)
    assert models.STATUS_INFRA == Status.INFRA_ERROR


# ---- GradeConfig and the judge ---------------------------------------------------------------------

def test_the_judges_settings_are_gradeconfig_overrides():
    """serve's settings -> the runner's flags -> the runner's GradeConfig, one mapping all the way."""
    from metakernelbench.judge.isolation import GradeSettings
    from metakernelbench.judge.runner import CONFIG_FLAGS, _overrides, parse_args

    fields = {f.name for f in dataclasses.fields(GradeConfig)}
    assert set(CONFIG_FLAGS) <= fields
    assert GradeSettings().grade_config() == GradeConfig() and GradeSettings().runner_flags() == []
    settings = GradeSettings(small=True, draws=2, warmup=3, timed=7, rechecks=1, compile_timeout_s=30,
                             call_timeout_s=7.5, interleave_eager=True)
    assert set(settings.overrides()) == set(CONFIG_FLAGS)
    base = ["--problem", "28", "--dsl", "tirx", "--kernel", "kernel.py"]
    args = parse_args(base + settings.runner_flags())
    assert args.small and GradeConfig(**_overrides(args)) == settings.grade_config()
    assert settings.grade_config() == dataclasses.replace(GradeConfig(), correctness_draws=2, warmup=3, timed=7,
                                                          rechecks=1, compile_timeout_s=30.0, call_timeout_s=7.5,
                                                          interleave_eager=True)
    assert "--interleave-eager" in settings.runner_flags()  # a switch, no value
    assert not _overrides(parse_args(base)).get("interleave_eager")


def test_mkb_grade_offers_the_contracts_time_limits():
    import inspect

    from metakernelbench.verifier.cli import grade_command

    params = inspect.signature(grade_command).parameters
    assert params["compile_timeout"].default.default == GradeConfig.compile_timeout_s
    assert params["call_timeout"].default.default == GradeConfig.call_timeout_s


# ---- Forbidden imports ---------------------------------------------------------------------------

def test_the_audit_hook_refuses_the_contracts_list():
    from metakernelbench.verifier import guard

    assert guard.FORBIDDEN_IMPORTS is contract.AUDIT_FORBIDDEN_IMPORTS
    assert guard.TORCH_LAZY is contract.AUDIT_SUBMISSION_ONLY
    assert guard.DSL_FOREIGN is contract.FOREIGN_DSL_PACKAGES
    assert set(contract.AUDIT_SUBMISSION_ONLY) <= set(contract.AUDIT_FORBIDDEN_IMPORTS)


def test_the_table_names_every_entry_of_both_enforcers():
    from metakernelbench.verifier import rules

    table = forbidden_imports()
    rows = {(r.module, r.dsl): r for r in table}
    assert len(rows) == len(table)
    for module, reason in rules.FORBIDDEN_MODULES.items():
        assert rows[module, None].reason == reason and Enforcer.STATIC in rows[module, None].enforced_by
    for module in contract.AUDIT_FORBIDDEN_IMPORTS:
        assert Enforcer.AUDIT in rows[module, None].enforced_by
    for dsl in DSLS:
        for module, reason in rules.DSL_FOREIGN[dsl].items():
            assert rows[module, dsl].reason == reason and rows[module, dsl].where == "static scan + audit hook"
    assert {r.module for r in table if r.submission_only} == set(contract.AUDIT_SUBMISSION_ONLY)


def test_what_the_audit_hook_refuses_the_static_scan_refuses_too_but_the_declared_few():
    """The scan runs first, and in the sandbox's `check`: an agent should hear of a forbidden import there.
    The declared exceptions must really be exceptions (else the declaration has gone stale)."""
    table = forbidden_imports()
    audit_only = {r.module for r in table if r.enforced_by == {Enforcer.AUDIT}}
    assert audit_only == set(contract.AUDIT_ONLY)


@functools.cache
def _audit_policy(dsl: str):
    from metakernelbench.verifier.guard import make_policy

    return make_policy("/nonexistent/kernel.py", (), dsl, roots=())


@pytest.mark.parametrize("row", forbidden_imports(), ids=lambda r: f"{r.module}-{r.dsl or 'any'}")
def test_each_entry_is_refused_where_the_table_says(row):
    """Asked of the enforcers themselves: the AST scan of a file importing it, and the audit hook's policy.
    (In a task of one DSL, everything under the other DSL's package is refused besides: its own rows.)"""
    from metakernelbench.verifier import rules

    for dsl in [row.dsl] if row.dsl else DSLS:
        source = f"import {contract.DSL_PACKAGES[dsl]}\nimport {row.module}\n\ndef solve():\n    pass\n"
        refused = [v for v in rules.scan_source(source, dsl) if v.line == 2]
        assert bool(refused) == (Enforcer.STATIC in row.enforced_by)
        if refused:
            assert refused[0].detail == row.reason
        foreign = any(row.module == p or row.module.startswith(p + ".") for p in contract.FOREIGN_DSL_PACKAGES[dsl])
        audited = Enforcer.AUDIT in row.enforced_by or foreign
        expected = "" if not audited else "submission" if row.submission_only else "always"
        for name in (row.module, row.module + ".sub"):
            assert _audit_policy(dsl).blocked_module(name) == expected


def stray_contract_numbers(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place a module states one of the contract's numbers itself: a count as a
    literal default of a field or a parameter of that name, the speedup cap assigned a literal, a
    grader image tag written out. Defaults taken from ``GradeConfig`` and ``None`` (keep the
    contract's value) are no copies."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in COUNT_NAMES
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)):
            found.append((node.lineno, node.target.id))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                isinstance(t, ast.Name) and t.id == "SPEEDUP_CAP" for t in node.targets):
            found.append((node.lineno, "SPEEDUP_CAP"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = node.args.posonlyargs + node.args.args
            pairs = list(zip(positional[len(positional) - len(node.args.defaults):], node.args.defaults, strict=True))
            pairs += list(zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True))
            found += [(node.lineno, arg.arg) for arg, default in pairs if arg.arg in COUNT_NAMES
                      and isinstance(default, ast.Constant) and isinstance(default.value, int)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "metakernelbench/grader-" in node.value:
            found.append((node.lineno, "grader image tag"))
    return found


def test_the_stray_copy_check_finds_each_kind():
    source = ("SPEEDUP_CAP = 100.0\n"
              "class C:\n    timed: int = 50\n    warmup: int | None = None\n"
              "def f(x, warmup=10, *, rechecks=3, timed=GradeConfig.timed):\n    pass\n"
              "IMAGE = 'metakernelbench/grader-tirx:0.1.0'\n")
    assert sorted(stray_contract_numbers(source)) == [(1, "SPEEDUP_CAP"), (3, "timed"), (5, "rechecks"),
                                                      (5, "warmup"), (7, "grader image tag")]


def test_no_module_restates_the_contracts_numbers():
    """The counts, the cap and the image tags are defined in ``contract.py`` alone (the generated tasks'
    copies are held to it by tests/adapters/test_adapters_contract.py)."""
    found = {}
    for folder in ("metakernelbench", "benchmarks", "demo", "scripts"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            hits = stray_contract_numbers(path.read_text())
            if hits and path != REPO_ROOT / "metakernelbench" / "contract.py":
                found[str(path.relative_to(REPO_ROOT))] = hits
    assert found == {}
