"""Skill transfer between DSLs and the paired comparison (design.md §6)."""
