"""One production night's summary, Dagster-free: what the nightly ``production_metrics`` asset
(``defs.production``) writes as ``production/<day>.json`` in the reports folder, and what
``ragspine-eval production backfill`` writes for the nights before a deployment existed.

    history = read_summaries(summaries_folder(reports), settings.history_nights, before=day)
    traces = sample_traces(sample.records, scratch)          # the day's seeded, redacted sample
    result = night_summary(day, mark_refusals(traces, ...), evidence, config.required_versions,
                           config.citations_are_retrieved)
    plan, night = night_tests(result, history, settings, fixed_sample_size)
    summaries_folder(reports).write_text(summary_name(day), summary_document(result), "summary")
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from ragspine_pipeline.contracts.columns import load_traces
from ragspine_pipeline.contracts.schemas import TRACE_SCHEMA
from ragspine_pipeline.decision.gates import canonical_keys
from ragspine_pipeline.files import write_jsonl
from ragspine_pipeline.metrics import Scope
from ragspine_pipeline.scoring.drop_settings import DropSettings
from ragspine_pipeline.scoring.production import production_metrics
from ragspine_pipeline.scoring.sample_plan import SamplePlan, nightly_sample_plan
from ragspine_pipeline.scoring.significance import FrozenLevel, NightTests, drop_tests
from ragspine_pipeline.sources.objects import ObjectFolder

DAY_FILE = re.compile(r"\d{4}-\d{2}-\d{2}\.json")


def summaries_folder(reports: ObjectFolder) -> ObjectFolder:
    """Where the daily summaries live: ``production/`` in the reports folder."""
    return reports.child("production")


def summary_name(day: str) -> str:
    """The summary file of ``day`` in :func:`summaries_folder`."""
    return f"{day}.json"


def read_summaries(folder: ObjectFolder, days: int = 14, before: str | None = None) -> list[dict]:
    """The latest ``days`` daily summaries in ``folder`` (those before day ``before`` when given), oldest
    first, under their metrics' current names: what a night's drop tests compare with."""
    names = [name for name in folder.names(".json") if DAY_FILE.fullmatch(name)]
    names = [name for name in names if before is None or name[:10] < before][-days:]
    return [current_names(folder.read_json(name, "production summary")) for name in names]


def current_names(summary: dict) -> dict:
    """A daily summary with its metrics under their current names: a night written before a metric was
    renamed (``compliance``, ``citation_validity``, …) still counts as a trailing night of its metric."""
    slices = {
        dimension: {
            value: {**entry, "metrics": canonical_keys(entry.get("metrics") or {}, Scope.PRODUCTION)}
            for value, entry in values.items()
        }
        for dimension, values in (summary.get("slices") or {}).items()
    }
    metrics = canonical_keys(summary.get("metrics") or {}, Scope.PRODUCTION)
    return {**summary, "metrics": metrics, **({"slices": slices} if "slices" in summary else {})}


def sample_traces(records: list[dict], scratch: Path) -> pa.Table:
    """The sampled ``records`` as canonical trace rows; written to ``scratch/sample.jsonl`` on the way
    (the file the nightly path keeps in its work folder)."""
    path = Path(scratch) / "sample.jsonl"
    write_jsonl(records, path, "trace sample")
    return load_traces(path).table.cast(TRACE_SCHEMA)


def night_summary(
    day: str,
    traces: pa.Table,
    evidence: pa.Table | None,
    required_versions: Sequence[str],
    citations_are_retrieved: bool = False,
) -> dict:
    """The night's reference-free metrics (``traces`` with refusals marked): ``{"day": day, ...}``."""
    scored = production_metrics(
        traces,
        evidence,
        required_versions=required_versions,
        citations_are_retrieved=citations_are_retrieved,
    )
    return {"day": day, **scored.to_dict()}


def night_tests(
    result: dict,
    history: Sequence[dict],
    settings: DropSettings,
    fixed_sample_size: int,
    incidents: Mapping[str, FrozenLevel] | None = None,
    accepted: Mapping[str, str] | None = None,
) -> tuple[SamplePlan, NightTests]:
    """Add the night's sample plan (``sample_size``) and its drop tests against the earlier nights'
    summaries in ``history`` (``drop_tests``, with the open ``incidents``' levels and the ``accepted``
    ones) to ``result``, and return both."""
    # The plan the sample was drawn with: the same function of the same earlier nights.
    plan = nightly_sample_plan(history, settings, fixed_sample_size)
    result["sample_size"] = plan.to_dict()
    night = drop_tests(result, history, settings, incidents, accepted)
    result["drop_tests"] = night.to_dict()
    return plan, night


def summary_document(result: dict) -> str:
    """A summary as the JSON text it is kept as: indented, UTF-8 as is, one final newline; NaN or
    infinity is a bug and raises."""
    return json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
