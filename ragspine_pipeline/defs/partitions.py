"""The production days of a service: daily partitions that start where its trace store starts.

A partition is one day of production traces (`dt=YYYY-MM-DD` in the trace store), the last one
yesterday (UTC): a day is evaluated once it is complete. The first one is, in this order:

1. `RAGSPINE_PARTITIONS_START` (`YYYY-MM-DD`), when set: what a deployment should set, so the partition
   set never depends on what the store holds when the code location loads;
2. otherwise the first `dt=` day of the service's own trace store, read once when the definitions load
   (a folder listing, or one S3 listing of the `dt=` prefixes, not retried);
3. otherwise (an empty or absent store, or one that cannot be listed) yesterday: a new deployment shows
   no partition it has no traces for, instead of hundreds of "missing" ones.

A store whose old days are deleted (retention) moves the start forward with them; days before the
start are no longer offered in the UI, and their materialisations stay in the instance's history.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg

from ragspine_pipeline.defs.resources import TraceStoreResource
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError

START_SETTING = "RAGSPINE_PARTITIONS_START"
log = logging.getLogger(__name__)


def partitions_start(
    store: TraceStoreResource, env: Mapping[str, str] = os.environ, today: date | None = None
) -> date:
    """The first production day (see the module docstring); never later than yesterday."""
    yesterday = (today or datetime.now(UTC).date()) - timedelta(days=1)
    text = env.get(START_SETTING, "").strip()
    if text:
        try:
            return date.fromisoformat(text)
        except ValueError:
            raise InputError(START_SETTING, f"not a date YYYY-MM-DD: {text!r}") from None
    resource = store.model_copy(update={"max_attempts": 1})  # loading the definitions waits for no retry
    try:
        days = resource.open().days()
    except (InputError, SourceError) as exc:
        if "://" not in resource.uri and not Path(resource.uri).exists():
            return yesterday  # a store not written yet: a new deployment, nothing to warn about
        log.warning(
            "daily partitions start yesterday: the trace store could not be listed (%s); set %s",
            exc,
            START_SETTING,
        )
        return yesterday
    return min(date.fromisoformat(days[0]), yesterday) if days else yesterday


def daily_partitions(
    store: TraceStoreResource, env: Mapping[str, str] = os.environ, today: date | None = None
) -> dg.PartitionsDefinition:
    """One partition per production day of the service whose traces ``store`` holds, from
    `partitions_start` to yesterday (UTC)."""
    start = partitions_start(store, env, today)
    return dg.DailyPartitionsDefinition(start_date=start.isoformat(), end_offset=0)
