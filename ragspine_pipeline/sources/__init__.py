"""Sources of traces: the systems under test that the evaluation replays questions against."""
