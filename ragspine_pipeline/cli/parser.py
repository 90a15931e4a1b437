"""The ``ragspine-eval`` command line: every subcommand and its arguments.

Built on every start, ``--help`` and ``--version`` included, so this module imports only the standard
library and modules that do the same (``cli.args``, ``judge.prompts``, ``sources.strata``). A command's
implementation (pyarrow, pydantic, boto3, the openai SDK …) is imported when that command runs: each
subcommand's ``run`` names its handler as ``"module:function"`` and ``main`` imports it then. A command
that needs an optional extra names it (``extra="judge"``): without it, ``main`` prints one line naming
the extra and exits 2 (``cli.extras``).

A default that belongs to the core and would cost an import here is applied by the handler and only
named in the help (``tests/cli/test_parser.py`` keeps the two equal).
"""

from __future__ import annotations

import argparse
from datetime import date
from typing import Any

from ragspine_pipeline import __version__
from ragspine_pipeline.cli.args import share, whole_number
from ragspine_pipeline.judge.prompts import DEFAULT_MAX_INPUT_CHARS, JUDGED_METRICS, METRICS
from ragspine_pipeline.sources.strata import DEFAULT_FLOOR

DEMO_ROOT = "var/demo"

_POSITIVE = whole_number(1)
_NON_NEGATIVE = whole_number(0)
_COUNT = whole_number(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragspine-eval",
        description="Score a RAG service's traces against a golden set and decide whether it may ship.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_score(commands)
    _add_replay(commands)
    _add_golden(commands)
    _add_baseline(commands)
    _add_extraction(commands)
    _add_sample(commands)
    _add_production(commands)
    _add_plan(commands)
    _add_judge(commands)
    _add_demo(commands)
    _add_alerts(commands)
    _add_incidents(commands)
    _add_schema(commands)
    _add_check_traces(commands)
    _add_init(commands)
    _add_deploy(commands)
    return parser


SCHEMA_TYPES = ("gold", "trace", "evidence", "manifest", "facts")  # ``cli.schema.RECORD_TYPES``


def _add_schema(commands: Any) -> None:
    parser = commands.add_parser(
        "schema",
        help="the JSON Schema of a record type (golden case, trace, evidence chunk, manifest, facts)",
        description="Print the JSON Schema of a record type, derived from its contract model.",
    )
    parser.add_argument("type", choices=SCHEMA_TYPES, help="the record type")
    parser.set_defaults(run="ragspine_pipeline.cli.schema:run_schema")


def _add_init(commands: Any) -> None:
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


def _add_span_options(parser: argparse.ArgumentParser) -> None:
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


def _add_check_traces(commands: Any) -> None:
    parser = commands.add_parser(
        "check-traces",
        help="how many traces carry each field, and which metrics the file can and cannot measure",
        description="Exit 0 when some metric can be measured, 2 when no metric can use the file.",
    )
    parser.add_argument("trace", help="traces (JSONL, any supported dialect)")
    parser.add_argument("--gold", help="golden set: the golden run's metrics (default: the nightly ones)")
    parser.add_argument("--evidence", help="evidence registry (JSONL): adds the layered metrics")
    parser.add_argument("--config", help="gates config (YAML): its refusal phrases and snippet length")
    _add_span_options(parser)
    parser.set_defaults(run="ragspine_pipeline.cli.check_traces:run_check_traces")


def _add_score(commands: Any) -> None:
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
    score.add_argument("--k", type=_POSITIVE, help="cut-off for recall@k (default: config, else 5)")
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
    _add_span_options(score)
    score.set_defaults(run="ragspine_pipeline.cli.score:run_score")


def _add_replay(commands: Any) -> None:
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


def _add_golden(commands: Any) -> None:
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


def _add_baseline(commands: Any) -> None:
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


def _add_extraction(commands: Any) -> None:
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


def _add_sample(commands: Any) -> None:
    parser = commands.add_parser(
        "sample",
        help="a seeded, de-duplicated (optionally stratified) sample of one day of production traces",
        description="Exit 0 when the day was sampled (even if it is empty), 2 when the input is unusable.",
    )
    parser.add_argument("--source", required=True, help="trace store: a directory or s3://bucket/prefix")
    parser.add_argument("--date", required=True, help="the day to sample, YYYY-MM-DD")
    parser.add_argument("--n", required=True, type=_COUNT, help="sample size")
    parser.add_argument("--seed", required=True, type=int, help="sampling seed (same seed, same sample)")
    parser.add_argument("--stratify", metavar="DIM", help="stratify on this tag dimension (tags[DIM])")
    parser.add_argument(
        "--floor",
        type=_COUNT,
        default=DEFAULT_FLOOR,
        help=f"traces owed to each stratum when stratifying (default: {DEFAULT_FLOOR})",
    )
    parser.add_argument("--out", help="write the sample (JSONL) here instead of standard output")
    parser.add_argument(
        "--quarantine",
        help="write malformed lines here (JSONL; replaced when the pass completes, untouched if it fails)",
    )
    parser.add_argument(
        "--quarantine-max-bytes",
        type=_POSITIVE,
        metavar="BYTES",
        help="stop writing quarantine entries beyond this size; later bad lines are only counted "
        "(default 67,108,864)",
    )
    parser.add_argument("--endpoint-url", help="S3 endpoint (MinIO, LocalStack, ...) for an s3:// source")
    parser.add_argument(
        "--redact",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="redact personal data in the sampled traces (default: on)",
    )
    _add_store_format(parser)
    parser.set_defaults(run="ragspine_pipeline.cli.sample:run_sample")


def _add_store_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("jsonl", "otlp"),
        default="jsonl",
        help="jsonl: trace lines under dt=YYYY-MM-DD/; otlp: OpenTelemetry spans as the Collector writes "
        "them (OTLP/JSON under year=/month=/day=/..., or dt=YYYY-MM-DD/)",
    )
    _add_span_options(parser)


