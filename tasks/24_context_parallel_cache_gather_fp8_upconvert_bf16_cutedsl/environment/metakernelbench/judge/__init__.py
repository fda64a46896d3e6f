"""Only the judge client (and, in the sandbox, the static rules ``check`` applies) lives here; the grader runs in the judge, outside this image."""
