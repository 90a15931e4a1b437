"""The grounded-QA metrics on hand-made cases, one branch at a time, plus the WFGY worked example."""

from __future__ import annotations

import pytest

from ragspine_pipeline.metrics import MetricResult
from ragspine_pipeline.scoring.grounded import gold_claim_phrases, score_grounded
from tests.scoring.conftest import gold_table, trace_table


def answerable(qid, substr=("rejects null keys",), cites=("p1",), **extra):
    return {
        "qid": qid,
        "answerable": True,
        "gold_claim_substr": list(substr),
        "gold_citations": list(cites),
        **extra,
    }


def unanswerable(qid):
    return {"qid": qid, "answerable": False}


def shipped(qid, claim="X rejects null keys.", cites=("p1",), retrieved=("p1", "p2")):
    return {
        "qid": qid,
        "claim": claim,
        "citations": None if cites is None else list(cites),
        "retrieved_ids": list(retrieved),
    }


def refusal(qid, claim="not in context"):
    return {"qid": qid, "claim": claim, "citations": [], "retrieved_ids": ["p9"]}


def run(gold, traces, k=5):
    return score_grounded(gold_table(gold), trace_table(traces), k=k)


def labels(result):
    return dict(
        zip(result.cases.column("qid").to_pylist(), result.cases.column("label").to_pylist(), strict=True)
    )


def test_wfgy_worked_example():
    """The mini example of the WFGY eval page: all three correct."""
    gold = [
        answerable("A0001", substr=["rejects null keys"], cites=["p1#2"]),
        {"qid": "A0002", "answerable": False, "gold_claim_substr": [], "gold_citations": []},
        answerable("A0003", substr=["only domain example.com"], cites=["pB#1"]),
    ]
    traces = [
        shipped("A0001", "X rejects null keys.", ["p1#2"], ["p1#1", "p1#2", "p2#1"]),
        {"qid": "A0002", "claim": "not in context", "citations": [], "retrieved_ids": ["p1#1", "p2#1"]},
        shipped("A0003", "Only domain example.com is allowed.", ["pB#1"], ["pB#1", "p1#2"]),
    ]
    result = run(gold, traces)
    assert result.metrics["precision"] == 1.0
    assert result.metrics["chr"] == 1.0
    assert result.metrics["under_refusal"] == 0.0
    assert result.metrics["over_refusal"] == 0.0
    assert result.metrics["recall@k"] == 1.0
    assert result.counts["answered"] == 2 and result.counts["refused"] == 1
    assert labels(result) == {"A0001": "OK", "A0002": "REFUSAL_OK", "A0003": "OK"}


def test_every_label():
    gold = [
        answerable("ok"),
        unanswerable("ref_ok"),
        answerable("over"),
        unanswerable("hall"),
        answerable("nohit"),
    ]
    traces = [
        shipped("ok"),
        refusal("ref_ok"),
        refusal("over"),
        shipped("hall"),
        shipped("nohit", cites=["p2"]),
    ]
    result = run(gold, traces)
    assert labels(result) == {
        "ok": "OK",
        "ref_ok": "REFUSAL_OK",
        "over": "OVER_REFUSAL",
        "hall": "HALLUCINATION",
        "nohit": "ANS_NO_HIT",
    }
    # S = {ok, hall, nohit}; only ok is correct and a hit.
    assert result.metrics["precision"] == pytest.approx(1 / 3)
    assert result.metrics["chr"] == pytest.approx(1 / 3)
    assert result.metrics["under_refusal"] == 0.5  # hall of {ref_ok, hall}
    assert result.metrics["over_refusal"] == pytest.approx(1 / 3)  # over of {ok, over, nohit}


def test_empty_shipped_set_makes_precision_and_chr_not_applicable():
    result = run([answerable("a"), unanswerable("u")], [refusal("a"), refusal("u")])
    assert result.counts["answered"] == 0
    assert result.metrics["precision"] is None and result.metrics["chr"] is None  # null, no placeholder
    assert result.denominator("precision") == 0
    assert result.results()["precision"] == MetricResult("precision", None, 0, 0)


