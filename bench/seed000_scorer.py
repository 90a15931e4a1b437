"""The seed-000 grounded-QA scorer's published rules, record by record in the standard library: the
per-line implementation users migrate from, kept here as the yardstick of bench_score.py --reference.

    python bench/seed000_scorer.py --gold G --trace T [--k 5]

Written from the rules, not copied: every gold line and every trace line is decoded into Python
objects (the last trace of a qid wins; a trace names its case by ``qid`` or ``q_id``), then each gold
case is scored in a loop:

* refusal: the claim, stripped, lower-cased, is exactly ``not in context``; anything else is shipped;
* containment: some gold substring of at least 5 characters occurs in the lower-cased claim (an empty
  list makes it true, an absent one false);
* citation hit: the citations are a list, all among the retrieved ids, and they meet the gold
  citations (or, without gold citations, are empty);
* precision and CHR over shipped answers (1.0 when none), under- and over-refusal over unanswerable
  and answerable cases, recall@k over answerable cases.

Prints the figures as JSON. Where our scorer defines a figure differently (docs/migration.md), the two
disagree on purpose; the benchmark compares time and memory only.
"""

from __future__ import annotations

import argparse
import json

REFUSAL = "not in context"


def records(path: str):
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                yield json.loads(line)


def contained(claim: str, substrings: list[str] | None) -> bool:
    lowered = claim.lower()
    if any(len(s) >= 5 and s.lower() in lowered for s in substrings or []):
        return True
    return substrings == []  # an empty list is contained; an absent one (None) is not


def hit(citations, gold: list[str] | None, retrieved: list[str] | None) -> bool:
    if not isinstance(citations, list) or not set(citations) <= set(retrieved or []):
        return False
    return bool(set(citations) & set(gold)) if gold else citations == []


def score(gold_path: str, trace_path: str, k: int) -> dict:
    gold = {case["qid"]: case for case in records(gold_path)}
    traces = {}
    for trace in records(trace_path):
        key = trace.get("qid") or trace.get("q_id")
        if key:
            traces[key] = trace
    shipped = refused = answerable = unanswerable = 0
    correct = cited = under = over = recalled = 0
    for qid, case in gold.items():
        trace = traces.get(qid, {})
        answer = trace.get("answer_json") or {}
        claim = (answer.get("claim") or "").strip()
        retrieved = trace.get("retrieved_ids") or []
        is_answer = claim.lower() != REFUSAL
        if case.get("answerable"):
            answerable += 1
            if set(case.get("gold_citations") or []) <= set(retrieved[:k]):
                recalled += 1
        else:
            unanswerable += 1
        if not is_answer:
            refused += 1
            over += case.get("answerable") is True
            continue
        shipped += 1
        if case.get("answerable") is False:
            under += 1
            continue
        if hit(answer.get("citations") or [], case.get("gold_citations"), retrieved):
            cited += 1
            correct += contained(claim, case.get("gold_claim_substr"))
    return {
        "answered": shipped,
        "refused": refused,
        "answerable": answerable,
        "unanswerable": unanswerable,
        "precision": correct / shipped if shipped else 1.0,
        "chr": cited / shipped if shipped else 1.0,
        "under_refusal": under / unanswerable if unanswerable else 0.0,
        "over_refusal": over / answerable if answerable else 0.0,
        "recall@k": recalled / answerable if answerable else 0.0,
        "k": k,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gold", required=True)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(score(args.gold, args.trace, args.k), indent=2))


if __name__ == "__main__":
    main()
