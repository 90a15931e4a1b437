"""``ragspine-eval``: the scorer as a command, for the service's own CI.

Exit codes: 0 ship (every gate, slice and baseline holds), 1 block, 2 unusable input (the message names
file, line and field), 3 an internal error (a bug: the traceback is printed).
"""

from ragspine_pipeline.cli.app import main

__all__ = ["main"]
