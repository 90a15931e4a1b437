"""``ragspine_pipeline.RagEvaluation``: one evaluated service of a code location, declared in a
``defs.yaml``.

Each instance evaluates one service with its own golden set, system under test, production traces,
gates, baseline, reports and alerts. Its asset keys start with its name (``support_bot/golden_set``),
its jobs, checks, sensors and schedule carry it too (``support_bot__nightly_eval``), its alerts stream
and titles name it. ``dg scaffold defs ragspine_pipeline.RagEvaluation support_bot`` writes a
commented ``defs.yaml`` that loads as it is against the embedded demo.

Relative paths are relative to the project's root (where ``pyproject.toml`` is). Values may come from
the environment with Dagster's templating (``url: "{{ env.SUPPORT_BOT_URL }}"``); a SUT's header
values name their variables themselves (``Bearer ${SUPPORT_BOT_TOKEN}``) and are read only when a
replay starts, so a token never reaches the UI, run metadata, a report or the outbox.

The demo instance (``demo: true``) takes every setting it does not give from the environment variables
of docs/operations.md, as a deployment configured by environment variables always has; any other
instance must name its golden set, SUT and trace store, and a missing one is one line when the
definitions load.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field, TypeAdapter, ValidationError

from ragspine_pipeline.defs.assemble import service_definitions
from ragspine_pipeline.defs.env_resources import default_resources
from ragspine_pipeline.defs.judge import JudgeResource
from ragspine_pipeline.defs.resources import (
    AlertsResource,
    EvalFiles,
    IndexManifestResource,
    SutResource,
    TraceStoreResource,
    gates_config_path,
)
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.sut import SutSettings, load_sut_settings

STARTER_GATES = Path(__file__).parent / "project_template" / "gates.yaml"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
REQUIRED = ("golden_set", "sut", "trace_store")


class AlertSettings(dg.Model):
    """Where this service's alerts are kept and posted, and what they point to."""

    outbox: str | None = Field(default=None, description="default: var/<name>/alerts/outbox.jsonl")
    slack_channel: str | None = Field(default=None, description="default: SLACK_CHANNEL")
    runbook: str | None = Field(default=None, description="a runbook link shown in every alert")
    webserver_url: str | None = Field(default=None, description="the Dagster UI the alerts link to")
    reports_url: str | None = Field(default=None, description="where the reports folder is served")


class TraceStoreSettings(dg.Model):
    """Where a service's production traces land and in what form."""

    path: str = Field(description="a folder or s3:// prefix")
    format: Literal["jsonl", "otlp"] = Field(
        default="jsonl",
        description="jsonl: trace lines under dt=YYYY-MM-DD/; otlp: OpenTelemetry spans (OTLP/JSON, or a "
        "Parquet span table) under year=/month=/day=/... as the Collector's S3 exporter writes them, or dt=",
    )
    citation_pattern: str | None = Field(
        default=None, description=r"spans: the citations in the answer text, e.g. '\[(\w+#\d+)\]'"
    )
    citation_attribute: str | None = Field(default=None, description="spans: an attribute listing them")
    version_attribute: str = Field(
        default="service.version", description="spans: the attribute naming the index version"
    )


