"""Layered, permission-safe evaluation (docs/metrics.md).

Every case walks the pipeline in order and stops at its **first failed stage**:

``admissibility`` → ``candidate retrieval`` (candidate_recall < 1) → ``context selection``
(context_recall < 1) → ``answer completeness`` (no claims) → ``answer faithfulness``
(claim_faithfulness < 1)
→ ``citation support`` (< 1) → ``answer completeness`` (point_coverage < 1) → ``pass``.
For an unanswerable case the answer stages are replaced by one, ``refusal``: a refusal passes, a shipped
answer fails there. An answerable case that was refused reaches ``refusal`` as its first answer stage
(an over-refusal). A case is **releasable** iff its first failed stage is ``pass``.

Definitions (required = the case's gold citations, selected = ``selected_context_ids``, defaulting to the
first-stage ``retrieved_ids``):

* ``candidate_recall`` = |first_stage ∩ required| / |required|; ``context_recall`` = |selected ∩ required|
  / |required| — not applicable when nothing is required (they then fail no stage);
* ``context_precision`` = |selected ∩ required| / |selected|, where |selected| is the length of the
  selection, a repeated id counted each time (0 when selected is empty);
* a claim of a claim ledger is **supported** by a chunk the registry knows when every one of its
  ``support_phrases`` occurs in the chunk text, both lower-cased as Python's ``str.lower()`` does — an
  empty list is met by every known chunk; the claim read from a trace without a ledger has no support
  phrases and is supported when ≥ 60 % of its word tokens are word tokens of the chunk text;
  ``claim_faithfulness`` = claims supported by some selected chunk / claims (0 with no claims);
  ``citation_coverage`` = claims with a citation / claims; ``citation_support`` = claims whose cited chunk
  is selected and supports them / claims; ``point_coverage`` = |answer points of supported claims ∩
  required_points| / |required_points| (not applicable when no point is required).
* A trace without a claim ledger is one claim: its answer text (when not blank), cited by its first
  citation, with no support phrases (null, not an empty list) and no answer point.

**Admissibility** (each rule reported by name when it fails): the case has a trace (``missing_trace``),
the selection is non-empty (``empty_selection``), ``len(selected) == len(selected_versions)``
(``version_count``), no id repeats within a stage (``duplicate_id``), every required version key is in
``versions`` (``missing_version``) and none is repeated (``repeated_version``), every traced id is in the
registry (``unknown_chunk``), rerank input ⊆ first stage (``rerank_input_not_in_first_stage``), set(reranked)
== set(rerank input) (``reranked_not_rerank_input``), selected ⊆ reranked (``selected_not_reranked``),
each selected version equals the registry's (``wrong_version``), every traced chunk is permitted
(``restricted``) and current (``stale``). Subset rules between stages apply only when the trace carries
both stages; the others read an absent list as empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.metrics import MetricResult, family, ratio
from ragspine_pipeline.scoring import means, rowwise
from ragspine_pipeline.scoring.admissibility import (
    ChunkIds,
    Registry,
    admissibility,
    coded_strings,
    rule_names,
)
from ragspine_pipeline.scoring.claims import answer_claims, claim_support
from ragspine_pipeline.scoring.grounded import refusals
from ragspine_pipeline.scoring.join import aligned_chunks, join_traces

# The permission-safe harness's version keys: one per component of the retrieval path.
DEFAULT_REQUIRED_VERSIONS = ("retriever", "index", "sparse", "dense", "fusion", "reranker")

STAGES = (
    "admissibility",
    "candidate retrieval",
    "context selection",
    "answer completeness",
    "answer faithfulness",
    "citation support",
    "refusal",
    "pass",
)
# The means of per-case ratios, and the per-case denominator of each (a column of
# ``LayeredScore.cases``), from the registry (``ragspine_pipeline.metrics``).
RATIO_METRICS = tuple(m.name for m in family("layered") if m.case_denominator)
RATIO_DENOMINATORS = {m.name: m.case_denominator for m in family("layered") if m.case_denominator}
# The two rates over every case, and the per-case flag each counts.
RATE_COLUMNS = {m.name: m.numerator for m in family("layered") if m.numerator}
FAITHFULNESS = "claim_faithfulness"
_STAGE_DICTIONARY = pa.array(STAGES, pa.string())


@dataclass(frozen=True)
class LayeredScore:
    """Per-case layered results (gold order) and their aggregates.

    ``cases`` columns: ``qid``, ``admissible``, ``inadmissible`` (names of the failed rules),
    ``answerable``, ``refused``, the denominators of the ratio metrics (:data:`RATIO_DENOMINATORS`:
    ``n_required`` distinct gold citations, ``n_selected`` selected ids counted with repeats, ``n_claims``,
    ``n_points`` distinct required points), every ratio metric (null where not applicable),
    ``first_failed_stage`` and ``releasable``.
    """

    cases: pa.Table
    metrics: dict[str, float | None]
    denominators: dict[str, int]

    def results(self) -> dict[str, MetricResult]:
        """Every layered metric with the number of cases it is over; the two rates also with the cases
        they count (a mean of per-case ratios has no single numerator)."""
        return {
            name: MetricResult(
                name,
                value,
                _count(self.cases.column(RATE_COLUMNS[name])) if name in RATE_COLUMNS else None,
                self.denominators[name],
            )
            for name, value in self.metrics.items()
        }

    def stage_histogram(self) -> dict[str, int]:
        counts = np.bincount(
            np.asarray(self.cases.column("first_failed_stage").combine_chunks().indices),
            minlength=len(STAGES),
        )
        return dict(zip(STAGES, counts.tolist(), strict=True))


def score_layered(
    gold: pa.Table,
    traces: pa.Table,
    evidence: pa.Table,
    required_versions: Sequence[str] = DEFAULT_REQUIRED_VERSIONS,
) -> LayeredScore:
    """Score canonical gold, trace and evidence columns (``contracts.columns``) layer by layer.

    Cases are scored :data:`CHUNK_ROWS` at a time (the claim × chunk × token pairs of a chunk bound the
    memory); the registry is indexed once, its chunk texts' tokens on a second thread while the first
    cases are checked for admissibility.
    """
    rows, _ = join_traces(gold, traces)
    # Only what the metrics read: the gather of a join copies every column, and each chunk combines them.
    traces = traces.select([name for name in TRACE_COLUMNS if name in traces.column_names])
    registry = Registry(evidence)
    with ThreadPoolExecutor(max_workers=1) as executor:
        registry.index_tokens_on(executor)
        parts = [
            _score_cases(part_gold, aligned, missing, registry, required_versions)
            for part_gold, aligned, missing in aligned_chunks(gold, traces, rows, CHUNK_ROWS)
        ]
    cases = pa.concat_tables(parts) if parts else _score_cases(gold, traces, np.zeros(0, bool), registry, ())
    return LayeredScore(cases=cases, metrics=_aggregates(cases), denominators=_denominators(cases))


CHUNK_ROWS = 1 << 14
# The trace columns the layered metrics read (tables built before ``outcome_refused`` existed lack it).
TRACE_COLUMNS = (
    "claim",
    "citations",
    "claims",
    "retrieved_ids",
    "rerank_input_ids",
    "reranked_ids",
    "selected_context_ids",
    "selected_versions",
    "version_keys",
    "outcome_refused",
)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Per row ``numerator / denominator``; 0 where the denominator is 0."""
    return np.divide(numerator, denominator, out=np.zeros(len(denominator)), where=denominator > 0)


