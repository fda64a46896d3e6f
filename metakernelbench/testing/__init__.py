"""Helpers that serve the tests and the benchmarks, never a grading.

``controls`` writes negative controls (submissions a trustworthy grader must reject) and
``selfcheck`` compares a trusted kernel with its reference in the caller's own process. Both know
the reference and run code without a worker, which a grading must never do, so they live outside
the security boundary (``metakernelbench.verifier``) and nothing there imports them. They ship with
the package so that ``benchmarks/`` and ``tests/`` import them by name, as any other module.
"""