class RagEvaluation(dg.Component, dg.Model, dg.Resolvable):
    """One evaluated RAG service: its golden replay and release decision, its nightly production
    sample, its report and its alerts."""

    name: str | None = Field(default=None, description="the service's name (default: this folder's)")
    prefixed: bool = Field(
        default=True,
        description="asset keys and names start with the name; false keeps the plain names an existing "
        "deployment's history has (one such instance per code location)",
    )
    demo: bool = Field(default=False, description="settings not given come from the environment")
    golden_set: str | None = Field(default=None, description="the frozen golden set (JSONL)")
    evidence: str | None = Field(default=None, description="an evidence registry (JSONL)")
    sut: dict[str, Any] | str | None = Field(
        default=None,
        description="the system under test: kind http, python or recorded and its settings, or the path "
        "of a SUT file (as `ragspine-eval replay --sut` reads)",
    )
    trace_store: str | TraceStoreSettings | None = Field(
        default=None,
        description="production traces: a folder or s3:// prefix of dt=YYYY-MM-DD/ trace lines, or "
        "{path, format: otlp, ...} for OpenTelemetry spans as the Collector writes them",
    )
    index_manifest: str | None = Field(default=None, description="the index manifest the sensor watches")
    gates: str | None = Field(default=None, description="the gates config (default: the starter gates)")
    baseline: str | None = Field(default=None, description="default: var/<name>/baseline.json")
    reports: str | None = Field(default=None, description="default: var/<name>/reports")
    work: str | None = Field(default=None, description="default: var/<name>/work")
    s3_endpoint_url: str | None = None
    sample_size: int = Field(
        default=200,
        ge=1,
        description="production traces scored per night (with a production.sample target in the gates "
        "config: the fewest, the target sizes the night above it)",
    )
    nightly_at: str = Field(default="02:00", description="HH:MM UTC of the nightly run")
    replay_max_failed_share: float = Field(default=0.0, ge=0, le=1)
    replay_reuse_answers: bool = Field(
        default=False,
        description="a new run reuses the answers earlier runs kept for the same SUT settings, release and "
        "index version, each reuse named in the decision; default: only a retry or re-execution of the "
        "same run does",
    )
    alerts: AlertSettings = Field(default_factory=AlertSettings)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return definitions_of(self.service(Path(context.path), Path(context.project_root)))

    def service(self, folder: Path, project_root: Path, env: Mapping[str, str] = os.environ) -> Service:
        """The service this declaration (its ``defs.yaml`` in ``folder``) describes; a missing or
        malformed setting is one line naming it and the file. A demo instance reads the settings it does
        not give from ``env``."""
        where = str(folder / "defs.yaml")
        _refuse_duplicate_keys(folder / "defs.yaml")
        name = self.name or folder.name
        if not NAME.fullmatch(name):
            raise InputError(where, f"name {name!r} is not a name (letters, digits and _)", field="name")
        if not self.demo:
            for setting in REQUIRED:
                if getattr(self, setting) is None:
                    raise InputError(
                        where, f"{setting} is not set: say which {setting.replace('_', ' ')} to evaluate"
                    )
        base = default_resources(env) if self.demo else None

        def path(value: str | None, default: str) -> str:
            if value is None:
                return default
            if "://" in value:
                return value
            return str((project_root / value).absolute())

        def home(*parts: str) -> str:
            return str((project_root / "var" / name).joinpath(*parts).absolute())

        files = EvalFiles(
            golden_path=path(self.golden_set, base and base["eval_files"].golden_path),
            evidence_path=path(self.evidence, base and base["eval_files"].evidence_path),
            baseline_path=path(
                self.baseline, base["eval_files"].baseline_path if base else home("baseline.json")
            ),
            reports_dir=path(self.reports, base["eval_files"].reports_dir if base else home("reports")),
            work_dir=path(self.work, base["eval_files"].work_dir if base else home("work")),
            s3_endpoint_url=self.s3_endpoint_url or (base and base["eval_files"].s3_endpoint_url),
            production_sample_size=self.sample_size
            if base is None or "sample_size" in self.model_fields_set
            else base["eval_files"].production_sample_size,
            **(
                {}
                if base is None
                else {
                    "extraction_facts": base["eval_files"].extraction_facts,
                    "extraction_truth": base["eval_files"].extraction_truth,
                    "extraction_baseline": base["eval_files"].extraction_baseline,
                    "production_stratify": base["eval_files"].production_stratify,
                    "production_shards": base["eval_files"].production_shards,
                }
            ),
        )
        sut = self._sut(where, files.work_dir, base, project_root)
        given = self.trace_store
        if isinstance(given, str):
            given = TraceStoreSettings(path=given)
        trace_store = (
            TraceStoreResource(
                uri=path(given.path, ""),
                endpoint_url=self.s3_endpoint_url,
                format=given.format,
                citation_pattern=given.citation_pattern,
                citation_attribute=given.citation_attribute,
                version_attribute=given.version_attribute,
            )
            if given is not None
            else base["trace_store"]
        )
        manifest = (
            IndexManifestResource(uri=path(self.index_manifest, ""), endpoint_url=self.s3_endpoint_url)
            if self.index_manifest is not None
            else (base["index_manifest"] if base else IndexManifestResource(uri=None))
        )
        given = self.alerts
        alerts = (base["alerts"] if base else AlertsResource()).model_copy(
            update={
                key: value
                for key, value in {
                    "outbox_path": path(
                        given.outbox, base["alerts"].outbox_path if base else home("alerts", "outbox.jsonl")
                    ),
                    "slack_channel": given.slack_channel,
                    "runbook_url": given.runbook,
                    "webserver_base_url": given.webserver_url,
                    "reports_base_url": given.reports_url,
                    "service": name if self.prefixed else None,
                }.items()
                if value is not None
            }
        )
        gates = (
            Path(path(self.gates, str(STARTER_GATES))) if (self.gates or not base) else gates_config_path()
        )
        hour, _, minute = self.nightly_at.partition(":")
        if not (hour.isdigit() and minute.isdigit() and int(hour) < 24 and int(minute) < 60):
            raise InputError(where, f"nightly_at {self.nightly_at!r} is not HH:MM", field="nightly_at")
        service = Service(
            files=files,
            sut=sut,
            alerts=alerts,
            trace_store=trace_store,
            index_manifest=manifest,
            judge=base["judge"] if base else JudgeResource(),
            gates_config=gates,
            name=name if self.prefixed else None,
            nightly_at=(int(hour), int(minute)),
        )
        # The runbook line of each alert stream lives in the service's own gates config (`alerts.runbook`).
        runbooks = dict(service.config().alerts.runbook)
        return dataclasses.replace(service, alerts=service.alerts.model_copy(update={"runbooks": runbooks}))

    def _sut(self, where: str, work: str, base: dict | None, project_root: Path) -> SutResource:
        if self.sut is None or (
            base is not None and isinstance(self.sut, dict) and self.sut.get("kind") == "reference"
        ):
            return base["sut"]  # the demo's built-in engine, or what the environment declares
        if isinstance(self.sut, str):
            settings = load_sut_settings(project_root / self.sut)  # its own one-line errors name the file
        else:
            try:
                settings = TypeAdapter(SutSettings).validate_python(self.sut)
            except ValidationError as exc:
                error = exc.errors(include_url=False)[0]
                field = ".".join(str(part) for part in ("sut", *error["loc"]))
                raise InputError(where, error["msg"], field=field) from None
        return SutResource(
            kind="declared",
            settings_json=settings.model_dump_json(),
            max_failed_share=self.replay_max_failed_share,
            answers_dir=None if "://" in work else posixpath.join(work, "answers"),
            reuse_answers=self.replay_reuse_answers,
        )


