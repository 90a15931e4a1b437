"""An obviously-correct, per-case implementation of the layered evaluation, written from its definition
(docs/metrics.md and ``ragspine_pipeline.scoring.layered``'s docstring).

It exists only to check the vectorised scorer; it loops over cases (and claims, and chunks) on purpose.
Inputs are the same plain dicts that ``conftest.gold_table`` / ``conftest.trace_table`` turn into canonical
tables, plus the evidence registry rows (``EVIDENCE_SCHEMA``).

Readings of the definition where it leaves room:

* ``|A ∩ B|`` and ``|required|`` are read with sets (a repeated id or point counts once); ``|selected|``
  in ``context_precision`` is the selection's length, a repeated id counted each time (as the harness);
* a ledger claim's ``support_phrases`` are all-of: an empty list is met by every known chunk (as the
  harness); a claim without them (the key absent, or the ledger-less claim) is judged by its tokens;
* a stage the trace does not carry is skipped: ``candidate_recall`` is not applicable without a first stage;
* ``wrong_version`` pairs ids and versions position by position, only when their counts agree (otherwise
  ``version_count`` already fails), and says nothing about an unknown chunk (``unknown_chunk`` does).
"""

from __future__ import annotations

import re

from ragspine_pipeline.scoring.admissibility import ADMISSIBILITY_RULES

REFUSAL = "not in context"
ASCII_WHITESPACE = " \t\n\r\f\v"
SUPPORT_SHARE_NUM, SUPPORT_SHARE_DEN = 3, 5  # 60 %, compared in integers
DEFAULT_REQUIRED_VERSIONS = ("retriever", "index", "sparse", "dense", "fusion", "reranker")  # the harness's
WORD = re.compile(r"\w+")  # letters, digits, underscore (Unicode): everything else breaks a token

# The rule names and their reporting order are the scorer's public contract, not logic to re-derive.
RULES = ADMISSIBILITY_RULES


def tokens(text: str | None) -> list[str]:
    """Word tokens of the lower-cased text, with repetition."""
    if text is None:
        return []
    return WORD.findall(text.lower())


def is_refusal(claim: str | None, outcome_refused: bool | None = None) -> bool:
    """The trace's own refusal flag when it carries one; else the claim, stripped as str.strip() strips
    (Unicode whitespace), is the refusal token."""
    if outcome_refused is not None:
        return outcome_refused
    return claim is not None and claim.strip().lower() == REFUSAL


def has_repeats(values: list) -> bool:
    return len(values) != len(set(values))


def share(found: int, total: int) -> float:
    return found / total if total else 0.0


def supports(claim: dict, chunk_id: str, registry: dict[str, dict]) -> bool:
    """Does the registry chunk ``chunk_id`` support ``claim``?"""
    chunk = registry.get(chunk_id)
    if chunk is None:
        return False
    text = chunk["text"].lower()
    if claim["phrases"] is not None:
        return all(phrase.lower() in text for phrase in claim["phrases"])
    words = tokens(claim["text"])
    if not words:
        return False
    chunk_words = set(tokens(text))
    shared = sum(1 for word in words if word in chunk_words)
    return shared * SUPPORT_SHARE_DEN >= SUPPORT_SHARE_NUM * len(words)


def claims_of(trace: dict) -> list[dict]:
    """The claim ledger, or the answer text as one claim (cited by the first citation)."""
    ledger = trace.get("claims")
    if ledger is not None:
        return [
            {
                "text": entry.get("text"),
                "citation": entry.get("citation_id"),
                "phrases": None if entry.get("support_phrases") is None else list(entry["support_phrases"]),
                "point": entry.get("answer_point"),
            }
            for entry in ledger
        ]
    text = trace.get("claim")
    if text is None or not text.strip():
        return []
    citations = trace.get("citations") or []
    return [{"text": text, "citation": citations[0] if citations else None, "phrases": None, "point": None}]


