"""Decisions over scores: gates (and, later, baselines, golden-set freezes and the release decision)."""
