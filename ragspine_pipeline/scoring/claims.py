"""The claims of an answer and their support: each claim of each case, flat (its case row, text,
citation, support phrases and answer point), and whether the chunk it cites, among the case's selected
chunks, supports it (its support phrases found there, else enough of its word tokens). The layered
evaluation (``scoring.layered``) and the production metrics (``scoring.production``) read them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragspine_pipeline.columnar import lists_from_rows
from ragspine_pipeline.scoring import rowwise
from ragspine_pipeline.scoring.admissibility import ChunkIds, CodedLists, Registry, word_tokens

SUPPORT_TOKEN_SHARE = (3, 5)  # 60 %, compared in integers: shared * 5 >= tokens * 3


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