def definitions_of(service: Service) -> dg.Definitions:
    """The definitions of one declared service; the one unprefixed instance also lists its settings as
    the code location's resources, as the UI shows them."""
    defs = service_definitions(service)
    if service.name is None:
        return dg.Definitions.merge(defs, dg.Definitions(resources=service.resources))
    return defs


SCAFFOLD = """\
# One evaluated service (ragspine_pipeline.RagEvaluation). As written, it evaluates the embedded demo
# (`ragspine-eval demo init` writes var/demo): point each setting at your own service, then
# `dg check defs`.
type: ragspine_pipeline.RagEvaluation
attributes:
  # Asset keys start with the name ({name}/golden_set), jobs too ({name}__nightly_eval).
  name: {name}
  # The frozen golden set (`ragspine-eval golden freeze`); paths are relative to the project's root.
  golden_set: var/demo/golden/gold.jsonl
  # How to ask the service: kind http (url, headers with ${{TOKEN}} from the environment, body,
  # response mapping), python (module:function) or recorded (a trace file). See docs/your-service.md.
  sut:
    kind: python
    function: ragspine_pipeline.demo.sut:ask
    # The demo index of this project (not the one under $RAGSPINE_HOME, another service's on a host).
    options: {{manifest: var/demo/index/manifest.json}}
  # Production traces, dt=YYYY-MM-DD/*.jsonl[.gz]: a folder or an s3:// prefix.
  trace_store: var/demo/traces
  # The index manifest the rebuild sensor watches (optional).
  index_manifest: var/demo/index/manifest.json
  # The evidence registry that adds the layered metrics (optional).
  evidence: var/demo/evidence.jsonl
  # The release gates (default: the starter gates `ragspine-eval init` writes), e.g.:
  # gates: var/demo/gates.yaml
  # Where the baseline, reports and working files live (default: var/{name}/...).
  baseline: var/{name}/baseline.json
  reports: var/{name}/reports
  work: var/{name}/work
  alerts:
    outbox: var/{name}/alerts/outbox.jsonl
    # slack_channel: "#{name}-eval"        # default: SLACK_CHANNEL
    # runbook: https://wiki.example.com/{name}/evaluation
  nightly_at: "02:00"
"""


