"""Office-document extraction channels: scores, one check per channel, the alert, and the thresholds
file that only ratchets up.

``extraction_scores`` reads the parser's facts (a local file or ``s3://`` through the trace store's
endpoint) and the curated ground truth, and scores ``cell_value``, ``color_mapping`` and
``header_attribution``. ``extraction_channels`` fails (ERROR) for a channel strictly below its
threshold; ``extraction_alert`` (WARN) announces a new regression or a recovery in Slack;
``extraction_baseline`` raises the thresholds only after a run in which every channel held. A service
that names no facts and truth has none of these (``Service.extracts``); one whose truth file does not
exist (yet) records that, and its checks pass.

The channel checks do not block: ``slice_report`` reads the channels (a true edge in the asset graph)
and must be written precisely when a channel falls. A failed channel is a red ERROR check on
``extraction_scores`` and one alert; it is not a release gate, so it neither blocks the release nor
fails the run, and it never raises a threshold.
"""

from pathlib import Path

import dagster as dg

from ragspine_pipeline.alerts.builders import gate_alert
from ragspine_pipeline.alerts.model import Finding
from ragspine_pipeline.contracts.extraction import load_truth
from ragspine_pipeline.decision import extraction_baseline as thresholds
from ragspine_pipeline.defs.io import IO_MANAGER_KEY
from ragspine_pipeline.defs.metadata import json_document, markdown_table, user_errors
from ragspine_pipeline.defs.resources import EvalFiles
from ragspine_pipeline.defs.retries import step_retries
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.files import VersionedFile
from ragspine_pipeline.reports.extraction import ExtractionResult
from ragspine_pipeline.scoring.extraction import CHANNELS
from ragspine_pipeline.sources.extraction_facts import read_facts
from ragspine_pipeline.sources.versioned import open_versioned

GROUP = "extraction"
STREAM = "extraction"


def channel_check(channel: str) -> str:
    return f"channel_{channel}"


