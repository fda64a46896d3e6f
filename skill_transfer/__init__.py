"""Skill transfer between DSLs and the paired comparison (DESIGN §6)."""
