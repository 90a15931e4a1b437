"""Grounded-QA metrics over gold cases and traces (docs/metrics.md).

Notation: S = shipped answers (not refusals), R = refusals, A = gold cases with
``answerable=true``, U = ``answerable=false``. Every metric below is computed over whole columns.

Per case:

* **C (containment)**: some ``gold_claim_substr`` of at least 5 characters (the gates config's
  ``min_snippet_chars``) occurs in the claim, case-insensitively (both lower-cased as Python's
  ``str.lower()`` does, :func:`rowwise.lower`). An empty list makes C true; a list whose substrings
  are all shorter makes C false (nothing qualifying can be found), and the run's warnings name such
  cases (:func:`short_snippet_cases`). A seed-000 case with no list at all (the key absent or null) is
  never contained, as seed-000 scores it (its ``subs == []`` is false for None); the warnings name them.
* **H (citation hit)**: every cited id is among the retrieved ids, and the citations meet the gold
  citations (or, when the case has no gold citations, there are none). An answer whose trace carries no
  citation list cites nothing, as seed-000 reads it (``answer_json.get("citations") or []``): a hit on a
  case without gold citations (the warnings name such cases), never on one with them. A case without a
  trace has no hit.

Joining: traces join gold on ``qid``; a trace without one joins on its exact question text.
When a qid has several traces the last one wins and the extras are counted in ``duplicates``. A gold
case without a trace is answered with an empty claim and no citation list (so it fails) and is counted
in ``missing``; distinct trace keys not in the gold set are counted in ``unmatched``.

The metrics themselves — ``precision``, ``chr``, ``under_refusal``, ``over_refusal``, ``recall@k``,
``compliance``, ``chr_answerable``, ``claim_containment`` — are defined in the registry
(``ragspine_pipeline.metrics``): each is its numerator count over its denominator count, and None (not
applicable, reported with its denominator 0) when that denominator is empty.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline import duck
from ragspine_pipeline.contracts.trace import REFUSAL_TOKEN, UNICODE_WHITESPACE
from ragspine_pipeline.metrics import MetricResult, family, ratio
from ragspine_pipeline.scoring import rowwise
from ragspine_pipeline.scoring.join import join_traces

MIN_SUBSTR_CHARS = 5
# RE2: from a letter or digit, along its run of letters, digits, hyphens and whitespace, to the run's
# last character that is not whitespace.
_PHRASE = r"[\p{L}\p{N}](?:[\p{L}\p{N}\- \t\n\r\f\v]*[\p{L}\p{N}\-])?"


def phrases_sql(text: str) -> str:
    """SQL: the phrases of the (lower-cased) gold claim ``text``, what claim_containment looks for: its
    maximal runs of letters, digits, hyphens and whitespace, each from its first letter or digit to its
    last character that is not whitespace, of at least :data:`MIN_SUBSTR_CHARS` characters."""
    return f"[p FOR p IN regexp_extract_all({text}, '{_PHRASE}') IF length(p) >= {MIN_SUBSTR_CHARS}]"


LABELS = ("OK", "REFUSAL_OK", "OVER_REFUSAL", "HALLUCINATION", "ANS_NO_HIT")
_LABEL_DICTIONARY = pa.array(LABELS, pa.string())
# The labels of a right outcome: answered with a citation hit, or rightly refused.
PASSING_LABELS = pa.array(["OK", "REFUSAL_OK"], pa.string())


def right_outcome(cases: pa.Table) -> pa.ChunkedArray:
    """Per case of ``cases`` (``GroundedScore.cases``), whether its label is a right outcome."""
    return pc.is_in(cases.column("label").cast(pa.string()), value_set=PASSING_LABELS)


# Metric name -> (numerator key, denominator key) of ``GroundedScore.counts``, from the registry
# (``ragspine_pipeline.metrics``, where each formula is stated).
METRICS: dict[str, tuple[str, str]] = {m.name: (m.numerator, m.denominator) for m in family("grounded")}


@dataclass(frozen=True)
class GroundedScore:
    """Unrounded figures (None: not applicable), their counts, and one row per gold case (gold order)."""

    k: int
    counts: dict[str, int]
    metrics: dict[str, float | None]
    cases: pa.Table
    # The service's citations are the sources it retrieved and used (``score_grounded``).
    citations_are_retrieved: bool = False
    # {what seed-000's rule decided: [the qids it decided for]}, for the run's warnings.
    seed_rules: dict[str, list[str]] | None = None

    @property
    def not_measured(self) -> dict[str, str]:
        """``{metric: why}`` of the metrics the traces cannot measure by what the service says of them."""
        return {"recall@k": CITATIONS_ARE_RETRIEVED} if self.citations_are_retrieved else {}

    def denominator(self, metric: str) -> int:
        return self.counts[METRICS[metric][1]]

    def results(self) -> dict[str, MetricResult]:
        """Every grounded metric with the counts it is the ratio of."""
        return {
            name: MetricResult(name, None, 0, 0)
            if name in self.not_measured
            else MetricResult(name, self.metrics[name], self.counts[num], self.counts[den])
            for name, (num, den) in METRICS.items()
        }

    def label_counts(self) -> dict[str, int]:
        """Cases per label, every label listed (zero included)."""
        counts = np.zeros(len(LABELS), dtype=np.int64)
        for chunk in self.cases.column("label").chunks:
            counts += np.bincount(np.asarray(chunk.indices), minlength=len(LABELS))
        return dict(zip(LABELS, counts.tolist(), strict=True))


def refusals(
    claim_lower: pa.Array | pa.ChunkedArray, outcome_refused: pa.Array | pa.ChunkedArray | None = None
) -> np.ndarray:
    """Per answer, whether it is a refusal: ``outcome.refused`` where the trace carries it (the column
    ``outcome_refused``; null means the trace does not say), else the claim lower-cased as Python's
    ``str.lower()`` does (``claim_lower``: :func:`rowwise.lower`) and stripped of Unicode whitespace
    (what ``str.strip()`` strips) is exactly the refusal token."""
    # Chunk by chunk: the trimmed copy of the claims only ever exists one chunk at a time.
    chunks = claim_lower.chunks if isinstance(claim_lower, pa.ChunkedArray) else [claim_lower]
    token = [pc.equal(pc.utf8_trim(chunk, UNICODE_WHITESPACE), REFUSAL_TOKEN) for chunk in chunks]
    refused = np.concatenate(
        [np.zeros(0, dtype=bool)] + [np.asarray(pc.fill_null(t, False), dtype=bool) for t in token]
    )
    if outcome_refused is None:
        return refused
    said = np.asarray(outcome_refused.is_valid(), dtype=bool)
    return np.where(said, np.asarray(pc.fill_null(outcome_refused, False), dtype=bool), refused)


def short_snippet_cases(gold: pa.Table, min_snippet_chars: int = MIN_SUBSTR_CHARS) -> list[str]:
    """The qids of the gold cases whose snippets (``gold_claim_substr``, when there are any) are all
    shorter than ``min_snippet_chars``: such a case's containment can never hold."""
    short = f"list_bool_and([length(s) < {int(min_snippet_chars)} FOR s IN substrs])"
    rows = duck.query(
        f"SELECT qid FROM gold WHERE len(substrs) > 0 AND {short} ORDER BY position",
        gold=pa.table(
            {
                "qid": gold.column("qid"),
                "substrs": gold.column("gold_claim_substr"),
                "position": np.arange(gold.num_rows),
            }
        ),
    )
    return rows.column("qid").to_pylist()


