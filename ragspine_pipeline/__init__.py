"""ragspine_pipeline: continuous evaluation and release gating for a retrieval-augmented QA service.

The core (``contracts``, ``scoring``, ``decision``, ``reports``) imports no orchestration framework;
``cli`` is a thin shell over it. ``ragspine_pipeline.RagEvaluation``, the Dagster component of one
evaluated service, is imported only when asked for (it needs the ``dagster`` extra).
"""

__version__ = "0.1.0"

_LAZY = {"RagEvaluation": "ragspine_pipeline.component"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ragspine_pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
