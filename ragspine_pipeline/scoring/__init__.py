"""Pure scoring functions: Arrow columns in, columns and figures out. No orchestration imports."""