def compliant(citations: pa.Array, refused: np.ndarray) -> np.ndarray:
    """Compliance of each answer: it carries a citation list (the canonical ``citations`` is not
    null: explicit, embedded in the text or from the claim ledger), or it is a refusal."""
    return np.asarray(citations.is_valid()) | refused


# Why recall@k is not measured when a service's citations are all it says of retrieval.
CITATIONS_ARE_RETRIEVED = (
    "citations_are_retrieved: the traces list only the sources the answer used, not what retrieval returned"
)


def score_grounded(
    gold: pa.Table,
    traces: pa.Table,
    k: int = 5,
    min_snippet_chars: int = MIN_SUBSTR_CHARS,
    citations_are_retrieved: bool = False,
) -> GroundedScore:
    """Score canonical trace columns against canonical gold columns (``contracts.columns``); a gold
    snippet shorter than ``min_snippet_chars`` never counts as contained (:func:`short_snippet_cases`).
    ``citations_are_retrieved``: the service reports only the sources it used, as its citations; a
    citation then counts as retrieved (the hit H is the gold test alone) and recall@k is not measured."""
    if k < 1:
        raise ValueError("k must be at least 1")
    # What a trace says on its own is worked out once per trace, in file order, while the join hashes
    # the ids (DuckDB runs outside the GIL).
    with ThreadPoolExecutor(max_workers=1) as pool:
        joined = pool.submit(join_traces, gold, traces)
        answers = _Answers.of(traces)
        trace_rows, counts = joined.result()
    if citations_are_retrieved:
        answers = replace(answers, cited_retrieved=np.ones_like(answers.cited_retrieved))
    counts = {**counts, "cases": gold.num_rows, "traces": traces.num_rows}
    cases, case_counts, seed_rules = _score_cases(gold, answers, trace_rows, k, min_snippet_chars)
    counts.update(case_counts)
    metrics = {name: ratio(counts[num], counts[den]) for name, (num, den) in METRICS.items()}
    if citations_are_retrieved:
        metrics["recall@k"] = None
        cases = cases.set_column(
            cases.schema.get_field_index("recall_hit"), "recall_hit", pa.nulls(cases.num_rows, pa.bool_())
        )
    return GroundedScore(k, counts, metrics, cases, citations_are_retrieved, seed_rules)


