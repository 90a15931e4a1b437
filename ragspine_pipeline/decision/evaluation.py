"""One evaluation run, from canonical columns to the release decision — shared by every shell.

The CLI and the Dagster assets load files their own way, then call :func:`evaluate`: grounded
metrics, the layered evaluation and slices when an evidence registry is given, the QA gates and
fabrication count when the golden set carries RAGSpine expectations, gates, the baseline comparison
(the fabrication count against the baseline's ``fabrication_count``) and the ``ship`` / ``block``
decision with its causes. Without a gate list, ``run_gates.default_gates_for`` picks the defaults of the
dialects the data carries.

Every metric of the run is one :class:`~ragspine_pipeline.metrics.MetricResult` (:attr:`Evaluation.results`):
its value, numerator and denominator, each metric defined in the registry (``ragspine_pipeline.metrics``).
Not applicable: a metric whose denominator is 0 has the value None (JSON ``null``), shown as n/a with its
denominator; a gate on it neither passes nor fails (it never blocks), a baseline skips it. Unmeasured is
not that: a metric the cases want but whose input no trace carried (``narrative_faithfulness`` without
retrieved context) is also None, and named with the reason (:attr:`Evaluation.unmeasured`); a gate on it
fails as unmeasured, as a gate on a metric the run did not measure at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.decision.baseline import (
    BaselineEntry,
    Comparison,
    Regression,
    compare,
)
from ragspine_pipeline.decision.causes import release_causes
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.flakiness import flakiness
from ragspine_pipeline.decision.gates import Gate, GateResult, evaluate_gates, unmeasured
from ragspine_pipeline.decision.golden import GoldenLock
from ragspine_pipeline.decision.outcomes import (
    CANARIES,
    canaries,
    canary_rows,
    case_outcomes,
    with_wrong_canaries,
)
from ragspine_pipeline.decision.paired import paired_test
from ragspine_pipeline.decision.release import (
    PAIRED_REGRESSION,
    ReleaseDecision,
    decide,
    failed_slices,
    index_integrity,
)
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import (
    GOLDEN_FAMILIES,
    MetricResult,
    Scope,
    names,
)
from ragspine_pipeline.scoring.grounded import (
    MIN_SUBSTR_CHARS,
    GroundedScore,
    score_grounded,
    short_snippet_cases,
)
from ragspine_pipeline.scoring.layered import RATIO_METRICS, LayeredScore, score_layered
from ragspine_pipeline.scoring.narrative import ACCURACY as ANSWER_ACCURACY
from ragspine_pipeline.scoring.narrative import FAITHFULNESS as NARRATIVE_FAITHFULNESS
from ragspine_pipeline.scoring.narrative import narrative_cases, read_references
from ragspine_pipeline.scoring.qa_gates import FABRICATION, QAGates, has_qa_cases, score_qa_gates
from ragspine_pipeline.scoring.refusal import mark_refusals
from ragspine_pipeline.scoring.slices import Slice, outcome_slices, slices

LAYERED_METRICS = names("layered")
# Every name a golden run can report, gate or baseline (``ragspine_pipeline.metrics``).
KNOWN_METRICS = names(*GOLDEN_FAMILIES)


@dataclass(frozen=True)
class Evaluation:
    """Everything one run decided, ready to render or to store."""

    grounded: GroundedScore
    gates: list[GateResult]
    release: ReleaseDecision
    results: dict[str, MetricResult]
    layered: LayeredScore | None = None
    slices: list[Slice] = field(default_factory=list)
    comparison: Comparison | None = None
    qa: QAGates | None = None
    flakiness: dict | None = None  # per-case passes over repeated replays (``decision.flakiness``)
    # Gold cases whose snippets are all shorter than the config's min_snippet_chars: never contained.
    short_snippets: list[str] = field(default_factory=list)
    min_snippet_chars: int = MIN_SUBSTR_CHARS
    # Without a layered evaluation, the cases by tag all the same (``scoring.slices.outcome_slices``),
    # which no slice gate judges.
    tag_slices: list[Slice] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.release.ships

    @property
    def fabrication_count(self) -> int | None:
        return None if self.qa is None else self.qa.fabrication.count

    @property
    def metrics(self) -> dict[str, float | None]:
        """Every metric's unrounded value (None: it does not apply to this run)."""
        return {name: result.value for name, result in self.results.items()}

    @property
    def baseline_metrics(self) -> dict[str, float]:
        """What a baseline records and compares: every metric that applies to this run (a metric with
        no case to measure is not a measurement), but the fabrication count, kept as its own entry."""
        skip = {FABRICATION, *CANARIES}  # canaries: always gated at 1.0
        return {name: value for name, value in self.metrics.items() if name not in skip and value is not None}

    def baseline_figures(self, paired: bool) -> BaselineFigures:
        """What the baseline comparison and promotion need of this run (:class:`BaselineFigures`);
        ``paired``: keep the per-case outcomes for the paired test."""
        narrative = self.qa is not None and NARRATIVE_FAITHFULNESS in self.qa.gates
        return BaselineFigures(
            metrics=self.baseline_metrics,
            fabrication_count=self.fabrication_count,
            n_cases=self.grounded.counts["cases"],
            case_outcomes=self.case_outcomes if paired else None,
            answer_accuracy_unmeasured=narrative and ANSWER_ACCURACY not in self.metrics,
        )

    @property
    def case_outcomes(self) -> dict[str, bool]:
        """``{case id: passed}`` (``outcomes.case_outcomes``): what the paired baseline test compares."""
        return case_outcomes(self.grounded, self.layered)

    @property
    def denominators(self) -> dict[str, int]:
        """How many cases (answers, for the fabrication count) each metric that has one is over."""
        return {name: r.denominator for name, r in self.results.items() if r.denominator is not None}

    @property
    def unmeasured(self) -> dict[str, str]:
        """``{metric: why}`` of the metrics whose value is None because no trace carried their input,
        or because the service says its traces cannot measure them (``citations_are_retrieved``)."""
        return {**self.grounded.not_measured, **({} if self.qa is None else self.qa.unmeasured_metrics())}

    @property
    def not_applicable(self) -> list[str]:
        """The metrics of this run whose value is None (their denominator is 0), in ``results`` order,
        but the :attr:`unmeasured` ones."""
        unmeasured = self.unmeasured
        return [name for name, r in self.results.items() if not r.applies and name not in unmeasured]


