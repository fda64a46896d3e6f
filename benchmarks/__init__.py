"""The measurements behind the records under ``results/``: each module here is a script.

Run them from the repository root as modules, ``python3 -m benchmarks.<name> ...`` (on a GPU host
after ``source benchmarks/h200_env.sh``): the root is then on the import path, so a script imports
``metakernelbench`` and its sibling scripts' helpers (``benchmarks.h200_judge``,
``benchmarks.independent_loop``) by name, installed or not, and the child processes a script starts
run the same way. Each script's docstring gives its command.
"""
