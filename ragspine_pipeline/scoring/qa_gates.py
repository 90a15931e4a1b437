"""RAGSpine's QA gates and the fabrication count, over canonical gold and trace columns.

The gates are kept separate, each with ``total`` (cases it applies to), ``passed``, ``pass_rate``
(None — JSON ``null``, not applicable — when it applies to no case), ``failures``
(``{id, expected, actual}``) and ``by_tag`` (``{dimension: {value: {total, passed, pass_rate}}}``).
They apply to the cases that carry ``expected``
(a golden set may mix RAGSpine cases with other dialects; the others are not QA-gate cases). A case with
no trace is answered with an empty claim and no outcome, so it fails what applies to it.

* ``numeric_accuracy`` — applies when ``expected.value`` exists: ``outcome.found_value`` equals it (up
  to 1e-9 relative: float noise, not rounding) and ``outcome.found_unit`` equals ``expected.unit``.
* ``citation_validity`` — applies when ``expected.source`` or ``expected.narrative_doc`` exists.
  Source: ``outcome.found_source`` equals ``expected.source`` (doc and locator) and the doc name appears
  in the answer (the claim text, case-sensitive). Narrative: some ``outcome.sources`` entry has
  ``doc == narrative_doc`` and that name appears in the answer. A composite case needs both.
* ``refusal_appropriateness`` — every QA-gate case, both directions: when ``expected.refuse`` (absent:
  the case is unanswerable) the answer is a refusal and ``found_value`` is absent; otherwise it is not a
  refusal. ``outcome.refused`` says whether an answer is a refusal when the trace carries it; otherwise
  the claim, stripped of Unicode whitespace, is the refusal token (``scoring.grounded.refusals``).
* ``clarification_appropriateness`` — every QA-gate case: ``outcome.clarification_mode`` equals
  ``expected.clarification`` (either one absent reads as ``none``).
* ``narrative_faithfulness`` and ``answer_accuracy`` — RAGSpine's groundedness gates on the cases whose
  ``case_type`` is ``narrative`` (not composite ones): every claim of ``outcome.narrative_answer``
  lexically entailed by the trace's retrieved context, and that answer's token recall of the reference
  text of ``expected.narrative_doc`` (given as ``references``), both at 0.6 (``scoring.narrative``).
  A narrative case whose trace carries no context passages is *unmeasured* for faithfulness: out of
  ``total``, counted in the gate's ``unmeasured`` beside the fields it ``needs``; when no case could be
  measured the pass rate is None and :meth:`QAGates.unmeasured_metrics` says why.
* ``fabrication`` — on the cases that expect a refusal: reporting periods are removed from the answer
  with ``period_pattern`` (default :data:`~ragspine_pipeline.scoring.fabrication.PERIOD_PATTERN`,
  configurable), then any remaining Unicode digit makes the answer a fabrication
  (``scoring.fabrication``). ``count`` is the number of such answers; the target is 0.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import lists_from_rows
from ragspine_pipeline.metrics import MetricResult, family, ratio
from ragspine_pipeline.scoring import fabrication, rowwise
from ragspine_pipeline.scoring.fabrication import PERIOD_PATTERN
from ragspine_pipeline.scoring.grounded import refusals
from ragspine_pipeline.scoring.join import join_traces
from ragspine_pipeline.scoring.narrative import FAITHFULNESS as NARRATIVE_FAITHFULNESS
from ragspine_pipeline.scoring.narrative import GATES as NARRATIVE_GATES
from ragspine_pipeline.scoring.narrative import NEEDS, lacking, score_narrative
from ragspine_pipeline.scoring.rowwise import any_in

# The four pass rates and the count of fabricating refusals (the registry, ``ragspine_pipeline.metrics``),
# then the narrative gates.
FABRICATION = next(m.name for m in family("qa") if m.kind == "count")
GATES = (*(m.name for m in family("qa") if m.kind == "rate"), *NARRATIVE_GATES)
RELATIVE_TOLERANCE = 1e-9

_CONTAINS = np.frompyfunc(operator.contains, 2, 1)
_OUTCOME = (
    "claim",
    "outcome_refused",
    "outcome_clarification",
    "outcome_found_value",
    "outcome_found_value_text",
    "outcome_found_unit",
    "outcome_found_doc",
    "outcome_found_locator",
    "outcome_source_docs",
    "outcome_narrative",
    "outcome_context",
    "context_texts",
)


@dataclass(frozen=True)
class QAGate:
    """One gate: how many cases it applies to, how many pass, which fail and how, per tag. A gate whose
    input a trace may lack (``needs``: the trace fields, None for the others) also counts the cases it
    could not measure (``unmeasured``), which are in neither ``total`` nor ``passed``."""

    name: str
    total: int
    passed: int
    failures: list[dict]
    by_tag: dict[str, dict[str, dict]]
    unmeasured: int = 0
    needs: str | None = None

    @property
    def pass_rate(self) -> float | None:
        return ratio(self.passed, self.total)

    @property
    def result(self) -> MetricResult:
        return MetricResult(self.name, self.pass_rate, self.passed, self.total)

    @property
    def lacking(self) -> str | None:
        """What the unmeasured cases' traces lack (``4 narrative traces carry no …``); None when every
        case was measured."""
        return lacking(self.name, self.unmeasured) if self.unmeasured else None

    @property
    def note(self) -> str | None:
        """:attr:`lacking`, and that this gate is unmeasured for those cases: the run's warning."""
        return None if self.lacking is None else f"{self.lacking}: {self.name} unmeasured for them"

    def to_dict(self) -> dict:
        """The gate as the report shows it; ``unmeasured`` and ``needs`` only on a gate that has them."""
        out = {
            "total": self.total,
            "passed": self.passed,
            "pass_rate": None if self.pass_rate is None else round(self.pass_rate, 4),
            "failures": self.failures,
            "by_tag": self.by_tag,
        }
        if self.needs is not None:
            out.update(unmeasured=self.unmeasured, needs=self.needs)
        return out


