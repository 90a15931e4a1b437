"""Side by side with the source systems: minimal inputs written the way RAGSpine and the seed-000 (WFGY)
scorer write them, each expected figure worked out by hand from that system's own rule (the comment
says how), never by running this code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.columns import load_gold
from ragspine_pipeline.errors import InputError


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
    (  # no split at a full stop: one claim, its 9 tokens all in the context -> faithful
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
    (  # one claim (no split at a full stop): growth came from new agents in the context, margins
        # doubled thanks to ai not: 5/10 = 0.5 < 0.6 -> not faithful
        narrative_case("nar-2", "CN_QBR.pptx"),
        narrative_trace(
            "nar-2",
            "CN_QBR.pptx",
            "Growth came from new agents. Margins doubled thanks to AI.",
            ["Growth came from new agents in Guangdong."],
        ),
    ),
    (  # CJK characters are tokens: 监管收紧佣金规则 has 8, the context holds 监 管 收 紧 规 则 -> 6/8 >= 0.6
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
    # RAGSpine splits claims at 。！？!?；; and line breaks, never at a full stop (this test split
    # "… agents. Margins …" in two and reported 0/5 before): the claim is the whole sentence pair.
    assert failure["id"] == "nar-2" and failure["actual"]["coverage"] == 0.5
    assert failure["actual"]["weakest_claim"] == "Growth came from new agents. Margins doubled thanks to AI."
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
SIX_KEYS = ["retriever", "index", "sparse", "dense", "fusion", "reranker"]  # the harness's version keys


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
    traces[2]["versions"] = [pair for pair in traces[2]["versions"] if pair[0] != "fusion"]
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


# -- RAGSpine: narrative gates (third pass) --
#
# Inputs as RAGSpine's engine writes them. Tool-direct mode: each retrieved chunk becomes a line
# "<chunk text>（来源：<doc> <doc>#para1>）" and those lines are the narrative answer. Agent mode with
# its offline provider: the provider echoes the prompt under "基于检索到的资料：", so the answer is that
# line, "。", "问题：<question>", "检索片段：" and "[1] <chunk text>（来源：…）"; a provider whose prose
# does not name the doc gets a "（资料来源：…）" line appended. No retrieval: "未检索到…".
# RAGSpine's rules: a line that is empty or starts with 基于检索到的资料 / 未检索到 / 问题： / 检索片段 …
# is dropped; the trailers （来源：…） / （资料来源：…） are removed, "[n]" becomes a space; a line
# splits at 。！？!?；; (never at "."). Tokens: runs of [A-Za-z0-9] lower-cased, each of 一-鿿 alone.


def ragspine_case(qid: str, case_type: str, doc: str, **expected) -> dict:
    """A golden case as RAGSpine's qa_golden_set.jsonl writes one."""
    return {
        "id": qid,
        "question": f"{qid}?",
        "case_type": case_type,
        "expected": {"clarification": "none", "refuse": False, "narrative_doc": doc, **expected},
        "tags": {"topic": "FIN", "scope": "ACME_HK", "qtype": case_type},
        "reference_date": "2026-06-12",
    }


def engine_trace(qid: str, doc: str, told: str, context: list[str], answer: str | None = None, **outcome):
    """RAGSpine's outcome of a narrative answer: the answer text is the narrative answer unless given."""
    observed = {
        "route": "narrative",
        "clarification_mode": "none",
        "refused": False,
        "sources": [{"doc": doc, "locator": f"{doc}#para1"}],
        "narrative_answer": told,
        "retrieved_context": context,
    }
    return ragspine_trace(qid, told if answer is None else answer, **{**observed, **outcome})


HK_REG = "香港监管动态：MPFA 强积金新规要求披露管理费，IA 加强销售流程审查。"
HK_QBR = "香港 REVENUE 下降主因是 MCV 客群收缩与银保渠道调整，趋势上短期仍有压力。"
CN_QBR = "ACME China growth driver: agency productivity and bancassurance expansion."


def agent_answer(question: str, text: str, doc: str) -> str:
    return f"基于检索到的资料：\n。\n问题：{question}\n检索片段：\n[1] {text}（来源：{doc} {doc}#para1）"


def test_narrative_claims_drop_framing_trailers_and_markers_and_never_split_at_a_full_stop(tmp_path, capsys):
    cases = [
        # Agent mode: lines 1, 3, 4 are framing, "。" has no token; the last line, its trailer and "[1]"
        # removed, is HK_REG less its 。: 28 tokens (香 港 监 管 动 态 mpfa 强 积 金 …), all in the
        # context -> 28/28, faithful.
        (
            "nar-agent",
            "REG_WATCH_HK.pptx",
            agent_answer("香港最近有什么监管动态", HK_REG, "REG_WATCH_HK.pptx"),
            [HK_REG],
        ),
        # Tool-direct mode: the trailer removed, one claim, every token in the context -> faithful.
        (
            "nar-tool",
            "HK_QBR_2025Q4.pptx",
            f"{HK_QBR}（来源：HK_QBR_2025Q4.pptx HK_QBR_2025Q4.pptx#para1）",
            [HK_QBR],
        ),
        # Provider prose and the appended trailer line (removed whole). No split at ".": one claim of 11
        # tokens (acme china growth came from agency productivity bancassurance expansion helped too),
        # 7 in the context (not came, from, helped, too) -> 7/11 = 0.636 >= 0.6, faithful.
        (
            "nar-prose",
            "CN_QBR_2025.pptx",
            "ACME China growth came from agency productivity. Bancassurance expansion helped too.\n"
            "（资料来源：CN_QBR_2025.pptx CN_QBR_2025.pptx#para1）",
            [CN_QBR],
        ),
        # Full-width digits are no tokens and "，" does not split: 收 入 涨 成 本 跌 利 润 翻 倍, 6 of
        # 10 in the context -> 0.6, at the threshold: faithful.
        ("nar-digits", "CN_QBR_2025.pptx", "收入涨３０％，成本跌１５％，利润翻倍。", ["收入涨，成本跌"]),
        # "；" splits: 银保渠道调整 6/6; 佣金上限下调 has only 调 in the context -> 1/6 = 0.1667:
        # not faithful.
        ("nar-split", "HK_QBR_2025Q4.pptx", "银保渠道调整；佣金上限下调。", ["银保渠道调整。"]),
    ]
    gold = [ragspine_case(qid, "narrative", doc) for qid, doc, _, _ in cases]
    traces = [engine_trace(qid, doc, told, context) for qid, doc, told, context in cases]
    _, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    faithful = report["qa_gates"]["narrative_faithfulness"]
    assert (faithful["passed"], faithful["total"]) == (4, 5)
    [failure] = faithful["failures"]
    assert failure["id"] == "nar-split"
    assert {
        key: failure["actual"][key] for key in ("claims", "unsupported", "weakest_claim", "coverage")
    } == {
        "claims": 2,
        "unsupported": 1,
        "weakest_claim": "佣金上限下调",
        "coverage": 0.1667,
    }


