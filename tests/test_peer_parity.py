"""Side by side with the source systems: minimal inputs written the way RAGSpine and the seed-000 (WFGY)
scorer write them, each expected figure worked out by hand from that system's own rule (the comment
says how), never by running this code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main


def write(tmp_path, name: str, rows: list[dict]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def score(tmp_path, capsys, gold: list[dict], traces: list[dict], *extra: str) -> tuple[int, dict, str]:
    code = main(
        [
            "score",
            "--gold",
            write(tmp_path, "gold.jsonl", gold),
            "--trace",
            write(tmp_path, "traces.jsonl", traces),
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


# -- RAGSpine: clarification_mode "out_of_scope_entity" ---------------------------------------------

REFUSAL_CASE = {
    "id": "ref-oos",
    "question": "What was Globex's revenue in FY2025?",
    "case_type": "refusal",
    "expected": {"clarification": "none", "refuse": True},
    "tags": {"topic": "FIN"},
    "reference_date": "2026-06-12",
}
CLARIFY_CASE = {
    "id": "clar-001",
    "question": "What was revenue?",
    "case_type": "clarification",
    "expected": {"clarification": "ask_first", "refuse": False},
    "tags": {"topic": "FIN"},
    "reference_date": "2026-06-12",
}


def ragspine_trace(qid: str, claim: str, **outcome) -> dict:
    """A trace as RAGSpine's engine writes one: the answer text and its ``outcome``."""
    return {"id": qid, "answer": {"claim": claim, "citations": []}, "outcome": {"route": "qa", **outcome}}


def test_an_out_of_scope_entity_observation_is_read_and_scored_by_equality(tmp_path, capsys):
    traces = [
        ragspine_trace("ref-oos", "not in context", clarification_mode="out_of_scope_entity", refused=True),
        ragspine_trace("clar-001", "Which entity?", clarification_mode="ask_first", refused=False),
    ]
    code, report, err = score(tmp_path, capsys, [REFUSAL_CASE, CLARIFY_CASE], traces, "--format", "json")
    # RAGSpine: refusal_appropriateness = refused as expected, both cases -> 2/2. clarification_
    # appropriateness = observed mode == expected mode: "out_of_scope_entity" != "none" -> 1/2.
    assert code == 1 and err.count("\n") <= 1  # a verdict (the clarification gate), not unusable input
    gates = report["qa_gates"]
    assert (gates["refusal_appropriateness"]["passed"], gates["refusal_appropriateness"]["total"]) == (2, 2)
    clarification = gates["clarification_appropriateness"]
    assert (clarification["passed"], clarification["total"], clarification["pass_rate"]) == (1, 2, 0.5)
    assert [f["id"] for f in clarification["failures"]] == ["ref-oos"]


def test_out_of_scope_entity_is_not_a_legal_expected_mode(tmp_path, capsys):
    case = {**REFUSAL_CASE, "expected": {"clarification": "out_of_scope_entity", "refuse": True}}
    trace = ragspine_trace("ref-oos", "not in context", refused=True)
    code, _, err = score(tmp_path, capsys, [case], [trace])
    assert code == 2 and err.count("\n") == 1
    assert "gold.jsonl:1" in err and "id=ref-oos" in err and "clarification" in err


# -- RAGSpine: fabrication digits and periods ---------------------------------------------------------

# (answer of a refusal case, fabricated under RAGSpine's rule): remove periods matched by
# (?:FY\s*)?(?:19|20)\d{2}\s*年?\s*(?:H\s*[12]|Q\s*[1-4]|上半年|下半年)? compiled with re.IGNORECASE (\s and
# \d Unicode-aware), then any digit left (\d: any Unicode decimal digit) is a fabrication.
FABRICATION_CASES = [
    ("营收为１２３４百万", True),  # full-width digits are digits
    ("２０３０年的数据不在上下文中", True),  # full-width "２０" is not the ASCII "20" a period starts with
    ("2024h2 is not in context", False),  # lower-case half: still a period
    ("fy2025 q1 not in context", False),
    ("2025\u3000Q1 not in context", False),  # ideographic space inside the period
    ("FY\u00a02025 not in context", False),  # NBSP after FY
    ("٣ segments are not in context", True),  # an Arabic-Indic digit
    ("not in context", False),
]


