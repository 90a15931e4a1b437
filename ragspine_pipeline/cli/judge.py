"""``ragspine-eval judge``: LLM-judge metrics of a trace file, with intervals and gates.

What the command promises (the endpoint it needs, its exit codes, how cost is bounded) is its ``--help``
text: ``JUDGE_DESCRIPTION`` in ``cli/parser_nightly.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.decision.gates import GateSpecError, parse_gates
from ragspine_pipeline.errors import InputError, printable
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.judge.cache import (
    JudgmentCache,
    LocalJudgmentCache,
    open_judgment_cache,
    user_cache_dir,
)
from ragspine_pipeline.judge.client import Budget, JudgeClient, JudgeEndpoint, env_number
from ragspine_pipeline.judge.items import case_tags, judge_items
from ragspine_pipeline.judge.prompts import DEFAULT_MAX_INPUT_CHARS, JUDGED_METRICS
from ragspine_pipeline.judge.report import judge_report, judged_metrics, load_labels, render_markdown
from ragspine_pipeline.judge.run import JudgeRun, JudgeSettings, parse_thresholds, run_judge
from ragspine_pipeline.sources.errors import SourceError

EXIT_OK, EXIT_FAILED = 0, 1


def run_judge_command(args: argparse.Namespace) -> int:
    try:
        endpoint = JudgeEndpoint.from_env()
        # An option wins; else the setting the Dagster runs read, so one budget bounds both ways in.
        max_calls = args.max_calls or env_number("RAGSPINE_JUDGE_MAX_CALLS")
        max_tokens = args.max_tokens or env_number("RAGSPINE_JUDGE_MAX_TOKENS")
        max_input_chars = (
            args.max_input_chars or env_number("RAGSPINE_JUDGE_MAX_INPUT_CHARS") or DEFAULT_MAX_INPUT_CHARS
        )
    except ValueError as exc:
        raise InputError("environment", str(exc)) from None
    if endpoint is None:
        raise InputError(
            "environment", "no judge configured: set RAGSPINE_JUDGE_BASE_URL and RAGSPINE_JUDGE_MODEL"
        )
    try:
        gates = parse_gates(args.gates, JUDGED_METRICS) if args.gates else []
    except GateSpecError as exc:
        raise InputError("--gates", str(exc)) from None
    try:
        thresholds = parse_thresholds(args.threshold)
    except ValueError as exc:
        raise InputError("--threshold", str(exc)) from None
    settings = JudgeSettings(
        metrics=args.metrics,
        repeat=args.repeat,
        thresholds=thresholds,
        seed=args.seed,
        max_input_chars=max_input_chars,
    )
    traces = load_traces(args.trace).table
    gold = load_gold(args.gold).table if args.gold else None
    evidence = load_evidence(args.evidence).table if args.evidence else None
    labels = load_labels(args.labels) if args.labels else None
    cache = _cache(args)
    client = JudgeClient(endpoint, Budget(max_calls=max_calls, max_tokens=max_tokens))
    try:
        run = run_judge(judge_items(traces, gold, evidence), settings, client, cache)
    except SourceError as exc:  # the judgment cache (a folder or S3) cannot be read or written
        way_out = "" if args.cache else " (choose another with --cache DIR, or run with --no-cache)"
        raise InputError(exc.location, exc.cause + way_out) from None
    report = judge_report(run, labels=labels, tags=case_tags(traces, gold))
    measured = judged_metrics(run)
    report["gates"] = [
        {
            "metric": gate.metric,
            "op": gate.op,
            "threshold": gate.threshold,
            "value": measured.get(gate.metric),
            "passed": gate.metric in measured and gate.passes(measured[gate.metric]),
        }
        for gate in gates
    ]
    # Pass rule: the endpoint stayed reachable, at least one case got a score (from every model of the
    # ensemble), and every --gates gate holds. Some judgments failing (a 500, an unreadable reply, calls
    # the budget stopped) does not fail the run by itself: they are left out of every mean and rate,
    # counted in the report ("judgments", and per metric "errors" and "excluded") and named on standard
    # error, and the gates decide on the cases that were judged. Failing on any one of them would let a
    # single flaky call block a release; a run that judged nothing never passes.
    nothing = run.nothing_judged
    failed_gates = [gate for gate in report["gates"] if not gate["passed"]]
    report["pass"] = run.failed is None and nothing is None and not failed_gates
    if not report["pass"]:
        report["reason"] = (
            f"the judge step failed: {run.failed}"
            if run.failed
            else nothing or "gate(s) failed: " + ", ".join(_gate_failure(gate) for gate in failed_gates)
        )
    text = json.dumps(report, indent=2) + "\n" if args.format == "json" else render_markdown(report)
    if args.out:
        with atomic_writer(args.out, "judge report") as fh:  # a reader never sees half a report
            fh.write(text)
    else:
        sys.stdout.write(text)
    for line in _stderr_lines(run, report, failed_gates, max_input_chars):
        print(f"ragspine-eval: {printable(line)}", file=sys.stderr)
    return EXIT_OK if report["pass"] else EXIT_FAILED


def _cache(args: argparse.Namespace) -> JudgmentCache | None:
    """``--cache``, else the user's cache directory; none with ``--no-cache``."""
    if args.no_cache:
        return None
    if args.cache:
        return open_judgment_cache(args.cache, endpoint_url=args.endpoint_url)
    try:
        return LocalJudgmentCache(user_cache_dir())
    except RuntimeError:  # neither XDG_CACHE_HOME nor a home directory
        raise InputError(
            "environment",
            "no home directory for the judgment cache: set XDG_CACHE_HOME, or --cache or --no-cache",
        ) from None


def _stderr_lines(run: JudgeRun, report: dict, failed_gates: list[dict], max_input_chars: int) -> list[str]:
    """What standard error says, one line each: why nothing was judged (then only that, and the cuts),
    or the budget stop, the judgments without a score, the cuts and each failed gate."""
    lines = []
    counts = report["judgments"]
    if run.failed:
        lines.append(f"error: the judge step failed: {run.failed}")
    elif not counts["scored"]:
        lines.append(f"error: {report['reason']}")
    else:
        if run.stopped:
            lines.append(f"warning: {run.stopped}")
        if counts["failed"]:
            kinds = ", ".join(f"{kind} {n}" for kind, n in counts["errors"].items())
            lines.append(
                f"warning: {counts['failed']} of {counts['applicable']} judgment(s) got no score ({kinds}); "
                "they are left out of every mean and rate"
            )
    if run.truncated:
        cut = len({(row["qid"], row["metric"]) for row in run.truncated})
        lines.append(
            f"warning: {cut} judgment input(s) cut to {max_input_chars} characters "
            "(see 'truncated' in the report)"
        )
    if counts["scored"]:
        lines += [f"gate failed: {_gate_failure(gate)}" for gate in failed_gates]
    return lines


def _gate_failure(gate: dict) -> str:
    value = "not measured" if gate["value"] is None else f"{gate['value']:.4f}"
    return f"{gate['metric']} {value} (needs {gate['op']} {gate['threshold']:g})"