def test_narrative_gates_apply_to_narrative_cases_only_not_to_composite_ones(tmp_path, capsys):
    narrative = ragspine_case("nar-001", "narrative", "REG_WATCH_HK.pptx")
    source = {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5,table=1,row=2,col=3"}
    composite = ragspine_case(
        "comp-001", "composite", "HK_QBR_2025Q4.pptx", value=1702.0, unit="USD_M", source=source
    )
    told = agent_answer("香港最近有什么监管动态", HK_REG, "REG_WATCH_HK.pptx")
    # Agent mode writes no narrative answer for a composite case: its narrative sits in the answer text
    # after "归因分析：". Gated, that empty narrative answer would still be scored; RAGSpine scores
    # neither gate on it.
    figure = (
        "ACME_HK FY2025 REVENUE：1702 USD_M（来源：ACME_FY2025_Results.pptx · slide=5,table=1,row=2,col=3）"
    )
    why = agent_answer("香港去年REVENUE多少，为什么下降了", HK_QBR, "HK_QBR_2025Q4.pptx")
    composite_answer = f"{figure}\n\n归因分析：\n{why}"
    traces = [
        engine_trace("nar-001", "REG_WATCH_HK.pptx", told, [HK_REG]),
        engine_trace(
            "comp-001",
            "HK_QBR_2025Q4.pptx",
            "",
            [HK_QBR],
            answer=composite_answer,
            route="composite",
            found_value=1702.0,
            found_unit="USD_M",
            found_source=source,
        ),
    ]
    references = tmp_path / "references"
    references.mkdir()
    # Only the narrative case's doc has a reference text: the composite case's is never asked for.
    (references / "REG_WATCH_HK.pptx.txt").write_text(HK_REG, encoding="utf-8")
    code, report, err = score(
        tmp_path, capsys, [narrative, composite], traces, "--references", str(references), "--format", "json"
    )
    # RAGSpine: both gates over the one narrative case. nar-001's claim is HK_REG's text (faithful), and
    # its answer holds every token of the reference (recall 1.0) -> 1/1 each.
    gates = report["qa_gates"]
    for gate in ("narrative_faithfulness", "answer_accuracy"):
        assert (gates[gate]["passed"], gates[gate]["total"]) == (1, 1), gate
    assert gates["citation_validity"]["total"] == 2  # the composite case is still a QA case
    assert code != 2 and err.count("\n") <= 1


def test_an_empty_narrative_answer_has_no_claims_and_is_faithful(tmp_path, capsys):
    gold = [
        ragspine_case(qid, "narrative", "REG_WATCH_HK.pptx") for qid in ("nar-1", "nar-2", "nar-3", "nar-4")
    ]
    no_material = "未检索到与该问题相关的资料，无法基于现有知识库作答。"
    absent = engine_trace("nar-3", "REG_WATCH_HK.pptx", "", [], answer="Revenue tripled thanks to AI.")
    del absent["outcome"]["narrative_answer"]
    traces = [
        # RAGSpine's default narrative answer, "" (the case was routed elsewhere): no claims.
        engine_trace("nar-1", "REG_WATCH_HK.pptx", "", [], answer="请补充想查询的指标/实体/期间。"),
        # Its refusal when nothing was retrieved: a framing line, dropped whole -> no claims.
        engine_trace("nar-2", "REG_WATCH_HK.pptx", no_material, [], refused=True),
        # A trace without the key reads as that default, "", never as the answer text.
        absent,
        # nar-4 has no trace at all: a dropped question fails (this pipeline's rule; RAGSpine answers
        # every case).
    ]
    _, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    faithful = report["qa_gates"]["narrative_faithfulness"]
    # RAGSpine: no claims -> nothing unsupported -> faithful: nar-1, nar-2, nar-3 -> 3/4.
    assert (faithful["passed"], faithful["total"]) == (3, 4)
    assert [f["id"] for f in faithful["failures"]] == ["nar-4"]


CN_REFERENCE = "中国 REVENUE 增长由代理人产能提升驱动，银保渠道增长放缓"


def test_answer_accuracy_recalls_the_set_of_reference_tokens(tmp_path, capsys):
    # CN_REFERENCE: 23 tokens, 增 and 长 twice -> 21 distinct.
    trailer = "\n（资料来源：CN_QBR_2025.pptx CN_QBR_2025.pptx#para1）"
    cases = [
        # 中 国 revenue 增 长 由 代 理 人 产 能 驱 动: 13 of the 21 -> 13/21 = 0.619, passes (over the
        # multiset it would be 13/23 = 0.5652 and fail).
        ("nar-set", "CN_QBR_2025.pptx", "中国 REVENUE 增长由代理人产能驱动。" + trailer),
        # Without 产能: 11/21 = 0.5238 -> fails (not 11/23 = 0.4783).
        ("nar-short", "CN_QBR_2025.pptx", "中国 REVENUE 增长由代理人驱动。" + trailer),
        # A reference without a token (Hangul is none) leaves nothing to recall: 1.0, passes.
        ("nar-hangul", "KR_MEMO.pptx", "매출 증가"),
    ]
    references = tmp_path / "references"
    references.mkdir()
    (references / "CN_QBR_2025.pptx.txt").write_text(CN_REFERENCE, encoding="utf-8")
    (references / "KR_MEMO.pptx.txt").write_text("매출 증가", encoding="utf-8")
    gold = [ragspine_case(qid, "narrative", doc) for qid, doc, _ in cases]
    traces = [engine_trace(qid, doc, told, [CN_REFERENCE]) for qid, doc, told in cases]
    _, report, _ = score(tmp_path, capsys, gold, traces, "--references", str(references), "--format", "json")
    accuracy = report["qa_gates"]["answer_accuracy"]
    assert (accuracy["passed"], accuracy["total"]) == (2, 3)
    assert {f["id"]: f["actual"]["recall"] for f in accuracy["failures"]} == {"nar-short": 0.5238}


# -- Loaders and the remaining differences (third pass) --
#
# What each source system's loader accepts, and how it reads it, from its code: RAGSpine's
# load_golden_set (qa_eval._validate_case), its GateMetric.tally (by_tag: str(tag value)) and its
# extraction_eval.run_eval; the seed-000 scorer (bench/seed000_scorer.py); WFGY example 08's score.md.py.
# Where this pipeline differs on purpose the test pins this pipeline's behaviour, the comment gives the
# source system's figure, and docs/migration.md lists the difference with its reason.


def figure_case(qid: str = "num-1", **expected) -> dict:
    """A numeric golden case as RAGSpine writes one (every key its loader requires)."""
    return {
        "id": qid,
        "question": "What was ACME HK's FY2025 revenue?",
        "case_type": "numeric",
        "expected": {
            "clarification": "none",
            "refuse": False,
            "value": 1702.0,
            "unit": "USD_M",
            "source": {"doc": "R.pptx", "locator": "slide=5"},
            **expected,
        },
        "tags": {"topic": "FIN", "scope": "ACME_HK", "qtype": "phrasing"},
        "reference_date": "2026-06-12",
    }


def figure_trace(qid: str = "num-1", **outcome) -> dict:
    """RAGSpine's outcome of a figure found by its tool: value, unit, source, named in the answer."""
    found = {
        "clarification_mode": "none",
        "refused": False,
        "found_value": 1702.0,
        "found_unit": "USD_M",
        "found_source": {"doc": "R.pptx", "locator": "slide=5"},
        **outcome,
    }
    return ragspine_trace(qid, "ACME_HK FY2025 REVENUE 为 1702 USD_M（来源：R.pptx · slide=5）", **found)


def refusal_case(qid: str, **tags) -> dict:
    return {**REFUSAL_CASE, "id": qid, "tags": tags}


# A refusal case that also expects a value (0) but states no unit or source.
VALUED_REFUSAL = {**REFUSAL_CASE, "expected": {**REFUSAL_CASE["expected"], "value": 0}}


def rejected(code: int, err: str, where: str, field: str) -> bool:
    """One error line (exit 2) naming the file and line, and the field."""
    return code == 2 and err.count("\n") == 1 and where in err and f"field '{field}'" in err


def test_tag_values_that_are_numbers_or_flags_are_read_as_ragspines_str_reads_them(tmp_path, capsys):
    gold = [
        refusal_case("ref-1", topic="FIN", year=2025, audited=True, weight=2.0),
        refusal_case("ref-2", topic="FIN", year=2026, audited=False, weight=1.5),
    ]
    traces = [
        ragspine_trace("ref-1", "not in context", refused=True, clarification_mode="none"),
        ragspine_trace("ref-2", "It was 12.", refused=False, clarification_mode="none"),
    ]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    # RAGSpine: by_tag[key][str(value)]: str(2025) = "2025", str(True) = "True", str(2.0) = "2.0" (a JSON
    # 2.0 is a float). ref-1 refused as expected, ref-2 answered: refusal_appropriateness 1/2.
    by_tag = report["qa_gates"]["refusal_appropriateness"]["by_tag"]
    assert {value: counts["passed"] for value, counts in by_tag["year"].items()} == {"2025": 1, "2026": 0}
    assert {value: counts["passed"] for value, counts in by_tag["audited"].items()} == {"True": 1, "False": 0}
    assert set(by_tag["weight"]) == {"2.0", "1.5"} and by_tag["topic"]["FIN"]["total"] == 2
    assert code == 1


@pytest.mark.parametrize("value", [{"fy": 2025}, ["FIN", "HR"]])
def test_a_tag_value_that_is_an_object_or_a_list_rejects_the_file_naming_the_line(tmp_path, capsys, value):
    gold = [refusal_case("ref-1", topic="FIN"), refusal_case("ref-2", topic=value)]
    traces = [ragspine_trace("ref-1", "not in context", refused=True)]
    code, _, err = score(tmp_path, capsys, gold, traces)
    # RAGSpine would slice by str(value) ("{'fy': 2025}"); this pipeline refuses (docs/migration.md).
    assert rejected(code, err, "gold.jsonl:2: id=ref-2", "tags.topic")


@pytest.mark.parametrize(
    ("expected", "field"),
    [
        ({"unit": ""}, "expected.unit"),  # RAGSpine: `not expected.get("unit")` -> rejected
        ({"source": {"doc": "R.pptx"}}, "expected.source.locator"),  # {"doc", "locator"} <= keys
        ({"value": None}, "expected.value"),  # not isinstance(value, (int, float)) -> rejected
        ({"value": "1702"}, "expected.value"),
    ],
)
def test_a_numeric_case_needs_a_number_a_unit_and_a_located_source_as_ragspine_requires(
    tmp_path, capsys, expected, field
):
    gold = [figure_case("num-1"), figure_case("num-2", **expected)]
    code, _, err = score(tmp_path, capsys, gold, [figure_trace("num-1"), figure_trace("num-2")])
    assert rejected(code, err, "gold.jsonl:2: id=num-2", field)


@pytest.mark.parametrize(
    ("case", "field"),
    [
        # RAGSpine: "给了 value 就必须同时给 unit 与 source", whatever the case type.
        (VALUED_REFUSAL, "expected.unit"),
        # RAGSpine: `not expected.get("narrative_doc")` -> an empty one is rejected.
        (narrative_case("nar-1", ""), "expected.narrative_doc"),
    ],
)
def test_a_value_needs_its_unit_and_source_and_a_narrative_doc_may_not_be_empty(
    tmp_path, capsys, case, field
):
    code, _, err = score(tmp_path, capsys, [case], [ragspine_trace(case["id"], "not in context")])
    assert rejected(code, err, f"gold.jsonl:1: id={case['id']}", field)


def test_an_empty_locator_is_a_locator_as_in_ragspine(tmp_path, capsys):
    # RAGSpine checks the keys, not their text: {"doc": "R.pptx", "locator": ""} loads, and
    # citation_validity compares it with the found source as it is: equal -> 1/1.
    source = {"doc": "R.pptx", "locator": ""}
    gold, traces = [figure_case(source=source)], [figure_trace(found_source=source)]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    citation = report["qa_gates"]["citation_validity"]
    assert (citation["passed"], citation["total"]) == (1, 1) and code == 0


def test_a_numeric_case_with_a_null_locator_is_rejected_where_ragspine_loads_it(tmp_path, capsys):
    # RAGSpine: "locator" is a key of the source -> loads. Here null is absent -> rejected.
    gold = [figure_case(source={"doc": "R.pptx", "locator": None})]
    code, _, err = score(tmp_path, capsys, gold, [figure_trace()])
    assert rejected(code, err, "gold.jsonl:1: id=num-1", "expected.source.locator")


@pytest.mark.parametrize("written", [0, "2026-06-12T00:00:00", "20260230", True])
def test_a_reference_date_that_is_no_calendar_date_is_rejected(tmp_path, capsys, written):
    # RAGSpine: date.fromisoformat(str(value)) raises for "0", "2026-06-12T00:00:00", "20260230" and
    # "True": the golden set is refused there too (0 used to read here as 1970-01-01, epoch seconds).
    gold = [figure_case(), {**figure_case("num-2"), "reference_date": written}]
    code, _, err = score(tmp_path, capsys, gold, [figure_trace(), figure_trace("num-2")])
    assert rejected(code, err, "gold.jsonl:2: id=num-2", "reference_date") and "calendar date" in err


@pytest.mark.parametrize("written", ["20260612", 20260612, "2026-06-12"])
def test_a_reference_date_is_read_in_the_forms_ragspine_reads(tmp_path, capsys, written):
    # RAGSpine (Python 3.11+): date.fromisoformat(str(value)) reads "20260612", 20260612 (str: "20260612")
    # and "2026-06-12" alike as 2026-06-12. Here too, and the case's date is 2026-06-12 whatever the form.
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({**figure_case(), "reference_date": written}) + "\n", encoding="utf-8")
    assert load_gold(gold).table.column("reference_date").to_pylist() == ["2026-06-12"]
    code, report, _ = score(
        tmp_path, capsys, [{**figure_case(), "reference_date": written}], [figure_trace()]
    )
    assert code == 0 and report["qa_gates"]["numeric_accuracy"]["passed"] == 1


