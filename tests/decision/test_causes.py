"""Why a release fails: where failing cases stop, which admissibility rules they break, the worst three."""

from __future__ import annotations

import random

import pyarrow as pa

from ragspine_pipeline.decision.causes import (
    FAILING_LABELS,
    QUESTION_CHARS,
    cause_sentence,
    release_causes,
    short_question,
    worst_case_line,
)
from ragspine_pipeline.decision.config import EvalConfig
from ragspine_pipeline.decision.evaluation import evaluate
from ragspine_pipeline.decision.gates import Gate
from ragspine_pipeline.scoring.grounded import LABELS, score_grounded
from ragspine_pipeline.scoring.layered import score_layered
from tests.scoring.conftest import gold_table, trace_table
from tests.scoring.test_layered import EVIDENCE, GOOD_CLAIM, HARNESS_KEYS

RESTRICTED, STALE, UNKNOWN = "hr-9#1", "pol-0#1", "ghost#7"


def case(qid: str, **changes) -> dict:
    return {
        "qid": qid,
        "answerable": True,
        "gold_claim_substr": ["release manager approves"],
        "gold_citations": ["pol-1#2"],
        "required_points": ["release manager approves"],
        **changes,
    }


def trace(qid: str, extra: tuple[str, ...] = (), **changes) -> dict:
    """A correct, admissible answer; ``extra`` chunk ids are added to the first stage."""
    first = ["pol-1#2", "pol-1#1", "noise#1", *extra]
    return {
        "qid": qid,
        "retrieved_ids": first,
        "selected_context_ids": ["pol-1#2", "pol-1#1"],
        "selected_versions": ["v1", "v1"],
        "version_keys": HARNESS_KEYS,
        "index_version": "ix-1",
        "claims": [GOOD_CLAIM],
        "claim": GOOD_CLAIM["text"],
        "citations": ["pol-1#2"],
        **changes,
    }


NO_CANDIDATE = {
    "retrieved_ids": ["pol-1#1", "noise#1"],
    "selected_context_ids": ["pol-1#1"],
    "selected_versions": ["v1"],
}
UNFAITHFUL = {
    "claims": [
        GOOD_CLAIM,
        {"text": "Admins can bypass the freeze.", "citation_id": "pol-1#1", "support_phrases": ["bypass"]},
    ]
}
# Gold order on purpose unlike qid order: the worst cases must not come out in gold order.
CASES = [
    (case("z-two"), trace("z-two", (STALE, UNKNOWN))),
    (case("a-ok"), trace("a-ok")),
    (case("m-stale"), trace("m-stale", (STALE,))),
    (case("c-two"), trace("c-two", (RESTRICTED, STALE))),
    (case("b-restricted"), trace("b-restricted", (RESTRICTED,))),
    (case("e-faith"), trace("e-faith", **UNFAITHFUL)),
    (case("y-nocand"), trace("y-nocand", **NO_CANDIDATE)),
]


def scored(cases=CASES, layered=True):
    gold = gold_table([g for g, _ in cases])
    traces = trace_table([t for _, t in cases])
    grounded = score_grounded(gold, traces)
    return gold, grounded, score_layered(gold, traces, EVIDENCE) if layered else None


def test_failing_cases_are_counted_by_first_failed_stage_in_pipeline_order():
    gold, grounded, layered = scored()
    causes = release_causes(gold, grounded.cases, layered)
    assert causes["cases"] == 7 and causes["failing"] == 6
    assert list(causes["first_failed_stage"].items()) == [
        ("admissibility", 4),
        ("candidate retrieval", 1),
        ("answer faithfulness", 1),
    ]


def test_each_broken_rule_counts_its_cases_most_first():
    gold, grounded, layered = scored()
    rules = release_causes(gold, grounded.cases, layered)["inadmissible_rules"]
    # c-two breaks two rules and counts for both; z-two counts for stale and unknown_chunk.
    assert list(rules.items()) == [("stale", 3), ("restricted", 2), ("unknown_chunk", 1)]


def test_rules_with_as_many_cases_are_ordered_by_name():
    cases = [(case("s"), trace("s", (STALE,))), (case("r"), trace("r", (RESTRICTED,)))]
    gold, grounded, layered = scored(cases)
    assert list(release_causes(gold, grounded.cases, layered)["inadmissible_rules"]) == [
        "restricted",
        "stale",
    ]