def test_fabrication_counts_every_unicode_digit_and_reads_periods_as_ragspine_does(tmp_path, capsys):
    gold = [{**REFUSAL_CASE, "id": f"ref-{i}"} for i in range(len(FABRICATION_CASES))]
    traces = [
        ragspine_trace(f"ref-{i}", answer, refused=True, clarification_mode="none")
        for i, (answer, _) in enumerate(FABRICATION_CASES)
    ]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    expected = [f"ref-{i}" for i, (_, fabricated) in enumerate(FABRICATION_CASES) if fabricated]
    assert (report["fabrication"]["count"], report["fabrication"]["checked"]) == (3, 8)
    assert sorted(case["id"] for case in report["fabrication"]["cases"]) == expected
    numbers = {case["id"]: case["numbers"] for case in report["fabrication"]["cases"]}
    assert numbers["ref-0"] == ["１２３４"] and numbers["ref-6"] == ["٣"]
    assert code == 1  # the default fabrication gate is a count of 0


# -- seed-000 (WFGY): the refusal token after str.strip() ----------------------------------------------


@pytest.mark.parametrize(
    "claim", ["not in context\u00a0", "not in context\u2003", "\u3000not in context", " NOT IN CONTEXT\u2029"]
)
def test_the_refusal_token_is_stripped_of_unicode_whitespace_as_the_seed_scorer_strips(
    tmp_path, capsys, claim
):
    gold = [
        {"qid": "u1", "question": "q", "answerable": False, "gold_claim_substr": [], "gold_citations": []},
        {"qid": "a1", "question": "q", "answerable": True, "gold_claim_substr": [], "gold_citations": ["d1"]},
    ]
    traces = [
        {"qid": "u1", "answer": claim, "citations": [], "retrieved_ids": ["d1"]},
        {"qid": "a1", "answer": "Kestrel", "citations": ["d1"], "retrieved_ids": ["d1"]},
    ]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    # seed-000: claim.strip().lower() == "not in context" -> u1 is refused: S = {a1}, R = {u1}.
    # under_refusal = |S ∩ U| / |U| = 0/1; precision = 1/1 (a1 shipped, hit, no substrings).
    assert (report["answered"], report["refused"]) == (1, 1)
    assert report["under_refusal"] == 0.0 and report["precision"] == 1.0
    assert [c["label"] for c in sorted(report["cases"], key=lambda c: c["qid"])] == ["OK", "REFUSAL_OK"]
    assert code == 0


def test_a_trace_that_carries_its_refusal_flag_is_judged_by_it(tmp_path, capsys):
    # RAGSpine writes outcome.refused on every answer; that flag, not the text, says whether it refused.
    gold = [CLARIFY_CASE, {**REFUSAL_CASE, "id": "ref-2"}]
    traces = [
        ragspine_trace("clar-001", "not in context", clarification_mode="ask_first", refused=False),
        ragspine_trace("ref-2", "I cannot answer that from the documents.", refused=True),
    ]
    _, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    refusal = report["qa_gates"]["refusal_appropriateness"]
    assert (refusal["passed"], refusal["total"]) == (2, 2)


# -- RAGSpine: the narrative groundedness gates ------------------------------------------------------


def narrative_case(qid: str, doc: str) -> dict:
    expected = {"clarification": "none", "refuse": False, "narrative_doc": doc}
    return {"id": qid, "question": f"why {qid}?", "case_type": "narrative", "expected": expected, "tags": {}}