def test_an_expected_value_that_is_a_flag_or_nan_is_rejected(tmp_path, capsys):
    # RAGSpine loads both: true is an int (so found_value 1 equals it: numeric_accuracy 1/1), NaN a
    # float that equals nothing (numeric_accuracy 0/1 whatever the answer).
    gold = tmp_path / "gold.jsonl"
    for written in ("true", "NaN"):
        gold.write_text(json.dumps(figure_case()).replace("1702.0", written, 1) + "\n", encoding="utf-8")
        traces = write(tmp_path, "traces.jsonl", [figure_trace(found_value=1)])
        code = main(["score", "--gold", str(gold), "--trace", traces])
        err = capsys.readouterr().err
        assert rejected(code, err, "gold.jsonl:1: id=num-1", "expected.value")


def test_tags_without_qtype_and_a_blank_question_load_here_where_ragspine_rejects_the_file(tmp_path, capsys):
    case = figure_case()
    case["tags"].pop("qtype")
    case["question"] = "   "
    # RAGSpine: "tags 必须含 topic/scope/qtype" and "question 不能为空" -> the golden set is refused.
    # Here the tags are slices (topic and scope), the question is not scored: numeric_accuracy 1/1.
    code, report, _ = score(tmp_path, capsys, [case], [figure_trace()], "--format", "json")
    numeric = report["qa_gates"]["numeric_accuracy"]
    assert (numeric["passed"], numeric["total"]) == (1, 1) and set(numeric["by_tag"]) == {"topic", "scope"}
    assert code == 0