BACKFILL_DAYS = 90  # the most days one backfill fills (``cli.production.MAX_DAYS``)


def _backfill_days(raw: str) -> int:
    days = _POSITIVE(raw)
    if days > BACKFILL_DAYS:
        raise argparse.ArgumentTypeError(f"must be at most {BACKFILL_DAYS}")
    return days


def _add_production(commands: Any) -> None:
    production = commands.add_parser(
        "production", help="the nightly production summaries: fill in the nights before a deployment"
    )
    production_commands = production.add_subparsers(dest="production_command", required=True)
    parser = production_commands.add_parser(
        "backfill",
        help="write the nightly summaries (production/<day>.json) of earlier days from the trace store",
        description="For each of the --days days up to --until, oldest first, with traces in the store and "
        "no summary yet: the day's seeded, redacted sample, its metrics and drop tests, written where the "
        "nightly asset writes them, so that the first nights of a deployment have trailing nights to test "
        "against. No judge, no alerts. One line per day; exit 0, 2 when the input is unusable.",
    )
    parser.add_argument(
        "--days", required=True, type=_backfill_days, help=f"days to fill, 1 to {BACKFILL_DAYS}"
    )
    parser.add_argument("--until", metavar="YYYY-MM-DD", help="the last day filled (default: yesterday, UTC)")
    parser.add_argument(
        "--store",
        help="trace store: a directory or s3://bucket/prefix "
        "(default: $RAGSPINE_TRACE_STORE, else $RAGSPINE_HOME/traces)",
    )
    _add_store_format(parser)
    parser.add_argument(
        "--reports",
        help="reports folder, a directory or s3://: the summaries go to its production/ "
        "(default: $RAGSPINE_REPORTS, else var/reports)",
    )
    parser.add_argument(
        "--config",
        help="gates config (YAML): drop-test settings, required versions, refusal rule "
        "(default: $RAGSPINE_GATES_CONFIG, else the packaged demo gates)",
    )
    parser.add_argument(
        "--evidence",
        help="evidence registry (JSONL) (default: $RAGSPINE_EVIDENCE, else $RAGSPINE_HOME/evidence.jsonl, "
        "when it exists)",
    )
    parser.add_argument(
        "--sample-size",
        type=_POSITIVE,
        metavar="N",
        help="traces sampled a day, the floor of a production.sample target "
        "(default: $RAGSPINE_SAMPLE_SIZE, else 200)",
    )
    parser.add_argument("--seed", type=int, default=7, help="sampling seed, the nightly asset's (default: 7)")
    parser.add_argument(
        "--stratify",
        metavar="DIM",
        help="stratify the sample on this tag dimension (default: $RAGSPINE_SAMPLE_STRATIFY)",
    )
    parser.add_argument(
        "--force", action="store_true", help="re-fill days that have a summary (default: skip them)"
    )
    parser.set_defaults(run="ragspine_pipeline.cli.production:run_backfill")


PLAN_DESCRIPTION = """\
What a sample can detect: for the release gate on a golden set (--golden or --cases) and for the nightly
drop test (--nightly), one line each naming the smallest drop caught with --power, or with --drop the
sample size that drop needs. The models and their approximations: docs/nightly.md (What a night can
detect) and ragspine_pipeline/scoring/power.py. Exit 0; 2 on unusable input.
"""


