"""ragspine_pipeline: continuous evaluation and release gating for a retrieval-augmented QA service.

The core (``contracts``, ``scoring``, ``decision``, ``reports``) imports no orchestration framework;
``cli`` is a thin shell over it.
"""

__version__ = "0.1.0"