def test_worst_cases_name_each_first_failed_stage_before_a_second_case_of_one():
    gold, grounded, layered = scored()
    worst = release_causes(gold, grounded.cases, layered)["worst_cases"]
    # Four cases stop at admissibility: its worst one, then the worst of each other stage.
    assert [(c["qid"], c["first_failed_stage"], c["rules"]) for c in worst] == [
        ("c-two", "admissibility", ["restricted", "stale"]),
        ("y-nocand", "candidate retrieval", []),
        ("e-faith", "answer faithfulness", []),
    ]
    four = release_causes(gold, grounded.cases, layered, worst=4)["worst_cases"]
    assert [c["qid"] for c in four] == ["c-two", "z-two", "y-nocand", "e-faith"]  # then by stage, rules, qid


def test_worst_cases_come_by_stage_then_broken_rules_then_qid():
    gold, grounded, layered = scored()
    every = release_causes(gold, grounded.cases, layered, worst=10)["worst_cases"]
    assert [c["qid"] for c in every] == ["c-two", "z-two", "b-restricted", "m-stale", "y-nocand", "e-faith"]
    labels = dict(zip(grounded.cases["qid"].to_pylist(), grounded.cases["label"].to_pylist(), strict=True))
    assert all(c["label"] == labels[c["qid"]] for c in every)
    assert every[0]["question"] == "question of c-two"


def test_case_tables_in_another_order_are_joined_on_qid():
    gold, grounded, layered = scored()
    reverse = pa.array(range(gold.num_rows - 1, -1, -1))
    shuffled = type(layered)(layered.cases.take(reverse), layered.metrics, layered.denominators)
    assert release_causes(gold, grounded.cases.take(reverse), shuffled) == release_causes(
        gold, grounded.cases, layered
    )


def test_the_sentence_and_the_lines_name_the_cause_in_plain_text():
    gold, grounded, layered = scored()
    causes = release_causes(gold, grounded.cases, layered)
    assert cause_sentence(causes) == (
        "4 of 7 cases fail first at admissibility (3 stale, 2 restricted, 1 unknown chunk); "
        "1 at candidate retrieval; 1 at answer faithfulness"
    )
    assert (
        worst_case_line(causes["worst_cases"][0])
        == "c-two (admissibility: restricted, stale): question of c-two"
    )
    nocand = release_causes(gold, grounded.cases, layered, worst=10)["worst_cases"][4]
    assert worst_case_line(nocand) == "y-nocand (candidate retrieval): question of y-nocand"


def test_questions_are_redacted_folded_and_cut_to_80_characters():
    question = (
        "Can  alice.smith+ops@example.com\n\tapprove a freeze exception " + "for the payments team " * 5
    )
    cases = [(case("q1", question=question), trace("q1", (STALE,)))]
    gold, grounded, layered = scored(cases)
    shown = release_causes(gold, grounded.cases, layered)["worst_cases"][0]["question"]
    assert shown.startswith("Can [EMAIL] approve a freeze exception for the payments team")
    assert "alice" not in shown and "example.com" not in shown and "\n" not in shown and "  " not in shown
    assert len(shown) == QUESTION_CHARS and shown.endswith("…")
    exact = "x" * QUESTION_CHARS
    assert short_question(exact) == exact and short_question(None) == "" and short_question("") == ""


def test_a_missing_question_is_empty_and_the_line_stops_at_the_reason():
    cases = [(case("q1", question=""), trace("q1", (RESTRICTED,)))]
    gold, grounded, layered = scored(cases)
    worst = release_causes(gold, grounded.cases, layered)["worst_cases"][0]
    assert worst["question"] == "" and worst_case_line(worst) == "q1 (admissibility: restricted)"


def grounded_only_cases():
    refused = {"claims": None, "claim": "not in context", "citations": []}
    wrong = {"claims": None, "citations": ["noise#1"]}
    return [
        (case("a-over"), trace("a-over", **refused)),
        (case("b-nohit"), trace("b-nohit", **wrong)),
        (case("d-halluc", answerable=False, gold_citations=[]), trace("d-halluc")),
        (case("c-halluc", answerable=False, gold_citations=[]), trace("c-halluc")),
        (case("e-ok"), trace("e-ok")),
        (case("f-refusal-ok", answerable=False, gold_citations=[]), trace("f-refusal-ok", **refused)),
    ]


