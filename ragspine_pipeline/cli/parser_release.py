"""The release path's subcommands of ``ragspine-eval`` (``cli.parser``): score, check-traces, replay,
golden, baseline, extraction, schema, init; and the span options the readers of traces share."""

from __future__ import annotations

import argparse
from typing import Any

from ragspine_pipeline.cli.args import POSITIVE, share

SCHEMA_TYPES = ("gold", "trace", "evidence", "manifest", "facts")  # ``cli.schema.RECORD_TYPES``


def add_schema(commands: Any) -> None:
    parser = commands.add_parser(
        "schema",
        help="the JSON Schema of a record type (golden case, trace, evidence chunk, manifest, facts)",
        description="Print the JSON Schema of a record type, derived from its contract model.",
    )
    parser.add_argument("type", choices=SCHEMA_TYPES, help="the record type")
    parser.set_defaults(run="ragspine_pipeline.cli.schema:run_schema")


def add_init(commands: Any) -> None:
    parser = commands.add_parser(
        "init",
        help="a new evaluation project for your service: golden-set template, gates, SUT settings",
        description="Exit 0 when the project was written, 2 when the folder exists and is not empty.",
    )
    parser.add_argument("folder", help="the new project's folder (created; must not hold anything)")
    parser.add_argument("--service", help="the service's name (default: the folder's, as an identifier)")
    parser.add_argument(
        "--sut-url",
        default="http://127.0.0.1:8080/answer",
        help="the URL your service answers questions at (written into sut.yaml)",
    )
    parser.set_defaults(run="ragspine_pipeline.cli.init:run_init")


def add_span_options(parser: argparse.ArgumentParser) -> None:
    """How a file (or day) of OpenTelemetry spans becomes traces: OTLP/JSON or the flat span table is
    told from the file itself; these say where a service's spans keep what the traces need."""
    group = parser.add_argument_group(
        "traces from OpenTelemetry / OpenInference spans",
        "OTLP/JSON and the flat span table are read as they are: spans grouped by trace id",
    )
    group.add_argument(
        "--citation-pattern",
        metavar="REGEX",
        help=r"the citations in the answer text: each match (its group, if any), e.g. '\[(\w+#\d+)\]'",
    )
    group.add_argument(
        "--citation-attribute", metavar="KEY", help="a span attribute holding the answer's citations"
    )
    group.add_argument(
        "--version-attribute",
        metavar="KEY",
        default="service.version",
        help="the span or resource attribute naming the index version (default: service.version)",
    )
    group.add_argument(
        "--case-id-attribute",
        metavar="KEY",
        help="the attribute carrying the golden case id (metadata.KEY: a metadata key); "
        "without it traces join their golden case on the question",
    )


def add_check_traces(commands: Any) -> None:
    parser = commands.add_parser(
        "check-traces",
        help="how many traces carry each field, and which metrics the file can and cannot measure",
        description="Exit 0 when some metric can be measured, 2 when no metric can use the file.",
    )
    parser.add_argument("trace", help="traces (JSONL, any supported dialect)")
    parser.add_argument("--gold", help="golden set: the golden run's metrics (default: the nightly ones)")
    parser.add_argument("--evidence", help="evidence registry (JSONL): adds the layered metrics")
    parser.add_argument("--config", help="gates config (YAML): its refusal phrases and snippet length")
    add_span_options(parser)
    parser.set_defaults(run="ragspine_pipeline.cli.check_traces:run_check_traces")


