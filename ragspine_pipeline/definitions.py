"""The ragspine_pipeline code location: every evaluated service declared under
``ragspine_pipeline/services`` (a ``defs.yaml`` each, built by the ``RagEvaluation`` component), how a
run executes its steps, and where values between steps live. ``dg dev`` / ``dg check defs`` and
``make run`` load this module (``[tool.dg.project]`` in pyproject.toml).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from ragspine_pipeline.defs.executor import executor_from_env
from ragspine_pipeline.defs.io import ObjectStoreIOManager


def io_manager_from_env(env: Mapping[str, str] = os.environ) -> ObjectStoreIOManager:
    """Where values between steps live: ``RAGSPINE_IO_URI`` (``s3://bucket/prefix`` when steps run on
    several hosts; ``RAGSPINE_S3_ENDPOINT_URL`` for an S3-compatible store), else the instance's
    storage directory."""
    return ObjectStoreIOManager(
        base_uri=env.get("RAGSPINE_IO_URI") or None,
        endpoint_url=env.get("RAGSPINE_S3_ENDPOINT_URL") or None,
    )


def location(services: dg.Definitions) -> dg.Definitions:
    """``services`` (the definitions the component built for each service) with how a run executes its
    steps and where values between steps live (written whole or not at all, so concurrent runs both
    finish)."""
    return dg.Definitions.merge(
        services,
        dg.Definitions(executor=executor_from_env(), resources={"io_manager": io_manager_from_env()}),
    )


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
