"""Only the judge client lives here; the grader runs in the judge, outside this image."""
