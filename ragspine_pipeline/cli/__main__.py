"""``python -m ragspine_pipeline.cli``: the same command as the ``ragspine-eval`` script."""

from ragspine_pipeline.cli.app import console

console()