def narrative_trace(qid: str, doc: str, told: str, context: list) -> dict:
    outcome = {
        "clarification_mode": "none",
        "refused": False,
        "sources": [{"doc": doc, "locator": "slide=1"}],
        "narrative_answer": told,
        "retrieved_context": context,
    }
    return {"id": qid, "answer": {"claim": f"{told} [{doc}]", "citations": []}, "outcome": outcome}


NARRATIVE = [
    (  # every claim covered: 6/6 and 4/4 tokens in the context -> faithful
        narrative_case("nar-1", "HK_QBR.pptx"),
        narrative_trace(
            "nar-1",
            "HK_QBR.pptx",
            "Bancassurance sales fell 12% in Q4. The regulator capped commissions.",
            [
                "HK bancassurance sales fell 12% in Q4 2025.",
                {"doc": "REG.pptx", "text": "The regulator capped commissions."},
            ],
        ),
    ),
    (  # second claim "margins doubled thanks to ai": 0/5 tokens in the context -> not faithful
        narrative_case("nar-2", "CN_QBR.pptx"),
        narrative_trace(
            "nar-2",
            "CN_QBR.pptx",
            "Growth came from new agents. Margins doubled thanks to AI.",
            ["Growth came from new agents in Guangdong."],
        ),
    ),
    (  # CJK characters are tokens: 收紧佣金规则 has 6, the context holds 收 紧 规 则 -> 4/6 = 0.67 >= 0.6
        narrative_case("nar-3", "REG_WATCH_HK.pptx"),
        narrative_trace("nar-3", "REG_WATCH_HK.pptx", "监管收紧佣金规则。", ["香港监管机构收紧了规则"]),
    ),
    (  # exactly 3/5 = 0.6 of "abc def ghi jkl mno" in the context -> faithful (at the threshold passes)
        narrative_case("nar-4", "MEMO.docx"),
        narrative_trace("nar-4", "MEMO.docx", "abc def ghi jkl mno", ["abc def ghi"]),
    ),
]
REFERENCES = {
    # nar-1 answer has the, regulator, capped, commissions, bancassurance, sales, fell, 12, in, q4 ...;
    # reference tokens: the regulator capped bancassurance commissions at 10 percent (8) -> the,
    # regulator, capped, bancassurance, commissions recalled: 5/8 = 0.625 -> passes
    "HK_QBR.pptx.txt": "The regulator capped bancassurance commissions at 10 percent",
    # nar-2: growth came from new agents margins doubled thanks to ai vs 9 reference tokens, of which
    # growth, from, new, agents: 4/9 = 0.4444 -> fails
    "CN_QBR.txt": "Growth from new agents offset weaker bank channel sales",
    # nar-3: 监 管 收 紧 佣 金 规 则 vs 香港监管收紧规则 (8): 监 管 收 紧 规 则 -> 6/8 = 0.75 -> passes
    "REG_WATCH_HK.pptx.md": "香港监管收紧规则",
    # nar-4: abc def ghi jkl mno vs "abc xyz" (2): abc -> 1/2 = 0.5 -> fails
    "MEMO.docx.txt": "abc xyz",
}


def narrative_files(tmp_path) -> tuple[list[dict], list[dict], str]:
    references = tmp_path / "references"
    references.mkdir()
    for name, text in REFERENCES.items():
        (references / name).write_text(text, encoding="utf-8")
    return [c for c, _ in NARRATIVE], [t for _, t in NARRATIVE], str(references)