def _aggregates(cases: pa.Table) -> dict[str, float | None]:
    """Means over the cases where each metric applies (non-null); None where none does.

    Each mean is the exact mean of the per-case ratios (numerator over :data:`RATIO_DENOMINATORS`),
    rounded once (``scoring.means``), and the two rates are integer counts over the number of cases:
    the same cases in any order give the same figures, bit for bit.
    """
    metrics = {
        name: means.mean(cases.column(name), cases.column(RATIO_DENOMINATORS[name])) for name in RATIO_METRICS
    }
    for name, column in RATE_COLUMNS.items():
        metrics[name] = ratio(_count(cases.column(column)), cases.num_rows)
    return metrics


def _count(flags: pa.ChunkedArray) -> int:
    return pc.sum(flags.cast(pa.int64())).as_py() or 0


def _denominators(cases: pa.Table) -> dict[str, int]:
    counts = {name: cases.num_rows - cases.column(name).null_count for name in RATIO_METRICS}
    counts.update({name: cases.num_rows for name in RATE_COLUMNS})
    return counts


def _score_cases(
    gold: pa.Table, aligned: pa.Table, missing: np.ndarray, registry: Registry, required_versions
) -> pa.Table:
    """The per-case layered columns for aligned gold and trace rows (a missing trace is a null row)."""
    n = gold.num_rows
    t = {name: aligned.column(name).combine_chunks() for name in aligned.column_names}
    required = gold.column("gold_citations").combine_chunks()
    answerable = np.asarray(gold.column("answerable").combine_chunks(), dtype=bool)
    first = t["retrieved_ids"]
    selected = pc.coalesce(t["selected_context_ids"], first)
    refused = refusals(rowwise.lower(pc.fill_null(t["claim"], "")), t.get("outcome_refused")) & ~missing

    ids = ChunkIds(
        registry,
        {
            "first": first,
            "rerank_in": t["rerank_input_ids"],
            "reranked": t["reranked_ids"],
            "selected": selected,
            "required": required,
        },
    )
    violations = admissibility(t, first, selected, missing, registry, required_versions, ids)
    admissible = ~np.any(np.stack(list(violations.values())), axis=0)

    # |A ∩ B| and |required| are set sizes (a repeated id or point counts once); |selected|, the
    # denominator of context precision, is the selection's length, as the harness counts it.
    n_required = ids["required"].distinct_counts().astype(np.int32)
    candidate_recall = _ratio(ids["required"].count_in(ids["first"]), n_required)
    required_selected = ids["required"].count_in(ids["selected"])  # = |selected ∩ required|
    context_recall = _ratio(required_selected, n_required)
    n_selected = ids["selected"].lengths.astype(np.int32)
    context_precision = _ratio(required_selected, n_selected)

    claims = answer_claims(t, missing | refused, n)
    support = claim_support(claims, ids["selected"], registry)
    n_claims = np.bincount(claims.rows, minlength=n)
    per_claim = {
        FAITHFULNESS: support.by_selected,
        "citation_coverage": claims.citation_valid,
        "citation_support": support.by_citation,
    }
    claim_ratios = {
        name: _ratio(np.bincount(claims.rows[flags], minlength=n), n_claims)
        for name, flags in per_claim.items()
    }
    points, supported_points = coded_strings(
        [gold.column("required_points").combine_chunks(), claims.points_of(support.by_selected, n)]
    )
    n_points = points.distinct_counts().astype(np.int32)
    point_coverage = _ratio(points.count_in(supported_points), n_points)

    first_applicable = np.asarray(first.is_valid())
    stage = np.select(
        [
            ~admissible,
            first_applicable & (n_required > 0) & (candidate_recall < 1),
            (n_required > 0) & (context_recall < 1),
            refused | ~answerable,
            n_claims == 0,
            claim_ratios[FAITHFULNESS] < 1,
            claim_ratios["citation_support"] < 1,
            (n_points > 0) & (point_coverage < 1),
        ],
        [
            STAGES.index("admissibility"),
            STAGES.index("candidate retrieval"),
            STAGES.index("context selection"),
            # An unanswerable case that refused passes its only answer stage; anything else stops here.
            np.where(~answerable & refused, STAGES.index("pass"), STAGES.index("refusal")),
            STAGES.index("answer completeness"),
            STAGES.index("answer faithfulness"),
            STAGES.index("citation support"),
            STAGES.index("answer completeness"),
        ],
        default=STAGES.index("pass"),
    ).astype(np.int8)
    releasable = stage == STAGES.index("pass")

    applicable = {
        "candidate_recall": first_applicable & (n_required > 0),
        "context_recall": n_required > 0,
        "context_precision": ~missing,
        FAITHFULNESS: answerable & ~refused & ~missing,
        "citation_coverage": answerable & ~refused & ~missing,
        "citation_support": answerable & ~refused & ~missing,
        "point_coverage": answerable & ~refused & ~missing & (n_points > 0),
    }
    values = {
        "candidate_recall": candidate_recall,
        "context_recall": context_recall,
        "context_precision": context_precision,
        **claim_ratios,
        "point_coverage": point_coverage,
    }
    cases = pa.table(
        {
            "qid": gold.column("qid"),
            "admissible": admissible,
            "inadmissible": rule_names(violations, n),
            "answerable": answerable,
            "refused": refused,
            "n_required": n_required,
            "n_selected": n_selected,
            "n_claims": n_claims,
            "n_points": n_points,
            **{name: pa.array(values[name], mask=~applicable[name]) for name in RATIO_METRICS},
            "first_failed_stage": pa.DictionaryArray.from_arrays(stage, _STAGE_DICTIONARY),
            "releasable": releasable,
        }
    )
    return cases
