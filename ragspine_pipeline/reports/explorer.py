"""The case explorer: every golden case of one run — its answer, evidence, per-metric verdicts and its
flip against the baseline run — as one JSON document (``cases.json``) and one standalone page that
embeds it (``case_explorer.html``: inline CSS and vanilla JS, nothing fetched, works from ``file://``).

A case **passes** by one rule, :func:`case_verdicts`, read off the evaluation report's case rows; the
current run and the baseline run are judged by it alike, so a flip is a change of the case, never of
the rule. The baseline run's verdicts come from its own report (``runs/<run id>/evaluation.json``),
else from the per-case outcomes the baseline entry kept (paired mode), else there is no baseline and
every flip is ``no baseline``.

The document (keys sorted, cases sorted by qid, nothing that changes between two builds of one run):

* ``format``: :data:`FORMAT`; ``run``: ``run_id``, ``decision``, ``index_version``,
  ``index_versions``, ``golden_version``, ``golden_sha256``;
* ``baseline``: ``run_id`` (null: no baseline entry or it names no run), ``source`` (``run report``,
  ``baseline entry`` or null: no per-case verdicts, flips not computed), ``cases`` (how many it judged);
* ``counts``: ``cases``, ``pass``, ``fail``, one count per flip (:data:`FLIPS`), ``changed``
  (pass→fail + fail→pass), ``removed`` (baseline cases this run does not have);
* ``metrics``: every metric name of the metric table (``name (model)`` for a judge's rows), sorted;
  ``stages``: the layered stages in pipeline order;
* ``cases``: ``qid``, ``question``, ``answer``, ``cited_ids``, ``retrieved_ids``, ``contexts``
  (``[{id, text}]``, null when the trace carries none), ``missing`` (no trace), ``label``,
  ``first_failed_stage`` (null without an evidence registry), ``verdict`` (``pass``/``fail``),
  ``baseline_verdict`` (null: not judged there), ``flip``, ``metrics`` (``{name: value}``: 1.0 pass,
  0.0 fail, a ratio in between, null where the metric does not apply), ``tags`` (the gold case's).

Free text (questions, answers, contexts) is PII-redacted like the report's worst-case quotes
(:mod:`ragspine_pipeline.redaction`): the page is meant to be shared.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from itertools import zip_longest
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.decision.baseline import BaselineEntry
from ragspine_pipeline.decision.evaluation import Evaluation
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.redaction import redact_text
from ragspine_pipeline.reports.charts import esc
from ragspine_pipeline.reports.html_parts import golden_version, index_versions
from ragspine_pipeline.scoring.grounded import PASSING_LABELS
from ragspine_pipeline.scoring.join import join_traces
from ragspine_pipeline.scoring.layered import STAGES

if TYPE_CHECKING:
    from ragspine_pipeline.sources.objects import ObjectFolder

FORMAT = "ragspine-case-explorer/1"
CHANGED = ("pass→fail", "fail→pass")
NO_BASELINE = "no baseline"
FLIPS = (*CHANGED, "new", "same", NO_BASELINE)
DECIMALS = 4
_PASSING = frozenset(PASSING_LABELS.to_pylist())
_PLACEHOLDER = re.compile(r"@@([A-Z]+)@@")


@dataclass(frozen=True)
class BaselineCases:
    """The baseline run the flips are computed against: its id, and ``{qid: passed}`` (None: no per-case
    verdicts are known, so no flip is computed) read from ``source``."""

    run_id: str | None = None
    verdicts: Mapping[str, bool] | None = None
    source: str | None = None  # "run report" or "baseline entry"


def case_verdicts(cases: Iterable[Mapping]) -> dict[str, bool]:
    """``{qid: passed}`` of the evaluation report's case rows (``evaluation.json`` ``cases``).

    A case passes when it is ``releasable``, where the layered evaluation applies to it (the row has a
    non-null ``releasable``); otherwise when its grounded ``label`` is ``OK`` or ``REFUSAL_OK``. The
    paired baseline test's ``case_outcomes`` apply the same rule to the scored columns.
    """
    verdicts = {}
    for case in cases:
        releasable = case.get("releasable")
        passed = releasable if releasable is not None else case.get("label") in _PASSING
        verdicts[str(case["qid"])] = bool(passed)
    return verdicts


def baseline_cases(entry: BaselineEntry | None, reports: ObjectFolder | None = None) -> BaselineCases:
    """The baseline run's verdicts: :func:`case_verdicts` of its report (``runs/<entry.run>/evaluation.json``
    under ``reports``, when given and still there), else the entry's recorded ``cases``, else none.

    A report that is gone, unreadable as JSON or without case rows falls back; an unreachable store
    (``SourceError``) is raised: it says nothing about the baseline.
    """
    if entry is None:
        return BaselineCases()
    if reports is not None and entry.run:
        try:
            folder = reports.child("runs", entry.run)
            if folder.exists("evaluation.json"):
                cases = folder.read_json("evaluation.json", "baseline run's evaluation report")["cases"]
                return BaselineCases(entry.run, case_verdicts(cases), "run report")
        except (InputError, KeyError, TypeError, AttributeError):
            pass  # a report we cannot read as one: the entry's own record is the next best
    if entry.cases is not None:
        return BaselineCases(entry.run, dict(entry.cases), "baseline entry")
    return BaselineCases(entry.run)


def explorer_document(
    evaluation: Evaluation, gold: pa.Table, traces: pa.Table, table: pa.Table, baseline: BaselineCases
) -> dict:
    """The explorer's document (module docstring) of one run: ``gold`` and ``traces`` are the canonical
    tables the run scored (traces joined to cases as scoring joins them, the last trace of a case wins),
    ``table`` its metric table (``reports.metric_table``)."""
    rows = {row["qid"]: row for row in _case_rows(evaluation)}
    verdicts = case_verdicts(rows.values())
    before = baseline.verdicts
    metrics, per_case = _metrics_by_case(table)
    answers = _aligned_traces(gold, traces)
    redact = _redactor()
    wanted = ("qid", "question", "tags", "gold_citations", "gold_claim_substr")
    gold_rows = zip(*(gold.column(c).to_pylist() for c in wanted), strict=True)
    trace_rows = zip(*(answers[c] for c in ("claim", "citations", "retrieved_ids", "contexts")), strict=True)
    cases = []
    for (qid, question, tags, expected_ids, phrases), (answer, cited, retrieved, contexts) in zip(
        gold_rows, trace_rows, strict=True
    ):
        row, passed = rows[qid], verdicts[qid]
        was = None if before is None else before.get(qid)
        cases.append(
            {
                "qid": qid,
                "question": redact(question),
                "answer": redact(answer),
                # What the golden case expects: the ids a hit cites one of, the phrases the answer contains.
                "expected_ids": list(expected_ids or ()),
                "expected_phrases": [redact(phrase) for phrase in phrases or ()],
                "cited_ids": cited,
                "retrieved_ids": retrieved,
                "contexts": None
                if contexts is None
                else [{"id": cid, "text": redact(text)} for cid, text in contexts],
                "missing": row["missing"],
                "label": row["label"],
                "first_failed_stage": row.get("first_failed_stage"),
                "verdict": _word(passed),
                "baseline_verdict": None if was is None else _word(was),
                "flip": _flip(passed, was, before is not None),
                "metrics": {name: per_case.get(qid, {}).get(name) for name in metrics},
                "tags": dict(tags or ()),
            }
        )
    cases.sort(key=lambda case: case["qid"])
    counts = {flip: 0 for flip in FLIPS}
    for case in cases:
        counts[case["flip"]] += 1
    passing = sum(verdicts.values())
    release = evaluation.release
    return {
        "format": FORMAT,
        "run": {
            "run_id": release.run_id,
            "decision": release.decision,
            "index_version": release.index_version,
            "index_versions": list(release.index_versions),
            "golden_version": release.golden_version,
            "golden_sha256": release.golden_sha256,
        },
        "baseline": {
            "run_id": baseline.run_id,
            "source": None if before is None else baseline.source,
            "cases": None if before is None else len(before),
        },
        "counts": {
            "cases": len(cases),
            "pass": passing,
            "fail": len(cases) - passing,
            **counts,
            "changed": sum(counts[flip] for flip in CHANGED),
            "removed": 0 if before is None else len(set(before) - set(verdicts)),
        },
        "metrics": metrics,
        "stages": list(STAGES),
        "cases": cases,
    }


def explorer_json(document: Mapping) -> str:
    """The document as published (``cases.json``) and embedded in the page, byte for byte: compact,
    keys sorted, UTF-8 text; ``</`` written ``<\\/`` and ``<!--`` as ``\\u003c!--`` (both still JSON) so
    that no text can end or derail the ``<script>`` element that holds it."""
    text = json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "\\u003c!--")


def render_explorer(document: Mapping) -> str:
    """The standalone page of ``document``: the header (run, decision, versions, baseline, counts) as
    HTML, the cases as embedded JSON (:func:`explorer_json`) that the page's script filters and pages."""
    run, baseline, counts = document["run"], document["baseline"], document["counts"]
    parts = {
        "TITLE": esc(f"Case explorer · {run['run_id']}"),
        "HEADER": _header(run, baseline, counts),
        "SCRIPT": _asset("explorer.js"),
        "DATA": explorer_json(document),
    }
    # One pass: text put in place is never searched for placeholders again.
    return _PLACEHOLDER.sub(lambda match: parts[match[1]], _asset("explorer.html"))