# Written by `dg scaffold defs` in a project `ragspine-eval init` made (its sut.yaml and golden set at the
# root): the project's own files, each service's outputs apart.
PROJECT_SCAFFOLD = """\
# One more evaluated service (ragspine_pipeline.RagEvaluation) of this project: as written it reads the
# project's golden set, gates, SUT and traces; point each at this service's own, then `dg check defs`.
type: ragspine_pipeline.RagEvaluation
attributes:
  # Asset keys start with the name ({name}/golden_set), jobs too ({name}__nightly_eval).
  name: {name}
  golden_set: golden/gold.jsonl
  gates: gates.yaml
  sut: sut.yaml                     # how to ask the service (docs/your-service.md)
  trace_store: traces               # production traces, dt=YYYY-MM-DD/*.jsonl[.gz] (or s3://bucket/prefix)
  # index_manifest: s3://bucket/index/manifest.json   # the rebuild sensor watches its index_version
  alerts:
    outbox: var/{name}/alerts/outbox.jsonl
    # slack_channel: "#{name}-eval"
  baseline: var/{name}/baseline.json
  reports: var/{name}/reports
  work: var/{name}/work
"""


def _refuse_duplicate_keys(path: Path) -> None:
    """A key given twice in ``path`` (any of its documents) is one line naming it: Dagster's own reading
    keeps the last value silently, so a setting written twice would change what is evaluated unseen."""
    import yaml

    from ragspine_pipeline import inputs

    if not path.is_file():
        return
    try:
        for _ in yaml.load_all(inputs.read_text(path, "component file"), Loader=inputs.StrictLoader):
            pass
    except inputs.DuplicateKeyError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise InputError(str(path), exc.problem or "a key is given twice", line) from None
    except yaml.YAMLError:
        return  # malformed YAML is Dagster's to report, with its own context


class RagEvaluationScaffolder(dg.Scaffolder):
    """Writes a commented defs.yaml under the new service's name: in a project ``ragspine-eval init``
    made, one that reads the project's own files; anywhere else one that evaluates the embedded demo."""

    def scaffold(self, request) -> None:
        folder = Path(request.target_path)
        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"\W", "_", folder.name)
        root = Path(request.project_root) if request.project_root is not None else None
        initialised = root is not None and (root / "sut.yaml").is_file() and (root / "golden").is_dir()
        text = (PROJECT_SCAFFOLD if initialised else SCAFFOLD).format(name=name)
        (folder / "defs.yaml").write_text(text, encoding="utf-8")


RagEvaluation = dg.scaffold_with(RagEvaluationScaffolder)(RagEvaluation)
