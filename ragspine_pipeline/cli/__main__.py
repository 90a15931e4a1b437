"""``python -m ragspine_pipeline.cli``: the same command as the ``ragspine-eval`` script."""

import sys

from ragspine_pipeline.cli import main

sys.exit(main())