@dataclass(frozen=True)
class BaselineFigures:
    """What comparing a run with a baseline, and promoting it, needs of the run — as plain data, so a
    step on another host can ratchet the baseline from the decision alone (:meth:`to_dict`).

    ``metrics``: :attr:`Evaluation.baseline_metrics`; ``case_outcomes``: ``{case id: passed}``, kept
    only when the paired test needs them (else None); ``answer_accuracy_unmeasured``: the run has
    narrative cases but no reference texts, so a baseline listing ``answer_accuracy`` cannot be met.
    """

    metrics: dict[str, float]
    fabrication_count: int | None
    n_cases: int
    case_outcomes: dict[str, bool] | None = None
    answer_accuracy_unmeasured: bool = False

    def to_dict(self) -> dict:
        return {
            "metrics": dict(self.metrics),
            "fabrication_count": self.fabrication_count,
            "n_cases": self.n_cases,
            "case_outcomes": None if self.case_outcomes is None else dict(self.case_outcomes),
            "answer_accuracy_unmeasured": self.answer_accuracy_unmeasured,
        }

    @classmethod
    def from_dict(cls, data: dict) -> BaselineFigures:
        return cls(
            metrics={name: float(value) for name, value in data["metrics"].items()},
            fabrication_count=data.get("fabrication_count"),
            n_cases=int(data["n_cases"]),
            case_outcomes=data.get("case_outcomes"),
            answer_accuracy_unmeasured=bool(data.get("answer_accuracy_unmeasured", False)),
        )


def run_results(
    grounded: GroundedScore, layered: LayeredScore | None, qa: QAGates | None
) -> dict[str, MetricResult]:
    """Every metric the scores of a run measured, each with its numerator and denominator: the grounded
    metrics, the layered ones, and each QA gate with the fabrication count."""
    out = grounded.results()
    if layered is not None:
        out.update(layered.results())
    if qa is not None:
        out.update(qa.results())
    return out


def metric_scope(evidence: object | None) -> Scope:
    """The scope metric names of a golden run are read in: with or without an evidence registry (an old
    name such as ``faithfulness`` means the layered claim metric in the one, RAGSpine's narrative gate
    in the other)."""
    return Scope.WITH_REGISTRY if evidence is not None else Scope.WITHOUT_REGISTRY


