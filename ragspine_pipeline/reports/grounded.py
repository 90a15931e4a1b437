"""The grounded-QA report: JSON for machines, Markdown for people.

Figures are rounded to 4 decimals here, for display; gates were decided on unrounded values.
Per-case rows are rendered on whole columns (``reports.columns``) so that a million-case report costs
a handful of kernel calls, not a million ``json.dumps``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TextIO

import pyarrow as pa

from ragspine_pipeline.decision.gates import GateResult
from ragspine_pipeline.reports.columns import (
    BOOL_STATES,
    concat,
    json_escaped,
    markdown_cell,
    render_states,
    write_column,
)
from ragspine_pipeline.scoring.grounded import LABELS, METRICS, GroundedScore

DECIMALS = 4
_CASE_FLAGS = ("answerable", "answered", "missing", "contained", "citation_hit", "recall_hit")
_COUNTS = (
    "answered",
    "refused",
    "answerable",
    "unanswerable",
    "missing",
    "unmatched",
    "duplicates",
    "traces",
)


@dataclass(frozen=True)
class ReportInputs:
    gold: str
    trace: str
    warnings: list[str] = field(default_factory=list)


def figure(value: float) -> float:
    return round(value, DECIMALS)


def summary(score: GroundedScore, gates: list[GateResult], inputs: ReportInputs) -> dict:
    """Every figure of the run, without the per-case rows (SPEC §7 order first)."""
    counts = {name: score.counts[name] for name in _COUNTS}
    metrics = {name: figure(value) for name, value in score.metrics.items()}
    return {
        "gold": inputs.gold,
        "trace": inputs.trace,
        "n_cases": score.counts["cases"],
        **{name: counts[name] for name in _COUNTS[:6]},
        **{name: metrics[name] for name in ("precision", "chr", "under_refusal", "over_refusal", "recall@k")},
        "k": score.k,
        "compliance": metrics["compliance"],
        "chr_answerable": metrics["chr_answerable"],
        "claim_containment": metrics["claim_containment"],
        "duplicates": counts["duplicates"],
        "traces": counts["traces"],
        "denominators": {name: score.denominator(name) for name in METRICS},
        "labels": score.label_counts(),
        "gates": [
            {
                "metric": result.gate.metric,
                "op": result.gate.op,
                "threshold": result.gate.threshold,
                "value": figure(result.value),
                "pass": result.passed,
            }
            for result in gates
        ],
        "pass": all(result.passed for result in gates),
        "warnings": inputs.warnings,
    }


def write_json(score: GroundedScore, gates: list[GateResult], inputs: ReportInputs, out: TextIO) -> None:
    """The summary with a ``cases`` array of per-case rows appended as the last key."""
    head = json.dumps(summary(score, gates, inputs), indent=2, ensure_ascii=False)
    out.write(head[: head.rindex("}")].rstrip())
    out.write(',\n  "cases": [\n')
    skip = len(",\n")  # the first row has no separator before it
    for cases in _slices(score.cases):
        qid = json_escaped(cases.column("qid").combine_chunks())
        row = concat(',\n    {"qid": "', qid, '"', _json_tail(cases))
        write_column(out, row, skip)
        skip = 0
    out.write("\n  ]\n}\n" if score.cases.num_rows else "  ]\n}\n")


def _json_tail(cases: pa.Table) -> pa.Array:
    def render(label: str, *flags: bool | None) -> str:
        values = ", ".join(
            f'"{name}": {json.dumps(flag)}' for name, flag in zip(_CASE_FLAGS, flags, strict=True)
        )
        return f', "label": "{label}", {values}}}'

    columns = [cases.column(name).combine_chunks() for name in ("label", *_CASE_FLAGS)]
    return render_states(columns, [LABELS, *[BOOL_STATES] * len(_CASE_FLAGS)], render)


def _slices(table: pa.Table, rows: int = 1 << 16):
    """Render big reports a slice at a time, so memory stays bounded by the slice."""
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


def write_markdown(score: GroundedScore, gates: list[GateResult], inputs: ReportInputs, out: TextIO) -> None:
    """A report a person reads: verdict, headline figures, gates, coverage, labels, every question."""
    s = summary(score, gates, inputs)
    verdict = "PASS" if s["pass"] else "FAIL"
    out.write("# Grounded QA report\n\n")
    out.write(
        f"**{verdict}** — gold `{inputs.gold}` ({s['n_cases']} cases), traces `{inputs.trace}` "
        f"({s['traces']} traces), k = {score.k}\n\n"
    )
    for warning in inputs.warnings:
        out.write(f"> ⚠ {warning}\n")
    if inputs.warnings:
        out.write("\n")

    out.write("## Gates\n\n| metric | gate | value | result |\n|---|---|---|---|\n")
    for result in gates:
        gate = f"{'≤' if result.gate.op == '<=' else '≥'} {result.gate.threshold:.4f}"
        mark = "✅ pass" if result.passed else "❌ **FAIL**"
        out.write(f"| {result.gate.metric} | {gate} | {figure(result.value):.4f} | {mark} |\n")

    out.write("\n## Headline figures\n\n| metric | value | over |\n|---|---|---|\n")
    for name, (numerator, denominator, _) in METRICS.items():
        shown = f"{score.counts[numerator]} / {score.counts[denominator]} {denominator}"
        if score.counts[denominator] == 0:
            shown = f"0 {denominator}: not applicable, reported as {s[name]}"
        out.write(f"| {name} | {s[name]:.4f} | {shown} |\n")

    out.write(
        f"\n## Coverage\n\n"
        f"- answered {s['answered']}, refused {s['refused']} "
        f"(answerable {s['answerable']}, unanswerable {s['unanswerable']})\n"
        f"- missing (gold case without a trace, scored as an empty answer): {s['missing']}\n"
        f"- unmatched (trace without a gold case, ignored): {s['unmatched']}\n"
        f"- duplicates (extra traces for one case, last one kept): {s['duplicates']}\n"
    )

    out.write("\n## Labels\n\n| label | cases |\n|---|---|\n")
    for label, count in s["labels"].items():
        out.write(f"| {label} | {count} |\n")

    out.write(
        "\n## Per question\n\n| qid | answerable | answered | citation hit | contained | recall@k | label |\n"
        "|---|---|---|---|---|---|---|\n"
    )

    for cases in _slices(score.cases):
        row = concat("| ", markdown_cell(cases.column("qid").combine_chunks()), _markdown_tail(cases), "\n")
        write_column(out, row)


_MARKDOWN_COLUMNS = ("answerable", "missing", "answered", "citation_hit", "contained", "recall_hit")


def _markdown_tail(cases: pa.Table) -> pa.Array:
    def cell(flag: bool | None) -> str:
        return "—" if flag is None else "yes" if flag else "no"

    def render(label, answerable, missing, answered, hit, contained, recalled) -> str:
        answered_cell = "no trace" if missing else cell(answered)
        cells = [cell(answerable), answered_cell, cell(hit), cell(contained), cell(recalled), label]
        return " | " + " | ".join(cells) + " |"

    columns = [cases.column(name).combine_chunks() for name in ("label", *_MARKDOWN_COLUMNS)]
    return render_states(columns, [LABELS, *[BOOL_STATES] * len(_MARKDOWN_COLUMNS)], render)