def test_a_numeric_case_without_clarification_or_refuse_loads_where_ragspine_rejects_it(tmp_path, capsys):
    case = figure_case()
    del case["expected"]["clarification"], case["expected"]["refuse"]
    # RAGSpine: "expected.clarification 必须是 …" -> the golden set is refused. Here the clarification
    # reads as none (the trace's is none: 1/1) and the refusal expected is not answerable (true): 1/1.
    gold = [{**case, "answerable": True}]
    code, report, _ = score(tmp_path, capsys, gold, [figure_trace()], "--format", "json")
    gates = report["qa_gates"]
    assert gates["clarification_appropriateness"]["passed"] == gates["refusal_appropriateness"]["passed"] == 1
    assert code == 0


def test_a_found_value_within_float_noise_passes_where_ragspine_wants_equality(tmp_path, capsys):
    # 0.1 + 0.2 = 0.30000000000000004: RAGSpine found_value == 0.3 is False -> numeric_accuracy 0/1.
    # Here |0.30000000000000004 - 0.3| <= 1e-9 x max(1, 0.3) -> 1/1.
    gold, traces = [figure_case(value=0.3)], [figure_trace(found_value=0.1 + 0.2)]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    numeric = report["qa_gates"]["numeric_accuracy"]
    assert (numeric["passed"], numeric["total"]) == (1, 1) and code == 0


def test_a_found_value_written_as_text_is_a_miss_as_in_ragspine(tmp_path, capsys):
    # RAGSpine: "1702.0" == 1702.0 is False -> numeric_accuracy 0/1, failure "1702.0 USD_M" on both sides
    # (f"{value} {unit}" of the text and of the float); the answer is not a refusal, so
    # refusal_appropriateness passes (1/1). Here the same, and one warning names the case.
    traces = [figure_trace(found_value="1702.0")]
    code, report, err = score(tmp_path, capsys, [figure_case()], traces, "--format", "ragspine")
    numeric, refusal = report["metrics"]["numeric_accuracy"], report["metrics"]["refusal_appropriateness"]
    assert (numeric["total"], numeric["passed"]) == (1, 0) and refusal["passed"] == 1
    assert numeric["failures"] == [{"id": "num-1", "expected": "1702.0 USD_M", "actual": "1702.0 USD_M"}]
    assert code == 1 and "1 trace(s) wrote outcome.found_value as text" in err and "num-1" in err


def test_a_found_source_with_more_keys_than_doc_and_locator_is_still_the_source(tmp_path, capsys):
    # RAGSpine: found_source == expected source compares whole dicts: {"doc", "locator", "page"} !=
    # {"doc", "locator"} -> citation_validity 0/1. Here doc and locator are compared -> 1/1.
    traces = [figure_trace(found_source={"doc": "R.pptx", "locator": "slide=5", "page": 5})]
    code, report, _ = score(tmp_path, capsys, [figure_case()], traces, "--format", "json")
    citation = report["qa_gates"]["citation_validity"]
    assert (citation["passed"], citation["total"]) == (1, 1) and code == 0


SCHEMA_LINES = [  # (a golden line, whether the loader takes it)
    (figure_case(), True),
    ({**figure_case(), "tags": {"year": 2025, "audited": True, "weight": 1.5, "gone": None}}, True),
    ({**figure_case(), "tags": {"year": {"fy": 2025}}}, False),
    ({**figure_case(), "tags": {"year": [2025]}}, False),
    (figure_case(unit=""), False),
    (figure_case(unit=None), False),
    (figure_case(source={"doc": "R.pptx"}), False),
    (figure_case(source={"doc": "R.pptx", "locator": None}), False),
    (figure_case(source={"doc": "R.pptx", "locator": ""}), True),
    (figure_case(value="1702"), False),
    (figure_case(value=True), False),
    ({**figure_case(), "case_type": "composite"}, False),  # no narrative_doc
    ({**figure_case(narrative_doc="Outlook.docx"), "case_type": "composite"}, True),
    (VALUED_REFUSAL, False),
    (
        {**VALUED_REFUSAL, "expected": {**VALUED_REFUSAL["expected"], "unit": "", "source": {"doc": "R"}}},
        True,
    ),
    (narrative_case("nar-1", ""), False),
    ({**figure_case(), "reference_date": "20260612"}, True),
    ({**figure_case(), "reference_date": 20260612}, True),
    ({**figure_case(), "reference_date": "2026-02-30"}, False),
    ({**figure_case(), "reference_date": "2026-02-28"}, True),
]