def test_without_layered_data_worst_cases_come_by_label_then_qid():
    gold, grounded, _ = scored(grounded_only_cases(), layered=False)
    causes = release_causes(gold, grounded.cases, None)
    assert causes["failing"] == 4 and causes["cases"] == 6
    assert causes["first_failed_stage"] is None and causes["inadmissible_rules"] == {}
    assert [(c["qid"], c["label"]) for c in causes["worst_cases"]] == [
        ("c-halluc", "HALLUCINATION"),
        ("b-nohit", "ANS_NO_HIT"),
        ("a-over", "OVER_REFUSAL"),
    ]  # one per label before a second hallucination (d-halluc)
    assert all(c["first_failed_stage"] is None and c["rules"] == [] for c in causes["worst_cases"])
    assert cause_sentence(causes) == "4 of 6 cases fail (no evidence registry: failed stages unknown)"
    assert worst_case_line(causes["worst_cases"][0]) == "c-halluc (HALLUCINATION): question of c-halluc"
    over = release_causes(gold, grounded.cases, None, worst=10)["worst_cases"][-1]
    assert (over["qid"], over["label"]) == ("a-over", "OVER_REFUSAL")


def test_nothing_failing_still_has_causes_and_no_sentence():
    passing = [(case(q), trace(q)) for q in ("p1", "p2")]
    gold, grounded, layered = scored(passing)
    causes = release_causes(gold, grounded.cases, layered)
    assert causes == {
        "cases": 2,
        "failing": 0,
        "first_failed_stage": {},
        "inadmissible_rules": {},
        "worst_cases": [],
    }
    assert cause_sentence(causes) is None and cause_sentence(None) is None
    gold, grounded, _ = scored(passing, layered=False)
    assert release_causes(gold, grounded.cases, None)["worst_cases"] == []


def test_the_release_decision_carries_the_causes():
    gold, traces = gold_table([g for g, _ in CASES]), trace_table([t for _, t in CASES])
    ev = evaluate(gold, traces, gates=[Gate("releasable_rate", 0.9)], config=EvalConfig(), run_id="t",
                  evidence=EVIDENCE)  # fmt: skip
    assert ev.release.decision == "block"
    assert ev.release.causes == release_causes(gold, ev.grounded.cases, ev.layered)
    assert ev.release.as_dict()["causes"]["first_failed_stage"]["admissibility"] == 4


def test_the_worst_cases_and_counts_of_a_large_run_are_those_a_full_sort_gives():
    """The worst cases come from top-k selections over dictionary codes; with many failing cases in
    several chunks, some rows null, they are those a plain sort by (label, qid) gives: the first of
    each label, then the first of the rest, in that sort's order."""
    rnd = random.Random(3)
    n = 5000
    qids = [f"q{rnd.randrange(10**6):07d}-{i}" for i in range(n)]
    picks = [rnd.choice([*LABELS, None]) for _ in range(n)]
    picks[0], picks[1700] = "HALLUCINATION", "ANS_NO_HIT"  # each chunk's first code is a failing label
    labels = pa.chunked_array(
        [pa.array(picks[:1700], pa.string()).dictionary_encode(), pa.array(picks[1700:]).dictionary_encode()]
    )
    gold = pa.table({"qid": qids, "question": [f"question {i}" for i in range(n)]})
    cases = pa.table({"qid": qids, "label": labels})
    for worst in (0, 1, 3, 50):
        causes = release_causes(gold, cases, None, worst=worst)
        failing = sorted(
            (FAILING_LABELS.index(label), qid)
            for qid, label in zip(qids, picks, strict=True)
            if label in FAILING_LABELS
        )
        assert causes["failing"] == len(failing)
        leaders = [min(f for f in failing if f[0] == rank) for rank in sorted({r for r, _ in failing})]
        leaders = leaders[:worst]
        expected = sorted(leaders + [f for f in failing if f not in leaders][: worst - len(leaders)])
        assert [(c["label"], c["qid"]) for c in causes["worst_cases"]] == [
            (FAILING_LABELS[rank], qid) for rank, qid in expected
        ]
    assert None in picks  # the nulls were there to be missed
