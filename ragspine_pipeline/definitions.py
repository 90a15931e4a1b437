"""The ragspine_pipeline code location: every evaluated service declared under
``ragspine_pipeline/services`` (a ``defs.yaml`` each, built by the ``RagEvaluation`` component), how a
run executes its steps, and where values between steps live. ``dg dev`` / ``dg check defs`` and
``make run`` load this module (``[tool.dg.project]`` in pyproject.toml).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg

from ragspine_pipeline.defs.executor import executor_from_env


def location(services: dg.Definitions) -> dg.Definitions:
    """``services`` (the definitions the component built for each service, each with its jobs' executor
    and its values' store) with the same executor as the default of what else is launched here: an
    asset materialised by hand from the UI runs as a service's job would."""
    return dg.Definitions.merge(services, dg.Definitions(executor=executor_from_env()))


# Dagster turns the asset checks a component returns into assets definitions and back, passing a beta
# parameter of its own (execution_type) on the way: nothing of ours to act on, and noise in every load.
warnings.filterwarnings("ignore", message="Parameter `execution_type`", category=dg.BetaWarning)


def code_location() -> dg.Definitions:
    """Every service declared under ``ragspine_pipeline/services`` (a ``defs.yaml`` each), how a run
    executes its steps, and where values between steps live."""
    import ragspine_pipeline.services

    # From the module, not the checkout's pyproject.toml: an installed package (a wheel, an image)
    # loads the same services.
    project_root = Path(__file__).resolve().parent.parent
    with warnings.catch_warnings():
        # Dagster's component loader uses beta and preview parts of its own (load_from_defs_folder
        # silences them the same way): nothing of ours to act on.
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        services = dg.ComponentTree.from_module(ragspine_pipeline.services, project_root).build_defs()
    return location(services)


defs = code_location()
