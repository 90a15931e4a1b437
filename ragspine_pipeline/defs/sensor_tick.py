"""One sensor tick without a daemon, recorded on the instance the way the daemon records it.

`make demo-regression` (and `python -m ragspine_pipeline.defs.local reeval`) has no daemon, yet its
run must look exactly like a deployed one: the sensor is evaluated through Dagster's own tick
evaluation, the tick is stored (the UI lists it under Automation → `index_rebuild_sensor`, with its
cursor, skip reason or requested run), and each requested run carries the tags a daemon-launched run
carries — `dagster/sensor_name`, `dagster/run_key`, `dagster/tick` — so the UI shows it as launched by
the sensor, and a daemon started later never launches the same run key again.

Dagster offers no public call to record a tick outside its daemon; this writes the tick through the
instance's schedule storage as the daemon does, on the pinned Dagster release (the tests read the
tick and the run back through the same instance).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.remote_origin import (
    InProcessCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG, TICK_ID_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.utils import make_new_run_id
from dagster._utils.error import serializable_error_info_from_exc_info

# The code location's name in workspace.yaml and [tool.dg.project]: ticks are found by the sensor's
# selector (location, repository, sensor name), whichever process recorded them.
LOCATION_NAME = "ragspine_pipeline"
DEFINITIONS_MODULE = "ragspine_pipeline.definitions"


@dataclass(frozen=True)
class RequestedRun:
    """A run the tick requested: its id (reserved by the tick) and every tag it is created with."""

    run_id: str
    run_key: str | None
    tags: dict[str, str]


@dataclass(frozen=True)
class SensorTick:
    """What one tick did: the runs it requested, or why it requested none."""

    tick_id: int
    skip_reason: str | None = None
    runs: list[RequestedRun] = field(default_factory=list)


def sensor_origin(sensor_name: str) -> RemoteInstigatorOrigin:
    """The sensor as this code location's instigator: its id and selector key its ticks."""
    location = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name=DEFINITIONS_MODULE), location_name=LOCATION_NAME
    )
    return RemoteInstigatorOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), sensor_name)


def tick_sensor(
    sensor: dg.SensorDefinition,
    instance: dg.DagsterInstance,
    *,
    cursor: str | None,
    resources: dict[str, object],
) -> SensorTick:
    """Evaluate ``sensor`` once from ``cursor`` and store the tick; return the runs to launch.

    A run key this sensor already launched is not requested again (the daemon's guarantee); a tick
    whose every request was such a key is a skip that says so. A sensor that raises records a failed
    tick and the error propagates.
    """
    origin = sensor_origin(sensor.name)
    tick = instance.create_tick(
        TickData(
            instigator_origin_id=origin.get_id(),
            instigator_name=sensor.name,
            instigator_type=InstigatorType.SENSOR,
            status=TickStatus.STARTED,
            timestamp=time.time(),
            selector_id=origin.get_selector().get_id(),
        )
    )
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=resources, sensor_name=sensor.name
    )
    try:
        data = sensor.evaluate_tick(context)
    except Exception:
        error = serializable_error_info_from_exc_info(sys.exc_info())
        instance.update_tick(tick.with_status(TickStatus.FAILURE, error=error))
        raise
    runs, used = [], []
    for request in data.run_requests or []:
        if request.run_key and _launched(instance, request.run_key):
            used.append(request.run_key)
            continue
        tags = {
            **request.tags,
            SENSOR_NAME_TAG: sensor.name,
            TICK_ID_TAG: str(tick.tick_id),
            **({RUN_KEY_TAG: request.run_key} if request.run_key else {}),
        }
        runs.append(RequestedRun(make_new_run_id(), request.run_key, tags))
    if runs:
        for run in runs:
            tick = tick.with_run_info(run.run_id, run.run_key)
        instance.update_tick(tick.with_status(TickStatus.SUCCESS, cursor=data.cursor))
        return SensorTick(tick.tick_id, runs=runs)
    reason = data.skip_message or (
        f"run key {', '.join(used)} already launched by this sensor" if used else "no run requested"
    )
    instance.update_tick(tick.with_status(TickStatus.SKIPPED, skip_reason=reason, cursor=data.cursor))
    return SensorTick(tick.tick_id, skip_reason=reason)


def _launched(instance: dg.DagsterInstance, run_key: str) -> bool:
    """Whether a run with ``run_key`` exists (launched by a daemon's tick, by this module's, or by the
    runner before its runs carried the sensor's name)."""
    return bool(instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1))
