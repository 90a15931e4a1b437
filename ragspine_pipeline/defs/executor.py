"""How a launched run executes its steps (``RAGSPINE_EXECUTOR``): read by the code location when it
loads, and by the failure sensor, which revokes a Celery run's unfinished tasks."""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg

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