def narrative_references(gold: pa.Table, config: EvalConfig, wanted: Iterable[str]) -> dict[str, str] | None:
    """The reference texts ``answer_accuracy`` measures against: ``{narrative_doc: text}`` for the docs
    the narrative cases name, read from ``config.references``. None when there is none, or when no
    directory is configured and nothing asks for ``answer_accuracy``; asked for (a gate or a baseline
    entry lists it) without a directory, a one-line InputError — it would otherwise go unmeasured."""
    if "expected_narrative_doc" not in gold.column_names or "case_type" not in gold.column_names:
        return None
    named = gold.column("expected_narrative_doc").filter(narrative_cases(gold.column("case_type")))
    docs = set(named.drop_null().to_pylist())
    if not docs:
        return None
    if config.references is not None:
        return read_references(config.references, docs)
    if ANSWER_ACCURACY in set(wanted):
        raise InputError("references", _NO_REFERENCES.format(listed="a gate or the baseline lists"))
    return None


_NO_REFERENCES = (
    "{listed} answer_accuracy, which needs the reference text of each narrative_doc: give --references "
    "DIR (one text file per doc) or references: DIR in the gates config"
)


def evaluate(
    gold: pa.Table,
    traces: pa.Table,
    *,
    gates: Sequence[Gate],
    config: EvalConfig,
    run_id: str,
    evidence: pa.Table | None = None,
    baseline: BaselineEntry | None = None,
    compare_baseline: bool = False,
    lock: GoldenLock | None = None,
    k: int | None = None,
    judged: dict[str, float] | None = None,
    expected_index_version: str | None = None,
) -> Evaluation:
    """Score, gate and decide.

    ``compare_baseline`` with ``baseline=None`` means the baseline file has no entry for the mode yet;
    the comparison is :func:`with_baseline` (strict or paired, as the config says). ``judged``: the LLM
    judge's aggregates (``judge.report.judged_metrics``), gated like any metric; a gate on a metric
    nobody measured fails (it blocks when hard). ``expected_index_version``: the index the run was
    requested for; traces naming another one, or more than one, block (``mixed_index_versions``).
    """
    traces = mark_refusals(traces, config.refusals.phrases, config.refusals.patterns)
    grounded = score_grounded(
        gold,
        traces,
        k=k or config.k,
        min_snippet_chars=config.min_snippet_chars,
        citations_are_retrieved=config.citations_are_retrieved,
    )
    layered, all_slices = None, []
    if evidence is not None:
        layered = score_layered(gold, traces, evidence, config.required_versions)
        all_slices = slices(gold.column("tags"), layered.cases, RATIO_METRICS)
    qa = None
    if has_qa_cases(gold):
        listed = baseline.metrics if compare_baseline and baseline is not None else {}
        wanted = [*(gate.metric for gate in gates), *listed]
        references = narrative_references(gold, config, wanted)
        qa = score_qa_gates(gold, traces, config.period_pattern, references)
    results = run_results(grounded, layered, qa)
    results.update({name: MetricResult(name, value) for name, value in (judged or {}).items()})
    canary = canary_rows(gold, grounded, layered)
    checks = canaries(canary)
    results.update(checks)
    gated = {gate.metric for gate in gates}
    gates = [*gates, *(Gate(check, 1.0, "min") for check in checks if check not in gated)]
    # A metric no trace carried the input of is no measurement: its gates fail as unmeasured, with why.
    reasons = {**grounded.not_measured, **({} if qa is None else qa.unmeasured_metrics())}
    measured = {name: result for name, result in results.items() if name not in reasons}
    gate_results = evaluate_gates(gates, measured)
    release = decide(
        [result for result in gate_results if result.applicable],  # a gate that does not apply never blocks
        failed_slices(all_slices, config.slice_gate),
        None,
        histogram=None if layered is None else layered.stage_histogram(),
        index_versions=_value_counts(traces.column("index_version")),
        golden_version=None if lock is None else lock.version,
        golden_sha256=None if lock is None else lock.sha256,
        run_id=run_id,
        slice_gate=config.slice_gate if layered is not None else None,
        unmeasured=unmeasured(gates, measured),
        unmeasured_reasons=reasons,
        causes=with_wrong_canaries(release_causes(gold, grounded.cases, layered), canary),
        expected_index_version=expected_index_version,
    )
    evaluation = Evaluation(
        grounded,
        gate_results,
        release,
        results,
        layered,
        all_slices,
        None,
        qa,
        short_snippets=short_snippet_cases(gold, config.min_snippet_chars),
        min_snippet_chars=config.min_snippet_chars,
        tag_slices=[] if layered is not None else outcome_slices(gold.column("tags"), grounded.cases),
    )
    return with_baseline(evaluation, baseline, config) if compare_baseline else evaluation