def test_narrative_faithfulness_and_answer_accuracy_as_ragspine_scores_them(tmp_path, capsys):
    gold, traces, references = narrative_files(tmp_path)
    # RAGSpine's own name for its gate: without an evidence registry, the narrative metric.
    _, report, _ = score(
        tmp_path, capsys, gold, traces, "--references", references, "--gates", "faithfulness=0.5"
    )
    assert [gate["metric"] for gate in report["gates"]] == ["narrative_faithfulness"]
    gates = report["qa_gates"]
    faithful = gates["narrative_faithfulness"]
    assert (faithful["passed"], faithful["total"]) == (3, 4)
    [failure] = faithful["failures"]
    assert failure["id"] == "nar-2" and failure["actual"]["coverage"] == 0.0
    assert failure["actual"]["weakest_claim"] == "margins doubled thanks to ai"
    accuracy = gates["answer_accuracy"]
    assert (accuracy["passed"], accuracy["total"]) == (2, 4)
    assert {f["id"]: f["actual"]["recall"] for f in accuracy["failures"]} == {"nar-2": 0.4444, "nar-4": 0.5}


SIX_GATES = {  # as RAGSpine's qa_baseline.json names them: its ``faithfulness`` is the narrative gate
    "numeric_accuracy": 1.0,
    "citation_validity": 1.0,
    "refusal_appropriateness": 1.0,
    "clarification_appropriateness": 1.0,
    "faithfulness": 1.0,
    "answer_accuracy": 1.0,
}


def test_a_six_gate_ragspine_baseline_is_enforced_in_full(tmp_path, capsys):
    gold, traces, references = narrative_files(tmp_path)
    baseline = tmp_path / "qa_baseline.json"
    baseline.write_text(json.dumps({"tool": {"metrics": SIX_GATES, "fabrication_count": 0, "n_cases": 4}}))
    args = ["--references", references, "--baseline", str(baseline), "--mode", "tool"]
    code, report, _ = score(tmp_path, capsys, gold, traces, *args, "--gates", "refusal_appropriateness=1.0")
    assert code == 1
    regressions = {r["metric"]: r["current"] for r in report["release"]["regressions"]}
    assert regressions == {"narrative_faithfulness": 0.75, "answer_accuracy": 0.5}
    assert report["release"].get("unmeasured", []) == []
    # Without the reference texts, answer_accuracy cannot go silently unmeasured: unusable input.
    code, _, err = score(tmp_path, capsys, gold, traces, "--baseline", str(baseline), "--mode", "tool")
    assert code == 2 and err.count("\n") == 1
    assert "answer_accuracy" in err and "--references" in err


# -- the permission-safe harness: versions as [key, value] pairs, six required keys, canaries ----------

LAYERED = Path(__file__).resolve().parents[1] / "examples" / "layered"
SIX_KEYS = ["index", "embedder", "retriever", "reranker", "generator", "acl_policy"]


def layered_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (LAYERED / name).read_text("utf-8").splitlines() if line.strip()]


def layered_score(tmp_path, capsys, gold: list[dict], traces: list[dict]) -> tuple[int, dict]:
    args = ["--evidence", str(LAYERED / "evidence.jsonl"), "--config", str(LAYERED / "gates.yaml")]
    code, report, _ = score(tmp_path, capsys, gold, traces, *args, "--format", "json")
    return code, report


def test_the_harness_versions_as_pairs_are_read_and_a_repeated_key_is_still_repeated(tmp_path, capsys):
    gold, traces = layered_rows("gold.jsonl")[:3], layered_rows("traces.jsonl")[:3]
    assert [pair[0] for pair in traces[0]["versions"]] == SIX_KEYS  # the shipped example, as written
    traces[1]["versions"] = [*traces[1]["versions"], ["retriever", "bm25-2.2"]]  # a key written twice
    traces[2]["versions"] = [pair for pair in traces[2]["versions"] if pair[0] != "acl_policy"]
    code, report = layered_score(tmp_path, capsys, gold, traces)
    # The harness: all six keys once -> admissible; a repeated key -> repeated_version; a missing key
    # -> missing_version. Two of three cases inadmissible.
    rules = {case["qid"]: case["inadmissible"] for case in report["cases"]}
    assert rules == {"FRZ-01": [], "FRZ-02": ["repeated_version"], "FRZ-03": ["missing_version"]}
    assert code == 1