def test_no_unanswerable_or_no_answerable_case_makes_their_rates_not_applicable():
    result = run([answerable("a")], [shipped("a")])
    assert result.counts["unanswerable"] == 0 and result.metrics["under_refusal"] is None
    result = run([unanswerable("u")], [shipped("u")])
    assert (
        result.counts["answerable"] == 0
        and result.metrics["over_refusal"] is None
        and result.metrics["recall@k"] is None
    )
    assert result.metrics["chr_answerable"] is None and result.metrics["under_refusal"] == 1.0


def test_missing_trace_is_an_empty_answer_that_fails():
    gold = [answerable("a", substr=[], cites=[]), unanswerable("u"), answerable("b")]
    result = run(gold, [shipped("b")])
    assert result.counts["missing"] == 2
    assert result.counts["answered"] == 3  # an empty claim is not a refusal
    # Even a case with no substrings and no gold citations fails: there is no citation list at all.
    assert labels(result) == {"a": "ANS_NO_HIT", "u": "HALLUCINATION", "b": "OK"}
    assert result.metrics["under_refusal"] == 1.0
    # compliance is over matched traces only
    assert result.denominator("compliance") == 1 and result.metrics["compliance"] == 1.0
    assert result.cases.column("missing").to_pylist() == [True, True, False]


def test_substrings_shorter_than_five_characters_never_count():
    gold = [
        answerable("short", substr=["null"]),  # 4 chars: cannot be found
        answerable("mixed", substr=["null", "rejects null"]),
        answerable("empty", substr=[]),  # empty list: C is true
        answerable("exact5", substr=["KEYS."]),  # exactly 5 chars, case-insensitive
    ]
    traces = [shipped(q, claim="X rejects null keys.") for q in ("short", "mixed", "empty", "exact5")]
    result = run(gold, traces)
    assert result.cases.column("contained").to_pylist() == [False, True, True, True]
    assert result.metrics["precision"] == 0.75
    assert result.metrics["chr"] == 1.0  # containment does not affect the citation hit


def test_citations_outside_the_retrieved_ids_are_not_a_hit():
    gold = [answerable("a", cites=["p1"]), answerable("b", cites=["p1"])]
    traces = [
        shipped("a", cites=["p1", "p7"], retrieved=["p1", "p2"]),  # p7 was never retrieved
        shipped("b", cites=["p1"], retrieved=["p1"]),
    ]
    result = run(gold, traces)
    assert result.cases.column("citation_hit").to_pylist() == [False, True]
    # chr_answerable does not require scoped citations: both cite the gold id
    assert result.metrics["chr_answerable"] == 1.0


def test_no_gold_citations_requires_an_empty_citation_list():
    gold = [answerable("a", substr=[], cites=[]), answerable("b", substr=[], cites=[])]
    traces = [shipped("a", cites=[]), shipped("b", cites=["p1"])]
    assert run(gold, traces).cases.column("citation_hit").to_pylist() == [True, False]


def test_an_answer_without_a_citation_list_is_not_a_hit_and_not_compliant():
    gold = [answerable("a"), unanswerable("u")]
    traces = [shipped("a", cites=None), refusal("u")]
    result = run(gold, traces)
    assert result.cases.column("citation_hit").to_pylist() == [False, None]  # H does not apply to refusals
    assert result.metrics["compliance"] == 0.5  # the refusal is compliant without citations


def test_duplicate_traces_last_one_wins_and_are_counted():
    gold = [answerable("a"), unanswerable("u")]
    traces = [shipped("a", cites=["p2"]), refusal("u"), shipped("a"), shipped("u"), refusal("u")]
    result = run(gold, traces)
    assert result.counts["duplicates"] == 3
    assert labels(result) == {"a": "OK", "u": "REFUSAL_OK"}


