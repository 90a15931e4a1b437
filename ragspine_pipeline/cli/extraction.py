"""``ragspine-eval extraction``: score a parser's extracted workbook cells against the curated ones.

Exit codes: 0 every listed channel holds its threshold (or no baseline was given), 1 a channel is strictly
below its threshold, 2 unusable input (``main`` prints the InputError on one line). Quarantined fact
lines are reported in the output and counted on standard error; they do not change the exit code.
"""

from __future__ import annotations

import argparse
import json
import sys

from ragspine_pipeline.contracts.extraction import load_facts, load_truth
from ragspine_pipeline.decision import extraction_baseline
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.files import atomic_writer
from ragspine_pipeline.reports.extraction import ExtractionResult, render_markdown
from ragspine_pipeline.sources.versioned import open_versioned, s3_endpoint

EXIT_PASS, EXIT_BELOW_THRESHOLD = 0, 1


def run_extraction(args: argparse.Namespace) -> int:
    if args.promote and not args.baseline:
        raise InputError("--promote", "needs --baseline")
    warnings: list[str] = []
    thresholds = None
    store = None
    if args.baseline:  # read first: a broken thresholds file should not cost a full scoring pass
        store = open_versioned(args.baseline, "extraction thresholds", endpoint_url=s3_endpoint())
        text = store.read()
        thresholds = extraction_baseline.parse_thresholds(text, store.name)
        if text is None and not args.promote:
            warnings.append(f"baseline {args.baseline} does not exist: no channel is checked")
    truth = load_truth(args.truth)
    facts = load_facts(args.facts)
    result = ExtractionResult.evaluate(facts, truth, thresholds, args.baseline)
    if args.promote:
        # Compare again with the thresholds current under the lock, and raise them in the same update:
        # a concurrent promotion can neither be lowered nor be compared against a stale copy.
        def judge(current: dict[str, float]) -> dict[str, float] | None:
            nonlocal result
            result = ExtractionResult.evaluate(facts, truth, current, args.baseline)
            return extraction_baseline.raised(current, result.score.accuracies()) if result.passed else None

        extraction_baseline.locked_update(store, judge)
    check = result.baseline

    if facts.invalid:
        warnings.append(
            f"{len(facts.invalid)} invalid fact line(s) left out of every channel, first: {facts.invalid[0]}"
        )
    if check is not None and check.unmeasured:
        warnings.append(f"baseline channels with nothing to measure: {', '.join(check.unmeasured)}")
    if args.promote:
        if result.passed:
            warnings.append(f"promoted {args.baseline}: every threshold is now at least as strict")
        else:
            warnings.append(
                f"not promoting {args.baseline}: a channel is below its threshold, it is unchanged"
            )
    for warning in warnings:
        print(f"ragspine-eval: warning: {warning}", file=sys.stderr)

    if args.format == "markdown":
        text = render_markdown(result)
    else:
        text = json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        with atomic_writer(args.out, "report") as fh:  # a reader never sees half a report
            fh.write(text)
    return EXIT_PASS if result.passed else EXIT_BELOW_THRESHOLD
