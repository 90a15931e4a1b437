"""LLM-judge metrics (SPEC §3.4): prompts, client, cache, statistics, runs."""