def test_unmatched_traces_are_ignored_and_counted_once_per_id():
    result = run([answerable("a")], [shipped("a"), shipped("zz"), shipped("zz"), shipped("yy")])
    assert result.counts["unmatched"] == 2
    assert result.counts["duplicates"] == 1
    assert result.metrics["precision"] == 1.0


def test_refusal_token_is_stripped_and_case_insensitive_but_exact():
    gold = [unanswerable(q) for q in ("a", "b", "c")]
    traces = [
        refusal("a", "  Not In Context\n"),
        refusal("b", "not in context."),
        refusal("c", "NOT IN CONTEXT"),
    ]
    assert labels(run(gold, traces)) == {"a": "REFUSAL_OK", "b": "HALLUCINATION", "c": "REFUSAL_OK"}


def test_recall_at_k_uses_the_top_k_retrieved_ids():
    gold = [answerable("a", cites=["p1", "p3"]), answerable("b", cites=["p3"])]
    traces = [shipped("a", retrieved=["p1", "p2", "p3"]), shipped("b", retrieved=["p1", "p2", "p3"])]
    assert run(gold, traces, k=2).metrics["recall@k"] == 0.0
    assert run(gold, traces, k=3).metrics["recall@k"] == 1.0


def test_traces_without_an_id_join_on_the_question():
    gold = [answerable("a", question="What is X?"), answerable("b", question="What is Y?")]
    traces = [
        {
            "qid": None,
            "question": "What is X?",
            "claim": "X rejects null keys.",
            "citations": ["p1"],
            "retrieved_ids": ["p1"],
        },
        {"qid": None, "question": "Unknown?", "claim": "x", "citations": [], "retrieved_ids": []},
    ]
    result = run(gold, traces)
    assert labels(result) == {"a": "OK", "b": "ANS_NO_HIT"}
    assert result.counts["missing"] == 1 and result.counts["unmatched"] == 1


def test_claim_containment_uses_phrases_of_the_gold_claim():
    gold = [
        answerable("a", gold_claim="X is a constrained mapping."),
        answerable("b", gold_claim="Y is unrelated."),
        answerable("c", gold_claim=None),
    ]
    traces = [
        shipped("a", claim="Indeed x is a constrained mapping, see p1"),
        shipped("b", claim="Y is related"),
        shipped("c"),
    ]
    result = run(gold, traces)
    assert result.counts["answerable_phrase_contained"] == 1
    # "c" has no gold_claim: the metric does not apply to it and it leaves the denominator.
    assert result.denominator("claim_containment") == 2
    assert result.metrics["claim_containment"] == 0.5


def test_claim_containment_without_any_gold_claim_is_not_applicable():
    result = run([answerable("a")], [shipped("a")])
    assert result.denominator("claim_containment") == 0 and result.metrics["claim_containment"] is None


def test_case_flags_are_null_where_they_do_not_apply():
    result = run(
        [answerable("a"), unanswerable("u"), answerable("r")], [shipped("a"), shipped("u"), refusal("r")]
    )
    cases = result.cases
    assert cases.column("citation_hit").to_pylist() == [True, False, None]  # refusal: H does not apply
    assert cases.column("contained").to_pylist() == [True, True, None]
    assert cases.column("recall_hit").to_pylist() == [
        True,
        None,
        False,
    ]  # unanswerable: recall does not apply


def test_gold_claim_phrases_split_on_punctuation_and_trim():
    import pyarrow as pa

    phrases = gold_claim_phrases(pa.array(["X is a mapping. -- Only domain example.com, ok", None, "ab. cd"]))
    assert phrases.to_pylist() == [["x is a mapping", "only domain example"], [], []]


def test_k_must_be_positive():
    with pytest.raises(ValueError):
        run([answerable("a")], [shipped("a")], k=0)
