"""One evaluated service: where its inputs and outputs live, how to ask it, and what its definitions are
called.

Every asset, check, job, sensor and schedule of the code location is built for a :class:`Service`
(``defs.build``): its steps read the service's settings directly (they are the same configurable
objects the resources of ``defs.resources`` describe), so several services can live in one code
location without their settings meeting. A named service's asset keys carry its name as a prefix
(``support_bot/golden_set``) and its jobs, checks, sensors and schedules its name and two underscores
(``support_bot__nightly_eval``); the one unprefixed service of a code location (the demo's,
``prefixed: false``) keeps the plain names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from ragspine_pipeline.decision.config import EvalConfig, load_config
from ragspine_pipeline.defs.judge import JudgeResource
from ragspine_pipeline.defs.resources import (
    METRIC_SCOPE,
    AlertsResource,
    EvalFiles,
    IndexManifestResource,
    SutResource,
    TraceStoreResource,
)


@dataclass(frozen=True)
class Service:
    files: EvalFiles
    sut: SutResource
    alerts: AlertsResource
    trace_store: TraceStoreResource
    index_manifest: IndexManifestResource
    gates_config: Path
    judge: JudgeResource = field(default_factory=JudgeResource)
    name: str | None = None
    nightly_at: tuple[int, int] = (2, 0)  # (hour, minute) UTC of the nightly run, for the previous day

    @property
    def resources(self) -> dict[str, dg.ConfigurableResource]:
        """The settings as Dagster resources, by the keys the UI lists them under."""
        return {
            "eval_files": self.files,
            "sut": self.sut,
            "alerts": self.alerts,
            "trace_store": self.trace_store,
            "index_manifest": self.index_manifest,
            "judge": self.judge,
        }

    def key(self, asset: str) -> dg.AssetKey:
        """An asset's key: ``support_bot/<asset>`` for a named service."""
        return dg.AssetKey([self.name, asset] if self.name else [asset])

    def node(self, name: str) -> str:
        """The name of a job, check, sensor, schedule or op: ``support_bot__<name>`` for a named service."""
        return f"{self.name}__{name}" if self.name else name

    def owns(self, run: dg.DagsterRun) -> bool:
        """Whether ``run`` is this service's: one of its jobs, or a selection of its assets."""
        if self.name is None:
            return True
        if run.job_name.startswith(f"{self.name}__"):
            return True
        return any(key.path[0] == self.name for key in run.asset_selection or ())

    @property
    def extracts(self) -> bool:
        """Whether the service has extraction channels: its facts and ground truth are named. Without
        them it has no extraction assets, checks or alert at all (not checks that pass on nothing)."""
        return bool(self.files.extraction_facts and self.files.extraction_truth)

    @property
    def title(self) -> str:
        """What reports call the evaluation."""
        return f"{self.name} release evaluation" if self.name else "ragspine release evaluation"

    def stream(self, stream: str) -> str:
        """An alert stream of this service (its de-duplication key in the outbox)."""
        return f"{self.name}/{stream}" if self.name else stream

    def config(self) -> EvalConfig:
        """The committed gates config (gates, the nightly drop tests' settings, alert runbooks)."""
        from ragspine_pipeline.decision.evaluation import KNOWN_METRICS  # the scoring stack, loaded on use

        return load_config(self.gates_config, KNOWN_METRICS, METRIC_SCOPE)
