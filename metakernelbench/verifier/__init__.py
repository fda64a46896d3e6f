"""The grading contract and its enforcement (design.md §4): the project's security boundary.

The trusted side (``grader``) holds the problem, the seeds and the expected outputs; the candidate
runs in a separate process (``worker``) that receives inputs one call at a time and returns raw
outputs and timings, which the trusted side validates.

It is only what one grading needs: nothing here imports Harbor, an HTTP service, sqlite, Docker or
Ray. The service that runs gradings for many attempts is ``metakernelbench.judge``, beside this
package; helpers that serve only tests and benchmarks are ``metakernelbench.testing``. That nothing
here imports them, nor the rest, is checked (``lint-imports``: ``[tool.importlinter]`` in
pyproject.toml).
"""
