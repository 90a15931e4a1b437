"""The evaluation report: JSON for machines, Markdown for people.

Figures are rounded to 4 decimals here, for display; gates were decided on unrounded values.

Not applicable: a metric whose denominator is 0 is ``null`` in the JSON, never a placeholder; its
denominator is in ``denominators``, ``layered_denominators`` or the QA gate's ``total``, and
``not_applicable`` names the null ones (derived from the values, for machines that want the list) but
those in ``unmeasured`` (``{metric: why}``: null because no trace carried the metric's input, e.g.
``narrative_faithfulness`` without retrieved context; a gate on one fails as unmeasured). A
gate row is one :class:`~ragspine_pipeline.decision.release_rows.GateRow`: the value, ``numerator`` and
``denominator`` of the metric it judged (null where the metric has none: means, judged scores; the
fabrication count's denominator is the answers it checked) beside its verdict; a gate on a metric that
does not apply has ``"value": null``, ``"pass": null``, ``"applicable": false`` and does not block.
Markdown shows such a metric as ``n/a`` with its denominator 0.

Per-case rows are rendered on whole columns (``reports.columns``) so that a million-case report costs
a handful of kernel calls, not a million ``json.dumps``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.decision.baseline import change_warnings
from ragspine_pipeline.decision.evaluation import LAYERED_METRICS, Evaluation
from ragspine_pipeline.decision.flakiness import flakiness_sentence
from ragspine_pipeline.decision.gates import GateResult
from ragspine_pipeline.decision.release import ReleaseDecision
from ragspine_pipeline.decision.release_rows import GateRow
from ragspine_pipeline.reports.columns import (
    BOOL_STATES,
    WriteBehind,
    concat,
    json_escaped,
    render_states,
)
from ragspine_pipeline.reports.markdown import (
    code_span,
    detectable_drop_markdown,
    md_text,
    md_text_column,
    tag_slices_markdown,
)
from ragspine_pipeline.reports.why import why_markdown
from ragspine_pipeline.scoring.grounded import LABELS, METRICS
from ragspine_pipeline.scoring.layered import STAGES
from ragspine_pipeline.scoring.slices import Slice, worst_first

DECIMALS = 4
_CASE_FLAGS = ("answerable", "answered", "missing", "contained", "citation_hit", "recall_hit")
_COUNTS = ("answered", "refused", "answerable", "unanswerable", "missing", "unmatched")
_SLICE_METRICS = ("context_recall", "claim_faithfulness", "citation_support")


@dataclass(frozen=True)
class ReportInputs:
    gold: str
    trace: str
    evidence: str | None = None
    warnings: list[str] = field(default_factory=list)


def figure(value: float | None) -> float | None:
    return None if value is None else round(value, DECIMALS)


def summary(ev: Evaluation, inputs: ReportInputs) -> dict:
    """Every figure of the run, without the per-case rows (the keys a CI reads first: `REQUIRED_KEYS`
    in the CLI tests)."""
    score = ev.grounded
    metrics = {name: figure(value) for name, value in score.metrics.items()}
    out = {
        "gold": inputs.gold,
        "trace": inputs.trace,
        "n_cases": score.counts["cases"],
        **{name: score.counts[name] for name in _COUNTS},
        **{name: metrics[name] for name in ("precision", "chr", "under_refusal", "over_refusal", "recall@k")},
        "k": score.k,
        "compliance": metrics["compliance"],
        "chr_answerable": metrics["chr_answerable"],
        "claim_containment": metrics["claim_containment"],
        "duplicates": score.counts["duplicates"],
        "traces": score.counts["traces"],
        "denominators": {name: score.denominator(name) for name in METRICS},
        "not_applicable": ev.not_applicable,
        "unmeasured": ev.unmeasured,
        "labels": score.label_counts(),
    }
    if ev.layered is not None:
        out["evidence"] = inputs.evidence
        out["layered"] = {name: figure(value) for name, value in ev.layered.metrics.items()}
        out["layered_denominators"] = dict(ev.layered.denominators)
        out["first_failed_stage_histogram"] = ev.layered.stage_histogram()
        out["slices"] = _slices_json(ev.slices)
    if ev.tag_slices:
        out["tag_slices"] = _slices_json(ev.tag_slices, "right")
    if ev.qa is not None:
        out["qa_gates"] = ev.qa.to_dict()
        out["fabrication"] = ev.qa.fabrication.to_dict()
    out["gates"] = [
        GateRow.of(result, DECIMALS).model_dump(mode="json", by_alias=True) for result in ev.gates
    ]
    if ev.flakiness is not None:
        out["flakiness"] = _rounded(ev.flakiness)
    out["release"] = _rounded(ev.release.as_dict())
    out["pass"] = ev.passed
    out["warnings"] = report_warnings(ev, inputs)
    return out


def report_warnings(ev: Evaluation, inputs: ReportInputs) -> list[str]:
    """The shell's warnings, then one per baseline value set by hand that still stands (the decision's
    ``warnings`` are these: the Dagster shell stores the report's)."""
    return [*inputs.warnings, *change_warnings(ev.comparison)]