@dataclass(frozen=True)
class _Answers:
    """The traces as the metrics read them, in file order."""

    table: pa.Table  # claim_lower, citations, retrieved_ids
    refused: np.ndarray
    compliant: np.ndarray
    has_citation_list: np.ndarray
    n_cited: np.ndarray
    cited_retrieved: np.ndarray  # every cited id is among the retrieved ids (true for no citation)

    @classmethod
    def of(cls, traces: pa.Table) -> _Answers:
        claim_lower = rowwise.lower(pc.fill_null(traces.column("claim"), ""))
        # Tables built before `outcome_refused` existed simply have no outcome to honour.
        outcome = traces.column("outcome_refused") if "outcome_refused" in traces.column_names else None
        citations = traces.column("citations")
        refused = refusals(claim_lower, outcome)
        table = pa.table(
            {
                "claim_lower": claim_lower,
                "citations": citations,
                "retrieved_ids": traces.column("retrieved_ids"),
            }
        )
        cited = duck.query(
            f"SELECT coalesce(len(citations), 0) AS n, {rowwise.ALL_IN.format('citations', 'retrieved_ids')} "
            "AS within FROM answers",
            answers=table,
        )
        return cls(
            table=table,
            refused=refused,
            compliant=compliant(citations, refused),
            has_citation_list=np.asarray(citations.is_valid(), dtype=bool),
            n_cited=np.asarray(cited.column("n"), dtype=np.int64),
            cited_retrieved=np.asarray(cited.column("within"), dtype=bool),
        )

    def per_case(self, values: np.ndarray, at: np.ndarray, missing) -> np.ndarray:
        """``values`` (one per trace) for each case's trace; ``missing`` where the case has none."""
        return np.where(at >= 0, values[at], missing) if len(values) else np.full(len(at), missing)


SEED_NO_SNIPPETS = "case(s) without gold_claim_substr are never contained, as seed-000 scores them"
SEED_NO_CITATION_LIST = (
    "answer(s) without a citation list on a case without gold citations count as a citation hit, as "
    "seed-000 reads an absent list (as [])"
)


