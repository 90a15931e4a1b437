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

Every instance must name its golden set, SUT and trace store, and a missing one is one line when the
definitions load. The demo instance (``services/demo/defs.yaml``) is declared the same way: each of its
settings reads the ``RAGSPINE_*`` variable named beside it (docs/operations.md), through template
variables of its own (``defs.env_resources``), as a deployment configured by environment variables always
has.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
from pydantic import Field, TypeAdapter, ValidationError

from ragspine_pipeline.component_settings import (
    AlertSettings,
    ExtractionSettings,
    JudgeSettings,
    TraceStoreSettings,
)
from ragspine_pipeline.defs.assemble import service_definitions
from ragspine_pipeline.defs.judge import JudgeResource
from ragspine_pipeline.defs.resources import (
    AlertsResource,
    EvalFiles,
    IndexManifestResource,
    SutResource,
    TraceStoreResource,
)
from ragspine_pipeline.defs.service import Service
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.sut import SutSettings, load_sut_settings

STARTER_GATES = Path(__file__).parent / "project_template" / "gates.yaml"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
REQUIRED = ("golden_set", "sut", "trace_store")
T = TypeVar("T")


class RagEvaluation(dg.Component, dg.Model, dg.Resolvable):
    """One evaluated RAG service: its golden replay and release decision, its nightly production
    sample, its report and its alerts."""

    name: str | None = Field(default=None, description="the service's name (default: this folder's)")
    prefixed: bool = Field(
        default=True,
        description="asset keys and names start with the name; false keeps the plain names an existing "
        "deployment's history has (one such instance per code location)",
    )
    golden_set: str | None = Field(default=None, description="the frozen golden set (JSONL)")
    evidence: str | None = Field(default=None, description="an evidence registry (JSONL)")
    sut: dict[str, Any] | str | None = Field(
        default=None,
        description="the system under test: kind http, python or recorded and its settings, or the path "
        "of a SUT file (as `ragspine-eval replay --sut` reads); kind reference: the demo's engine over "
        "index_manifest",
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
    s3_endpoint_url: str | None = Field(default=None, description="an S3-compatible endpoint (MinIO, ...)")
    s3_region: str | None = Field(default=None, description="the S3 region (default: boto3's own)")
    sample_size: int = Field(
        default=200,
        description="production traces scored per night (with a production.sample target in the gates "
        "config: the fewest, the target sizes the night above it)",
    )
    sample_stratify: str | None = Field(
        default=None, description="the tag dimension the nightly sample is stratified on"
    )
    sample_shards: int = Field(default=1, description="steps one day of traces is sampled in (1-256)")
    nightly_at: str = Field(default="02:00", description="HH:MM UTC of the nightly run")
    replay_repeat: int = Field(
        default=1, description="replays of the golden set per run (> 1: per-case flakiness is reported)"
    )
    replay_max_failed_share: float = Field(
        default=0.0, description="share of cases the SUT may fail to answer (0-1)"
    )
    replay_reuse_answers: bool = Field(
        default=False,
        description="a new run reuses the answers earlier runs kept for the same SUT settings, release and "
        "index version, each reuse named in the decision; default: only a retry or re-execution of the "
        "same run does",
    )
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return definitions_of(self.service(Path(context.path), Path(context.project_root)))

    def service(self, folder: Path, project_root: Path) -> Service:
        """The service this declaration (its ``defs.yaml`` in ``folder``) describes; a missing or
        malformed setting is one line naming it and the file."""
        where = str(folder / "defs.yaml")
        _refuse_duplicate_keys(folder / "defs.yaml")
        name = self.name or folder.name
        if not NAME.fullmatch(name):
            raise InputError(where, f"name {name!r} is not a name (letters, digits and _)", field="name")
        for setting in REQUIRED:
            if getattr(self, setting) is None:
                raise InputError(
                    where, f"{setting} is not set: say which {setting.replace('_', ' ')} to evaluate"
                )
        hour, _, minute = self.nightly_at.partition(":")
        if not (hour.isdigit() and minute.isdigit() and int(hour) < 24 and int(minute) < 60):
            raise InputError(where, f"nightly_at {self.nightly_at!r} is not HH:MM", field="nightly_at")

        def path(value: str | None, default: str | None = None) -> str | None:
            if value is None:
                return default
            if "://" in value:
                return value
            return str((project_root / value).absolute())

        def home(*parts: str) -> str:
            return str((project_root / "var" / name).joinpath(*parts).absolute())

        def built(make: Callable[[], T], settings: dict[str, str]) -> T:
            """A resource from this declaration's settings (``settings``: the resource's field -> the
            setting that gives it); a value it refuses (a number out of range) is one line naming the
            setting and the file."""
            try:
                return make()
            except ValidationError as exc:
                error = exc.errors(include_url=False)[0]
                field = settings.get(str(error["loc"][0]), str(error["loc"][0])) if error["loc"] else None
                raise InputError(where, f"{field}: {error['msg']}", field=field) from None

        endpoint, region = self.s3_endpoint_url, self.s3_region
        work = path(self.work, home("work"))
        extraction = self.extraction
        files = built(
            lambda: EvalFiles(
                golden_path=path(self.golden_set),
                evidence_path=path(self.evidence),
                baseline_path=path(self.baseline, home("baseline.json")),
                reports_dir=path(self.reports, home("reports")),
                work_dir=work,
                s3_endpoint_url=endpoint,
                extraction_facts=path(extraction.facts),
                extraction_truth=path(extraction.truth),
                extraction_baseline=path(extraction.baseline, home("extraction", "baseline.json")),
                production_sample_size=self.sample_size,
                production_stratify=self.sample_stratify or None,
                production_shards=self.sample_shards,
            ),
            {"production_sample_size": "sample_size", "production_shards": "sample_shards"},
        )
        given = self.trace_store
        if isinstance(given, str):
            given = TraceStoreSettings(path=given)
        trace_store = TraceStoreResource(
            uri=path(given.path),
            endpoint_url=endpoint,
            region=region,
            format=given.format,
            citation_pattern=given.citation_pattern,
            citation_attribute=given.citation_attribute,
            version_attribute=given.version_attribute,
        )
        manifest = IndexManifestResource(uri=path(self.index_manifest), endpoint_url=endpoint, region=region)
        given = self.alerts
        alerts = built(
            lambda: AlertsResource(
                outbox_path=path(given.outbox, home("alerts", "outbox.jsonl")),
                **_given(
                    slack_channel=given.slack_channel,
                    runbook_url=given.runbook,
                    webserver_base_url=given.webserver_url,
                    reports_base_url=given.reports_url,
                    ttl_hours=given.ttl_hours,
                    service=name if self.prefixed else None,
                ),
            ),
            {"ttl_hours": "alerts.ttl_hours"},
        )
        judge = self.judge
        judged = built(
            lambda: JudgeResource(
                cache_uri=path(judge.cache, posixpath.join(work, "judge-cache")),
                cache_endpoint_url=endpoint,
                **_given(**judge.model_dump(exclude={"cache"})),  # each under the resource's own name
            ),
            {name: f"judge.{name}" for name in JudgeResource.model_fields},
        )
        service = Service(
            files=files,
            sut=built(
                lambda: self._sut(where, work, manifest, project_root),
                {"repeat": "replay_repeat", "max_failed_share": "replay_max_failed_share"},
            ),
            alerts=alerts,
            trace_store=trace_store,
            index_manifest=manifest,
            judge=judged,
            gates_config=Path(path(self.gates, str(STARTER_GATES))),
            name=name if self.prefixed else None,
            nightly_at=(int(hour), int(minute)),
        )
        # The runbook line of each alert stream lives in the service's own gates config (`alerts.runbook`).
        runbooks = dict(service.config().alerts.runbook)
        return dataclasses.replace(service, alerts=service.alerts.model_copy(update={"runbooks": runbooks}))

    def _sut(self, where: str, work: str, manifest: IndexManifestResource, project_root: Path) -> SutResource:
        """The SUT resource: ``kind: reference`` is the demo's engine over the index manifest (in
        process: nothing to keep), any other kind is declared by its settings."""
        replay = {
            "repeat": self.replay_repeat,
            "max_failed_share": self.replay_max_failed_share,
            "answers_dir": None if "://" in work else posixpath.join(work, "answers"),
            "reuse_answers": self.replay_reuse_answers,
        }
        if isinstance(self.sut, dict) and self.sut.get("kind") == "reference":
            uri = manifest.uri
            return SutResource(
                kind="reference", manifest_path=None if uri is None or "://" in uri else uri, **replay
            )
        if isinstance(self.sut, str):
            settings = load_sut_settings(project_root / self.sut)  # its own one-line errors name the file
        else:
            try:
                settings = TypeAdapter(SutSettings).validate_python(self.sut)
            except ValidationError as exc:
                error = exc.errors(include_url=False)[0]
                field = ".".join(str(part) for part in ("sut", *error["loc"]))
                raise InputError(where, error["msg"], field=field) from None
        return SutResource(kind="declared", settings_json=settings.model_dump_json(), **replay)


def _given(**settings: Any) -> dict[str, Any]:
    """The settings a declaration gives (neither None nor empty): a resource takes its own default for
    the others, so each default is stated once, on the resource."""
    return {key: value for key, value in settings.items() if value not in (None, "")}


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
