"""Everything one evaluated service contributes to a code location, read top to bottom: the golden path
(golden set → SUT replay → metrics and decision → gate checks → baseline), the extraction channels, the
nightly production path, the report, the alerts, then the jobs, schedule and sensors (the retry guard
of ``defs/retry_guard.py`` among them).
"""

from __future__ import annotations

import dagster as dg

from ragspine_pipeline.defs.alerts import alert_defs
from ragspine_pipeline.defs.automation import automation_defs
from ragspine_pipeline.defs.evaluation import evaluation_asset
from ragspine_pipeline.defs.extraction import extraction_assets
from ragspine_pipeline.defs.golden import golden_assets
from ragspine_pipeline.defs.io import IO_MANAGER_KEY, io_manager_from_env
from ragspine_pipeline.defs.production import production_assets
from ragspine_pipeline.defs.release import release_assets
from ragspine_pipeline.defs.reports import report_asset
from ragspine_pipeline.defs.retry_guard import retry_guard_sensor
from ragspine_pipeline.defs.service import Service


def service_definitions(service: Service) -> dg.Definitions:
    """The assets, checks, jobs, schedule and sensors of ``service``, and where its values between steps
    live (:data:`IO_MANAGER_KEY`; the other settings each step reads from the service itself). Its jobs
    execute as ``RAGSPINE_EXECUTOR`` says (``defs.executor``) in whichever project declares the service:
    the demo's code location and a team's own alike."""
    checks, baseline = release_assets(service)
    # A service without extraction channels has none of their assets or checks.
    scores, channels, alert, thresholds = extraction_assets(service) if service.extracts else [None] * 4
    alert_checks, alert_sensors = alert_defs(service)
    jobs, schedules, sensors = automation_defs(service)
    assets = [*golden_assets(service), evaluation_asset(service), baseline, scores, thresholds]
    assets += [*production_assets(service), report_asset(service)]
    return dg.Definitions(
        assets=[asset for asset in assets if asset is not None],
        asset_checks=[check for check in (checks, channels, alert, *alert_checks) if check is not None],
        jobs=jobs,
        schedules=schedules,
        sensors=[
            *sensors,
            *alert_sensors,
            retry_guard_sensor(service.node("retry_guard_sensor"), service.owns),
        ],
        resources={IO_MANAGER_KEY: io_manager_from_env()},
    )