# -- building --------------------------------------------------------------------------------------


def _case_rows(evaluation: Evaluation) -> list[dict]:
    """The run's case rows as the evaluation report writes them (the keys :func:`case_verdicts` reads),
    in gold order."""
    grounded = evaluation.grounded.cases
    columns = {name: grounded.column(name) for name in ("qid", "label", "missing")}
    if evaluation.layered is not None:
        layered = evaluation.layered.cases
        columns |= {name: layered.column(name) for name in ("first_failed_stage", "releasable")}
    return pa.table({name: column.cast(_plain(column.type)) for name, column in columns.items()}).to_pylist()


def _plain(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _aligned_traces(gold: pa.Table, traces: pa.Table) -> dict[str, list]:
    """Per gold row (in order), what its trace says: the answer, cited and retrieved ids, and the
    contexts as ``(id, text)`` pairs — the trace's own ``contexts``, else the texts of its retrieved
    context — None where the trace does not carry them (or there is no trace)."""
    rows, _ = join_traces(gold, traces)
    joined = traces if rows is None else traces.take(rows)

    def column(name: str) -> list:
        if name not in joined.column_names:
            return [None] * gold.num_rows
        return joined.column(name).to_pylist()

    # A QA-gate trace may carry its answer only as the narrative answer.
    answers = [
        claim if claim is not None else narrative
        for claim, narrative in zip(column("claim"), column("outcome_narrative"), strict=True)
    ]
    contexts = [
        _contexts(ids, texts, retrieved)
        for ids, texts, retrieved in zip(
            column("context_ids"), column("context_texts"), column("outcome_context"), strict=True
        )
    ]
    return {
        "claim": answers,
        "citations": column("citations"),
        "retrieved_ids": column("retrieved_ids"),
        "contexts": contexts,
    }


def _contexts(ids: list | None, texts: list | None, retrieved: list | None) -> list[tuple] | None:
    if ids is not None or texts is not None:
        return list(zip_longest(ids or (), texts or ()))
    if retrieved is not None:
        return [(None, text) for text in retrieved]
    return None


def _metrics_by_case(table: pa.Table) -> tuple[list[str], dict[str, dict[str, float | None]]]:
    """The metric names of the long metric table (a judge's rows as ``metric (model)``), sorted, and
    ``{qid: {name: value}}`` (rounded; null where the metric does not apply)."""
    model = pc.fill_null(pc.binary_join_element_wise(" (", table.column("model"), ")", ""), "")
    names = pc.binary_join_element_wise(table.column("metric"), model, "").to_pylist()
    values = table.column("value").to_pylist()
    per_case: dict[str, dict[str, float | None]] = {}
    for qid, name, value in zip(table.column("qid").to_pylist(), names, values, strict=True):
        finite = value is not None and math.isfinite(value)
        per_case.setdefault(qid, {})[name] = round(value, DECIMALS) if finite else None
    return sorted(set(names)), per_case


def _redactor():
    """``redact_text`` memoised for one document: the same passage is retrieved for many cases."""
    seen: dict[str, str] = {}

    def redact(text: str | None) -> str | None:
        if not text:
            return text
        if text not in seen:
            seen[text] = redact_text(text)[0]
        return seen[text]

    return redact


def _word(passed: bool) -> str:
    return "pass" if passed else "fail"


def _flip(passed: bool, was: bool | None, has_baseline: bool) -> str:
    if not has_baseline:
        return NO_BASELINE
    if was is None:
        return "new"
    if was == passed:
        return "same"
    return "pass→fail" if was else "fail→pass"


# -- rendering -------------------------------------------------------------------------------------


def _header(run: Mapping, baseline: Mapping, counts: Mapping) -> str:
    decision = run.get("decision")
    badge = decision if decision in ("ship", "block") else "unknown"
    facts = [
        ("run", "run-id", esc(run.get("run_id"))),
        ("index version", "index-version", esc(index_versions(run))),
        ("golden version", "golden-version", esc(golden_version(run))),
        ("baseline run", "baseline-run", esc(baseline.get("run_id") or "none")),
    ]
    dl = "".join(f'<dt>{name}</dt><dd id="{key}">{value}</dd>' for name, key, value in facts)
    figures = [
        ("cases", "count-cases", counts["cases"]),
        ("pass→fail", "count-pass-fail", counts["pass→fail"]),
        ("fail→pass", "count-fail-pass", counts["fail→pass"]),
        ("new", "count-new", counts["new"]),
    ]
    strip = "".join(
        f'<li class="{"fail" if key == "count-pass-fail" and n else ""}">'
        f'<b id="{key}">{n}</b> {esc(name)}</li>'
        for name, key, n in figures
    )
    if baseline.get("source") is None:
        note = (
            "No baseline run: flips are not computed."
            if baseline.get("run_id") is None
            else "The baseline run's per-case results are not available: flips are not computed."
        )
        strip += f'<li id="no-baseline" class="note">{esc(note)}</li>'
    return (
        f'<div class="top"><h1>Case explorer</h1>'
        f'<span id="decision" class="badge {badge}">{esc(str(decision or "unknown").upper())}</span></div>'
        f'<dl class="facts">{dl}</dl><ul class="counts">{strip}</ul>'
    )


def _asset(name: str) -> str:
    return resources.files("ragspine_pipeline.reports").joinpath(name).read_text(encoding="utf-8")