def _add_plan(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="what a golden set or a nightly sample can detect, or the sample size a drop needs",
        description=PLAN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cases = parser.add_mutually_exclusive_group()
    cases.add_argument("--golden", metavar="FILE", help="a golden set: plan for its number of cases")
    cases.add_argument("--cases", type=_POSITIVE, metavar="N", help="plan for a golden set of N cases")
    parser.add_argument(
        "--baseline-test",
        choices=("paired", "strict"),
        default="paired",
        help="the release gate's baseline comparison (default: paired)",
    )
    parser.add_argument(
        "--flip-rate",
        type=share,
        metavar="F",
        help="share of cases an unchanged system flips in each direction between two runs (default 0.05)",
    )
    parser.add_argument("--nightly", action="store_true", help="plan for the nightly drop test")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="gates config (YAML): the nightly test's fdr and window and its production.sample target, "
        "the paired alpha and margin",
    )
    parser.add_argument(
        "--sample-size", type=_POSITIVE, metavar="N", help="traces scored a night (default 200)"
    )
    parser.add_argument(
        "--rate", type=share, metavar="P", help="the rate's level, lower is worse (default 0.9)"
    )
    parser.add_argument(
        "--tau2", type=float, metavar="T", help="between-day variance on the arcsine scale (default 0)"
    )
    parser.add_argument(
        "--alpha", type=share, help="the nightly test's per-test level (default: --fdr divided by --tests)"
    )
    parser.add_argument("--fdr", type=share, help="the night's false-discovery rate (default 0.02)")
    parser.add_argument(
        "--tests",
        type=_POSITIVE,
        metavar="M",
        help="tests a night, over the test's weight (default 10: six rates, three windows, all traffic; "
        "more with --slices)",
    )
    parser.add_argument(
        "--slices",
        type=_NON_NEGATIVE,
        default=0,
        metavar="K",
        help="slices tested a night besides all traffic, every tag dimension's values together (default 0); "
        "8 slices double the tests",
    )
    parser.add_argument(
        "--window", type=_POSITIVE, metavar="NIGHTS", help="trailing nights of the level (default 14)"
    )
    parser.add_argument("--power", type=share, help="the power asked for (default 0.8)")
    parser.add_argument(
        "--drop", type=share, metavar="D", help="print the sample size a drop of D (0.05: 5 points) needs"
    )
    parser.set_defaults(run="ragspine_pipeline.cli.plan:run_plan")


JUDGE_DESCRIPTION = """\
The judge is any OpenAI-compatible endpoint named by RAGSPINE_JUDGE_BASE_URL and RAGSPINE_JUDGE_MODEL
(comma-separated for an ensemble), with RAGSPINE_JUDGE_API_KEY. Without them the command refuses to run
(exit 2): nothing pretends to judge.

Exit codes: 0 judged and every --gates gate passes; 1 a gate fails (an unmeasured metric fails its
gate), the judge step failed (the endpoint could not be reached), or no judgment succeeded at all (every
call rejected, every call over the budget, nothing to judge): the report then says "pass": false and
why ("reason"); 2 unusable input or configuration. Some judgments failing (a 500, an unreadable reply,
calls the budget stopped) is not a failure by itself: they are counted and left out of every mean.

Cost is bounded before anything is sent: each prompt input (question, answer, context, reference) is cut
to --max-input-chars characters, and each cut is reported per case; a call whose estimated tokens do
not fit in what --max-tokens has left is not sent, and judging stops there. The limits default to
RAGSPINE_JUDGE_MAX_INPUT_CHARS, RAGSPINE_JUDGE_MAX_TOKENS and RAGSPINE_JUDGE_MAX_CALLS, the
settings the Dagster runs read.

Judgments are cached by model, prompt version, metric and a hash of what the judge was shown, by default
in $XDG_CACHE_HOME/ragspine-eval/judge (else ~/.cache/ragspine-eval/judge): a re-run over unchanged
answers makes no call. --cache puts the cache elsewhere, --no-cache turns it off.
"""