@pytest.mark.parametrize(("line", "loads"), SCHEMA_LINES)
def test_the_gold_json_schema_and_the_loader_agree_on_these_rules(tmp_path, capsys, line, loads):
    jsonschema = pytest.importorskip("jsonschema")
    assert main(["schema", "gold"]) == 0
    validator = jsonschema.Draft202012Validator(
        json.loads(capsys.readouterr().out), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    # The schema names each field by its first name (qid, not RAGSpine's id) and does not infer answerable.
    line = {"qid": line["id"], **line, "answerable": not line["expected"]["refuse"]}
    del line["id"]
    try:
        load_gold(write(tmp_path, "gold.jsonl", [line]))
        loaded = True
    except InputError:
        loaded = False
    assert (loaded, validator.is_valid(line)) == (loads, loads)


# Extraction, as RAGSpine's run_eval counts: aligned on f"{sheet}!{cell_ref}", `actual == expected`.


def extraction(tmp_path, capsys, truth, facts: list[dict], baseline: dict) -> tuple[int, str, str]:
    """``ragspine-eval extraction`` on ``truth`` (an object or list, or JSON text) and ``facts``."""
    paths = {name: tmp_path / f"{name}.json" for name in ("truth", "baseline")}
    paths["truth"].write_text(truth if isinstance(truth, str) else json.dumps(truth), encoding="utf-8")
    paths["baseline"].write_text(json.dumps(baseline), encoding="utf-8")
    facts_path = write(tmp_path, "facts.jsonl", facts)
    code = main(
        [
            "extraction",
            "--facts",
            facts_path,
            "--truth",
            str(paths["truth"]),
            "--baseline",
            str(paths["baseline"]),
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def cell(ref: str, value, **extra) -> dict:
    return {"sheet": "P&L", "cell_ref": ref, "value": value, **extra}


def test_a_flag_against_one_is_a_mismatch_and_fails_a_baseline_ragspine_passes(tmp_path, capsys):
    figures = [cell(f"B{row}", row * 10) for row in range(2, 11)]
    truth = {"cells": [*figures, cell("C2", True)]}
    facts = [*figures, cell("C2", 1)]
    code, out, _ = extraction(tmp_path, capsys, truth, facts, {"cell_value": 1.0})
    # RAGSpine: 1 == True -> cell_value 10/10 = 1.0, the baseline holds. Here a flag is not a number:
    # 9/10 = 0.9 < 1.0 -> exit 1.
    values = json.loads(out)["channels"]["cell_value"]
    assert (values["correct"], values["total"]) == (9, 10) and code == 1


@pytest.mark.parametrize(
    ("truth", "named"),
    [
        # RAGSpine: each truth cell is looked up, a repeated one twice -> cell_value 2/2.
        ({"cells": [cell("A1", 1), cell("A1", 1)]}, "id=P&L!A1"),
        # RAGSpine: key "None!A1" on both sides -> 1/1.
        ([{"cell_ref": "A1", "value": 1}], "field 'sheet'"),
        # RAGSpine: key "P&L!4" -> 1/1 when the fact says the same.
        ([{"sheet": "P&L", "cell_ref": 4, "value": 1}], "field 'cell_ref'"),
        # RAGSpine: [1, 2] == [1, 2], {"a": 1} == {"a": 1} -> 1/1.
        ([cell("A1", [1, 2])], "field 'value'"),
        ([cell("A1", {"a": 1})], "field 'value'"),
        # RAGSpine: nan == nan is False -> 0/1.
        ('[{"sheet": "P&L", "cell_ref": "A1", "value": NaN}]', "field 'value'"),
        # RAGSpine: an object without "cells" has no cells: every channel 0/0 = 1.0, any baseline holds.
        ({"sheets": [cell("A1", 1)]}, "field 'cells'"),
    ],
)
def test_extraction_truth_ragspine_scores_is_refused_here_naming_the_cell(tmp_path, capsys, truth, named):
    facts = [cell("A1", 1), {"cell_ref": "A1", "value": 1}]
    code, _, err = extraction(tmp_path, capsys, truth, facts, {"cell_value": 0.5})
    assert code == 2 and err.count("\n") == 1 and "truth.json" in err and named in err


# seed-000 (bench/seed000_scorer.py) and WFGY example 08.


def seed_case(**case) -> dict:
    return {"qid": "a1", "question": "Which bird?", "answerable": True, **case}


def seed_trace(**answer) -> dict:
    return {"qid": "a1", "answer_json": {"claim": "The kestrel.", **answer}, "retrieved_ids": ["d1"]}


def test_an_empty_snippet_list_is_contained_and_an_absent_one_is_not_as_in_the_seed(tmp_path, capsys):
    # seed-000's contains_substr(claim, subs): no snippet of `subs or []` is found, so it returns
    # `subs == []`: True for [] (precision 1/1), False for an absent list (None == [] is False): the hit
    # still counts (chr 1/1) but the answer is not correct (precision 0/1).
    traces = [seed_trace(citations=["d1"])]
    gold = [seed_case(gold_citations=["d1"], gold_claim_substr=[])]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    assert (report["precision"], report["chr"]) == (1.0, 1.0) and code == 0
    code, report, err = score(
        tmp_path, capsys, [seed_case(gold_citations=["d1"])], traces, "--format", "json"
    )
    assert (report["precision"], report["chr"]) == (0.0, 1.0)
    assert "1 case(s) without gold_claim_substr are never contained, as seed-000 scores them: a1" in err


@pytest.mark.parametrize("answer", [{}, {"citations": None}])
def test_an_answer_without_a_citation_list_hits_a_case_without_gold_citations_as_in_the_seed(
    tmp_path, capsys, answer
):
    # seed-000: cits = aj.get("citations") or [] -> [], a list, [] <= retrieved, no gold citations:
    # `citations == []` -> a hit (chr 1/1, label OK). With the snippets [] the answer is contained:
    # precision 1/1. The answer is still not compliant (it carries no citation list): compliance 0/1.
    gold = [seed_case(gold_claim_substr=[])]
    code, report, err = score(tmp_path, capsys, gold, [seed_trace(**answer)], "--format", "json")
    assert (report["precision"], report["chr"], report["compliance"]) == (1.0, 1.0, 0.0)
    assert [case["label"] for case in report["cases"]] == ["OK"]
    assert (
        "1 answer(s) without a citation list on a case without gold citations count as a citation hit" in err
    )
    # A case with gold citations gets no hit from an absent list: [] meets none of them (chr 0/1).
    code, report, _ = score(tmp_path, capsys, [seed_case(gold_citations=["d1"])], [seed_trace(**answer)])
    assert report["chr"] == 0.0 and code == 1


@pytest.mark.parametrize(
    ("case", "answer", "where", "field"),
    [
        # seed-000: {1} <= {1} and {1} & {1}: a hit -> precision 1/1.
        (seed_case(gold_citations=[1]), {"citations": [1]}, "gold.jsonl:1", "gold_citations.0"),
        # seed-000: "d1" is not a list -> no hit -> precision 0/1.
        (seed_case(gold_citations=["d1"]), {"citations": "d1"}, "traces.jsonl:1", "answer_json.citations"),
    ],
)
def test_integer_ids_and_a_text_citations_are_refused(tmp_path, capsys, case, answer, where, field):
    code, _, err = score(tmp_path, capsys, [case], [seed_trace(**answer)])
    assert rejected(code, err, f"{where}: id=a1", field)


def test_example_08s_ok_also_needs_the_cited_ids_to_be_retrieved_here(tmp_path, capsys):
    # WFGY example 08: hit = the citations meet gold_ids ({"d1", "d9"} & {"d1"}) -> label OK, precision
    # 1/1. Here (the seed-000 rule) every cited id must also be retrieved: d9 was not -> ANS_NO_HIT, 0/1.
    gold, traces = [seed_case(gold_citations=["d1"])], [seed_trace(citations=["d1", "d9"])]
    code, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    assert [case["label"] for case in report["cases"]] == ["ANS_NO_HIT"] and report["precision"] == 0.0
    assert code == 1


# -- What RAGSpine users rely on (third pass) --
# RAGSpine's QA evaluator (``src/ragspine/eval/qa_eval.py``) and its CLI (``ragspine.cli.run_qa_eval``):
# ``--report`` writes ``QAEvalReport.to_dict()`` with ``json.dumps(..., ensure_ascii=False, indent=2)``,
# the console gets ``_print_report``'s lines, and the baseline is ``{mode: make_baseline_entry(report)}``,
# read back with ``json.loads`` and checked by ``compare_to_baseline``. Every figure below is worked out
# from those functions by hand.

RESULTS = {"doc": "ACME_FY2025_Results.pptx", "locator": "slide=5,table=1,row=2,col=3"}
INTERIM = {"doc": "ACME_2025_Interim_Results.pptx", "locator": "slide=4,table=1,row=2,col=2"}


def report_case(qid: str, case_type: str, expected: dict, scope: str, qtype: str) -> dict:
    """A line of RAGSpine's ``qa_golden_set.jsonl``."""
    return {
        "id": qid,
        "question": f"question {qid}",
        "case_type": case_type,
        "expected": {"clarification": "none", "refuse": False, **expected},
        "tags": {"topic": "FIN", "scope": scope, "qtype": qtype},
        "reference_date": "2026-06-12",
    }


REPORT_GOLD = [
    report_case(
        "num-1", "numeric", {"value": 1702.0, "unit": "USD_M", "source": RESULTS}, "ACME_HK", "phrasing"
    ),
    report_case(
        "num-2", "numeric", {"value": 818.0, "unit": "USD_M", "source": INTERIM}, "ACME_HK", "period_trap"
    ),
    report_case("ref-1", "refusal", {"refuse": True}, "ACME_CN", "adversarial"),
    report_case("ref-2", "refusal", {"refuse": True}, "ACME_GROUP", "adversarial"),
    report_case("ask-1", "clarification", {"clarification": "ask_first"}, "ACME_HK", "should_clarify"),
]
REPORT_TRACES = [
    # found, right unit, right source named in the answer: passes every gate that applies
    ragspine_trace(
        "num-1", "ACME_HK FY2025 REVENUE 为 1702 USD_M（来源：ACME_FY2025_Results.pptx）",
        clarification_mode="none", refused=False, found_value=1702.0, found_unit="USD_M",
        found_source=RESULTS, sources=[RESULTS],
    ),
    # the FY figure for a half-year question, from the wrong deck: numeric and citation fail
    ragspine_trace(
        "num-2", "ACME_HK 2025H1 REVENUE 为 8180 USD_M（来源：ACME_FY2025_Results.pptx）",
        clarification_mode="none", refused=False, found_value=8180.0, found_unit="USD_M",
        found_source=RESULTS, sources=[RESULTS],
    ),
    # "FY2030" is a period (removed), no digit is left: no fabrication
    ragspine_trace("ref-1", "查不到：FY2030 的 ROE 不在事实表中。", clarification_mode="none", refused=True),
    # "15.5" is left once "2025" is removed: _NUMBER_RE finds ['15.5']
    ragspine_trace("ref-2", "查不到 2025 的 ROE，估计约 15.5%。", clarification_mode="none", refused=True),
    # answered without asking first: clarification fails, refusal passes (it should not refuse)
    ragspine_trace("ask-1", "香港去年 REVENUE 为 1702 USD_M", clarification_mode="none", refused=False),
]  # fmt: skip


def ragspine_format(tmp_path, capsys, fmt: str, *extra: str) -> tuple[int, str]:
    gold, traces = write(tmp_path, "gold.jsonl", REPORT_GOLD), write(tmp_path, "traces.jsonl", REPORT_TRACES)
    code = main(["score", "--gold", gold, "--trace", traces, "--mode", "tool", "--format", fmt, *extra])
    return code, capsys.readouterr().out


def gate(name: str, total: int, passed: int, failures: list, by_tag: dict) -> dict:
    """``GateMetric.to_dict()``: pass_rate = passed / total, 1.0 when total is 0 (``finalize``)."""
    rate = 1.0 if total == 0 else passed / total
    return {
        "name": name,
        "total": total,
        "passed": passed,
        "pass_rate": rate,
        "failures": failures,
        "by_tag": by_tag,
    }


def tagged(scope: dict[str, tuple[int, int]], qtype: dict[str, tuple[int, int]]) -> dict:
    """``by_tag`` as ``tally`` builds it: every case under each of its tags (topic, scope, qtype, in the
    order the golden set writes them), ``str(value)`` as key, values in the order met."""
    total, passed = (sum(n for n, _ in scope.values()), sum(p for _, p in scope.values()))
    buckets = {"topic": {"FIN": (total, passed)}, "scope": scope, "qtype": qtype}
    return {
        tag: {v: {"total": n, "passed": p} for v, (n, p) in values.items()} for tag, values in buckets.items()
    }


def test_the_ragspine_report_is_qa_eval_report_to_dict(tmp_path, capsys):
    code, out = ragspine_format(tmp_path, capsys, "ragspine")
    numeric_cases = tagged({"ACME_HK": (2, 1)}, {"phrasing": (1, 1), "period_trap": (1, 0)})
    every_case = {"ACME_HK": (3, 3), "ACME_CN": (1, 1), "ACME_GROUP": (1, 1)}
    qtypes = {"phrasing": (1, 1), "period_trap": (1, 1), "adversarial": (2, 2), "should_clarify": (1, 1)}
    expected = {
        "mode": "tool",
        "n_cases": 5,
        "metrics": {
            # value + unit exact; failure texts f"{exp['value']} {exp['unit']}", f"{found_value} {found_unit}"
            "numeric_accuracy": gate(
                "numeric_accuracy", 2, 1,
                [{"id": "num-2", "expected": "818.0 USD_M", "actual": "8180.0 USD_M"}],
                numeric_cases,
            ),
            # expected {k: exp[k] for k in ("source", "narrative_doc") if k in exp}; actual the
            # "structured_source={found_source}" bit (Python's str of the dict)
            "citation_validity": gate(
                "citation_validity", 2, 1,
                [{"id": "num-2", "expected": {"source": INTERIM}, "actual": f"structured_source={RESULTS}"}],
                numeric_cases,
            ),
            "refusal_appropriateness": gate("refusal_appropriateness", 5, 5, [], tagged(every_case, qtypes)),
            # ask-1 answered without asking: 4 of 5
            "clarification_appropriateness": gate(
                "clarification_appropriateness", 5, 4,
                [{"id": "ask-1", "expected": "ask_first", "actual": "none"}],
                tagged({**every_case, "ACME_HK": (3, 2)}, {**qtypes, "should_clarify": (1, 0)}),
            ),
            # no narrative case: total 0, pass_rate 1.0 (``finalize``)
            "faithfulness": gate("faithfulness", 0, 0, [], {}),
            "answer_accuracy": gate("answer_accuracy", 0, 0, [], {}),
        },
        # over the cases with expected.refuse: ref-1 clean, ref-2 fabricated ['15.5']
        "fabrication": gate(
            "fabrication", 2, 1,
            [{"id": "ref-2", "expected": "拒答回答不含任何数字（期间除外）", "actual": "出现数字 ['15.5']"}],
            tagged({"ACME_CN": (1, 1), "ACME_GROUP": (1, 0)}, {"adversarial": (2, 1)}),
        ),
        "fabrication_count": 1,
    }  # fmt: skip
    report = json.loads(out)
    assert report == expected and list(report) == list(expected)
    assert list(report["metrics"]) == list(expected["metrics"])
    assert code == 1  # as with --format json: the default fabrication gate (<= 0) fails


def test_the_ragspine_console_lines_are_print_report_and_the_baseline_gate(tmp_path, capsys):
    # make_baseline_entry of a perfect run, written as _save_baseline writes it
    six = dict.fromkeys(SIX_GATES, 1.0)
    baseline = tmp_path / "qa_baseline.json"
    entry = {"metrics": six, "fabrication_count": 0, "n_cases": 5}
    baseline.write_text(json.dumps({"tool": entry}, ensure_ascii=False, indent=2), encoding="utf-8")
    code, out = ragspine_format(tmp_path, capsys, "ragspine-text", "--baseline", str(baseline))
    assert out.splitlines() == [
        "=== QA 评测报告（mode=tool，5 cases）===",
        "  numeric_accuracy: 1/2 (pass_rate=0.5000)",
        "    FAIL num-2: 期望=818.0 USD_M 实际=8180.0 USD_M",
        "  citation_validity: 1/2 (pass_rate=0.5000)",
        "    FAIL num-2: 期望={'source': {'doc': 'ACME_2025_Interim_Results.pptx', 'locator': "
        "'slide=4,table=1,row=2,col=2'}} 实际=structured_source={'doc': 'ACME_FY2025_Results.pptx', "
        "'locator': 'slide=5,table=1,row=2,col=3'}",
        "  refusal_appropriateness: 5/5 (pass_rate=1.0000)",
        "  clarification_appropriateness: 4/5 (pass_rate=0.8000)",
        "    FAIL ask-1: 期望=ask_first 实际=none",
        "  faithfulness: 0/0 (pass_rate=1.0000)",
        "  answer_accuracy: 0/0 (pass_rate=1.0000)",
        "  fabrication: 1 例编造（拒答类样本 2 条，目标 0）",
        "    FAIL ref-2: 出现数字 ['15.5']",
        # compare_to_baseline: every listed metric below its threshold, in the baseline's order (the
        # narrative gates, 1.0 on no case, are not below 1.0), then the fabrication count 1 > 0
        "门禁 FAIL：检测到指标退化——",
        "  numeric_accuracy: 基线=1.0 当前=0.5（delta=-0.5）",
        "  citation_validity: 基线=1.0 当前=0.5（delta=-0.5）",
        f"  clarification_appropriateness: 基线=1.0 当前=0.8（delta={0.8 - 1.0:+}）",
        "  fabrication: 基线=0 当前=1（delta=+1）",
    ]
    assert code == 1


def ragspine_outputs(tmp_path, capsys, gold: list[dict], traces: list[dict]) -> tuple[dict, list[str]]:
    """``--report``'s JSON and ``_print_report``'s lines for these cases, in tool mode."""
    paths = [write(tmp_path, "gold.jsonl", gold), write(tmp_path, "traces.jsonl", traces)]
    outputs = []
    for fmt in ("ragspine", "ragspine-text"):
        main(["score", "--gold", paths[0], "--trace", paths[1], "--mode", "tool", "--format", fmt])
        outputs.append(capsys.readouterr().out)
    return json.loads(outputs[0]), outputs[1].splitlines()


def test_a_faithfulness_failure_lists_every_unsupported_claim_as_ragspine_does(tmp_path, capsys):
    told = "佣金上限下调；银保渠道调整。ACME's margin doubled!"
    doc = "HK_QBR_2025Q4.pptx"
    gold, traces = [ragspine_case("nar-1", "narrative", doc)], [engine_trace("nar-1", doc, told, [HK_QBR])]
    report, lines = ragspine_outputs(tmp_path, capsys, gold, traces)
    # groundedness.split_claims cuts at ；。!: 佣金上限下调 has 上, 下, 调 in HK_QBR -> 3/6 = 0.5 < 0.6;
    # 银保渠道调整 6/6; ACME's margin doubled (acme, s, margin, doubled) 0/4. faithfulness() keeps the
    # unsupported in claim order, and qa_eval.evaluate writes f"未蕴含 claim：{fres.unsupported}", the
    # list's repr: a claim with a ' is written between double quotes.
    actual = "未蕴含 claim：['佣金上限下调', \"ACME's margin doubled\"]"
    expected = "每条 claim 被检索片段蕴含"
    failure = {"id": "nar-1", "expected": expected, "actual": actual}
    assert report["metrics"]["faithfulness"]["failures"] == [failure]
    assert f"    FAIL nar-1: 期望={expected} 实际={actual}" in lines


def test_a_whole_found_value_is_printed_as_ragspines_float(tmp_path, capsys):
    # A found 3400, written without a fraction. RAGSpine's found_value is the fact store's value (Fact.value
    # from SqliteFactStore's "value REAL" column: always a Python float, 3400.0); qa_eval.evaluate writes
    # f"{out.found_value} {out.found_unit}" -> "3400.0 USD_M", and f"{exp['value']} {exp['unit']}" of the
    # golden 3500.0 -> "3500.0 USD_M". (A golden value written 3500 would print "3500" there and
    # "3500.0" here: the golden set is read as a float; RAGSpine's own writes 3500.0.)
    gold, traces = [figure_case(value=3500.0)], [figure_trace(found_value=3400)]
    report, lines = ragspine_outputs(tmp_path, capsys, gold, traces)
    failure = {"id": "num-1", "expected": "3500.0 USD_M", "actual": "3400.0 USD_M"}
    assert report["metrics"]["numeric_accuracy"]["failures"] == [failure]
    assert "    FAIL num-1: 期望=3500.0 USD_M 实际=3400.0 USD_M" in lines


def ragspine_load_baseline(text: str, mode: str) -> tuple[dict[str, float], int]:
    """RAGSpine's reading of ``qa_baseline.json``: ``run_qa_eval.main`` loads the whole file with
    ``json.loads`` and takes ``baselines[args.mode]``; ``qa_eval.compare_to_baseline`` reads only
    ``baseline.get("metrics", {})`` (each threshold compared with the run's pass rate by ``<``) and
    ``baseline.get("fabrication_count", 0)`` (compared by ``>``). Any other key of the entry is never read.
    Values of another type would fail those comparisons, so they are checked here."""
    baselines = json.loads(text)
    entry = baselines[mode]
    metrics = entry.get("metrics", {})
    fabrication_count = entry.get("fabrication_count", 0)
    assert all(isinstance(v, float | int) and not isinstance(v, bool) for v in metrics.values()), metrics
    assert isinstance(fabrication_count, int) and not isinstance(fabrication_count, bool)
    return metrics, fabrication_count


def test_a_promoted_ragspine_baseline_still_loads_in_ragspine_with_the_raised_values(tmp_path, capsys):
    below = {
        "numeric_accuracy": 0.25,
        "citation_validity": 0.5,
        "refusal_appropriateness": 0.75,
        "clarification_appropriateness": 0.6,
        "faithfulness": 1.0,
        "answer_accuracy": 1.0,
    }
    agent = {"metrics": dict.fromkeys(SIX_GATES, 1.0), "fabrication_count": 0, "n_cases": 41}
    written = {"tool": {"metrics": below, "fabrication_count": 1, "n_cases": 5}, "agent": agent}
    baseline = tmp_path / "qa_baseline.json"
    baseline.write_text(json.dumps(written, ensure_ascii=False, indent=2), encoding="utf-8")
    code, _ = ragspine_format(
        tmp_path,
        capsys,
        "json",
        "--baseline",
        str(baseline),
        "--promote",
        "--gates",
        "refusal_appropriateness=1.0",
    )
    assert code == 0
    text = baseline.read_text(encoding="utf-8")
    metrics, fabrication_count = ragspine_load_baseline(text, "tool")
    # The run's pass rates (worked out above): numeric 1/2, citation 1/2, refusal 5/5, clarification 4/5;
    # raised where the run beat the baseline (citation_validity already was 0.5), the narrative gates
    # (no narrative case, not measured here) kept at 1.0; the count stays 1 (the lower known one).
    assert metrics == {
        "numeric_accuracy": 0.5,
        "citation_validity": 0.5,
        "refusal_appropriateness": 1.0,
        "clarification_appropriateness": 0.8,
        "faithfulness": 1.0,
        "answer_accuracy": 1.0,
    }
    assert list(metrics) == list(below) and fabrication_count == 1
    assert ragspine_load_baseline(text, "agent") == (agent["metrics"], 0)
    entry = json.loads(text)["tool"]
    assert list(entry) == ["metrics", "fabrication_count", "n_cases", "ragspine_pipeline"]
    assert not set(entry["ragspine_pipeline"].get("metrics", {})) & set(SIX_GATES)
    assert json.loads(text)["agent"] == agent  # the other mode as RAGSpine wrote it


# -- Unicode case and the harness's rules (third pass) --
# Seed 000 lower-cases with Python's ``str.lower()`` (``claim.lower()``, ``s.lower() in lowered``), and
# so does the harness (``phrase.lower() in text.lower()``): full Unicode case mapping in context, so a
# capital sigma that ends a word is ``ς`` ("ΣΊΣΥΦΟΣ pushes" -> "σίσυφος pushes") and ``İ`` is ``i``
# followed by U+0307 ("İSTANBUL" -> "i̇stanbul", "NOT İN CONTEXT" -> "not i̇n context"). The figures
# below apply those rules by hand.

I_DOT = "i\u0307"  # "İ".lower(): i and a combining dot above


def wfgy_gold(qid: str, answerable: bool, substrings: list[str], citations: list[str]) -> dict:
    """A line of seed 000's ``gold.jsonl``."""
    return {
        "qid": qid,
        "question": f"question {qid}",
        "answerable": answerable,
        "gold_claim_substr": substrings,
        "gold_citations": citations,
    }


def wfgy_trace(qid: str, claim: str, citations: list[str], retrieved: list[str]) -> dict:
    """A line of seed 000's trace file: ``answer_json`` with the claim and its citations."""
    return {"qid": qid, "retrieved_ids": retrieved, "answer_json": {"claim": claim, "citations": citations}}


def test_containment_lower_cases_as_seed_000_so_a_final_sigma_and_a_dotted_i_are_found(tmp_path, capsys):
    gold = [
        wfgy_gold("g1", True, ["σίσυφος"], ["d1"]),
        wfgy_gold("g2", True, [f"{I_DOT}stanbul office"], ["d2"]),
    ]
    traces = [
        wfgy_trace("g1", "ΣΊΣΥΦΟΣ pushes the stone.", ["d1"], ["d1"]),
        wfgy_trace("g2", "The İSTANBUL OFFICE approves.", ["d2"], ["d2"]),
    ]
    _, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    # seed 000: "σίσυφος pushes the stone." contains "σίσυφος"; "the i̇stanbul office approves."
    # contains "i̇stanbul office". Both shipped, cited within the retrieved ids and meeting the gold
    # citation, and contained: precision = 2/2, chr = 2/2.
    assert (report["answered"], report["precision"], report["chr"]) == (2, 1.0, 1.0)
    assert [case["contained"] for case in report["cases"]] == [True, True]


def test_the_refusal_token_is_matched_after_str_lower_so_a_dotted_capital_i_is_an_answer(tmp_path, capsys):
    gold = [wfgy_gold("u1", False, [], []), wfgy_gold("u2", False, [], [])]
    traces = [wfgy_trace("u1", "NOT İN CONTEXT", [], ["d1"]), wfgy_trace("u2", "NOT IN CONTEXT", [], ["d1"])]
    _, report, _ = score(tmp_path, capsys, gold, traces, "--format", "json")
    # seed 000: "NOT İN CONTEXT".lower() is "not i̇n context", not the token: u1 ships (under-refusal);
    # "not in context" refuses u2. under_refusal = |S ∩ U| / |U| = 1/2.
    assert (report["answered"], report["refused"], report["under_refusal"]) == (1, 1, 0.5)
    assert [case["label"] for case in report["cases"]] == ["HALLUCINATION", "REFUSAL_OK"]


HARNESS_KEYS = ["retriever", "index", "sparse", "dense", "fusion", "reranker"]


def harness_chunk(chunk_id: str, text: str) -> dict:
    """A line of the harness's evidence registry."""
    return {"chunk_id": chunk_id, "document_id": chunk_id.split("#")[0], "parent_id": None, "version": "v1",
            "permitted": True, "current": True, "text": text}  # fmt: skip


def harness_case(case_id: str, required: list[str]) -> dict:
    return {"case_id": case_id, "question": f"question {case_id}", "answerable": True,
            "required_source_ids": required, "required_points": []}  # fmt: skip


def harness_trace(case_id: str, selected: list[str], claims: list[dict], keys=HARNESS_KEYS) -> dict:
    """A trace as the harness writes one: every stage, versions as [key, value] pairs, a claim ledger."""
    return {"case_id": case_id, "question": f"question {case_id}", "first_stage_ids": selected,
            "rerank_input_ids": selected, "reranked_ids": selected, "selected_context_ids": selected,
            "selected_versions": ["v1"] * len(selected), "versions": [[key, "1"] for key in keys],
            "answer": {"claims": claims}}  # fmt: skip


def ledger_claim(text: str, citation: str, phrases: list[str]) -> dict:
    return {"claim_id": "c1", "text": text, "citation_id": citation, "support_phrases": phrases,
            "answer_point": None}  # fmt: skip


def harness_score(tmp_path, capsys, chunks, gold, traces) -> dict:
    evidence = write(tmp_path, "evidence.jsonl", chunks)
    _, report, _ = score(tmp_path, capsys, gold, traces, "--evidence", evidence, "--format", "json")
    return report


def test_support_phrases_are_found_after_str_lower_on_both_sides(tmp_path, capsys):
    chunks = [
        harness_chunk("myth#1", "Ο Σίσυφος κυλά την πέτρα."),
        harness_chunk("office#1", "The İSTANBUL OFFICE signs every contract."),
    ]
    claims = [
        ledger_claim("Sisyphus rolls the stone.", "myth#1", ["ΣΊΣΥΦΟΣ"]),
        ledger_claim("Istanbul signs contracts.", "office#1", [f"{I_DOT}stanbul office"]),
    ]
    trace = harness_trace("L1", ["myth#1", "office#1"], claims)
    report = harness_score(tmp_path, capsys, chunks, [harness_case("L1", ["myth#1"])], [trace])
    # The harness: "σίσυφος" in "ο σίσυφος κυλά την πέτρα."; "i̇stanbul office" in "the i̇stanbul
    # office signs every contract.". Both claims supported by their cited, selected chunk: 2/2 each.
    layered = report["layered"]
    assert (layered["claim_faithfulness"], layered["citation_support"]) == (1.0, 1.0)
    assert report["cases"][0]["first_failed_stage"] == "pass"


def test_an_empty_list_of_support_phrases_is_vacuously_met_as_in_the_harness(tmp_path, capsys):
    chunks = [harness_chunk("pol#1", "Release freezes start on the last Friday of each quarter.")]
    claims = [ledger_claim("Admins may skip any freeze.", "pol#1", [])]
    report = harness_score(
        tmp_path, capsys, chunks, [harness_case("V1", ["pol#1"])], [harness_trace("V1", ["pol#1"], claims)]
    )
    # The harness: all(phrase in text for phrase in []) is true, so pol#1 supports the claim although
    # none of its 5 word tokens (admins, may, skip, any, freeze) is one of the chunk's, which the 60 %
    # token rule would need: 1/1 claims supported, 1/1 by the chunk it cites.
    layered = report["layered"]
    assert (layered["claim_faithfulness"], layered["citation_support"]) == (1.0, 1.0)
    assert report["cases"][0]["first_failed_stage"] == "pass"


def test_context_precision_divides_by_the_selection_with_its_repeats(tmp_path, capsys):
    chunks = [harness_chunk("a#1", "Alpha."), harness_chunk("b#1", "Beta.")]
    claims = [ledger_claim("Alpha.", "a#1", ["alpha"])]
    trace = harness_trace("P1", ["a#1", "a#1", "b#1"], claims)
    report = harness_score(tmp_path, capsys, chunks, [harness_case("P1", ["a#1"])], [trace])
    # The harness: |set(selected) ∩ required| / len(selected) = |{a#1}| / 3 = 1/3 (the repeat makes the
    # case inadmissible, duplicate_id, but context_precision is still measured on it).
    assert report["layered"]["context_precision"] == 0.3333
    assert report["cases"][0]["inadmissible"] == ["duplicate_id"]


def test_the_default_required_version_keys_are_the_harness_six(tmp_path, capsys):
    chunks = [harness_chunk("a#1", "Alpha.")]
    claims = [ledger_claim("Alpha.", "a#1", ["alpha"])]
    gold = [harness_case("K1", ["a#1"]), harness_case("K2", ["a#1"])]
    traces = [
        harness_trace("K1", ["a#1"], claims),
        harness_trace("K2", ["a#1"], claims, keys=["index", "retriever"]),
    ]
    report = harness_score(tmp_path, capsys, chunks, gold, traces)
    # The harness requires retriever, index, sparse, dense, fusion and reranker: K1 names all six once
    # (admissible, and passes); K2 lacks sparse, dense, fusion and reranker (missing_version).
    rules = {case["qid"]: case["inadmissible"] for case in report["cases"]}
    assert rules == {"K1": [], "K2": ["missing_version"]}
    assert report["layered"]["admissible_rate"] == 0.5
