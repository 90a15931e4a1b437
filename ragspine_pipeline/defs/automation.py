"""Jobs, the nightly schedule and the index-rebuild sensor.

Both the schedule and the sensor start **STOPPED**, Dagster's default: a deployment turns them on
deliberately (UI → Automation, or ``dg`` / GraphQL), so a fresh instance never starts evaluating a
production SUT by surprise. ``make run`` and ``make demo-regression`` run the same jobs directly.

Every run of these jobs carries ``dagster/retry_strategy: FROM_FAILURE`` (:data:`RETRY_TAGS`): when the
instance retries a failed run (``run_retries`` in the shipped ``dagster.yaml`` files: a run whose worker
died or that ran past its maximum runtime), the retry re-executes only the steps that did not succeed,
never the golden replay or a night's sample that was already done. It is Dagster's default strategy,
said here so that a changed default never re-runs a whole evaluation.
"""

import os

import dagster as dg

from ragspine_pipeline.defs.executor import executor_from_env
from ragspine_pipeline.defs.golden import INDEX_VERSION_TAG
from ragspine_pipeline.defs.resources import IndexManifestResource
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import ManifestMissing

RETRY_TAGS = {"dagster/retry_strategy": "FROM_FAILURE"}  # a retried run re-executes only what failed


def run_key(index_version: str) -> str:
    """One run per index version, ever: the daemon never launches a run key the sensor already used."""
    return f"index-{index_version}"


def sensor_interval(env: dict[str, str] | os._Environ = os.environ) -> int:
    """Seconds between two reads of the index manifest: ``RAGSPINE_REBUILD_SENSOR_INTERVAL_S`` (default
    60). A version published and replaced within one interval is never evaluated (it is named, see
    :func:`superseded`); a shorter interval misses fewer, at one manifest read per tick."""
    text = env.get("RAGSPINE_REBUILD_SENSOR_INTERVAL_S", "").strip() or "60"
    if not text.isdigit() or int(text) < 1:
        raise InputError(
            "RAGSPINE_REBUILD_SENSOR_INTERVAL_S", f"not a whole number of seconds >= 1: {text!r}"
        )
    return int(text)


def automation_defs(service: Service) -> tuple[list, list[dg.ScheduleDefinition], list[dg.SensorDefinition]]:
    """The service's jobs, its nightly schedule and its index-rebuild sensor."""
    key = service.key
    # Each job carries its executor: a project's own default (Dagster's is a process per step) never
    # decides how an evaluation runs.
    executor = executor_from_env()
    production = dg.AssetSelection.assets(key("production_traces"), key("production_metrics"))
    nightly_eval = dg.define_asset_job(
        service.node("nightly_eval"),
        selection=production | dg.AssetSelection.assets(key("slice_report")),
        description="Sample the previous day's production traces, score them reference-free, refresh the "
        "report.",
        run_tags=RETRY_TAGS,
        executor_def=executor,
    )
    reeval_on_index_rebuild = dg.define_asset_job(
        service.node("reeval_on_index_rebuild"),
        selection=dg.AssetSelection.assets(
            key("golden_set"),
            key("golden_traces"),
            key("metric_table"),
            *([key("extraction_scores")] if service.extracts else []),
        ).downstream()
        - production,
        description="Replay the frozen golden set against the SUT on the new index, score, decide, report; "
        "score the re-extracted documents' channels.",
        run_tags=RETRY_TAGS,
        executor_def=executor,
    )
    # Not partitioned, so it runs as launched (`dg launch --job …full_eval`, no partition to name): a
    # production day is `nightly_eval`'s, one run per day, and the report here shows the latest days.
    # The service's own assets only (what its sinks are built from), also for a service without a
    # prefix beside others in one code location.
    sinks = ["slice_report", "baseline", *(["extraction_baseline"] if service.extracts else [])]
    full_eval = dg.define_asset_job(
        service.node("full_eval"),
        selection=dg.AssetSelection.assets(*map(key, sinks)).upstream() - production,
        description="Everything but a production day, in one run: the golden replay, decision and "
        "baseline, the extraction channels and the report (with the latest production days). "
        "`nightly_eval` scores a production day.",
        run_tags=RETRY_TAGS,
        executor_def=executor,
    )
    # Daily (02:00 UTC unless the service says) for the previous day (the daily partitions end at yesterday).
    hour, minute = service.nightly_at
    nightly_eval_schedule = dg.build_schedule_from_partitioned_job(
        nightly_eval, hour_of_day=hour, minute_of_hour=minute
    )

    @dg.sensor(
        name=service.node("index_rebuild_sensor"),
        job=reeval_on_index_rebuild,
        minimum_interval_seconds=sensor_interval(),
    )
    def index_rebuild_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        """Request one `reeval_on_index_rebuild` run for every new `index_version` of the manifest.

        The cursor is the last index version a run was requested for; the manifest is read from a local
        path or `s3://`. A missing manifest or an unchanged version is a skip with its reason; an
        unreachable store or a malformed manifest fails the tick with a one-line error.

        Only the live index can be replayed: a version published and replaced between two ticks cannot
        be evaluated any more. It is never skipped silently: when the manifest lists its
        `previous_versions`, the run for the new version names those superseded since the cursor in
        its `ragspine/superseded_versions` tag, the tick logs them (`superseded`), and the run's Slack
        message says "index <v> was superseded by <w> before it was evaluated", once, whether the run
        ships, blocks or fails (`defs.alerts.queue_superseded`).
        """
        return rebuild_tick(context, service.index_manifest, service.key("metric_table"), service.name)

    jobs = [full_eval, reeval_on_index_rebuild, nightly_eval]
    return jobs, [nightly_eval_schedule], [index_rebuild_sensor]