@dataclass(frozen=True)
class Fabrication:
    """Refusal answers that state a number once period tokens are removed; the target count is 0."""

    count: int
    checked: int  # answers checked: the cases expecting a refusal
    cases: list[dict] = field(default_factory=list)  # {id, numbers, answer}

    @property
    def result(self) -> MetricResult:
        """The count as a metric: it always applies (nothing checked, nothing fabricated)."""
        return MetricResult(FABRICATION, float(self.count), None, self.checked)

    def to_dict(self) -> dict:
        return {"count": self.count, "checked": self.checked, "cases": self.cases}


@dataclass(frozen=True)
class QAGates:
    """The gates, the fabrication count, and per case which gates passed (None: not applicable)."""

    gates: dict[str, QAGate]
    fabrication: Fabrication
    cases: pa.Table  # qid and one nullable bool column per gate, gold order
    # The cases whose trace wrote its figure as text ("1702.0"): a miss, as RAGSpine scores it.
    text_figures: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> dict[str, float | None]:
        return {name: gate.pass_rate for name, gate in self.gates.items()}

    def results(self) -> dict[str, MetricResult]:
        """Every gate's pass rate over the cases it applies to, then the fabrication count."""
        return {
            **{name: gate.result for name, gate in self.gates.items()},
            FABRICATION: self.fabrication.result,
        }

    def unmeasured_notes(self) -> dict[str, str]:
        """``{gate: QAGate.note}`` of the gates some case could not be measured for, in gate order."""
        return {name: gate.note for name, gate in self.gates.items() if gate.note is not None}

    def text_figure_note(self) -> str | None:
        """The warning naming the cases whose figure was written as text, if any."""
        if not self.text_figures:
            return None
        shown = ", ".join(self.text_figures[:20])
        more = f" and {len(self.text_figures) - 20} more" if len(self.text_figures) > 20 else ""
        return (
            f"{len(self.text_figures)} trace(s) wrote outcome.found_value as text, which is no number: "
            f"numeric_accuracy fails for them, as RAGSpine scores it: {shown}{more}"
        )

    def unmeasured_metrics(self) -> dict[str, str]:
        """``{gate: why}`` of the gates no case could be measured for, though some case wanted them:
        their value is None, yet unlike a gate that applies to no case they are not *not applicable*
        (a gate on one fails as unmeasured)."""
        return {name: gate.note for name, gate in self.gates.items() if gate.total == 0 and gate.note}

    def to_dict(self) -> dict:
        return {name: gate.to_dict() for name, gate in self.gates.items()}


