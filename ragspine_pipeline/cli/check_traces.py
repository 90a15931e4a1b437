"""``ragspine-eval check-traces FILE [--gold G] [--evidence E] [--config C]``: what a trace file can be
scored on.

For a team wiring its service in: how many traces carry each field (the canonical columns every trace
dialect is read into, ``ragspine-eval schema trace`` for the JSON), then every metric the file gives a
value for, every one it leaves not applicable with the condition that metric needs, and every one some
traces leave unmeasured with the trace field they lack (``narrative_faithfulness`` without
``outcome.retrieved_context`` or ``contexts``: the very reason ``score`` warns of). With ``--gold``
the metrics are the golden run's (scored against the golden set); without it, the nightly reference-free
ones; ``--config`` brings the gates config's refusal phrases and snippet length. Exit 0 when some rate
can be measured, 2 when no metric can use the file (or it is unusable).
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa

from ragspine_pipeline.cli.args import EXIT_PASS, EXIT_UNUSABLE, span_settings
from ragspine_pipeline.contracts.columns import load_evidence, load_gold, load_traces
from ragspine_pipeline.contracts.schemas import TRACE_SCHEMA, carried
from ragspine_pipeline.contracts.spans import SPAN_FORMATS
from ragspine_pipeline.metrics import BY_NAME, METRICS, RETRIEVAL_FIELDS, absent_inputs

_FORMS = {"otlp": "OTLP/JSON", "span_table": "the flat span table"}
# What an answer is made of: a trace carrying none of these gives no metric anything to measure.
CONTENT = ("claim", "citations", "retrieved_ids", "selected_context_ids", "claims", "outcome_refused")


def measured(
    args: argparse.Namespace, traces: pa.Table
) -> tuple[dict[str, tuple[float | None, int | None]], int, dict[str, str], dict[str, str]]:
    """``({metric: (value, denominator)}, traces matched, {metric: what traces lack}, {metric: why})``:
    what the file gives (value None: not applicable, or unmeasured when the third names it), how many
    traces answer a case (with ``--gold``; else every trace), for each metric some traces could not be
    measured for, what those traces lack (``QAGate.lacking``), and the metrics the gates config says
    the traces cannot measure (``citations_are_retrieved``), with why."""
    from ragspine_pipeline.decision.config import EvalConfig, load_config
    from ragspine_pipeline.decision.evaluation import KNOWN_METRICS, evaluate, metric_scope

    evidence = load_evidence(args.evidence).table if args.evidence else None
    config = (
        load_config(args.config, KNOWN_METRICS, metric_scope(args.evidence)) if args.config else EvalConfig()
    )
    if args.gold:
        gold = load_gold(args.gold).table
        run = evaluate(gold, traces, gates=(), config=config, run_id="check-traces", evidence=evidence)
        results = {name: (r.value, r.denominator) for name, r in run.results.items()}
        gates = {} if run.qa is None else run.qa.gates
        lacking = {name: gate.lacking for name, gate in gates.items() if gate.lacking is not None}
        return results, run.grounded.counts["matched"], lacking, run.grounded.not_measured
    from ragspine_pipeline.scoring.grounded import CITATIONS_ARE_RETRIEVED
    from ragspine_pipeline.scoring.production import RETRIEVAL_RATES, production_metrics
    from ragspine_pipeline.scoring.refusal import mark_refusals

    traces = mark_refusals(traces, config.refusals.phrases, config.refusals.patterns)
    night = production_metrics(traces, evidence, citations_are_retrieved=config.citations_are_retrieved)
    declared = (
        dict.fromkeys(RETRIEVAL_RATES, CITATIONS_ARE_RETRIEVED) if config.citations_are_retrieved else {}
    )
    return {name: (m.value, m.n) for name, m in night.metrics.items()}, traces.num_rows, {}, declared


def run_check_traces(args: argparse.Namespace) -> int:
    loaded = load_traces(args.trace, span_settings(args))
    traces = loaded.table
    n = traces.num_rows
    if loaded.reader in SPAN_FORMATS:
        print(f"{args.trace}: {n} trace(s), grouped from OpenTelemetry spans ({_FORMS[loaded.reader]})")
    else:
        print(f"{args.trace}: {n} trace(s)")
    for note in loaded.notes:
        print(f"ragspine-eval: warning: {args.trace}: {note}", file=sys.stderr)
    width = max(len(name) for name in TRACE_SCHEMA.names)
    fields = carried(traces)
    for name, count in fields.items():
        share = f"{count / n:.0%}" if n else "-"
        print(f"  {name:<{width}}  {count:>8}  {share:>4}")
    results, matched, lacking, declared = measured(args, traces) if n else ({}, 0, {}, {})
    usable = [name for name, (value, _n) in results.items() if value is not None and _is_rate(name)]
    if usable:
        print("metrics measured:")
    # A value that depends on a field no trace carries is a 0 (or 1) the service never earned: said so
    # (retrieval aside where the service's citations are its retrieved sources).
    not_owed = RETRIEVAL_FIELDS if declared else ()
    absent = absent_inputs(
        {name: results[name][0] for name in usable}, carried(traces, empty=True), n, not_owed
    )
    for name in usable:
        value, denominator = results[name]
        why = f" ({absent[name]})" if name in absent else ""
        print(f"  {name} = {value:.4g} over {denominator}{why}")
    # Unmeasured is not n/a: the cases want the metric, their traces lack its input.
    unusable = [name for name, (value, _n) in results.items() if value is None and name not in lacking]
    unusable += [name for name in declared if name not in results]  # not reported, by the config
    if not args.evidence:
        families = ("layered",) if args.gold else ("production",)
        said = {*usable, *unusable}  # one thing per metric: measured without a registry is measured
        unusable += [
            m.name for m in METRICS if m.requires_registry and m.family in families and m.name not in said
        ]
    if unusable:
        print("not applicable (n/a), and what each needs:")
        for name in unusable:
            needs = BY_NAME[name].applies if name in BY_NAME else "its inputs"
            needs = declared.get(name, needs)
            if not args.evidence and BY_NAME.get(name) and BY_NAME[name].requires_registry:
                needs = "an evidence registry (--evidence)"
            print(f"  {name}: {needs}")
    if lacking:
        print("unmeasured for some traces, and the field each lacks:")
        for name, why in lacking.items():
            print(f"  {name}: {why}")
    problem = None
    if not sum(fields[name] for name in CONTENT):
        problem = "no trace carries an answer, citations, retrieved or selected ids, or a refusal flag"
    elif not matched:
        problem = "no trace answers a case of the golden set (by qid, or by its exact question)"
    if problem is not None:
        print(f"ragspine-eval: {args.trace}: no metric can use this file: {problem}", file=sys.stderr)
        return EXIT_UNUSABLE
    return EXIT_PASS


def _is_rate(name: str) -> bool:
    metric = BY_NAME.get(name)
    return metric is None or metric.kind in ("rate", "score")
