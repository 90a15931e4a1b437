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

from ragspine_pipeline.columnar import lists_from_rows
from ragspine_pipeline.metrics import MetricResult, family, ratio
from ragspine_pipeline.scoring import means, rowwise
from ragspine_pipeline.scoring.admissibility import (
    ChunkIds,
    CodedLists,
    Registry,
    admissibility,
    coded_strings,
    rule_names,
    word_tokens,
)
from ragspine_pipeline.scoring.grounded import refusals
from ragspine_pipeline.scoring.join import aligned_chunks, join_traces

SUPPORT_TOKEN_SHARE = (3, 5)  # 60 %, compared in integers: shared * 5 >= tokens * 3
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


# -- claims and support ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Claims:
    """Every claim of every case, flat: its case row, text, citation, support phrases, answer point."""

    rows: np.ndarray
    text: pa.Array
    citation: pa.Array
    phrases: pa.Array  # list<string>; null: no support phrases (the token rule decides)
    point: pa.Array

    @property
    def citation_valid(self) -> np.ndarray:
        return np.asarray(self.citation.is_valid())

    def points_of(self, keep: np.ndarray, n: int) -> pa.Array:
        """Per case, the answer points of the kept claims (a list column)."""
        mask = keep & np.asarray(self.point.is_valid())
        return lists_from_rows(self.point.filter(pa.array(mask)), self.rows[mask], n)


def answer_claims(t: dict[str, pa.Array], no_answer: np.ndarray, n: int) -> Claims:
    """Every claim of the answers of rows ``t`` (trace columns ``claims``, ``claim``, ``citations``), except
    the rows flagged ``no_answer``: the claim ledger, else the answer text as one claim (see the module
    docstring)."""
    ledger = t["claims"]
    with_ledger = np.asarray(ledger.is_valid())
    has_ledger = with_ledger & ~no_answer
    entries, ledger_rows = rowwise.flat(
        ledger, None if np.array_equal(has_ledger, with_ledger) else has_ledger
    )
    # Without a ledger: one claim, the answer text (when not blank), cited by its first citation.
    candidates = np.flatnonzero(~has_ledger & ~no_answer)
    text = pc.fill_null(t["claim"].take(pa.array(candidates)), "")
    blank = np.asarray(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(text)), 0))
    single_rows, text = candidates[~blank], text.filter(pa.array(~blank))
    first_citation = _first_elements(t["citations"].take(pa.array(single_rows)))
    count = len(single_rows)
    rows = np.concatenate([ledger_rows, single_rows])
    order = None if count == 0 or np.all(rows[1:] >= rows[:-1]) else np.argsort(rows, kind="stable")

    def both(from_ledger: pa.Array, from_single: pa.Array) -> pa.Array:
        claims = pa.concat_arrays([from_ledger, from_single])
        return claims if order is None else claims.take(pa.array(order))

    ledger_phrases = pc.struct_field(entries, "support_phrases")
    return Claims(
        rows=rows if order is None else rows[order],
        text=both(pc.struct_field(entries, "text"), text),
        citation=both(pc.struct_field(entries, "citation_id"), first_citation),
        phrases=both(ledger_phrases, pa.nulls(count, ledger_phrases.type)),
        point=both(pc.struct_field(entries, "answer_point"), pa.nulls(count, pa.string())),
    )


@dataclass(frozen=True)
class Support:
    by_selected: np.ndarray  # per claim: some selected chunk supports it
    by_citation: np.ndarray  # per claim: its cited chunk is selected and supports it