def has_qa_cases(gold: pa.Table) -> bool:
    """Whether any gold case carries QA-gate expectations (``case_type`` or ``expected``)."""
    if "case_type" not in gold.column_names:
        return False
    columns = ["case_type", "expected_refuse", "expected_clarification", "expected_value"]
    return any(gold.column(name).null_count < gold.num_rows for name in columns)


def score_qa_gates(
    gold: pa.Table,
    traces: pa.Table,
    period_pattern: str = PERIOD_PATTERN,
    references: Mapping[str, str] | None = None,
) -> QAGates:
    """The QA gates and fabrication over canonical gold and trace columns (``contracts.columns``).
    The narrative gates are present only when some case is a narrative case (``case_type``);
    ``answer_accuracy`` also needs ``references`` (``{narrative_doc: text}``)."""
    gold = gold.combine_chunks()
    trace_rows, _counts = join_traces(gold, traces)
    traces = traces.select([name for name in _OUTCOME if name in traces.column_names])
    aligned = (traces if trace_rows is None else traces.take(trace_rows)).combine_chunks()
    col = {name: aligned.column(name).chunk(0) if aligned.num_rows else pa.array([]) for name in _OUTCOME}
    g = {name: gold.column(name).chunk(0) for name in gold.column_names}
    n = gold.num_rows

    qa_case = _valid(g["case_type"]) | _valid(g["expected_refuse"]) | _valid(g["expected_clarification"])
    qa_case |= (
        _valid(g["expected_value"]) | _valid(g["expected_source_doc"]) | _valid(g["expected_narrative_doc"])
    )
    claim = pc.fill_null(col["claim"], "")
    refused = refusals(rowwise.lower(claim), col["outcome_refused"])
    answer = claim.to_numpy(zero_copy_only=False)

    # numeric_accuracy
    numeric = _valid(g["expected_value"])
    expected_value = np.asarray(pc.fill_null(g["expected_value"], 0.0), dtype=float)
    found_value = np.asarray(pc.fill_null(col["outcome_found_value"], np.nan), dtype=float)
    close = np.abs(found_value - expected_value) <= RELATIVE_TOLERANCE * np.maximum(
        1.0, np.abs(expected_value)
    )
    numeric_ok = close & _same(g["expected_unit"], col["outcome_found_unit"])

    # citation_validity
    wants_source, wants_narrative = _valid(g["expected_source_doc"]), _valid(g["expected_narrative_doc"])
    source_ok = (
        _same(g["expected_source_doc"], col["outcome_found_doc"])
        & _same(g["expected_source_locator"], col["outcome_found_locator"])
        & _mentioned(g["expected_source_doc"], answer, wants_source)
    )
    narrative_ok = _in_sources(g["expected_narrative_doc"], col["outcome_source_docs"], n) & _mentioned(
        g["expected_narrative_doc"], answer, wants_narrative
    )
    citation_ok = (source_ok | ~wants_source) & (narrative_ok | ~wants_narrative)

    # refusal_appropriateness, clarification_appropriateness
    answerable = np.asarray(g["answerable"], dtype=bool)
    expect_refusal = np.asarray(pc.fill_null(g["expected_refuse"], False), dtype=bool)
    expect_refusal |= ~_valid(g["expected_refuse"]) & ~answerable
    text_figure = _valid(col["outcome_found_value_text"])
    no_value = ~_valid(col["outcome_found_value"]) & ~text_figure
    refusal_ok = np.where(expect_refusal, refused & no_value, ~refused)
    clarification_ok = _same(
        pc.fill_null(g["expected_clarification"], "none"), pc.fill_null(col["outcome_clarification"], "none")
    )

    narrative = score_narrative(
        g["case_type"],
        g["expected_narrative_doc"],
        col["outcome_narrative"],
        # The retrieved context the trace reports, else the passages it says its answer was given.
        pc.coalesce(col["outcome_context"], col["context_texts"]),
        np.ones(n, dtype=bool) if trace_rows is None else _valid(trace_rows),
        references,
    )
    outcomes = {
        "numeric_accuracy": (numeric & qa_case, numeric_ok),
        "citation_validity": ((wants_source | wants_narrative) & qa_case, citation_ok),
        "refusal_appropriateness": (qa_case, refusal_ok),
        "clarification_appropriateness": (qa_case, clarification_ok),
    }
    faithfulness = narrative.applies[NARRATIVE_FAITHFULNESS] | narrative.unmeasured[NARRATIVE_FAITHFULNESS]
    if faithfulness.any():  # without narrative cases: the four gates
        kept = NARRATIVE_GATES if references is not None else (NARRATIVE_FAITHFULNESS,)
        outcomes.update({gate: (narrative.applies[gate], narrative.ok[gate]) for gate in kept})
    ids = g["qid"].to_pylist()
    tags = g["tags"]
    gates = {
        name: QAGate(
            name,
            int(applies.sum()),
            int((applies & ok).sum()),
            narrative.failures(name, np.flatnonzero(applies & ~ok), ids)
            if name in NARRATIVE_GATES
            else _failures(name, np.flatnonzero(applies & ~ok), ids, g, col, refused, expect_refusal),
            _by_tag(tags, applies, ok),
            int(narrative.unmeasured[name].sum()) if name in NARRATIVE_GATES else 0,
            NEEDS.get(name),
        )
        for name, (applies, ok) in outcomes.items()
    }
    cases = pa.table(
        {
            "qid": g["qid"],
            **{name: pa.array(np.where(a, ok, False), mask=~a) for name, (a, ok) in outcomes.items()},
        }
    )
    fabrication = _fabrication(claim, expect_refusal & qa_case, ids, period_pattern)
    text_figures = sorted(np.asarray(ids, dtype=object)[numeric & text_figure].tolist()) if n else []
    return QAGates(gates, fabrication, cases, text_figures)