def with_replays(
    evaluation: Evaluation,
    gold: pa.Table,
    replays: Iterable[pa.Table],
    *,
    config: EvalConfig,
    evidence: pa.Table | None = None,
    k: int | None = None,
) -> Evaluation:
    """``evaluation`` with the per-case flakiness of its run and the other replays of the same golden
    set (``decision.flakiness``); each replay is scored the same way, only which cases passed counts."""
    outcomes = [evaluation.case_outcomes]
    for traces in replays:
        scored = evaluate(gold, traces, gates=(), config=config, run_id="replay", evidence=evidence, k=k)
        outcomes.append(scored.case_outcomes)
    return replace(evaluation, flakiness=flakiness(outcomes))


def with_index_check(
    evaluation: Evaluation, replays: Sequence[tuple[str, pa.Table]], expected: str | None = None
) -> Evaluation:
    """``evaluation`` with the index check run over every replay (``--trace A --trace B``), not the first
    one only: replays that name different index versions, or one the run was not requested for, block
    (``mixed_index_versions``), and then nothing is promoted."""
    counts = [(name, _index_versions(table)) for name, table in replays]
    release = evaluation.release.model_copy(
        update={
            "integrity": index_integrity({}, expected, replays=counts),
            "index_versions": sorted({version for _path, versions in counts for version in versions}),
        }
    )
    return replace(evaluation, release=release)


def _index_versions(traces: pa.Table) -> dict[str, int]:
    counts = pc.value_counts(traces.column("index_version").drop_null())
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))


def with_baseline(evaluation: Evaluation, entry: BaselineEntry | None, config: EvalConfig) -> Evaluation:
    """``evaluation`` judged against a baseline entry (None: the mode has none yet) by
    :func:`compare_with_baseline`; what a shell calls under the baseline's lock, on the entry read there."""
    figures = evaluation.baseline_figures(paired=config.baseline_test == "paired")
    comparison = compare_with_baseline(figures, entry, config)
    release = evaluation.release.with_comparison(
        comparison, baseline_test=config.baseline_test, paired_settings=config.paired, cases=figures.n_cases
    )
    return replace(evaluation, comparison=comparison, release=release)


def compare_with_baseline(
    figures: BaselineFigures, entry: BaselineEntry | None, config: EvalConfig
) -> Comparison:
    """A run's figures against a baseline entry (None: the mode has none yet), as the config's
    ``baseline_test`` says.

    * ``strict``: every listed metric strictly worse than its baseline is a regression, the fabrication
      count when it rose (``baseline.compare``).
    * ``paired``: the exact test of this run's case outcomes against the entry's reference pool of recent
      shipping runs (``decision.paired``; an entry with only ``cases`` is a pool of that run); when it
      blocks, the regression is ``case_pass_rate (paired)``: the pool's pass rate against this run's,
      over the cases both hold. The aggregate metrics are compared only to be reported (their
      deltas are sampling noise for such a system): listed ones the run did not measure stay listed.

    Either way the comparison carries the entry's values set by hand that still stand (``changes``).
    """
    # Listed and measurable but without reference texts, answer_accuracy must not go silently unmeasured.
    if figures.answer_accuracy_unmeasured and entry is not None and ANSWER_ACCURACY in entry.metrics:
        raise InputError("references", _NO_REFERENCES.format(listed="the baseline lists"))
    strict = compare(entry, figures.metrics, figures.fabrication_count)
    if config.baseline_test == "paired":
        paired = _paired(entry, figures.case_outcomes or {}, config, strict.unmeasured)
        return replace(paired, changes=strict.changes)
    return strict


def _paired(
    entry: BaselineEntry | None, outcomes: dict[str, bool], config: EvalConfig, unmeasured: list[str]
) -> Comparison:
    reference = None if entry is None else entry.reference()
    if reference is None:  # nothing recorded yet: nothing to compare with
        return Comparison([], unmeasured, None)
    test = paired_test(reference, outcomes, config.paired)
    regressions = []
    if test.blocks:
        before, now = test.reference_rate, test.current_rate
        regressions.append(Regression(PAIRED_REGRESSION, before, now, now - before))
    return Comparison(regressions, unmeasured, test.to_dict())


def _value_counts(column: pa.ChunkedArray) -> dict[str, int]:
    counts = pc.value_counts(column.drop_null())
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