def add_score(commands: Any) -> None:
    score = commands.add_parser(
        "score",
        help="metrics, gates and the release decision for a gold file and a trace file",
        description="Exit 0 when the release ships, 1 when it is blocked, 2 when the input is unusable.",
    )
    score.add_argument(
        "--gold", required=True, help="golden set (JSONL or JSON array, any supported dialect)"
    )
    score.add_argument(
        "--trace",
        required=True,
        action="append",
        help="traces of the system under test (JSONL); give it N times for N replays of the golden set: "
        "the first decides, every one counts towards the per-case flakiness in the report; a file with no "
        "trace is unusable input",
    )
    score.add_argument("--k", type=POSITIVE, help="cut-off for recall@k (default: config, else 5)")
    score.add_argument(
        "--gates",
        help="complete gate set as name=value, e.g. precision=0.80,chr=0.75,under=0.05,over=0.10 (the "
        "direction is the metric's); overrides the config's "
        "(default: the gates of the dialects the data carries: precision, chr, under_refusal, "
        "over_refusal, compliance when the traces cite or retrieve; the QA gates and fabrication when "
        "the golden set has QA cases)",
    )
    score.add_argument(
        "--evidence", help="evidence registry (JSONL): adds the layered, permission-safe metrics"
    )
    score.add_argument("--config", help="gates config (YAML): gates, slice gate, k, required versions")
    score.add_argument(
        "--references",
        help="directory of reference texts, one per narrative_doc (DOC.txt or DOC.md): RAGSpine's "
        "answer_accuracy gate measures narrative answers against them (overrides the config's)",
    )
    score.add_argument(
        "--baseline",
        help="baseline file (JSON, keyed by mode; a path or s3://bucket/key): regressions block; read, "
        "compared and promoted under a lock (S3: conditional writes), so concurrent runs never lower it",
    )
    score.add_argument("--mode", help="baseline mode (default: golden)")
    score.add_argument(
        "--promote", action="store_true", help="after a shipping run, tighten the baseline (never loosens)"
    )
    score.add_argument("--run-id", help="identifier recorded in the decision (default: generated)")
    score.add_argument(
        "--release",
        help="the release these traces are of (version, image tag or commit; default: the one their "
        "replay record names, TRACE.replay.json). Paired baseline test: every run of the release that "
        "founded the reference pool joins it, blocked or not, so a pool that drew lucky runs comes back "
        "to where its release really is (each blocked run that joins is recorded in the baseline's "
        "pool_history); with no release known, no run is known to be of that release",
    )
    score.add_argument(
        "--index-version",
        help="the index the traces must come from: traces naming another index, or several, block "
        "(mixed_index_versions); without it, several index versions in the traces still block",
    )
    score.add_argument(
        "--format",
        choices=("json", "markdown", "ragspine", "ragspine-text"),
        default="json",
        help="json, markdown, or RAGSpine's QA report: its --report JSON (ragspine) or console lines "
        "(ragspine-text); the exit code is the same for every format",
    )
    score.add_argument("--out", help="write the report here instead of standard output")
    score.add_argument(
        "--explorer",
        metavar="PATH",
        help="also write the case explorer (one standalone HTML page: every case, its answer and its flip "
        "against the per-case outcomes the --baseline entry kept)",
    )
    add_span_options(score)
    score.set_defaults(run="ragspine_pipeline.cli.score:run_score")


def add_replay(commands: Any) -> None:
    parser = commands.add_parser(
        "replay",
        help="ask a system under test every golden question and write its traces (JSONL)",
        description="Exit 0 when the traces were written, 2 when the input is unusable or more cases "
        "failed than --max-failed-share allows (the answers received are kept with --answers). Kept "
        "answers are reused only for the same SUT settings, --index-version and --release: run again "
        "with the same ones, only the missing cases are asked; a new release is asked every case. "
        "OUT.replay.json records the replay and names every reused answer's replay; score names them "
        "in the decision.",
    )
    parser.add_argument("--gold", required=True, help="golden set (any supported dialect)")
    parser.add_argument(
        "--sut",
        required=True,
        help="the SUT's settings (YAML): kind http, python or recorded, and its fields",
    )
    parser.add_argument("--out", required=True, help="the traces, one per answered case (JSONL)")
    parser.add_argument(
        "--quarantine", help="answers the trace contract rejects (default: OUT.quarantine.jsonl)"
    )
    parser.add_argument(
        "--answers",
        help="folder keeping answers as they arrive: a re-run of the same release asks only the missing "
        "cases",
    )
    parser.add_argument(
        "--release",
        help="the release of the service being asked: its version, image tag or commit, e.g. "
        '"$GIT_COMMIT" (overrides the SUT file\'s release:). Kept answers are reused only for the same '
        "release; with neither --release nor --index-version, only within one replay",
    )
    parser.add_argument("--index-version", help="the index being evaluated (part of the answers' key)")
    parser.add_argument(
        "--reuse-answers",
        action="store_true",
        help="also reuse answers other replays kept for the same SUT settings, index version and release "
        "(needed only when neither --release nor --index-version is known, as each replay then keeps its "
        "answers to itself): each reuse is named in OUT.replay.json and the decision's warnings",
    )
    parser.add_argument(
        "--max-failed-share",
        type=share,
        default=0.0,
        help="share of cases that may fail to be asked, scored as missing (default 0: any failure fails)",
    )
    parser.add_argument(
        "--progress-every", type=float, default=5.0, help="seconds between progress lines (stderr)"
    )
    parser.set_defaults(run="ragspine_pipeline.cli.replay:run_replay")


