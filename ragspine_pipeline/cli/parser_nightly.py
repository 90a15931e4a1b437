"""The nightly path's subcommands of ``ragspine-eval`` (``cli.parser``): sample, production, plan and
judge."""

from __future__ import annotations

import argparse
from typing import Any

from ragspine_pipeline.cli.args import NON_NEGATIVE, POSITIVE, share
from ragspine_pipeline.cli.parser_release import add_span_options
from ragspine_pipeline.judge.prompts import DEFAULT_MAX_INPUT_CHARS, JUDGED_METRICS, METRICS
from ragspine_pipeline.sources.strata import DEFAULT_FLOOR


def add_sample(commands: Any) -> None:
    parser = commands.add_parser(
        "sample",
        help="a seeded, de-duplicated (optionally stratified) sample of one day of production traces",
        description="Exit 0 when the day was sampled (even if it is empty), 2 when the input is unusable.",
    )
    parser.add_argument("--source", required=True, help="trace store: a directory or s3://bucket/prefix")
    parser.add_argument("--date", required=True, help="the day to sample, YYYY-MM-DD")
    parser.add_argument("--n", required=True, type=NON_NEGATIVE, help="sample size")
    parser.add_argument("--seed", required=True, type=int, help="sampling seed (same seed, same sample)")
    parser.add_argument("--stratify", metavar="DIM", help="stratify on this tag dimension (tags[DIM])")
    parser.add_argument(
        "--floor",
        type=NON_NEGATIVE,
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
        type=POSITIVE,
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
    add_store_format(parser)
    parser.set_defaults(run="ragspine_pipeline.cli.sample:run_sample")


def add_store_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("jsonl", "otlp"),
        default="jsonl",
        help="jsonl: trace lines under dt=YYYY-MM-DD/; otlp: OpenTelemetry spans as the Collector writes "
        "them (OTLP/JSON under year=/month=/day=/..., or dt=YYYY-MM-DD/)",
    )
    add_span_options(parser)


BACKFILL_DAYS = 90  # the most days one backfill fills (``cli.production.MAX_DAYS``)


def _backfill_days(raw: str) -> int:
    days = POSITIVE(raw)
    if days > BACKFILL_DAYS:
        raise argparse.ArgumentTypeError(f"must be at most {BACKFILL_DAYS}")
    return days


def add_production(commands: Any) -> None:
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
    add_store_format(parser)
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
        type=POSITIVE,
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


def add_plan(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="what a golden set or a nightly sample can detect, or the sample size a drop needs",
        description=PLAN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cases = parser.add_mutually_exclusive_group()
    cases.add_argument("--golden", metavar="FILE", help="a golden set: plan for its number of cases")
    cases.add_argument("--cases", type=POSITIVE, metavar="N", help="plan for a golden set of N cases")
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
        "--sample-size", type=POSITIVE, metavar="N", help="traces scored a night (default 200)"
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
        type=POSITIVE,
        metavar="M",
        help="tests a night, over the test's weight (default 10: six rates, three windows, all traffic; "
        "more with --slices)",
    )
    parser.add_argument(
        "--slices",
        type=NON_NEGATIVE,
        default=0,
        metavar="K",
        help="slices tested a night besides all traffic, every tag dimension's values together (default 0); "
        "8 slices double the tests",
    )
    parser.add_argument(
        "--window", type=POSITIVE, metavar="NIGHTS", help="trailing nights of the level (default 14)"
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


def add_judge(commands: Any) -> None:
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
    parser.add_argument("--repeat", type=POSITIVE, default=1, help="judgments per model; the median is kept")
    parser.add_argument(
        "--threshold", default="", help="pass thresholds, metric=score,... (default 3 for every metric)"
    )
    parser.add_argument(
        "--max-calls",
        type=POSITIVE,
        help="budget: at most this many judge calls (default: $RAGSPINE_JUDGE_MAX_CALLS, else no limit)",
    )
    parser.add_argument(
        "--max-tokens",
        type=POSITIVE,
        help="budget: at most this many tokens; each call is checked on its estimate before it is sent and "
        "judging stops at the first that does not fit (default: $RAGSPINE_JUDGE_MAX_TOKENS, else no limit)",
    )
    parser.add_argument(
        "--max-input-chars",
        type=POSITIVE,
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