def _score_cases(
    gold: pa.Table, answers: _Answers, trace_rows: pa.Array | None, k: int, min_snippet_chars: int
) -> tuple[pa.Table, dict, dict[str, list[str]]]:
    """Per-case flags and metric counts for gold rows and the row of each one's trace (``trace_rows``:
    null where missing; None: the traces are in gold order). A missing trace answers with an empty claim
    and no citation list."""
    n = gold.num_rows
    at = np.arange(n) if trace_rows is None else np.asarray(trace_rows.fill_null(-1))
    missing = at < 0
    answerable = np.asarray(gold.column("answerable").combine_chunks(), dtype=bool)
    refused = answers.per_case(answers.refused, at, False)
    shipped = ~refused
    has_citation_list = answers.per_case(answers.has_citation_list, at, False)
    gold_citations = gold.column("gold_citations").combine_chunks()
    gold_claim = gold.column("gold_claim").combine_chunks()
    has_gold_claim = np.asarray(pc.fill_null(pc.greater(pc.utf8_length(gold_claim), 0), False))
    phrase_rows = shipped & answerable & has_gold_claim
    # Each case reads its trace by row through a join in DuckDB (no trace column is gathered into gold
    # order here); the rows come back in any order, each with its case's position.
    flags = duck.query(
        f"""
        SELECT
            position,
            len(substrs) = 0 OR coalesce(list_bool_or(
                [contains(claim_lower, s) FOR s IN substrs IF length(s) >= {int(min_snippet_chars)}]
            ), false) AS contained,
            coalesce(list_bool_or(
                [contains(claim_lower, p) FOR p IN {phrases_sql("gold_claim")}]
            ), false) AS phrase_contained,
            {rowwise.ANY_IN.format("gold_citations", "citations")} AS cites_meet_gold,
            {rowwise.ALL_IN.format("gold_citations", f"retrieved_ids[1:{int(k)}]")} AS recalled
        FROM cases LEFT JOIN answers ON answers.row = cases.trace_row
        """,
        cases=pa.table(
            {
                "position": np.arange(n),
                "trace_row": at,
                "substrs": _lower_items(gold.column("gold_claim_substr").combine_chunks()),
                # Only the cases the phrase test applies to are split into phrases.
                "gold_claim": pc.if_else(
                    pa.array(phrase_rows), rowwise.lower(gold_claim), pa.scalar(None, pa.string())
                ),
                "gold_citations": gold_citations,
            }
        ),
        answers=answers.table.append_column("row", pa.array(np.arange(answers.table.num_rows))),
    )
    order = np.argsort(np.asarray(flags.column("position")))
    flags = flags.take(pa.array(order))
    # Each flag counts only where its test applies: containment for shipped answers, the phrase test for
    # shipped answerable cases with a gold claim, recall for answerable cases.
    no_snippets = (
        np.asarray(pc.fill_null(gold.column("seed_without_snippets"), False), dtype=bool)
        if "seed_without_snippets" in gold.column_names
        else np.zeros(n, dtype=bool)
    )
    # Containment only decides a figure for answerable cases (precision): the seed rule applies there.
    no_snippets &= answerable
    contained = shipped & ~no_snippets & np.asarray(flags.column("contained"), dtype=bool)
    phrase_contained = phrase_rows & np.asarray(flags.column("phrase_contained"), dtype=bool)
    cites_meet_gold = shipped & np.asarray(flags.column("cites_meet_gold"), dtype=bool)
    recalled = answerable & np.asarray(flags.column("recalled"), dtype=bool)
    has_gold = np.asarray(pc.list_value_length(gold_citations)) > 0
    hit = (
        shipped
        & ~missing
        & answers.per_case(answers.cited_retrieved, at, True)
        & np.where(has_gold, cites_meet_gold, answers.per_case(answers.n_cited, at, 0) == 0)
    )
    qids = gold.column("qid")

    def named(where: np.ndarray) -> list[str]:  # only the ids a rule decided for become Python strings
        return sorted(qids.filter(pa.array(where)).to_pylist()) if where.any() else []

    seed_rules = {  # the cases named in the run's warnings, by id (whatever the order of the lines)
        SEED_NO_SNIPPETS: named(shipped & no_snippets),
        SEED_NO_CITATION_LIST: named(hit & ~has_citation_list),
    }

    unanswerable = ~answerable
    matched = ~missing
    counts = {
        "answered": int(shipped.sum()),
        "refused": int(refused.sum()),
        "answerable": int(answerable.sum()),
        "unanswerable": int(unanswerable.sum()),
        "missing": int(missing.sum()),
        "matched": int(matched.sum()),
        "shipped_answerable_correct": int((shipped & answerable & contained & hit).sum()),
        "shipped_answerable_hit": int((shipped & answerable & hit).sum()),
        "shipped_unanswerable": int((shipped & unanswerable).sum()),
        "refused_answerable": int((refused & answerable).sum()),
        "answerable_recalled": int((answerable & recalled).sum()),
        "compliant": int((matched & answers.per_case(answers.compliant, at, False)).sum()),
        "answerable_cites_gold": int((answerable & shipped & cites_meet_gold).sum()),
        "answerable_phrase_contained": int((answerable & shipped & phrase_contained).sum()),
        "answerable_with_gold_claim": int((answerable & has_gold_claim).sum()),
    }
    label = np.select(
        [answerable & shipped & hit, unanswerable & refused, answerable & refused, unanswerable & shipped],
        [LABELS.index(name) for name in ("OK", "REFUSAL_OK", "OVER_REFUSAL", "HALLUCINATION")],
        default=LABELS.index("ANS_NO_HIT"),
    ).astype(np.int8)
    # Per-case flags are null where they do not apply: C and H judge shipped answers only,
    # recall@k judges answerable cases only.
    cases = pa.table(
        {
            "qid": gold.column("qid"),
            "label": pa.DictionaryArray.from_arrays(label, _LABEL_DICTIONARY),
            "answerable": answerable,
            "answered": shipped,
            "missing": missing,
            "contained": pa.array(contained, mask=refused),
            "citation_hit": pa.array(hit, mask=refused),
            "recall_hit": pa.array(recalled, mask=unanswerable),
        }
    )
    return cases, counts, seed_rules


def _lower_items(lists: pa.Array) -> pa.Array:
    """A list-of-strings column with every item lower-cased (:func:`rowwise.lower`), nulls kept."""
    return pa.ListArray.from_arrays(lists.offsets, rowwise.lower(lists.values), mask=lists.is_null())


def gold_claim_phrases(gold_claim: pa.Array) -> pa.Array:
    """Per case, the phrases of the lower-cased gold claim (a list column, :func:`phrases_sql`)."""
    claims = pa.table({"claim": rowwise.lower(gold_claim)})
    return duck.column(
        f"SELECT coalesce({phrases_sql('claim')}, []) FROM claims", claims=claims
    ).combine_chunks()