def test_canaries_that_come_out_the_wrong_way_block_and_are_named(tmp_path, capsys):
    gold, traces = layered_rows("gold.jsonl")[:4], layered_rows("traces.jsonl")[:4]
    for case in gold:
        case.pop("expect", None)
    gold[0]["expect"], gold[1]["expect"] = "releasable", "blocked"  # FRZ-02 is known-bad, yet releasable
    gold[2]["expect"] = "blocked"  # FRZ-03: made inadmissible below, so blocked as expected
    traces[2]["selected_versions"] = ["v1"] * len(traces[2]["selected_versions"])  # a stale version
    code, report = layered_score(tmp_path, capsys, gold, traces)
    gates = {gate["metric"]: gate for gate in report["gates"]}
    # known-good: FRZ-01 released -> 1/1. known-bad: FRZ-02 released (wrong), FRZ-03 blocked -> 1/2.
    assert (gates["known_good_released"]["value"], gates["known_good_released"]["denominator"]) == (1.0, 1)
    assert (gates["known_bad_blocked"]["value"], gates["known_bad_blocked"]["denominator"]) == (0.5, 2)
    assert gates["known_bad_blocked"]["pass"] is False and code == 1
    assert report["release"]["decision"] == "block"
    assert report["release"]["causes"]["wrong_canaries"] == [
        {"id": "FRZ-02", "expect": "blocked", "outcome": "releasable"}
    ]


def test_canaries_that_come_out_as_expected_pass_their_checks(tmp_path, capsys):
    gold, traces = layered_rows("gold.jsonl"), layered_rows("traces.jsonl")
    code, report = layered_score(tmp_path, capsys, gold, traces)
    gates = {gate["metric"]: gate for gate in report["gates"]}
    assert gates["known_good_released"]["pass"] is True and "known_bad_blocked" not in gates
    assert code == 0 and "wrong_canaries" not in report["release"]["causes"]


# -- RAGSpine: extraction channels count every aligned cell ----------------------------------------


def test_ragspines_extraction_fixture_with_three_wrong_spans_is_58_of_61_and_passes_0_9(tmp_path, capsys):
    # RAGSpine's facts: one JSON object per cell, merge_span null where the cell heads no merged range.
    truth = [{"sheet": "P&L", "cell_ref": f"B{r}", "value": r * 10, "merge_span": None} for r in range(2, 60)]
    truth += [
        {"sheet": "P&L", "cell_ref": f"A{r}", "value": "Header", "merge_span": [f"A{r}", f"D{r}"]}
        for r in (1, 60, 61)
    ]
    facts = [dict(cell) for cell in truth[:58]]
    facts += [
        {**cell, "merge_span": [cell["cell_ref"], cell["cell_ref"].replace("A", "C")]} for cell in truth[58:]
    ]
    (tmp_path / "truth.json").write_text(json.dumps({"cells": truth}), encoding="utf-8")
    write(tmp_path, "facts.jsonl", facts)
    (tmp_path / "baseline.json").write_text(json.dumps({"header_attribution": 0.9}), encoding="utf-8")
    args = ["--facts", str(tmp_path / "facts.jsonl"), "--truth", str(tmp_path / "truth.json")]
    code = main(["extraction", *args, "--baseline", str(tmp_path / "baseline.json")])
    report = json.loads(capsys.readouterr().out)
    # RAGSpine: 61 aligned cells in every channel; spans equal on 58 (null = null), wrong on 3 -> 58/61.
    spans = report["channels"]["header_attribution"]
    assert (spans["correct"], spans["total"], spans["accuracy"]) == (58, 61, 0.9508)
    assert (report["channels"]["color_mapping"]["correct"], report["channels"]["color_mapping"]["total"]) == (
        61,
        61,
    )
    assert code == 0 and report["pass"] is True
