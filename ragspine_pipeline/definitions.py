"""The ragspine_pipeline code location: every asset, check, job, schedule, sensor and resource.

Read top to bottom: the golden path (golden set → SUT replay → metrics → decision → baseline), the
nightly production path, the report, the checks (release gates, alerts), then automation and
resources. ``dg dev`` / ``dg check defs`` load this module (``[tool.dg.project]`` in pyproject.toml).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg

from ragspine_pipeline.defs.alerts import (
    alert_outbox_flushed,
    evaluation_run_failure_sensor,
    evaluation_run_success_sensor,
    regression_alert,
)
from ragspine_pipeline.defs.automation import (
    full_eval,
    index_rebuild_sensor,
    nightly_eval,
    nightly_eval_schedule,
    reeval_on_index_rebuild,
)
from ragspine_pipeline.defs.evaluation import golden_evaluation
from ragspine_pipeline.defs.extraction import (
    extraction_alert,
    extraction_baseline,
    extraction_channels,
    extraction_scores,
)
from ragspine_pipeline.defs.golden import golden_set, golden_traces
from ragspine_pipeline.defs.io import ObjectStoreIOManager
from ragspine_pipeline.defs.judge import JudgeResource
from ragspine_pipeline.defs.production import production_metrics, production_traces
from ragspine_pipeline.defs.release import baseline, release_gates_check
from ragspine_pipeline.defs.reports import slice_report
from ragspine_pipeline.defs.resources import default_resources
from ragspine_pipeline.errors import InputError

EXECUTORS = ("in_process", "multiprocess", "celery")


def executor_from_env(env: Mapping[str, str] = os.environ) -> dg.ExecutorDefinition:
    """How a launched run executes its steps: ``RAGSPINE_EXECUTOR``.

    * ``in_process`` (the default): the steps in the run's own process — the embedded and dev set-ups,
      where starting a process and importing the code location for each step costs ~13 s a step.
    * ``multiprocess``: a process per step, on the run's host.
    * ``celery``: each step is a Celery task, executed by whichever worker takes it (``dagster-celery``,
      the ``deploy`` extra): broker and result backend from ``RAGSPINE_CELERY_BROKER`` and
      ``RAGSPINE_CELERY_BACKEND``, read when a run starts (never stored in the run's config); workers
      run ``ragspine_pipeline.defs.celery_app``.

    An unknown name is a one-line error when the definitions load.
    """
    name = env.get("RAGSPINE_EXECUTOR", "").strip() or "in_process"
    if name == "in_process":
        return dg.in_process_executor
    if name == "multiprocess":
        return dg.multiprocess_executor
    if name == "celery":
        try:
            from dagster_celery import celery_executor  # the deploy extra: only a Celery deployment needs it
        except ImportError:
            raise InputError(
                "RAGSPINE_EXECUTOR", "celery needs dagster-celery: pip install -e '.[deploy]'"
            ) from None

        return celery_executor.configured(
            {"broker": {"env": "RAGSPINE_CELERY_BROKER"}, "backend": {"env": "RAGSPINE_CELERY_BACKEND"}},
            name="celery",
        )
    raise InputError("RAGSPINE_EXECUTOR", f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")


def io_manager_from_env(env: Mapping[str, str] = os.environ) -> ObjectStoreIOManager:
    """Where values between steps live: ``RAGSPINE_IO_URI`` (``s3://bucket/prefix`` when steps run on
    several hosts; ``RAGSPINE_S3_ENDPOINT_URL`` for an S3-compatible store), else the instance's
    storage directory."""
    return ObjectStoreIOManager(
        base_uri=env.get("RAGSPINE_IO_URI") or None,
        endpoint_url=env.get("RAGSPINE_S3_ENDPOINT_URL") or None,
    )


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """The code location; tests pass their own resources (temp folders, a moto S3 endpoint)."""
    return dg.Definitions(
        assets=[
            golden_set,
            golden_traces,
            golden_evaluation,
            baseline,
            extraction_scores,
            extraction_baseline,
            production_traces,
            production_metrics,
            slice_report,
        ],
        asset_checks=[
            release_gates_check(),
            regression_alert,
            extraction_channels,
            extraction_alert,
            alert_outbox_flushed,
        ],
        jobs=[full_eval, reeval_on_index_rebuild, nightly_eval],
        schedules=[nightly_eval_schedule],
        sensors=[index_rebuild_sensor, evaluation_run_success_sensor, evaluation_run_failure_sensor],
        executor=executor_from_env(),
        # The judge is optional everywhere: a resource set without one gets the unconfigured default.
        # Values between steps are written whole or not at all, so concurrent runs both finish.
        resources={
            "io_manager": io_manager_from_env(),
            "judge": JudgeResource(),
            **(resources if resources is not None else default_resources()),
        },
    )


defs = build_definitions()