def claim_support(claims: Claims, selected: pa.Array | CodedLists, registry: Registry) -> Support:
    """Pair every claim with every selected chunk of its case and decide support per pair.

    ``selected`` is the selected ids of every case: a list column, or coded by :class:`ChunkIds`.
    """
    if not isinstance(selected, CodedLists):
        selected = ChunkIds(registry, {"selected": selected})["selected"]
    m = len(claims.rows)
    # A known id's code is its registry position.
    position = np.where(selected.codes < len(registry), selected.codes, -1)
    lengths = selected.lengths
    counts = lengths[claims.rows]
    pair_claim = np.repeat(np.arange(m), counts)
    pair_item = _segment_positions(counts, (np.cumsum(lengths) - lengths)[claims.rows])
    pair_chunk = position[pair_item]
    supported = _supported_pairs(claims, pair_claim, pair_chunk, registry)

    by_selected = np.zeros(m, dtype=bool)
    by_selected[pair_claim[supported]] = True
    # A supported pair's chunk is known: it is the cited chunk exactly when the citation has its position.
    is_cited = registry.index(claims.citation)[pair_claim] == pair_chunk
    by_citation = np.zeros(m, dtype=bool)
    by_citation[pair_claim[supported & is_cited]] = True
    return Support(by_selected=by_selected, by_citation=by_citation)


def _segment_positions(counts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``starts[i], starts[i] + 1, …`` (``counts[i]`` positions) for every ``i``, concatenated."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(starts - (ends - counts), counts)


def _supported_pairs(claims: Claims, pair_claim: np.ndarray, pair_chunk: np.ndarray, registry) -> np.ndarray:
    """For each (claim, chunk) pair: does the chunk support the claim (the module docstring's rule)?"""
    m, n_pairs = len(claims.rows), len(pair_claim)
    known = pair_chunk >= 0
    n_phrases = np.asarray(pc.fill_null(pc.list_value_length(claims.phrases), 0))
    with_phrases = np.asarray(claims.phrases.is_valid())[pair_claim]

    # Support phrases: every phrase of the claim occurs in the chunk text (an empty list: vacuously).
    phrase_values, _ = rowwise.flat(claims.phrases)
    per_pair = np.where(with_phrases & known, n_phrases[pair_claim], 0)
    triple_pair = np.repeat(np.arange(n_pairs), per_pair)
    triple_phrase = _segment_positions(per_pair, (np.cumsum(n_phrases) - n_phrases)[pair_claim])
    found = rowwise.contains_pairs(
        registry.text, rowwise.lower(phrase_values).take(pa.array(triple_phrase)), pair_chunk[triple_pair]
    )
    phrases_ok = rowwise.all_per_row(found, triple_pair, n_pairs)

    # Token overlap: ≥ 60 % of the claim's word tokens are tokens of the chunk text. Only the claims that
    # some known chunk may support by tokens are tokenised.
    by_tokens = ~with_phrases & known
    tokenised = np.zeros(m, dtype=bool)
    tokenised[pair_claim[by_tokens]] = True
    token_claims = np.flatnonzero(tokenised)
    token_values, token_rows = word_tokens(claims.text.take(pa.array(token_claims)))
    token_claim = token_claims[token_rows]
    n_tokens = np.bincount(token_claim, minlength=m)
    # A claim token absent from every chunk gets code -1: its key is code ``width - 1`` of the chunk
    # before, which is no token.
    claim_codes = np.asarray(pc.fill_null(pc.index_in(token_values, value_set=registry.vocabulary), -1))
    token_pairs = np.where(by_tokens, n_tokens[pair_claim], 0)
    quad_token = _segment_positions(token_pairs, (np.cumsum(n_tokens) - n_tokens)[pair_claim])
    keys = np.repeat(pair_chunk * registry.token_key_width, token_pairs) + claim_codes[quad_token]
    present = np.concatenate([[0], np.cumsum(registry.has_tokens(keys))])
    pair_end = np.cumsum(token_pairs)
    shared = present[pair_end] - present[pair_end - token_pairs]
    pair_tokens = n_tokens[pair_claim]
    numerator, denominator = SUPPORT_TOKEN_SHARE
    tokens_ok = (pair_tokens > 0) & (shared * denominator >= pair_tokens * numerator)

    return known & np.where(with_phrases, phrases_ok, tokens_ok)


def _first_elements(lists: pa.Array) -> pa.Array:
    """Per row, the first element of its list (null for an empty or null list)."""
    offsets = np.asarray(lists.offsets, dtype=np.int64)
    lengths = np.where(np.asarray(lists.is_valid()), np.diff(offsets), 0)
    return lists.values.take(pa.array(offsets[:-1], mask=lengths == 0)).cast(pa.string())