def _fabrication(claim: pa.Array, checked: np.ndarray, ids: list, period_pattern: str) -> Fabrication:
    rows = np.flatnonzero(checked)
    answers = claim.take(pa.array(rows, pa.int64()))
    remaining = fabrication.without_periods(answers, period_pattern)
    found = fabrication.fabricated(answers, period_pattern)
    cases = [
        {
            "id": ids[rows[i]],
            "numbers": fabrication.numbers(remaining[i].as_py()),
            "answer": answers[i].as_py()[:200],
        }
        for i in np.flatnonzero(found)
    ]
    return Fabrication(count=len(cases), checked=len(rows), cases=cases)


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_valid(), dtype=bool)


def _same(expected: pa.Array, actual: pa.Array) -> np.ndarray:
    """Null-safe equality: equal values, or both absent."""
    both_null = pc.and_(expected.is_null(), actual.is_null())
    return np.asarray(pc.or_(pc.fill_null(pc.equal(expected, actual), False), both_null), dtype=bool)


def _mentioned(names: pa.Array, answer: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row: the row's ``names`` value occurs in its answer text (only the rows in mask ``rows``)."""
    out = np.zeros(len(answer), dtype=bool)
    if rows.any():
        needles = names.filter(pa.array(rows)).to_numpy(zero_copy_only=False)
        out[rows] = _CONTAINS(answer[rows], needles).astype(bool)
    return out


def _in_sources(docs: pa.Array, source_docs: pa.Array, n: int) -> np.ndarray:
    """Per row: the row's ``docs`` value is one of its ``outcome.sources`` docs."""
    wanted = lists_from_rows(docs.drop_null(), np.flatnonzero(_valid(docs)), n, docs.is_null())
    return any_in(wanted, source_docs)


def _by_tag(tags: pa.Array, applies: np.ndarray, ok: np.ndarray) -> dict[str, dict[str, dict]]:
    """``{dimension: {value: {total, passed, pass_rate}}}`` over the cases the gate applies to."""
    offsets = np.asarray(tags.offsets, dtype=np.int64)
    rows = np.repeat(np.arange(len(tags)), np.diff(offsets))
    keep = applies[rows]
    entries = pa.array(offsets[0] + np.flatnonzero(keep))  # the map's children ignore a slice offset
    table = pa.table(
        {
            "dimension": tags.keys.take(entries),
            "value": tags.items.take(entries),
            "passed": pa.array(ok[rows][keep].astype(np.int64)),
        }
    )
    grouped = table.group_by(["dimension", "value"]).aggregate([("passed", "count"), ("passed", "sum")])
    out: dict[str, dict[str, dict]] = {}
    for dimension, value, total, passed in zip(
        *(grouped.column(c).to_pylist() for c in ("dimension", "value", "passed_count", "passed_sum")),
        strict=True,
    ):
        out.setdefault(dimension, {})[value] = {
            "total": total,
            "passed": passed,
            "pass_rate": round(passed / total, 4),
        }
    return {dimension: dict(sorted(values.items())) for dimension, values in sorted(out.items())}


def _failures(
    gate: str,
    rows: np.ndarray,
    ids: list,
    gold: dict[str, pa.Array],
    outcome: dict[str, pa.Array],
    refused: np.ndarray,
    expect_refusal: np.ndarray,
) -> list[dict]:
    """``{id, expected, actual}`` of each failing case, in gold order (few: a Python loop is fine)."""

    def at(columns: dict[str, pa.Array], name: str, row: int):
        return columns[name][int(row)].as_py()

    out = []
    for row in rows:
        if gate == "numeric_accuracy":
            expected = {"value": at(gold, "expected_value", row), "unit": at(gold, "expected_unit", row)}
            value = at(outcome, "outcome_found_value", row)
            actual = {
                "value": at(outcome, "outcome_found_value_text", row) if value is None else value,
                "unit": at(outcome, "outcome_found_unit", row),
            }
        elif gate == "citation_validity":
            expected = {
                "source": _source(
                    at(gold, "expected_source_doc", row), at(gold, "expected_source_locator", row)
                ),
                "narrative_doc": at(gold, "expected_narrative_doc", row),
            }
            actual = {
                "found_source": _source(
                    at(outcome, "outcome_found_doc", row), at(outcome, "outcome_found_locator", row)
                ),
                "sources": at(outcome, "outcome_source_docs", row),
            }
        elif gate == "refusal_appropriateness":
            expected = {"refuse": bool(expect_refusal[row])}
            actual = {"refused": bool(refused[row]), "found_value": at(outcome, "outcome_found_value", row)}
        else:
            expected = at(gold, "expected_clarification", row) or "none"
            actual = at(outcome, "outcome_clarification", row) or "none"
        out.append({"id": ids[row], "expected": expected, "actual": actual})
    return out


def _source(doc: str | None, locator: str | None) -> dict | None:
    return None if doc is None else {"doc": doc, "locator": locator}