def rebuild_tick(
    context: dg.SensorEvaluationContext,
    index_manifest: IndexManifestResource,
    metric_table: dg.AssetKey,
    service: str | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """One tick of the index-rebuild sensor against ``index_manifest``; a version some run evaluated
    (a ``metric_table`` materialisation names it: ``make run``, a run launched by hand) was not missed.
    The run's :data:`EVALUATION_TAG` names the ``service`` and the version: the run queue admits one
    run per value, so two services whose index versions share a name never wait for each other."""
    try:
        manifest = index_manifest.read()
    except ManifestMissing as exc:
        return dg.SkipReason(f"no index manifest yet: {exc}")
    version = manifest.index_version
    if version == context.cursor:
        return dg.SkipReason(f"index {version} was already evaluated (run key {run_key(version)})")
    tags = {
        INDEX_VERSION_TAG: version,
        EVALUATION_TAG: evaluation_tag(service, version),
        "ragspine/corpus_hash": manifest.corpus_hash or "",
    }
    evaluated = evaluated_versions(context.instance, metric_table)
    missed, note = superseded(context.cursor, manifest.previous_versions, evaluated)
    if missed:
        tags[SUPERSEDED_TAG] = ",".join(missed)[:1000]
    if note:
        context.log.warning(f"index {version}: {note}")
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=run_key(version), tags=tags)], cursor=version)


SUPERSEDED_TAG = "ragspine/superseded_versions"
# The run queue's unit (``tag_concurrency_limits`` of the shipped instance configs): one evaluation of a
# service's index version at a time.
EVALUATION_TAG = "ragspine/evaluation"


def evaluation_tag(service: str | None, index_version: str) -> str:
    """``support_bot@ix-0042`` (``@ix-0042`` for the unnamed service): one value per service and index."""
    return f"{service or ''}@{index_version}"


def evaluated_versions(instance: dg.DagsterInstance, metric_table: dg.AssetKey, limit: int = 100) -> set[str]:
    """The index versions the last ``limit`` evaluations of ``metric_table`` named."""
    records = instance.fetch_materializations(metric_table, limit=limit).records
    versions = set()
    for record in records:
        entry = (
            record.asset_materialization.metadata.get("index_version")
            if record.asset_materialization
            else None
        )
        if entry is not None:
            versions.add(str(entry.value))
    return versions


def superseded(
    cursor: str | None, previous: list[str], evaluated: set[str] | frozenset[str] = frozenset()
) -> tuple[list[str], str | None]:
    """The versions published after ``cursor`` and replaced before this tick (from the manifest's
    ``previous_versions``, oldest first) that no run evaluated (``evaluated``), and what to say about
    them (None: nothing was missed)."""
    if cursor is None:
        return [], None
    if cursor in previous:
        missed = [v for v in previous[previous.index(cursor) + 1 :] if v not in evaluated]
        if not missed:
            return [], None
        return missed, f"{len(missed)} version(s) replaced before they were evaluated: {', '.join(missed)}"
    if previous:
        missed = [v for v in previous if v not in evaluated]
        if not missed:
            return [], None
        return missed, (
            f"the manifest's history does not reach back to the last evaluated version {cursor}: "
            f"at least {len(missed)} version(s) were replaced unevaluated"
        )
    return [], (
        f"the manifest keeps no previous_versions: versions published after {cursor} and replaced "
        "before this tick cannot be named"
    )
