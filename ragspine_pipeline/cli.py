"""``ragspine-eval``: the scorer as a command, for the service's own CI. SPEC §7.

Exit codes: 0 every gate passes, 1 a gate fails, 2 unusable input (the message names file, line and field).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import contextmanager

from ragspine_pipeline import __version__
from ragspine_pipeline.contracts.columns import load_gold, load_traces
from ragspine_pipeline.decision.gates import GateSpecError, default_gates, evaluate_gates, parse_gates
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.reports.grounded import ReportInputs, write_json, write_markdown
from ragspine_pipeline.scoring.grounded import METRICS, score_grounded

EXIT_PASS, EXIT_GATE_FAILED, EXIT_UNUSABLE = 0, 1, 2


class UsageError(Exception):
    """A command line that cannot run (exit 2)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (InputError, UsageError) as exc:
        print(f"ragspine-eval: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except BrokenPipeError:  # e.g. `ragspine-eval score … | head`: the reader left; exit as SIGPIPE would
        sys.stderr.close()
        return 128 + 13


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragspine-eval",
        description="Score a RAG service's traces against a golden set and gate the result.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    score = commands.add_parser(
        "score",
        help="grounded-QA metrics and gates for a gold file and a trace file",
        description="Exit 0 when every gate passes, 1 when a gate fails, 2 when the input is unusable.",
    )
    score.add_argument("--gold", required=True, help="golden set (JSONL or JSON array, any SPEC dialect)")
    score.add_argument("--trace", required=True, help="traces of the system under test (JSONL)")
    score.add_argument("--k", type=_positive_int, default=5, help="cut-off for recall@k (default 5)")
    score.add_argument(
        "--gates",
        help="complete gate set, e.g. precision=0.80,chr=0.75,under=0.05,over=0.10 "
        "(default: precision, chr, under_refusal, over_refusal, compliance at the SPEC thresholds)",
    )
    score.add_argument("--format", choices=("json", "markdown"), default="json")
    score.add_argument("--out", help="write the report here instead of standard output")
    score.set_defaults(run=_score)
    return parser


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{raw}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _score(args: argparse.Namespace) -> int:
    try:
        gates = default_gates() if args.gates is None else parse_gates(args.gates, METRICS)
    except GateSpecError as exc:
        raise UsageError(f"--gates: {exc}") from None
    gold = load_gold(args.gold)
    traces = load_traces(args.trace)
    score = score_grounded(gold.table, traces.table, k=args.k)
    results = evaluate_gates(gates, score.metrics)

    inputs = ReportInputs(gold=args.gold, trace=args.trace, warnings=_coverage_warnings(score.counts))
    for warning in inputs.warnings:
        print(f"ragspine-eval: warning: {warning}", file=sys.stderr)
    write = write_json if args.format == "json" else write_markdown
    with _output(args.out) as out:
        write(score, results, inputs, out)
    return EXIT_PASS if all(result.passed for result in results) else EXIT_GATE_FAILED


def _coverage_warnings(counts: dict[str, int]) -> list[str]:
    warnings = []
    if counts["missing"]:
        warnings.append(f"{counts['missing']} gold case(s) have no trace and are scored as empty answers")
    if counts["unmatched"]:
        warnings.append(f"{counts['unmatched']} trace id(s) are not in the golden set and were ignored")
    if counts["duplicates"]:
        warnings.append(f"{counts['duplicates']} duplicate trace(s): the last trace per case was kept")
    return warnings


@contextmanager
def _output(path: str | None):
    if path is None:
        yield sys.stdout
        return
    with atomic_writer(path, "report") as fh:  # a reader never sees half a report
        yield fh


if __name__ == "__main__":
    sys.exit(main())