def extraction_assets(service: Service) -> list:
    """The service's `extraction_scores` with its channel checks and alert, and `extraction_baseline`."""
    asset = service.key("extraction_scores")

    @dg.asset(
        key=asset, group_name=service.node(GROUP), io_manager_key=IO_MANAGER_KEY, retry_policy=step_retries()
    )
    def extraction_scores(context: dg.AssetExecutionContext) -> dg.Output[dict]:
        """Per-channel accuracy of the extracted facts against the ground truth, and the threshold check,
        as a small dict (what `extraction.json` holds, figures rounded) with the unrounded
        `accuracies` and the `failed` channels that the checks and the ratchet read.

        The facts belong to the live index build (its parser re-extracted the documents), so the index
        version is recorded with them and a new index that fails is announced again.
        """
        eval_files, trace_store, index_manifest = service.files, service.trace_store, service.index_manifest
        if not _configured(eval_files):
            return dg.Output({"configured": False}, metadata={"configured": False})
        baseline_path = eval_files.extraction_baseline
        with user_errors():
            facts = read_facts(
                eval_files.extraction_facts, endpoint_url=trace_store.endpoint_url, region=trace_store.region
            )
            truth = load_truth(eval_files.extraction_truth)
            listed = thresholds.load_thresholds(_thresholds_store(eval_files)) if baseline_path else None
        result = ExtractionResult.evaluate(facts, truth, listed, baseline_path)
        score = result.score
        if facts.invalid:
            context.log.warning(
                f"{len(facts.invalid)} malformed fact line(s) set aside, first: {facts.invalid[0]}"
            )
        data = {
            "configured": True,
            "run_id": context.run.run_id,
            "index_version": index_manifest.live_version(),
            "facts": eval_files.extraction_facts,
            "truth": eval_files.extraction_truth,
            **result.to_dict(),
        }
        with user_errors():
            report = json_document(data)
            uri = eval_files.publish(context.run.run_id, "extraction.json", report, "extraction report")
        baseline = result.baseline
        failed = [] if baseline is None else baseline.failed
        value = {
            **data,
            "accuracies": score.accuracies(),
            "thresholds": {} if baseline is None else dict(baseline.thresholds),
            "failed": [
                {"channel": f.channel, "accuracy": f.accuracy, "threshold": f.threshold, "delta": f.delta}
                for f in failed
            ],
        }
        limits = listed or {}
        rows = [
            (
                name,
                "n/a" if c.accuracy is None else f"{c.accuracy:.4f}",
                f"{c.correct} / {c.total}",
                limits.get(name, "—"),
            )
            for name, c in score.channels.items()
        ]
        return dg.Output(
            value,
            metadata={
                # A channel with nothing to measure has no accuracy: "n/a" (never a placeholder value).
                **{
                    f"{name}_accuracy": "n/a" if c.accuracy is None else c.accuracy
                    for name, c in score.channels.items()
                },
                "aligned": score.aligned,
                "invalid_facts": len(facts.invalid),
                "duplicates": facts.duplicates,
                "channels": dg.MetadataValue.md(
                    markdown_table(["channel", "accuracy", "correct", "threshold"], rows)
                ),
                # Not "path": the IO manager records the pickle's path under that name.
                "report_path": dg.MetadataValue.path(uri),
            },
        )

    @dg.multi_asset_check(
        specs=[
            dg.AssetCheckSpec(
                channel_check(channel),
                asset=asset,
                description=f"{channel} accuracy is not below its threshold (equal passes)",
            )
            for channel in CHANNELS
        ],
        name=service.node("extraction_channels"),
        ins={"extraction_scores": dg.AssetIn(asset)},
        retry_policy=step_retries(),
    )
    def extraction_channels(extraction_scores: dict):
        failed = {f["channel"] for f in extraction_scores.get("failed", [])}
        channels = extraction_scores.get("channels", {})
        limits = extraction_scores.get("thresholds", {})
        for channel in CHANNELS:
            measured = channels.get(channel, {})
            yield dg.AssetCheckResult(
                asset_key=asset,
                check_name=channel_check(channel),
                passed=channel not in failed,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={
                    "accuracy": measured.get("accuracy", "not configured"),
                    "total": measured.get("total", 0),
                    "threshold": limits.get(channel, "none"),
                },
            )

    @dg.asset_check(
        asset=asset,
        name="extraction_alert",
        description="announce an extraction channel below baseline, or its recovery",
        retry_policy=step_retries(),
    )
    def extraction_alert(
        context: dg.AssetCheckExecutionContext, extraction_scores: dict
    ) -> dg.AssetCheckResult:
        alerts = service.alerts
        if not extraction_scores["configured"]:
            return dg.AssetCheckResult(
                passed=True, metadata={"new_alert": "none (extraction not configured)"}
            )
        findings = [
            Finding(
                kind="channel",
                name=f["channel"],
                value=f["accuracy"],
                reference=f["threshold"],
                reference_kind="baseline",
                op=">=",
                delta=f["delta"],
                n=extraction_scores["channels"][f["channel"]]["total"],
                correct=extraction_scores["channels"][f["channel"]]["correct"],
            )
            for f in extraction_scores["failed"]
        ]
        alert = gate_alert(
            findings,
            service.stream(STREAM),
            "Extraction channels",
            run_id=extraction_scores.get("run_id"),
            index_version=extraction_scores.get("index_version"),
            webserver_base_url=alerts.webserver_base_url,
            runbook=alerts.runbook("extraction"),
            measured=extraction_scores.get("accuracies"),
        )
        return alerts.alert_check(alert, context.log)

    @dg.asset(
        key=service.key("extraction_baseline"),
        io_manager_key=IO_MANAGER_KEY,
        group_name=service.node(GROUP),
        ins={"extraction_scores": dg.AssetIn(asset)},
        retry_policy=step_retries(),
    )
    def extraction_baseline(extraction_scores: dict) -> dg.MaterializeResult:
        """The channel thresholds, raised to a passing run's unrounded accuracies (never lowered).

        A run with a channel below its threshold changes nothing and says which channels held it back.
        """
        eval_files = service.files
        path = eval_files.extraction_baseline
        if not path or not extraction_scores["configured"]:
            return dg.MaterializeResult(metadata={"promoted": False, "reason": "extraction not configured"})
        if extraction_scores["failed"]:
            below = ", ".join(
                f"{f['channel']} {f['accuracy']:.4f} < {f['threshold']:.4f}"
                for f in extraction_scores["failed"]
            )
            return dg.MaterializeResult(metadata={"promoted": False, "reason": f"below threshold: {below}"})
        accuracies, passed = extraction_scores["accuracies"], extraction_scores["pass"]
        with user_errors():
            store = _thresholds_store(eval_files)
            before = thresholds.load_thresholds(store)
            after = thresholds.promote(store, accuracies, passed=passed)
        changed = [(c, before.get(c, "—"), f"{v:.4f}") for c, v in after.items() if before.get(c) != v]
        return dg.MaterializeResult(
            metadata={
                "promoted": True,
                "changes": dg.MetadataValue.md(markdown_table(["channel", "before", "after"], changed)),
                "path": dg.MetadataValue.path(path),
            }
        )

    return [extraction_scores, extraction_channels, extraction_alert, extraction_baseline]


def _thresholds_store(eval_files: EvalFiles) -> VersionedFile:
    """The channel thresholds file: a local path (updated under a lock) or S3 (conditional writes)."""
    path = eval_files.extraction_baseline or ""
    return open_versioned(path, "extraction thresholds", endpoint_url=eval_files.s3_endpoint_url)


def _configured(eval_files: EvalFiles) -> bool:
    """Facts and truth are named and the truth exists (a deployment without extraction has neither)."""
    truth = eval_files.extraction_truth
    if not (eval_files.extraction_facts and truth):
        return False
    return truth.startswith("s3://") or Path(truth).exists()
