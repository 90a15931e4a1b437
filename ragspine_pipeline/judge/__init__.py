"""LLM-judge metrics: prompts, client, cache, statistics, runs and their report."""