def admissibility(
    trace: dict | None, registry: dict[str, dict], required_versions: tuple[str, ...]
) -> list[str]:
    """Names of the failed admissibility rules, in ``RULES`` order."""
    if trace is None:
        return ["missing_trace"]
    first = trace.get("retrieved_ids")
    rerank_in = trace.get("rerank_input_ids")
    reranked = trace.get("reranked_ids")
    selected = trace.get("selected_context_ids")
    if selected is None:
        selected = first
    versions = trace.get("selected_versions") or []
    keys = trace.get("version_keys") or []
    stages = [stage or [] for stage in (first, rerank_in, reranked, selected)]
    traced = [chunk_id for stage in stages for chunk_id in stage]

    failed = set()
    if not selected:
        failed.add("empty_selection")
    if len(selected or []) != len(versions):
        failed.add("version_count")
    if any(has_repeats(stage) for stage in stages):
        failed.add("duplicate_id")
    if any(key not in keys for key in required_versions):
        failed.add("missing_version")
    if has_repeats(keys):
        failed.add("repeated_version")
    if any(chunk_id not in registry for chunk_id in traced):
        failed.add("unknown_chunk")
    if rerank_in is not None and first is not None and not set(rerank_in) <= set(first):
        failed.add("rerank_input_not_in_first_stage")
    if rerank_in is not None and reranked is not None and set(reranked) != set(rerank_in):
        failed.add("reranked_not_rerank_input")
    if selected is not None and reranked is not None and not set(selected) <= set(reranked):
        failed.add("selected_not_reranked")
    if selected and len(selected) == len(versions):
        for chunk_id, version in zip(selected, versions, strict=True):
            if chunk_id in registry and registry[chunk_id]["version"] != version:
                failed.add("wrong_version")
    for chunk_id in traced:
        if chunk_id in registry:
            if not registry[chunk_id]["permitted"]:
                failed.add("restricted")
            if not registry[chunk_id]["current"]:
                failed.add("stale")
    return [rule for rule in RULES if rule in failed]


def score_case(
    case: dict, trace: dict | None, registry: dict[str, dict], required_versions: tuple[str, ...]
) -> dict:
    inadmissible = admissibility(trace, registry, required_versions)
    answerable = case["answerable"]
    required = set(case.get("gold_citations") or [])
    points = set(case.get("required_points") or [])
    present = trace is not None
    trace = trace or {}
    first = trace.get("retrieved_ids")
    selected = trace.get("selected_context_ids")
    if selected is None:
        selected = first
    selected = selected or []
    refused = present and is_refusal(trace.get("claim"), trace.get("outcome_refused"))
    answered = present and not refused
    claims = claims_of(trace) if answered else []

    row = {
        "qid": case["qid"],
        "admissible": not inadmissible,
        "inadmissible": inadmissible,
        "answerable": answerable,
        "refused": refused,
        "n_claims": len(claims),
        "candidate_recall": None,
        "context_recall": None,
        "context_precision": None,
        "claim_faithfulness": None,
        "citation_coverage": None,
        "citation_support": None,
        "point_coverage": None,
    }
    if required and first is not None:
        row["candidate_recall"] = share(len(set(first) & required), len(required))
    if required:
        row["context_recall"] = share(len(set(selected) & required), len(required))
    if present:
        row["context_precision"] = share(len(set(selected) & required), len(selected))

    supported = [any(supports(claim, chunk_id, registry) for chunk_id in selected) for claim in claims]
    cited_ok = [
        claim["citation"] is not None
        and claim["citation"] in selected
        and supports(claim, claim["citation"], registry)
        for claim in claims
    ]
    if answerable and answered:
        row["claim_faithfulness"] = share(sum(supported), len(claims))
        row["citation_coverage"] = share(sum(c["citation"] is not None for c in claims), len(claims))
        row["citation_support"] = share(sum(cited_ok), len(claims))
        if points:
            covered = {c["point"] for c, ok in zip(claims, supported, strict=True) if ok} & points
            row["point_coverage"] = share(len(covered), len(points))

    row["first_failed_stage"] = first_failed_stage(row, answerable, refused, claims, points)
    row["releasable"] = row["first_failed_stage"] == "pass"
    return row


def first_failed_stage(row: dict, answerable: bool, refused: bool, claims: list, points: set) -> str:
    if not row["admissible"]:
        return "admissibility"
    if row["candidate_recall"] is not None and row["candidate_recall"] < 1:
        return "candidate retrieval"
    if row["context_recall"] is not None and row["context_recall"] < 1:
        return "context selection"
    if not answerable:  # the answer stages are replaced by one: a refusal passes it
        return "pass" if refused else "refusal"
    if refused:  # an over-refusal
        return "refusal"
    if not claims:
        return "answer completeness"
    if row["claim_faithfulness"] < 1:
        return "answer faithfulness"
    if row["citation_support"] < 1:
        return "citation support"
    if points and row["point_coverage"] < 1:
        return "answer completeness"
    return "pass"


def score(
    gold: list[dict],
    traces: list[dict],
    evidence: list[dict],
    required_versions: tuple[str, ...] = DEFAULT_REQUIRED_VERSIONS,
) -> list[dict]:
    """Per-case rows in gold order. Traces join by ``qid``; the last one wins."""
    registry = {chunk["chunk_id"]: chunk for chunk in evidence}
    by_qid: dict[str, dict] = {}
    for trace in traces:
        by_qid[trace["qid"]] = trace
    return [score_case(case, by_qid.get(case["qid"]), registry, tuple(required_versions)) for case in gold]