def add_golden(commands: Any) -> None:
    gold = commands.add_parser("golden", help="freeze or verify the golden set").add_subparsers(
        dest="golden_command", required=True
    )
    freeze = gold.add_parser("freeze", help="write G.lock: version, content hash, approver, time")
    freeze.add_argument("--gold", required=True)
    freeze.add_argument("--version", required=True, dest="golden_version")
    freeze.add_argument("--approved-by", required=True)
    freeze.set_defaults(run="ragspine_pipeline.cli.golden:run_freeze")
    verify = gold.add_parser(
        "verify", help="exit 0 when the content matches the lock, 1 when it changed, 2 when there is no lock"
    )
    verify.add_argument("--gold", required=True)
    verify.set_defaults(run="ragspine_pipeline.cli.golden:run_verify")


def add_baseline(commands: Any) -> None:
    baseline = commands.add_parser(
        "baseline", help="change a baseline value by hand, on the record (who, when, why, the value before)"
    ).add_subparsers(dest="baseline_command", required=True)
    setting = baseline.add_parser(
        "set",
        help="set one listed value of a mode's entry (to lower a bar on purpose) and record the change",
        description="Set one value the baseline lists, under the same lock as the ratchet, and append "
        "who ($RAGSPINE_ACTOR, else $USER, else $LOGNAME), when, why and the value before to the entry's "
        "history; every later decision warns about it while it stands. Exit 0 when it is set (or already "
        "was), 2 when the input is unusable.",
    )
    setting.add_argument("--baseline", required=True, help="baseline file (JSON): a path or s3://bucket/key")
    setting.add_argument("--mode", help="the entry's mode (default: golden)")
    setting.add_argument(
        "--metric", required=True, help="a metric the entry lists (names as in --gates), or fabrication_count"
    )
    setting.add_argument(
        "--to", required=True, help="the new value: a rate from 0 to 1, a judged score from 1 to 5, a count"
    )
    setting.add_argument("--reason", required=True, help="why, on one line (kept in the history)")
    setting.set_defaults(run="ragspine_pipeline.cli.baseline:run_set")


def add_extraction(commands: Any) -> None:
    parser = commands.add_parser(
        "extraction",
        help="score extracted workbook cells (value, colours, merged headers) against ground truth",
        description="Exit 0 when every channel in the baseline holds, 1 when one is below its threshold, "
        "2 when the input is unusable.",
    )
    parser.add_argument("--facts", required=True, help="extraction facts (JSONL, one cell per line)")
    parser.add_argument(
        "--truth", required=True, help='ground truth (JSON array of cells, or {"cells": [...]})'
    )
    parser.add_argument(
        "--baseline", help="thresholds per channel (JSON object); a missing file checks nothing"
    )
    parser.add_argument(
        "--promote", action="store_true", help="after a passing run, raise the thresholds (never lowers)"
    )
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    parser.add_argument("--out", help="write the report here instead of standard output")
    parser.set_defaults(run="ragspine_pipeline.cli.extraction:run_extraction")
