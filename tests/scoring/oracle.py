"""An obviously-correct, per-case implementation of the grounded-QA metrics, written from their
definitions (docs/metrics.md).

It exists only to check the vectorised scorer; it loops over cases on purpose.
"""

from __future__ import annotations

import re

REFUSAL = "not in context"
WS = " \t\n\r\f\v"
PHRASE = re.compile(r"[^\W_](?:[^\W_]|[- \t\n\r\f\v])*")


def is_refusal(claim: str | None, outcome_refused: bool | None = None) -> bool:
    """The trace's own refusal flag when it carries one; else the claim, stripped as str.strip() strips
    (Unicode whitespace), is the refusal token."""
    if outcome_refused is not None:
        return outcome_refused
    return claim is not None and claim.strip().lower() == REFUSAL


def containment(claim: str, substrs: list[str]) -> bool:
    if not substrs:
        return True
    text = claim.lower()
    return any(len(s.lower()) >= 5 and s.lower() in text for s in substrs)


def citation_hit(
    citations: list[str] | None, gold: list[str], retrieved: list[str], traced: bool = True
) -> bool:
    if not traced:  # no trace, no answer: no hit
        return False
    citations = citations or []  # an answer without a citation list cites nothing (seed-000: `or []`)
    if not set(citations) <= set(retrieved):
        return False
    return bool(set(citations) & set(gold)) if gold else citations == []


def phrase_containment(gold_claim: str | None, claim: str) -> bool:
    if not gold_claim:
        return False
    text = claim.lower()
    for match in PHRASE.finditer(gold_claim.lower()):
        phrase = match.group(0).strip(WS)
        if len(phrase) >= 5 and phrase in text:
            return True
    return False


def score(gold: list[dict], traces: list[dict], k: int) -> dict:
    """``gold`` and ``traces`` are canonical rows (contracts.columns schemas), traces in file order."""
    by_question = {}
    for case in gold:
        by_question.setdefault(case["question"], case["qid"])
    keyed: dict[str, dict] = {}
    n_traces = 0
    for trace in traces:
        n_traces += 1
        key = trace["qid"]
        if key is None:
            key = by_question.get(trace["question"], "question:" + trace["question"])
        keyed[key] = trace  # the last one wins
    gold_ids = {case["qid"] for case in gold}

    answered = refused = answerable = unanswerable = missing = matched = 0
    correct = hits = shipped_u = refused_a = recalled = compliant = cites_gold = phrase = with_claim = 0
    labels = []
    for case in gold:
        trace = keyed.get(case["qid"])
        if trace is None:
            missing += 1
            claim, citations, retrieved = "", None, []
        else:
            matched += 1
            claim = trace["claim"] or ""
            citations = trace["citations"]
            retrieved = trace["retrieved_ids"] or []
        is_ref = is_refusal(claim)
        shipped = not is_ref
        ans = case["answerable"]
        # A seed-000 case without a snippet list is never contained (seed-000: None == [] is False).
        c = containment(claim, case["gold_claim_substr"]) and not case.get("seed_without_snippets")
        h = citation_hit(citations, case["gold_citations"], retrieved, trace is not None)
        answered += shipped
        refused += is_ref
        answerable += ans
        unanswerable += not ans
        if shipped and ans and c and h:
            correct += 1
        if shipped and ans and h:
            hits += 1
        if shipped and not ans:
            shipped_u += 1
        if is_ref and ans:
            refused_a += 1
        if ans and set(case["gold_citations"]) <= set(retrieved[:k]):
            recalled += 1
        if trace is not None and (citations is not None or is_ref):
            compliant += 1
        if ans and shipped and set(citations or []) & set(case["gold_citations"]):
            cites_gold += 1
        if ans and case["gold_claim"]:
            with_claim += 1
            if shipped and phrase_containment(case["gold_claim"], claim):
                phrase += 1
        if ans and shipped and h:
            labels.append("OK")
        elif not ans and is_ref:
            labels.append("REFUSAL_OK")
        elif ans and is_ref:
            labels.append("OVER_REFUSAL")
        elif not ans and shipped:
            labels.append("HALLUCINATION")
        else:
            labels.append("ANS_NO_HIT")

    return {
        "answered": answered,
        "refused": refused,
        "answerable": answerable,
        "unanswerable": unanswerable,
        "missing": missing,
        "duplicates": n_traces - len(keyed),
        "unmatched": len(set(keyed) - gold_ids),
        "precision": correct / answered if answered else None,
        "chr": hits / answered if answered else None,
        "under_refusal": shipped_u / unanswerable if unanswerable else None,
        "over_refusal": refused_a / answerable if answerable else None,
        "recall@k": recalled / answerable if answerable else None,
        "compliance": compliant / matched if matched else None,
        "chr_answerable": cites_gold / answerable if answerable else None,
        "claim_containment": phrase / with_claim if with_claim else None,
        "labels": labels,
    }
