"""The optional LLM judge inside the golden and nightly runs (docs/metrics.md).

Judging is off unless ``RAGSPINE_JUDGE_BASE_URL`` and ``RAGSPINE_JUDGE_MODEL`` are set when a run
starts; the key (``RAGSPINE_JUDGE_API_KEY``) is read from the environment at that moment, never from
resource config, so it never reaches the UI, run metadata or reports. A judge that fails (endpoint
down, cache unreachable) fails only the ``judge_completed`` check (WARN): the deterministic metrics are
produced as usual, and a gate on a judged metric then fails as "not measured".
"""

import os
from dataclasses import dataclass

import dagster as dg
from pydantic import Field

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.judge.cache import open_judgment_cache
from ragspine_pipeline.judge.client import Budget, JudgeClient, JudgeEndpoint
from ragspine_pipeline.judge.prompts import DEFAULT_MAX_INPUT_CHARS, JudgeItem
from ragspine_pipeline.judge.report import judge_report, judged_metrics
from ragspine_pipeline.judge.run import JudgeRun, JudgeSettings, parse_thresholds, run_judge
from ragspine_pipeline.sources.errors import SourceError

JUDGE_CHECK = "judge_completed"


# Concurrency pools of the heavy steps. A deployed instance limits them across runs (``concurrency.pools``
# in deploy/postgres/dagster.yaml: one step at a time by default); the embedded one does not.
JUDGE_POOL = "llm_judge"  # the nightly judge step: the judge's API budget and rate limits are shared
TRACE_SCAN_POOL = "trace_scan"  # a full read of one day of production traces
POOLS = (TRACE_SCAN_POOL, JUDGE_POOL)
# One service's evaluation — golden replay, scoring and decision, gate checks, release alert, baseline
# promotion — is one pool of one slot on every instance (``<service>__evaluation`` for a named service):
# the steps of two runs of the service never run at the same time, whoever launched them. A step has one
# pool, so the golden evaluation's judge calls are limited by this pool, not by llm_judge.
EVALUATION_POOL = "evaluation"
EVALUATION_SLOTS = 1
# What a deployment sets once, before its processes start (a named service adds its own
# ``<service>__evaluation``): ``ragspine-eval deploy check`` looks for each.
DEPLOYED_POOLS = (*POOLS, EVALUATION_POOL)


class JudgeResource(dg.ConfigurableResource):
    """How the judge is used when it is configured (the endpoint itself comes from the environment)."""

    repeat: int = Field(default=1, ge=1, description="judgments per model; the median is kept")
    thresholds: str = Field(default="", description="pass thresholds, metric=score,... (default 3)")
    max_calls: int | None = Field(default=None, ge=1, description="budget per run: judge calls")
    max_tokens: int | None = Field(
        default=None, ge=1, description="budget per run: tokens, each call checked on its estimate"
    )
    max_input_chars: int = Field(
        default=DEFAULT_MAX_INPUT_CHARS, ge=1, description="longest prompt input sent, per field (cut beyond)"
    )
    cache_uri: str | None = Field(default=None, description="judgment cache: a directory or s3://…")
    cache_endpoint_url: str | None = None
    production_sample: int = Field(default=50, ge=0, description="nightly traces judged (0: none)")
    seed: int = Field(default=0, description="seed of the bootstrap intervals")


@dataclass(frozen=True)
class JudgeOutcome:
    """``status``: ``off`` (not configured), ``ok`` or ``failed`` (``reason`` says why)."""

    status: str
    run: JudgeRun | None = None
    report: dict | None = None
    reason: str | None = None

    @property
    def metrics(self) -> dict[str, float]:
        return {} if self.run is None or self.status != "ok" else judged_metrics(self.run)


def judge_step(
    judge: JudgeResource, items: list[JudgeItem], tags: dict[str, list[tuple[str, str]]], log
) -> JudgeOutcome:
    """Judge ``items`` when a judge is configured; never raises for the judge's own faults."""
    try:
        endpoint = JudgeEndpoint.from_env(os.environ)
        if endpoint is None:
            return JudgeOutcome("off")
        settings = JudgeSettings(
            repeat=judge.repeat,
            thresholds=parse_thresholds(judge.thresholds),
            seed=judge.seed,
            max_input_chars=judge.max_input_chars,
        )
        cache = (
            open_judgment_cache(judge.cache_uri, endpoint_url=judge.cache_endpoint_url)
            if judge.cache_uri
            else None
        )
        client = JudgeClient(endpoint, Budget(max_calls=judge.max_calls, max_tokens=judge.max_tokens))
        run = run_judge(items, settings, client, cache)
    except (ValueError, InputError, SourceError) as exc:
        log.warning(f"the judge step failed: {exc}")
        return JudgeOutcome("failed", reason=str(exc))
    report = judge_report(run, tags=tags)
    if run.failed or (items and run.nothing_judged):  # a configured judge that judged nothing failed
        reason = run.failed or run.nothing_judged
        log.warning(f"the judge step failed: {reason}")
        return JudgeOutcome("failed", run, report, reason)
    if run.truncated:
        log.warning(f"{len(run.truncated)} judge input(s) cut to {judge.max_input_chars} characters")
    return JudgeOutcome("ok", run, report)


def judge_check(outcome: JudgeOutcome, asset: dg.AssetKey) -> dg.AssetCheckResult:
    """The ``judge_completed`` check (WARN): fails when a configured judge could not judge."""
    usage = {} if outcome.run is None else outcome.run.usage
    return dg.AssetCheckResult(
        check_name=JUDGE_CHECK,
        asset_key=asset,
        passed=outcome.status != "failed",
        severity=dg.AssetCheckSeverity.WARN,
        description=None if outcome.reason is None else f"the judge step failed: {outcome.reason}"[:1000],
        metadata={
            "status": outcome.status,
            "calls": usage.get("calls", 0),
            "tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
            "cache_hits": 0 if outcome.run is None else outcome.run.cache["hits"],
        },
    )


def judge_check_spec(asset: dg.AssetKey) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        JUDGE_CHECK, asset=asset, description="the LLM judge ran when configured (WARN, never blocks)"
    )