def _add_judge(commands: Any) -> None:
    parser = commands.add_parser(
        "judge",
        help="LLM-judge metrics (faithfulness, answer relevancy, context recall) with intervals",
        description=JUDGE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trace", required=True, help="traces (JSONL, any trace dialect)")
    parser.add_argument("--gold", help="golden set: reference facts for context_recall, slice tags")
    parser.add_argument("--evidence", help="evidence registry: the chunk texts the answers were given")
    parser.add_argument(
        "--metrics",
        default=",".join(METRICS),
        type=_judge_metrics,
        help=f"comma-separated (default: {','.join(METRICS)})",
    )
    parser.add_argument("--labels", help="human labels, JSONL {qid, metric, score}: Krippendorff's alpha")
    parser.add_argument("--repeat", type=_POSITIVE, default=1, help="judgments per model; the median is kept")
    parser.add_argument(
        "--threshold", default="", help="pass thresholds, metric=score,... (default 3 for every metric)"
    )
    parser.add_argument(
        "--max-calls",
        type=_POSITIVE,
        help="budget: at most this many judge calls (default: $RAGSPINE_JUDGE_MAX_CALLS, else no limit)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_POSITIVE,
        help="budget: at most this many tokens; each call is checked on its estimate before it is sent and "
        "judging stops at the first that does not fit (default: $RAGSPINE_JUDGE_MAX_TOKENS, else no limit)",
    )
    parser.add_argument(
        "--max-input-chars",
        type=_POSITIVE,
        help="longest prompt input sent, per field (default: $RAGSPINE_JUDGE_MAX_INPUT_CHARS, else "
        f"{DEFAULT_MAX_INPUT_CHARS}); longer ones are cut and the cut is reported per case",
    )
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache",
        help="judgment cache: a directory or s3://bucket/prefix "
        "(default: $XDG_CACHE_HOME/ragspine-eval/judge, else ~/.cache/ragspine-eval/judge)",
    )
    cache.add_argument("--no-cache", action="store_true", help="neither read nor keep judgments")
    parser.add_argument("--endpoint-url", help="S3 endpoint for an s3:// cache")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals")
    parser.add_argument(
        "--gates",
        help=f"e.g. judge_faithfulness=4,judge_faithfulness_pass_rate=0.9 ({len(JUDGED_METRICS)} known)",
    )
    parser.add_argument("--format", choices=("json", "markdown"), default="json")
    parser.add_argument("--out", help="write the report here instead of standard output")
    parser.set_defaults(run="ragspine_pipeline.cli.judge:run_judge_command", extra="judge")


def _judge_metrics(raw: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip() for name in raw.split(",") if name.strip()))
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown metric(s) {', '.join(unknown) or '(none)'}; known: {', '.join(METRICS)}"
        )
    return names


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser("demo", help="the embedded demo: a policy corpus, golden set, index, traces")
    demo_commands = demo.add_subparsers(dest="demo_command", required=True)
    init = demo_commands.add_parser("init", help="write the demo environment (idempotent)")
    init.add_argument("--root", default=DEMO_ROOT, help=f"demo folder (default: {DEMO_ROOT})")
    init.add_argument("--today", type=date.fromisoformat, help="the traces cover the 7 days before this")
    init.add_argument("--traces-per-day", type=_POSITIVE, default=300)
    init.set_defaults(run="ragspine_pipeline.cli.demo:run_init")
    rebuild = demo_commands.add_parser("rebuild-index", help="publish a new demo index version")
    rebuild.add_argument("--root", default=DEMO_ROOT, help=f"demo folder (default: {DEMO_ROOT})")
    rebuild.add_argument(
        "--degraded", action="store_true", help="ACL filter off and fewer candidates kept: a regression"
    )
    rebuild.add_argument(
        "--degraded-parser",
        action="store_true",
        help="the build's document parser loses fills and merged spans: an extraction regression",
    )
    rebuild.set_defaults(run="ragspine_pipeline.cli.demo:run_rebuild_index")