def _slices_json(slices: list[Slice], flag: str = "releasable") -> dict:
    out: dict[str, dict] = {}
    for s in slices:
        out.setdefault(s.dimension, {})[s.value] = _rounded(s.as_dict(flag))
    return out


def _rounded(value):
    if isinstance(value, float):
        return figure(value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


# -- JSON ------------------------------------------------------------------------------------------


def write_json(ev: Evaluation, inputs: ReportInputs, out: TextIO) -> None:
    """The summary with a ``cases`` array of per-case rows appended as the last key."""
    head = json.dumps(summary(ev, inputs), indent=2, ensure_ascii=False)
    out.write(head[: head.rindex("}")].rstrip())
    out.write(',\n  "cases": [\n')
    skip = len(",\n")  # the first row has no separator before it
    with WriteBehind(out) as rows:
        for start, cases in _slices_of(ev.grounded.cases):
            qid = json_escaped(cases.column("qid").combine_chunks())
            parts = [',\n    {"qid": "', qid, '"', _json_tail(cases)]
            if ev.layered is not None:
                layered = ev.layered.cases.slice(start, cases.num_rows)
                parts += [_json_layered_tail(layered)]
            rows.write(concat(*parts, "}"), skip)
            skip = 0
    out.write("\n  ]\n}\n")


def _json_tail(cases: pa.Table) -> pa.Array:
    def render(label: str, *flags: bool | None) -> str:
        values = ", ".join(
            f'"{name}": {json.dumps(flag)}' for name, flag in zip(_CASE_FLAGS, flags, strict=True)
        )
        return f', "label": "{label}", {values}'

    columns = [cases.column(name).combine_chunks() for name in ("label", *_CASE_FLAGS)]
    return render_states(columns, [LABELS, *[BOOL_STATES] * len(_CASE_FLAGS)], render)


def _json_layered_tail(layered: pa.Table) -> pa.Array:
    def render(stage: str, releasable: bool | None) -> str:
        return f', "first_failed_stage": "{stage}", "releasable": {json.dumps(releasable)}, "inadmissible": '

    columns = [layered.column(name).combine_chunks() for name in ("first_failed_stage", "releasable")]
    head = render_states(columns, [STAGES, BOOL_STATES], render)
    rules = layered.column("inadmissible").combine_chunks()
    listed = pc.if_else(
        pc.greater(pc.list_value_length(rules), 0),
        concat('["', pc.binary_join(rules, '", "'), '"]'),
        "[]",
    )
    return concat(head, listed)


def _slices_of(table: pa.Table, rows: int = 1 << 16):
    """Render big reports a slice at a time, so memory stays bounded by the slice."""
    for start in range(0, table.num_rows, rows):
        yield start, table.slice(start, rows)


# -- Markdown --------------------------------------------------------------------------------------


def write_markdown(ev: Evaluation, inputs: ReportInputs, out: TextIO) -> None:
    """A report a person reads: decision, gates, figures, stages, slices, coverage, every question."""
    s = summary(ev, inputs)
    release = ev.release
    out.write("# Evaluation report\n\n")
    verdict = "SHIP" if release.ships else "BLOCK"
    out.write(
        f"**{verdict}** — gold {code_span(inputs.gold)} ({s['n_cases']} cases), traces "
        f"{code_span(inputs.trace)} ({s['traces']} traces), k = {ev.grounded.k}"
        + (f", evidence {code_span(inputs.evidence)}" if inputs.evidence else "")
        + "\n\n"
    )
    facts = [
        f"index version {md_text(release.index_version)}" if release.index_version else None,
        f"golden version {md_text(release.golden_version)} (sha256 {release.golden_sha256[:12]}…)"
        if release.golden_version
        else "golden set not frozen",
        f"run {md_text(release.run_id)}",
    ]
    out.write(" · ".join(f for f in facts if f) + "\n\n")
    for warning in s["warnings"]:
        out.write(f"> ⚠ {md_text(warning)}\n")
    if s["warnings"]:
        out.write("\n")
    if ev.flakiness is not None:
        cases = ev.flakiness["flaky_cases"]
        flaky = ", ".join(f"{code_span(c['qid'])} ({c['passed']}/{c['of']})" for c in cases)
        out.write(f"Replays: {flakiness_sentence(ev.flakiness)}" + (f": {flaky}" if flaky else "") + ".\n\n")
    _write_release(release, [result for result in ev.gates if not result.applicable], out)

    out.write("## Gates\n\n| metric | gate | value | result |\n|---|---|---|---|\n")
    for result in ev.gates:
        gate = f"{'≤' if result.gate.op == '<=' else '≥'} {result.gate.threshold:.4f}"
        if not result.applicable:
            out.write(f"| {result.gate.metric} | {gate} | n/a (over 0) | ➖ n/a: does not block |\n")
            continue
        mark = "✅ pass" if result.passed else "❌ **FAIL**" if result.gate.hard else "⚠️ warn (soft)"
        out.write(f"| {result.gate.metric} | {gate} | {figure(result.value):.4f} | {mark} |\n")
    for unmeasured in release.unmeasured_gates:  # no value to show: the release section says why
        gate = f"{'≤' if unmeasured.op == '<=' else '≥'} {unmeasured.threshold:.4f}"
        mark = "❌ **FAIL**" if unmeasured.severity == "hard" else "⚠️ warn (soft)"
        out.write(f"| {unmeasured.metric} | {gate} | not measured | {mark}: unmeasured |\n")

    out.write("\n## Grounded QA figures\n\n| metric | value | over |\n|---|---|---|\n")
    score = ev.grounded
    for name, (numerator, denominator) in METRICS.items():
        if score.counts[denominator] == 0:
            out.write(f"| {name} | n/a | 0 {denominator}: not applicable |\n")
            continue
        shown = f"{score.counts[numerator]} / {score.counts[denominator]} {denominator}"
        out.write(f"| {name} | {s[name]:.4f} | {shown} |\n")

    if ev.layered is not None:
        _write_layered(ev, out)
    if ev.tag_slices:
        out.write("\n" + tag_slices_markdown(_slices_json(ev.tag_slices, "right")))
    if ev.qa is not None:
        _write_qa_gates(ev, out)

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
    _write_cases(ev, out)


def _write_qa_gates(ev: Evaluation, out: TextIO) -> None:
    """RAGSpine's four gates, each on its own, their failures, and the fabrication count."""
    qa = ev.qa
    out.write("\n## QA gates\n\n| gate | pass rate | passed / applicable |\n|---|---|---|\n")
    for name, gate in qa.gates.items():
        unmeasured = md_text(f"; {gate.note}") if gate.note else ""
        if gate.total:
            out.write(f"| {name} | {gate.pass_rate:.4f} | {gate.passed} / {gate.total}{unmeasured} |\n")
        elif gate.note:
            out.write(f"| {name} | unmeasured | 0 measured{unmeasured} |\n")
        else:
            out.write(f"| {name} | n/a | 0: applies to no case |\n")
    fabrication = qa.fabrication
    checked = f"of {fabrication.checked} answers that should refuse"
    out.write(f"| fabrication | {fabrication.count} (target 0) | {checked} |\n")
    failures = [(name, f) for name, gate in qa.gates.items() for f in gate.failures]
    if failures:
        out.write("\n| gate | case | expected | actual |\n|---|---|---|---|\n")
        for name, f in failures[:50]:
            expected, actual = _cell(f["expected"]), _cell(f["actual"])
            out.write(f"| {name} | {_cell(f['id'])} | {expected} | {actual} |\n")
        if len(failures) > 50:
            out.write(f"\n… and {len(failures) - 50} more in the JSON report.\n")
    for case in fabrication.cases:
        out.write(f"\n- fabrication in {code_span(case['id'])}: {md_text(', '.join(case['numbers']))}")
    if fabrication.cases:
        out.write("\n")


def _cell(value) -> str:
    return md_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _write_release(release: ReleaseDecision, not_applicable: list[GateResult], out: TextIO) -> None:
    out.write(f"## Release decision: **{release.decision}**\n\n")
    for problem in release.integrity:
        out.write(f"- **blocked: {md_text(problem['reason'])}**: {md_text(problem['detail'])}\n")
    if release.integrity:
        out.write("\n")
    why = "" if release.ships else why_markdown(release.causes)
    if why:
        out.write(why + "\n")
    for gate in release.warned_gates:
        out.write(
            f"- soft gate **{gate.metric}** = {gate.value:.4f}, wants {gate.op} {gate.threshold:.4f} "
            f"(Δ {gate.delta:+.4f}): a warning, it does not block\n"
        )
    for gate in release.unmeasured_gates:
        why = f": {md_text(gate.reason)}" if gate.reason else ""
        out.write(
            f"- {gate.severity} gate **{gate.metric}** was not measured{why} (needs {gate.op} "
            f"{gate.threshold:.4f}): it fails\n"
        )
    for result in not_applicable:
        out.write(
            f"- gate **{result.gate.metric}** does not apply to this run (0 cases to measure): "
            "n/a, it does not block\n"
        )
    out.write(detectable_drop_markdown(release))
    if release.ships:
        out.write("Every hard gate, slice and baselined metric holds.\n\n")
        return
    for gate in release.failed_gates:
        out.write(
            f"- gate **{gate.metric}** = {gate.value:.4f}, needs {gate.op} {gate.threshold:.4f} "
            f"(Δ {gate.delta:+.4f})\n"
        )
    for failed in release.failed_slices:
        low, high = failed.ci95
        out.write(
            f"- slice **{md_text(failed.dimension)}={md_text(failed.value)}**: releasable "
            f"{failed.releasable_rate:.1%} of "
            f"{failed.n} (95% CI {low:.1%}–{high:.1%}), needs ≥ {failed.min_rate:.0%}\n"
        )
    for regression in release.regressions:
        out.write(
            f"- regression **{regression.metric}**: {regression.current:.4f} vs baseline "
            f"{regression.baseline:.4f} (Δ {regression.delta:+.4f})\n"
        )
    out.write("\n")


def _write_layered(ev: Evaluation, out: TextIO) -> None:
    layered = ev.layered
    out.write("\n## Layered figures\n\n| metric | value | over |\n|---|---|---|\n")
    for name in LAYERED_METRICS:
        n = layered.denominators[name]
        value = "n/a" if layered.metrics[name] is None else f"{layered.metrics[name]:.4f}"
        out.write(f"| {name} | {value} | {n} cases{'' if n else ': not applicable'} |\n")
    out.write("\n## First failed stage\n\n| stage | cases |\n|---|---|\n")
    for stage, count in layered.stage_histogram().items():
        out.write(f"| {stage} | {count} |\n")
    if ev.slices:
        header = " | ".join(_SLICE_METRICS)
        out.write(
            f"\n## Slices (worst first)\n\n| slice | n | releasable | 95% CI | {header} |\n"
            f"|---|---|---|---|{'---|' * len(_SLICE_METRICS)}\n"
        )
        for s in worst_first(ev.slices):
            cells = ["—" if s.metrics[name] is None else f"{s.metrics[name]:.3f}" for name in _SLICE_METRICS]
            out.write(
                f"| {md_text(s.dimension)}={md_text(s.value)} | {s.n} | {s.releasable_rate:.1%} | "
                f"{s.ci_low:.1%}–{s.ci_high:.1%} | {' | '.join(cells)} |\n"
            )


_MARKDOWN_COLUMNS = ("answerable", "missing", "answered", "citation_hit", "contained", "recall_hit")


def _write_cases(ev: Evaluation, out: TextIO) -> None:
    layered = ev.layered is not None
    extra = " first failed stage |" if layered else ""
    out.write(
        "\n## Per question\n\n| qid | answerable | answered | citation hit | contained | recall@k | label |"
        + extra
        + "\n|---|---|---|---|---|---|---|"
        + ("---|" if layered else "")
        + "\n"
    )
    with WriteBehind(out) as rows:
        for start, cases in _slices_of(ev.grounded.cases):
            parts = ["| ", md_text_column(cases.column("qid").combine_chunks()), _markdown_tail(cases)]
            if layered:
                stage = ev.layered.cases.slice(start, cases.num_rows).column("first_failed_stage")
                parts += [" ", stage.combine_chunks().cast(pa.string()), " |"]
            rows.write(concat(*parts, "\n"))


def _markdown_tail(cases: pa.Table) -> pa.Array:
    def cell(flag: bool | None) -> str:
        return "—" if flag is None else "yes" if flag else "no"

    def render(label, answerable, missing, answered, hit, contained, recalled) -> str:
        answered_cell = "no trace" if missing else cell(answered)
        cells = [cell(answerable), answered_cell, cell(hit), cell(contained), cell(recalled), label]
        return " | " + " | ".join(cells) + " |"

    columns = [cases.column(name).combine_chunks() for name in ("label", *_MARKDOWN_COLUMNS)]
    return render_states(columns, [LABELS, *[BOOL_STATES] * len(_MARKDOWN_COLUMNS)], render)
