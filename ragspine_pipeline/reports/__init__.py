"""Rendering of scores and decisions for people (Markdown) and machines (JSON)."""