def _add_deploy(commands: Any) -> None:
    deploy = commands.add_parser(
        "deploy",
        help="a deployed instance: check it, create and seed its buckets, wait for a run",
    )
    deploy_commands = deploy.add_subparsers(dest="deploy_command", required=True)
    check = deploy_commands.add_parser(
        "check",
        help="the instance config, PostgreSQL, pools, AWS credentials, buckets and Slack settings",
        description="Read $DAGSTER_HOME/dagster.yaml and the environment as a deployed process does, and "
        "print one line for each thing missing (names only, never a value). Exit 0 when nothing is "
        "missing, 1 otherwise.",
    )
    check.add_argument("--config", help="the instance config to check (default: $DAGSTER_HOME/dagster.yaml)")
    check.add_argument(
        "-m",
        "--module",
        default="ragspine_pipeline.definitions",
        help="the code location whose services' pools must be set (default: ragspine_pipeline.definitions; "
        "'' for none)",
    )
    check.set_defaults(run="ragspine_pipeline.cli.deploy:run_check", extra="deploy")
    bootstrap = deploy_commands.add_parser(
        "bootstrap",
        help="create every bucket the settings name; with --from, seed traces, manifest, facts, baselines",
        description="Create the buckets of every s3:// setting (RAGSPINE_TRACE_STORE, RAGSPINE_REPORTS, "
        "..., DAGSTER_COMPUTE_LOG_BUCKET) and, with --from, upload the trace store, index manifest, "
        "extracted facts and baselines from a folder laid out as RAGSPINE_HOME to their settings' "
        "locations. An object that exists is kept. Exit 0, 2 when a bucket or object cannot be written.",
    )
    bootstrap.add_argument(
        "--from",
        dest="source",
        metavar="FOLDER",
        help="seed from this folder: traces/, index/manifest.json, extraction/facts.jsonl, baseline.json, "
        "extraction/baseline.json (the demo's layout)",
    )
    bootstrap.set_defaults(run="ragspine_pipeline.cli.deploy:run_bootstrap")
    wait = deploy_commands.add_parser(
        "wait",
        help="wait for a run to end; print how it ended and its release decision",
        description="Wait for the run RUN_ID of the instance at $DAGSTER_HOME to end (a run `dagster job "
        "launch` queued: the daemon starts it), then print its status, its release decision and why it "
        "blocked. Exit 0 when it succeeded and did not block, 1 when it blocked, 2 when it failed, was "
        "canceled, is unknown or had not ended by --timeout.",
    )
    wait.add_argument("run_id", metavar="RUN_ID")
    wait.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait (default 3600)")
    wait.add_argument("--poll", type=float, default=2.0, help="seconds between two looks (default 2)")
    wait.set_defaults(run="ragspine_pipeline.cli.deploy:run_wait", extra="dagster")


def _add_alerts(commands: Any) -> None:
    alerts = commands.add_parser("alerts", help="the alert outbox: what is pending, and delivering it")
    alerts_commands = alerts.add_subparsers(dest="alerts_command", required=True)
    outbox_help = (
        "the outbox: a JSONL file or postgresql://user@host:port/db (default: $RAGSPINE_ALERTS_OUTBOX, "
        "else var/alerts/outbox.jsonl)"
    )
    listing = alerts_commands.add_parser("list", help="pending, delivered and expired alerts, oldest first")
    listing.add_argument("--outbox", help=outbox_help)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run="ragspine_pipeline.cli.alerts:run_list")
    flushing = alerts_commands.add_parser(
        "flush",
        help="deliver pending alerts to Slack (SLACK_BOT_TOKEN, SLACK_CHANNEL, SLACK_API_BASE_URL)",
        description="Exit 0 when nothing is left pending, 1 when some alerts could not be delivered.",
    )
    flushing.add_argument("--outbox", help=outbox_help)
    flushing.add_argument(
        "--ttl-hours",
        type=float,
        help="alerts older than this are marked expired, never posted "
        "(default: $RAGSPINE_ALERT_TTL_HOURS, else 24)",
    )
    flushing.set_defaults(run="ragspine_pipeline.cli.alerts:run_flush")


def _add_incidents(commands: Any) -> None:
    incidents = commands.add_parser(
        "incidents",
        help="open production incidents, and accepting a rate's new level",
        description="A production incident stays open until its rates are back at the level they dropped "
        "from, or a person accepts their new level. Exit 0; 2 when the outbox or a rate is unusable.",
    )
    incidents_commands = incidents.add_subparsers(dest="incidents_command", required=True)
    outbox_help = (
        "the outbox: a JSONL file or postgresql://user@host:port/db (default: $RAGSPINE_ALERTS_OUTBOX, "
        "else var/alerts/outbox.jsonl)"
    )
    listing = incidents_commands.add_parser(
        "list", help="every open incident's rates: since when, the level each dropped from, the accepted ones"
    )
    listing.add_argument("--outbox", help=outbox_help)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run="ragspine_pipeline.cli.incidents:run_list")
    accept = incidents_commands.add_parser(
        "accept",
        help="accept the level rates stand at now as their new one: closes their incident as accepted",
        description="Each RATE is metric@slice (retrieved_citation_rate@all traffic) or a metric (every "
        "rate of its incident). The acceptance is recorded with who (RAGSPINE_ACTOR, else USER), when and "
        "why, replied in the incident's Slack thread, and from then on the rate is compared only with the "
        "nights since it dropped.",
    )
    accept.add_argument("rates", nargs="+", metavar="RATE", help="metric@slice, or metric")
    accept.add_argument("--reason", required=True, help="why the new level is right (one line, kept)")
    accept.add_argument(
        "--stream",
        help="the service's production stream (<service>/production); needed when several have incidents",
    )
    accept.add_argument("--outbox", help=outbox_help)
    accept.set_defaults(run="ragspine_pipeline.cli.incidents:run_accept")
