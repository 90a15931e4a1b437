"""The app a Celery worker runs when steps execute on Celery (``RAGSPINE_EXECUTOR=celery``).

Start workers on any host with the same environment as the code location (the ``RAGSPINE_*``
settings, ``DAGSTER_HOME`` holding the deployed instance's ``dagster.yaml``)::

    celery -A ragspine_pipeline.defs.celery_app worker --pool=solo --queues=dagster

``--pool=solo`` executes one step at a time in the worker process itself, as Dagster's step execution
expects (no forked pool children); the app leaves the worker's stdout and stderr alone
(``worker_redirect_stdouts``), so Dagster captures each step's output into its step logs. The broker
and the result backend come from ``RAGSPINE_CELERY_BROKER`` (e.g. ``pyamqp://user@host:5672/vhost``)
and ``RAGSPINE_CELERY_BACKEND`` (e.g. ``redis://host:6379/3``): the same variables the run that submits
the steps reads, so the two always agree, and a URL with a password never enters a run's config.
"""

from __future__ import annotations

import os

from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

BROKER_ENV = "RAGSPINE_CELERY_BROKER"
BACKEND_ENV = "RAGSPINE_CELERY_BACKEND"

_missing = [name for name in (BROKER_ENV, BACKEND_ENV) if not os.environ.get(name)]
if _missing:
    raise SystemExit(f"ragspine celery worker: set {' and '.join(_missing)}")

settings = CeleryExecutor.for_cli(
    broker=os.environ[BROKER_ENV],
    backend=os.environ[BACKEND_ENV],
    config_source={"worker_redirect_stdouts": False},
)
app = make_app(settings.app_args())
execute_plan = create_task(app)
